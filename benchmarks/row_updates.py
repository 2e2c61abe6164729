"""Dense or row-sparse Adam updates of the latent tables: what a step costs as N grows.

Usage::

    python benchmarks/row_updates.py [--rows 800 3000 10000 30000 100000] [--repeats 3] [--quick]

B-SVI under the package's defaults at oil flow's other shapes (D=12, Q=10, M=25, batch 100,
synthetic data of ``common.py``) with N rows, trained by one Trainer with
``row_updates="sparse"`` (only the batch's rows of q(x)'s tables move) and one with
``row_updates="dense"`` (every row every step, as tf_keras' Adam). A step's time is the
difference of two run lengths of one compiled trainer (100 and 600 steps), the median over
``--repeats`` rounds that alternate the two; the ratio dense / sparse is taken per round. What
dense updates gain per step in ELBO is measured by ``convergence.py`` (setting ``default-sparse``
against ``default``).
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from common import seconds_per_step, synthetic_rows  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

SHORT, LONG = 100, 600


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[800, 3000, 10000, 30000, 100000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    short, long = (5, 10) if args.quick else (SHORT, LONG)
    if args.quick:
        args.rows, args.repeats = [200, 400], 1
    print("| N | sparse ms/step | dense ms/step | dense / sparse (median of rounds) |")
    print("|---:|---:|---:|---:|")
    for num_rows in args.rows:
        Y = synthetic_rows(num_rows)
        trainers = {}
        for updates in ("sparse", "dense"):
            model = BayesianSVIGPLVM(Y, 10, 25, seed=0)
            trainers[updates] = Trainer(model, Y, batch_size=100, row_updates=updates)
            trainers[updates].train(short, steps_per_call=short, progress=False)  # compiles
        rounds = [
            {k: seconds_per_step(trainers[k], short, long) for k in trainers}
            for _ in range(args.repeats)
        ]
        sparse = statistics.median(r["sparse"] for r in rounds)
        dense = statistics.median(r["dense"] for r in rounds)
        ratio = statistics.median(r["dense"] / r["sparse"] for r in rounds)
        print(f"| {num_rows} | {1e3 * sparse:.2f} | {1e3 * dense:.2f} | {ratio:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
