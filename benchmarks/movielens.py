"""MovieLens-100K on its canonical splits: u1.base / u1.test and the five-fold mean over u1-u5,
the GPLVM beside a rank-k matrix factorisation and simple baselines, in one script.

    python benchmarks/movielens.py                    # u1 and the five folds, the defaults below
    python benchmarks/movielens.py --folds 1          # u1 alone
    python benchmarks/movielens.py --validation       # choose settings: 5% of u1.base held out
    python benchmarks/movielens.py --folds 1 --iterations 200 --mf-sweeps 2   # a smoke run

The splits are the release's ``mku.sh``: u_i.test is rows 20,000 (i - 1) to 20,000 i of
``u.data`` in its original order (the shared data's ``ratings`` keep it) and u_i.base the other
80,000. ``--validation`` scores on a seeded 5% of u1.base instead, the model trained on the rest
(the settings below were chosen so, never on a test set).

The GPLVM: B-SVI with movies as rows and users as outputs (``--rows users``: the transpose),
missing ratings masked, a Gaussian likelihood whose variance starts at half the centred ratings'
(``--noise``), one q(u) covariance shared by the users. Ratings are centred first (``--centre
biases``, the default): the training ratings' mean and a ridge bias per user and per movie
(``--bias-penalty``) are taken out, the GPLVM models the rest, and predictions add them back.
The kernel is a squared exponential plus a linear kernel, both with a weight per latent
dimension (``--kernel se`` for the first alone); Q = 20, M = 100, 3000 steps of batch 100.
Predictions are the predictive means at each movie's trained q(x), clipped to [1, 5].
``--num-importance`` trains on the importance-weighted bound. These settings were chosen on the
validation split of u1.base (``--validation``: movies against users as rows, the kernel, the
noise's start, Q, M, K; ``benchmarks/results/importance.md``).

Baselines: the rank-k matrix factorisation with user and movie biases fitted by alternating
ridge regressions (``--mf-rank``, ``--mf-penalty``, rank 10 and ridge 10 chosen on the same
validation split; ``missing_data.matrix_factorisation``), the mean of its and the GPLVM's
predictions, the bias model alone (global mean plus user and movie biases), the movie means and
the global mean (``--no-baselines``: the GPLVM alone).
Data: $GPFLOW_SVI_GPLVM_DATA (MovieLens-100K; GroupLens' terms: research use, no redistribution).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from missing_data import matrix_factorisation  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit  # noqa: E402
from gpflow_svi_gplvm.datasets import load_movielens100k  # noqa: E402

tf.get_logger().setLevel("ERROR")

NUM_USERS, NUM_MOVIES, FOLD_SIZE = 943, 1682, 20_000


def fold(ratings: np.ndarray, i: int, validation: bool) -> tuple[np.ndarray, np.ndarray]:
    """(base, test) rows of ``ratings`` [100000, 4] for fold i (1-5), as ``mku.sh`` makes them;
    with ``validation``, u_i.base split into 95% and a seeded 5% instead."""
    rows = np.arange(len(ratings))
    in_test = (rows >= FOLD_SIZE * (i - 1)) & (rows < FOLD_SIZE * i)
    base, test = ratings[~in_test], ratings[in_test]
    if validation:
        chosen = np.random.default_rng(i).random(len(base)) < 0.05
        base, test = base[~chosen], base[chosen]
    return base, test


def matrix(ratings: np.ndarray) -> np.ndarray:
    """The users x movies matrix [943, 1682] of ``ratings`` (NaN where unrated)."""
    Y = np.full((NUM_USERS, NUM_MOVIES), np.nan)
    Y[ratings[:, 0] - 1, ratings[:, 1] - 1] = ratings[:, 2]
    return Y


def biases(Y: np.ndarray, penalty: float, sweeps: int = 10) -> np.ndarray:
    """The bias model's predictions [943, 1682]: mu + b_u + c_i fitted to the observed entries of
    Y by alternating ridge regressions (``penalty`` on each bias)."""
    observed = ~np.isnan(Y)
    mu = np.nanmean(Y)
    residual = np.where(observed, Y - mu, 0.0)
    b, c = np.zeros(Y.shape[0]), np.zeros(Y.shape[1])
    for _ in range(sweeps):
        b = np.sum(np.where(observed, residual - c, 0.0), 1) / (penalty + observed.sum(1))
        c = np.sum(np.where(observed, residual - b[:, None], 0.0), 0) / (penalty + observed.sum(0))
    return mu + b[:, None] + c[None, :]


def gplvm(Y: np.ndarray, offset: np.ndarray, args: argparse.Namespace) -> np.ndarray:
    """The GPLVM's predictions [943, 1682] for ratings Y (NaN = missing) centred by ``offset``."""
    residual = (Y - offset).T if args.rows == "movies" else Y - offset
    kernel = gpflow.kernels.SquaredExponential(lengthscales=np.ones(args.latent_dim))
    if args.kernel == "se+linear":
        kernel += gpflow.kernels.Linear(variance=0.1 * np.ones(args.latent_dim))
    model = BayesianSVIGPLVM(
        residual,
        args.latent_dim,
        args.num_inducing,
        kernel=kernel,
        likelihood=gpflow.likelihoods.Gaussian(variance=args.noise * np.nanvar(residual)),
        num_importance=args.num_importance,
        seed=args.seed,
    )
    fit(
        model,
        residual,
        iterations=args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        progress=False,
    )
    mean, _ = model.reconstruct(residual, rows=np.arange(len(residual)), num_samples=32)
    mean = mean.numpy().T if args.rows == "movies" else mean.numpy()
    return offset + mean


