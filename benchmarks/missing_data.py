"""Training with most entries missing: the paper's MNIST and MovieLens experiments.

    python benchmarks/missing_data.py mnist      [--num-train 2000 --iterations 3000 ...]
    python benchmarks/missing_data.py movielens  [--latent-dim 10 --iterations 3000 ...]
    python benchmarks/missing_data.py encoders   # amortised encoders on MNIST, 30% missing
    python benchmarks/missing_data.py all --quick

MNIST: B-SVI (Q=5, M=100) trained on images with 10/30/60% of the pixels hidden; for each
train/test missingness pair, RMSE on the hidden pixels of held-out test images (their latents
inferred with the model frozen). The paper reports 0.27-0.28 in every cell.
MovieLens-100K: B-SVI on the users x movies matrix (93.7% missing), 10% of the ratings held
out: test RMSE, and the mean predictive variance of held-out ratings against how many users
rated the movie (the paper's figure: more ratings, less variance).
Data: the folder in $GPFLOW_SVI_GPLVM_DATA (see gpflow_svi_gplvm.datasets).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, fit  # noqa: E402
from gpflow_svi_gplvm.datasets import load_mnist, load_movielens100k  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402
from gpflow_svi_gplvm.protocols import random_missing  # noqa: E402

FRACTIONS = (0.1, 0.3, 0.6)


def _train(model, Y, args) -> float:
    start = time.perf_counter()
    fit(
        model,
        Y,
        iterations=args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        progress=not args.no_progress,
    )
    return time.perf_counter() - start


def mnist_table(args) -> str:
    """The paper's Table 4 as markdown: RMSE on hidden test pixels per train/test missingness."""
    data = load_mnist(num_train=args.num_train, num_test=args.num_test)
    print(f"MNIST: {args.num_train} training and {args.num_test} test images, D=784", flush=True)
    table = {}
    for train_fraction in FRACTIONS:
        Y_train, _ = random_missing(data.Y, train_fraction, seed=1)
        model = BayesianSVIGPLVM(Y_train, 5, num_inducing=args.num_inducing)
        seconds = _train(model, Y_train, args)
        for test_fraction in FRACTIONS:
            Y_test, hidden = random_missing(data.Y_test, test_fraction, seed=2)
            mean, _ = model.reconstruct(
                Y_test, iterations=args.inference_iterations, num_samples=32
            )
            table[train_fraction, test_fraction] = rmse(data.Y_test, mean.numpy(), mask=hidden)
        print(f"  trained on {train_fraction:.0%} missing in {seconds:.0f} s", flush=True)
    header = " | ".join(f"test {f:.0%} missing" for f in FRACTIONS)
    lines = [
        f"| B-SVI (Q=5, M={args.num_inducing}), RMSE on hidden test pixels | {header} |",
        "|---|" + "---|" * len(FRACTIONS),
    ]
    for train_fraction in FRACTIONS:
        cells = " | ".join(f"{table[train_fraction, f]:.3f}" for f in FRACTIONS)
        lines.append(f"| trained on {train_fraction:.0%} missing | {cells} |")
    return "\n".join(lines) + "\n\n(paper: 0.27-0.28 in every cell)"


def mnist(args) -> None:
    print("\n" + mnist_table(args))


def encoders(args) -> None:
    data = load_mnist(num_train=args.num_train, num_test=args.num_test)
    Y_train, _ = random_missing(data.Y, 0.3, seed=1)
    Y_test, hidden = random_missing(data.Y_test, 0.3, seed=2)
    print(f"MNIST, 30% missing: amortised encoders ({args.num_train} training images)")
    print("| encoder | test RMSE on hidden pixels | 95% interval coverage | train s |")
    print("|---|---|---|---|")
    variants = {
        "values only (paper)": dict(missing_aware=False, hide_fraction=0.0),
        "values + mask": dict(missing_aware=True, hide_fraction=0.0),
        "values + mask, 20% hidden (default)": dict(missing_aware=True, hide_fraction=0.2),
        "set of observed (value, column) pairs, 20% hidden": dict(set_size=64, hide_fraction=0.2),
    }
    for name, options in variants.items():
        model = AmortisedBayesianGPLVM(
            Y_train, 5, num_inducing=args.num_inducing, hidden_sizes=(128, 64), **options
        )
        seconds = _train(model, Y_train, args)
        mean, variance = model.reconstruct(Y_test, num_samples=32)
        mean, sd = mean.numpy(), np.sqrt(variance.numpy())
        coverage = np.mean(np.abs(data.Y_test - mean)[hidden] <= 1.96 * sd[hidden])
        error = rmse(data.Y_test, mean, mask=hidden)
        print(f"| {name} | {error:.3f} | {coverage:.2f} | {seconds:.0f} |")


def movielens(args) -> None:
    data = load_movielens100k()
    Y = data.Y
    Y_train, held_out = random_missing(Y, 0.1, seed=1)
    print(
        f"MovieLens-100K: {Y.shape[0]} users x {Y.shape[1]} movies, "
        f"{np.isnan(Y).mean():.1%} missing; {held_out.sum()} ratings held out"
    )
    model = BayesianSVIGPLVM(Y_train, args.latent_dim, num_inducing=args.num_inducing)
    seconds = _train(model, Y_train, args)
    mean, variance = model.reconstruct(Y_train, rows=np.arange(Y.shape[0]), num_samples=32)
    mean, variance = mean.numpy(), variance.numpy()
    global_mean = np.nanmean(Y_train)
    movie_means = np.where(np.isnan(np.nanmean(Y_train, 0)), global_mean, np.nanmean(Y_train, 0))
    print(f"  trained in {seconds:.0f} s")
    print("| predictor | test RMSE on held-out ratings |")
    print("|---|---|")
    print(f"| B-SVI (Q={args.latent_dim}, M={args.num_inducing}) | {rmse(Y, mean, held_out):.3f} |")
    print(f"| movie mean | {rmse(Y, np.broadcast_to(movie_means, Y.shape), held_out):.3f} |")
    print(f"| global mean | {rmse(Y, np.full(Y.shape, global_mean), held_out):.3f} |")
    ratings_per_movie = np.sum(~np.isnan(Y_train), axis=0)
    bins = [0, 5, 20, 50, 100, 200, 1000]
    print("\n| users who rated the movie | held-out ratings | mean predictive variance |")
    print("|---|---|---|")
    counts = np.broadcast_to(ratings_per_movie, Y.shape)[held_out]
    variances = variance[held_out]
    for low, high in zip(bins[:-1], bins[1:]):
        chosen = (counts >= low) & (counts < high)
        if chosen.any():
            print(f"| {low}-{high - 1} | {chosen.sum()} | {variances[chosen].mean():.3f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiment", choices=["mnist", "movielens", "encoders", "all"])
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--num-test", type=int, default=500)
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--latent-dim", type=int, default=10, help="MovieLens Q")
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--inference-iterations", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.num_train, args.num_test, args.num_inducing = 200, 50, 10
        args.iterations, args.inference_iterations, args.no_progress = 20, 5, True
    experiments = {"mnist": mnist, "movielens": movielens, "encoders": encoders}
    chosen = experiments if args.experiment == "all" else {args.experiment: None}
    for name in chosen:
        experiments[name](args)
        print()


if __name__ == "__main__":
    main()
