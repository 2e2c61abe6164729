"""Where the package departs from the paper on purpose, and what each departure is worth.

    python benchmarks/paper_differences.py oilflow qpcr [--seeds 3 --iterations 5000]
    python benchmarks/paper_differences.py taxi --variants "AEB-SVI, raw encoder inputs"

Each row trains one model under the package's defaults except for one choice, set back to the
paper's, with ``reproduce_paper.py``'s protocol (seeded 80/20 split, test latents inferred with
the model frozen, test RMSE and NLPD on the full test rows):

- initial latents: PCA of the (mean-filled) data (ours) / random (the paper: "initialised
  randomly"), B-SVI;
- mean function: a constant at the column means (ours) / zero (GPflow's default), B-SVI;
- encoder inputs: standardised per column (ours) / the raw y_n (the paper), AEB-SVI;
- covariance factor: lower triangular with a positive diagonal (ours) / the paper's dense Q x Q
  factor H with L = chol(H H^T), AEB-SVI.

The "defaults" rows are each model under the package's defaults. Mean +- standard error over
seeds. Data: $GPFLOW_SVI_GPLVM_DATA.
"""

from __future__ import annotations

import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import mean_and_error  # noqa: E402
from reproduce_paper import OURS, run_one  # noqa: E402

tf.get_logger().setLevel("ERROR")

# name: (model, options that set the paper's choice back); None: the package's defaults.
VARIANTS: dict[str, tuple[str, dict | None]] = {
    "B-SVI, defaults": ("B-SVI", None),
    "B-SVI, random initial latents": ("B-SVI", dict(latent_init="random")),
    "B-SVI, zero mean function": ("B-SVI", "zero"),
    "AEB-SVI, defaults": ("AEB-SVI", None),
    "AEB-SVI, raw encoder inputs": ("AEB-SVI", dict(standardise_inputs=False)),
    "AEB-SVI, dense factor": ("AEB-SVI", dict(covariance="dense")),
}


def _options(options: dict | str | None) -> dict:
    # A mean function is a module: build a fresh one for every model.
    if options == "zero":
        return dict(mean_function=gpflow.mean_functions.Zero())
    return dict(options or {})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="+", choices=["oilflow", "qpcr", "taxi"])
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS), default=list(VARIANTS))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=5000)
    args = parser.parse_args(argv)
    vars(args).update(OURS)  # run_one's protocol under the package's defaults
    results = {}
    for name in args.datasets:
        for variant in args.variants:
            model_name, options = VARIANTS[variant]
            results[name, variant] = [
                run_one(name, model_name, seed, args, model_options=_options(options))
                for seed in range(args.seeds)
            ]
    print(f"\nThe paper's choices one at a time ({args.seeds} seed(s), {args.iterations} steps)\n")
    print("| data set | model and choice | test RMSE | test NLPD | train s |")
    print("|---|---|---|---|---|")
    for (name, variant), runs in results.items():
        print(
            f"| {name} | {variant} | {mean_and_error([r['rmse'] for r in runs])} "
            f"| {mean_and_error([r['nlpd'] for r in runs])} "
            f"| {np.mean([r['train_seconds'] for r in runs]):.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
