"""XLA for one part of the step: the closed-form data term compiled alone, or nothing compiled.

Usage::

    python benchmarks/xla_parts.py [--repeats 5] [--quick]

B-SVI under the package's defaults at oil flow's shapes (synthetic data of ``speed.py``: N=800,
D=12, Q=10, M=25, batch 100): the closed-form expectation over q(x) and natural gradients on
q(u). Two Trainers side by side in one process: one as the package builds it, one whose model's
``closed_form_data_term`` is a ``tf.function(jit_compile=True)`` (an XLA island inside the
uncompiled step). A step's time is the difference of two run lengths of one compiled trainer
(100 and 600 steps), the median over ``--repeats`` rounds that alternate the two; the ratio is
taken per round. ``speed.py --jit`` compiles the whole step instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow as tf  # noqa: E402
from row_updates import LONG, SHORT, seconds_per_step  # noqa: E402
from speed import synthetic  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, models  # noqa: E402
from gpflow_svi_gplvm.training import Trainer  # noqa: E402

NAMES = ("uncompiled", "closed form by XLA")


def trainer(Y, closed_form_xla: bool, short: int) -> Trainer:
    """A compiled Trainer of B-SVI under the defaults, its closed form compiled by XLA or not."""
    original = models.closed_form_data_term
    if closed_form_xla:
        models.closed_form_data_term = tf.function(original, jit_compile=True)
    try:
        model = BayesianSVIGPLVM(Y, 10, 25, seed=0)
        built = Trainer(model, Y, 100)
        built.train(short, steps_per_call=short, progress=False)  # traces with the part in place
    finally:
        models.closed_form_data_term = original
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    short, long = (5, 10) if args.quick else (SHORT, LONG)
    repeats = 1 if args.quick else args.repeats
    Y = synthetic(200 if args.quick else 800)
    trainers = {name: trainer(Y, name != "uncompiled", short) for name in NAMES}
    rounds = [
        {k: seconds_per_step(t, short, long) for k, t in trainers.items()} for _ in range(repeats)
    ]
    print("| step | ms/step (median) | range | XLA part / uncompiled (median of rounds) |")
    print("|---|---:|---:|---:|")
    for name in trainers:
        times = [1e3 * r[name] for r in rounds]
        ratio = statistics.median(r[name] / r["uncompiled"] for r in rounds)
        low, high = min(times), max(times)
        line = f"| {name} | {statistics.median(times):.2f} | {low:.2f}-{high:.2f} | {ratio:.2f} |"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
