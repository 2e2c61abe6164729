"""The first seconds of a session: what the first compiled calls cost in a fresh process.

Usage::

    python benchmarks/first_call.py [--repeats 3] [--baseline PATH] [--quick]

Each measurement runs in a new Python process (AutoGraph and TensorFlow cache what they convert
and trace for the life of a process, so a second measurement in one process would be flattered):
import the package, build B-SVI under its defaults on oil flow's first 800 rows (or the synthetic
stand-in of ``speed.py`` without ``GPFLOW_SVI_GPLVM_DATA``; N=800, D=12, Q=10, M=25) and a
``Trainer`` (batch 100), then time

- the first call of ``train`` (1 step: the compiled step's trace and its first run),
- the next 100 steps (one compiled call),
- ``LatentInference(model)``'s first ``reconstruct`` of one new row (traces) and its second,

with ``--baseline PATH`` the same for the checkout at PATH (its package first on ``PYTHONPATH``)
in alternating processes. Prints the median over ``--repeats`` processes per version.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

MEASURE = """
import json, os, sys, time
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
started = time.perf_counter()
import numpy as np
import gpflow_svi_gplvm as sg
from common import oil_flow_rows
times = {"import": time.perf_counter() - started}
Y = oil_flow_rows()[0][: int(sys.argv[1])]
model = sg.BayesianSVIGPLVM(Y, 10, 25, seed=0)
trainer = sg.Trainer(model, Y, batch_size=100, seed=0)
for name, steps in (("first step", 1), ("next 100 steps", 100)):
    start = time.perf_counter()
    trainer.train(steps, steps_per_call=steps, progress=False)
    times[name] = time.perf_counter() - start
inference = sg.LatentInference(model)
row = np.array(Y[:1])
row[0, ::3] = np.nan
for name in ("first new row", "second new row"):
    start = time.perf_counter()
    inference.reconstruct(row)
    times[name] = time.perf_counter() - start
print(json.dumps(times))
"""


def measure(package_root: str, rows: int) -> dict[str, float]:
    """One fresh process's times, with ``package_root``'s package imported (its folder, the
    process's working folder, comes first on its path; this folder, for ``common``, next)."""
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([package_root, HERE]))
    result = subprocess.run(
        [sys.executable, "-c", MEASURE, str(rows)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=package_root,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"the measuring process failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="a checkout of another version")
    parser.add_argument("--quick", action="store_true", help="200 rows, one process each")
    args = parser.parse_args(argv)
    repeats, rows = (1, 200) if args.quick else (args.repeats, 800)
    versions = {"this checkout": ROOT}
    if args.baseline:
        if not os.path.isdir(os.path.join(args.baseline, "gpflow_svi_gplvm")):
            raise SystemExit(f"--baseline: {args.baseline} holds no gpflow_svi_gplvm package.")
        versions["baseline"] = os.path.abspath(args.baseline)
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in versions}
    for _ in range(repeats):
        for name, root in versions.items():
            start = time.perf_counter()
            runs[name].append(measure(root, rows))
            print(f"  {name}: {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)
    columns = list(runs["this checkout"][0])
    print(f"seconds, median of {repeats} fresh processes per version; N={rows}")
    print("| version | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for name, measured in runs.items():
        cells = [f"{statistics.median(m[c] for m in measured):.3f}" for c in columns]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
