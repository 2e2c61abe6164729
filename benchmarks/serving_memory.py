"""Peak memory of a SavedModel served with TensorFlow alone, against the rows in one request.

Usage::

    python benchmarks/serving_memory.py [--rows 1000 10000] [--chunk-size N]

Exports a B-SVI model of the digits' size (N=1797, D=64, Q=5, M=50, per-output q(u)
covariances, 50 training steps: the cost of serving does not depend on training), then, for
each request size, starts a process that imports TensorFlow only, loads the export, calls
``reconstruct`` once with that many rows (the digits repeated, 30% of the entries NaN) and
prints its peak resident memory and the call's seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import textwrap

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SERVE = textwrap.dedent(
    """
    import json, resource, sys, time
    import numpy as np
    import tensorflow as tf
    path, rows = sys.argv[1], int(sys.argv[2])
    Y = np.load(sys.argv[3])
    Y = np.resize(Y, (rows, Y.shape[1]))
    reconstruct = tf.saved_model.load(path).signatures["reconstruct"]
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    start = time.perf_counter()
    out = reconstruct(Y=tf.constant(Y))
    seconds = time.perf_counter() - start
    assert out["mean"].shape == Y.shape and np.isfinite(out["mean"].numpy()).all()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    print(json.dumps({"peak_gib": peak, "before_call_gib": before, "seconds": seconds}))
    """
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--chunk-size", type=int, default=None)
    args = parser.parse_args(argv)

    import numpy as np

    import gpflow_svi_gplvm as svi
    from gpflow_svi_gplvm.datasets import load_digits

    Y = load_digits().Y
    model = svi.BayesianSVIGPLVM(Y, 5, num_inducing=50, shared_covariance=False)
    svi.fit(model, Y, iterations=50, progress=False)
    with tempfile.TemporaryDirectory() as folder:
        path = svi.export_saved_model(
            model, os.path.join(folder, "model"), chunk_size=args.chunk_size
        )
        requests = Y.copy()
        requests[np.random.default_rng(0).random(Y.shape) < 0.3] = np.nan
        np.save(os.path.join(folder, "rows.npy"), requests)
        print("| rows in one request | peak resident GiB | GiB before the call | call s |")
        print("|---:|---:|---:|---:|")
        for rows in args.rows:
            command = [
                sys.executable,
                "-c",
                SERVE,
                str(path),
                str(rows),
                os.path.join(folder, "rows.npy"),
            ]
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                print(f"| {rows} | failed: {result.stderr.strip().splitlines()[-1]} | | |")
                continue
            measured = json.loads(result.stdout.strip().splitlines()[-1])
            print(
                f"| {rows} | {measured['peak_gib']:.2f} | {measured['before_call_gib']:.2f} "
                f"| {measured['seconds']:.1f} |",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
