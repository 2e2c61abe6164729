"""How wide the amortised model's encoder should be: held-out RMSE of AEB-SVI per width rule.

    python benchmarks/encoder_width.py oilflow qpcr [--seeds 3 --iterations 5000]
    python benchmarks/encoder_width.py mnist [--seeds 1 --iterations 3000]
    python benchmarks/encoder_width.py oilflow --rules "(10, 5)" default   # some rules only

Oil flow and qPCR follow ``reproduce_paper.py``'s protocol under the package's defaults (seeded
80/20 split, test latents from one encoder pass, test RMSE on the full test rows), changing only
the encoder's hidden layers. MNIST: 2000 training / 500 test images with 30% of the pixels
missing in both, RMSE on the hidden test pixels. Each rule maps (D, Q) to the hidden widths of the
mean and covariance networks; the rows print the widths each data set got, the mean test RMSE
+- standard error over seeds, and the mean training seconds. Data: $GPFLOW_SVI_GPLVM_DATA.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import mean_and_error  # noqa: E402
from reproduce_paper import OURS, run_one  # noqa: E402

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, LatentInference, fit  # noqa: E402
from gpflow_svi_gplvm.datasets import (
    load_mnist,  # noqa: E402
    random_missing,  # noqa: E402
)
from gpflow_svi_gplvm.latents import default_encoder_sizes, paper_encoder_options  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402

tf.get_logger().setLevel("ERROR")

Widths = tuple[tuple[int, ...], tuple[int, ...]]


def _fixed(*sizes: int) -> Callable[[int, int], Widths]:
    return lambda data_dim, latent_dim: (sizes, sizes)


def _paper_rule(data_dim: int, latent_dim: int) -> Widths:
    """The supplement's covariance-network widths (H, H), H = (D + Q^2) / 2, for both networks."""
    widths = paper_encoder_options(data_dim, latent_dim)["covariance_hidden_sizes"]
    return widths, widths


RULES: dict[str, Callable[[int, int], Widths]] = {
    "(10, 5)": _fixed(10, 5),
    "(32, 16)": _fixed(32, 16),
    "(64, 64)": _fixed(64, 64),
    "(128, 128)": _fixed(128, 128),
    "(D + Q^2) / 2": _paper_rule,
    "default": lambda data_dim, latent_dim: (default_encoder_sizes(data_dim, latent_dim),) * 2,
}
SHAPES = {"oilflow": (12, 10), "qpcr": (48, 11), "mnist": (784, 5)}


def mnist_run(seed: int, widths: Widths, args) -> dict:
    """AEB-SVI (Q=5, M=100) on MNIST with 30% missing; RMSE on the hidden test pixels."""
    data = load_mnist(num_train=2000, num_test=500)
    Y_train, _ = random_missing(data.Y, 0.3, seed=1 + seed)
    Y_test, hidden = random_missing(data.Y_test, 0.3, seed=2 + seed)
    tf.random.set_seed(seed)
    start = time.perf_counter()
    model = AmortisedBayesianGPLVM(
        Y_train, 5, 100, mean_hidden_sizes=widths[0], covariance_hidden_sizes=widths[1], seed=seed
    )
    fit(model, Y_train, iterations=args.iterations, seed=seed, progress=False)
    train_seconds = time.perf_counter() - start
    # The encoder's q(x*) as it comes (tolerance=None): the widths are what is compared.
    inference = LatentInference(model, seed=seed, num_samples=32, tolerance=None)
    mean, _ = inference.reconstruct(Y_test)
    return {"rmse": rmse(data.Y_test, mean.numpy(), mask=hidden), "train_seconds": train_seconds}


def measure(name: str, rule: str, args) -> list[dict]:
    widths = RULES[rule](*SHAPES[name])
    runs = []
    for seed in range(args.seeds):
        if name == "mnist":
            result = mnist_run(seed, widths, args)
        else:
            options = dict(mean_hidden_sizes=widths[0], covariance_hidden_sizes=widths[1])
            result = run_one(name, "AEB-SVI", seed, args, model_options=options)
        print(f"  {name} {rule} seed {seed}: RMSE {result['rmse']:.4f}", flush=True)
        runs.append(result)
    return runs


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("datasets", nargs="+", choices=list(SHAPES))
    parser.add_argument("--rules", nargs="+", choices=list(RULES), default=list(RULES))
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--iterations", type=int, default=5000)
    args = parser.parse_args(argv)
    vars(args).update(OURS)  # run_one's protocol under the package's defaults
    results = {(n, r): measure(n, r, args) for n in args.datasets for r in args.rules}
    print(
        f"\nAEB-SVI held-out RMSE by encoder width ({args.seeds} seed(s), "
        f"{args.iterations} steps)\n"
    )
    print("| data set (D, Q) | rule | mean / covariance hidden widths | test RMSE | train s |")
    print("|---|---|---|---|---|")
    for (name, rule), runs in results.items():
        mean_sizes, covariance_sizes = RULES[rule](*SHAPES[name])
        print(
            f"| {name} {SHAPES[name]} | {rule} | {mean_sizes} / {covariance_sizes} "
            f"| {mean_and_error([r['rmse'] for r in runs])} "
            f"| {np.mean([r['train_seconds'] for r in runs]):.0f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