def rmse(prediction: np.ndarray, test: np.ndarray) -> float:
    """RMSE of ``prediction`` [943, 1682], clipped to [1, 5], on the ``test`` ratings."""
    predicted = np.clip(prediction[test[:, 0] - 1, test[:, 1] - 1], 1.0, 5.0)
    return float(np.sqrt(np.mean((predicted - test[:, 2]) ** 2)))


def one_fold(ratings: np.ndarray, i: int, args: argparse.Namespace) -> dict[str, float]:
    base, test = fold(ratings, i, args.validation)
    Y = matrix(base)
    bias_model = biases(Y, args.bias_penalty)
    offset = bias_model if args.centre == "biases" else np.full(Y.shape, np.nanmean(Y))
    start = time.perf_counter()
    gplvm_prediction = gplvm(Y, offset, args)
    seconds = time.perf_counter() - start
    scores = {"GPLVM": rmse(gplvm_prediction, test)}
    if args.baselines:
        factorised = matrix_factorisation(Y, args.mf_rank, args.mf_penalty, args.mf_sweeps)
        scores[f"matrix factorisation (rank {args.mf_rank})"] = rmse(factorised, test)
        scores["mean of the two above"] = rmse(0.5 * (gplvm_prediction + factorised), test)
        scores["biases (mean + user + movie)"] = rmse(bias_model, test)
        counts = np.sum(~np.isnan(Y), axis=0)  # movies unrated in training take the mean
        movie_means = np.where(counts > 0, np.nansum(Y, 0) / np.maximum(counts, 1), np.nanmean(Y))
        scores["movie means"] = rmse(np.broadcast_to(movie_means, Y.shape), test)
        scores["global mean"] = rmse(np.full(Y.shape, np.nanmean(Y)), test)
    print(
        f"  fold {i}{' (validation)' if args.validation else ''}: "
        + ", ".join(f"{name} {value:.4f}" for name, value in scores.items())
        + f"; GPLVM trained in {seconds:.0f} s",
        flush=True,
    )
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--validation", action="store_true")
    parser.add_argument("--rows", choices=["users", "movies"], default="movies")
    parser.add_argument("--centre", choices=["biases", "mean"], default="biases")
    parser.add_argument("--bias-penalty", type=float, default=5.0)
    parser.add_argument("--kernel", choices=["se", "se+linear"], default="se+linear")
    parser.add_argument("--noise", type=float, default=0.5, help="of the residuals' variance")
    parser.add_argument("--latent-dim", type=int, default=20)
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--num-importance", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--mf-rank", type=int, default=10)
    parser.add_argument("--mf-penalty", type=float, default=10.0)
    parser.add_argument("--mf-sweeps", type=int, default=20)
    parser.add_argument("--baselines", action=argparse.BooleanOptionalAction, default=True)
    args = parser.parse_args()
    ratings = load_movielens100k().metadata["ratings"]
    results = [one_fold(ratings, i, args) for i in args.folds]
    settings = {k: v for k, v in vars(args).items() if k not in ("folds", "validation")}
    print(f"\nSettings: {settings}\n")
    columns = [f"u{i}" for i in args.folds] + (["mean of the folds"] if len(results) > 1 else [])
    scored = "5% of u_i.base held out" if args.validation else "u_i.test"
    print(f"| RMSE on {scored} | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name in results[0]:
        values = [r[name] for r in results]
        cells = [f"{v:.4f}" for v in values] + (
            [f"{np.mean(values):.4f}"] if len(values) > 1 else []
        )
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
