"""Training with most entries missing: the paper's MNIST, MovieLens and motion-capture experiments.

    python benchmarks/missing_data.py mnist      [--num-train 2000 --iterations 3000 ...]
    python benchmarks/missing_data.py movielens  [--latent-dim 10 --iterations 3000 ...]
    python benchmarks/missing_data.py brendan    # Brendan faces, 39% of the pixels missing
    python benchmarks/missing_data.py encoders   # amortised encoders on MNIST, 30% missing
    python benchmarks/missing_data.py mocap      # body parts blanked in CMU motion capture
    python benchmarks/missing_data.py covariance # per-output vs shared q(u) covariance
    python benchmarks/missing_data.py all --quick

MNIST: B-SVI (Q=5, M=100) trained on images with 10/30/60% of the pixels hidden; for each
train/test missingness pair, RMSE on the hidden pixels of held-out test images (their latents
inferred with the model frozen). The paper reports 0.27-0.28 in every cell.
MovieLens-100K: B-SVI on the users x movies matrix (93.7% missing), 10% of the ratings held
out: test RMSE and NLPD beside the movie means, a biased matrix factorisation and the global
mean, and the mean predictive variance of held-out ratings against how many ratings their user
gave and their movie got (the paper's figure: against the movie's; that needs per-output q(u)
covariances, ``shared_covariance=False``). reproduce_paper.py runs it at the paper's Q=15, M=34,
lr 0.005, batch 100.
Brendan faces: B-SVI (Q=5) on the 1965 frames with 39% of the pixels hidden; RMSE on the hidden
pixels from the trained q(x) beside the column mean and the nearest other frame
(reproduce_paper.py: the paper's M=120, lr 0.01, batch 450).
Motion capture (CMU subject 35 walk / jog, standing in for the paper's unnamed subject): each of the
four models (Q=9; M=100 by default here, while results/paper.md's table, made by
reproduce_paper.py, uses M=50: pass --num-inducing 50 to match it) is trained on the poses with
one body part blanked in a random 20% of them, and then reconstructs that part, in degrees, for
those training poses (from their trained q(x)) and for the two held-out trials (latents inferred
from the other channels), beside the training mean and the nearest complete training pose on the
observed channels.
Covariance: B-SVI with one q(u) covariance per output against one shared by all outputs, on
MNIST (60% missing; scored on the hidden training pixels, from the trained q(x)) and MovieLens
(Q=15, M=34 as in the paper; scored on the held-out ratings), at the paper's learning rates
(0.01 and 0.005; ``--learning-rate`` is not used): per-output and shared at equal
steps, and shared again for the per-output model's training time (equal wall time); full-data
ELBO, RMSE, Gaussian NLPD and 95% interval coverage.
Data: the folder in $GPFLOW_SVI_GPLVM_DATA (see gpflow_svi_gplvm.datasets).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, fit, models  # noqa: E402
from gpflow_svi_gplvm.datasets import (  # noqa: E402
    blank_bones,
    load_brendan_faces,
    load_mnist,
    load_mocap,
    load_movielens100k,
    random_missing,
)
from gpflow_svi_gplvm.metrics import nlpd, rmse  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

FRACTIONS = (0.1, 0.3, 0.6)
MODELS = {models.PAPER_NAMES[name]: models.MODELS[name] for name in models.PAPER_MODELS}
"""The four models under the paper's names (the rows of its tables)."""
MOCAP_PARTS = ("left_leg", "upper_body")

tf.get_logger().setLevel("ERROR")  # retracing notices: one model per run, expected


def _train(model, Y, args):
    """Train with the run's settings; returns (seconds, History)."""
    start = time.perf_counter()
    history = fit(
        model,
        Y,
        iterations=args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        progress=not args.no_progress,
    )
    return time.perf_counter() - start, history


def mnist_table(args) -> str:
    """The paper's Table 5 (MNIST) as markdown: RMSE on hidden test pixels per train/test
    missingness (``args.fractions``, each of FRACTIONS in a full run), beside two baselines trained
    on the same pixels; with ``args.elbo_plot`` (a path) the models' ELBO traces are saved there."""
    data = load_mnist(num_train=args.num_train, num_test=args.num_test)
    print(f"MNIST: {args.num_train} training and {args.num_test} test images, D=784", flush=True)
    predictors = ["B-SVI", "column mean", "nearest training image"]
    table, traces = {}, {}
    for train_fraction in args.fractions:
        Y_train, _ = random_missing(data.Y, train_fraction, seed=1)
        model = BayesianSVIGPLVM(Y_train, 5, num_inducing=args.num_inducing)
        seconds, traces[train_fraction] = _train(model, Y_train, args)
        column_means = np.nanmean(Y_train, axis=0)
        filled = np.where(np.isnan(Y_train), column_means, Y_train)
        for test_fraction in args.fractions:
            Y_test, hidden = random_missing(data.Y_test, test_fraction, seed=2)
            mean, _ = model.reconstruct(
                Y_test, iterations=args.inference_iterations, num_samples=32
            )
            predictions = {
                "B-SVI": mean.numpy(),
                "column mean": np.broadcast_to(column_means, Y_test.shape),
                "nearest training image": nearest_pose(filled, Y_test),
            }
            for name, prediction in predictions.items():
                table[name, train_fraction, test_fraction] = rmse(
                    data.Y_test, prediction, mask=hidden
                )
        print(f"  trained on {train_fraction:.0%} missing in {seconds:.0f} s", flush=True)
    if getattr(args, "elbo_plot", None):
        _plot_traces(traces, args.elbo_plot)
    header = " | ".join(f"test {f:.0%} missing" for f in args.fractions)
    lines = [
        f"| RMSE on hidden test pixels (B-SVI: Q=5, M={args.num_inducing}) | {header} |",
        "|---|" + "---|" * len(args.fractions),
    ]
    for name in predictors:
        for train_fraction in args.fractions:
            cells = " | ".join(f"{table[name, train_fraction, f]:.3f}" for f in args.fractions)
            lines.append(f"| {name}, trained on {train_fraction:.0%} missing | {cells} |")
    return "\n".join(lines) + (
        "\n\n(paper, B-SVI: 0.27-0.28 in every cell. Column mean: the training pixels' mean; "
        "nearest training image: the training image closest on the test image's observed "
        "pixels, its own gaps filled with column means.)"
    )


def _plot_traces(histories: dict, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, ax = plt.subplots(figsize=(7, 3.5))
    for fraction, history in histories.items():
        elbo = np.asarray(history.elbo)
        window = max(1, min(200, len(elbo) // 20))
        smooth = np.convolve(elbo, np.ones(window) / window, mode="valid")
        steps = np.arange(window - 1, len(elbo))
        shown = steps >= len(elbo) // 10  # the first tenth climbs by orders of magnitude
        ax.plot(steps[shown], smooth[shown], label=f"trained on {fraction:.0%} missing")
    ax.set_xlabel("step")
    ax.set_ylabel(f"minibatch ELBO\n(running mean of {window} steps)")
    ax.legend()
    figure.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(figure)


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
        seconds, _ = _train(model, Y_train, args)
        mean, variance = model.reconstruct(Y_test, num_samples=32)
        mean, sd = mean.numpy(), np.sqrt(variance.numpy())
        coverage = np.mean(np.abs(data.Y_test - mean)[hidden] <= 1.96 * sd[hidden])
        error = rmse(data.Y_test, mean, mask=hidden)
        print(f"| {name} | {error:.3f} | {coverage:.2f} | {seconds:.0f} |")


def matrix_factorisation(Y: np.ndarray, rank: int, penalty: float, sweeps: int = 20) -> np.ndarray:
    """A baseline: y_ui ~ mu + b_u + c_i + p_u . q_i fitted to the observed entries by
    alternating ridge regressions (``penalty`` on the factors and biases); the full matrix."""
    rng = np.random.default_rng(0)
    observed = ~np.isnan(Y)
    mu = np.nanmean(Y)
    P, b = 0.1 * rng.standard_normal((Y.shape[0], rank)), np.zeros(Y.shape[0])
    Q, c = 0.1 * rng.standard_normal((Y.shape[1], rank)), np.zeros(Y.shape[1])

    def ridge(features: np.ndarray, targets: np.ndarray) -> tuple[np.ndarray, float]:
        A = np.column_stack([features, np.ones(len(features))])
        solution = np.linalg.solve(A.T @ A + penalty * np.eye(rank + 1), A.T @ targets)
        return solution[:-1], solution[-1]

    for _ in range(sweeps):
        for u in range(Y.shape[0]):
            seen = observed[u]
            P[u], b[u] = ridge(Q[seen], Y[u, seen] - mu - c[seen])
        for i in range(Y.shape[1]):
            seen = observed[:, i]
            Q[i], c[i] = ridge(P[seen], Y[seen, i] - mu - b[seen])
    return mu + b[:, None] + c[None, :] + P @ Q.T


def movielens_table(args) -> str:
    """MovieLens-100K at the paper's configuration: held-out rating RMSE and NLPD beside
    baselines, and the predictive variance of held-out ratings against each user's count."""
    Y = load_movielens100k().Y
    Y_train, held_out = random_missing(Y, 0.1, seed=1)
    print(
        f"MovieLens-100K: {Y.shape[0]} users x {Y.shape[1]} movies, "
        f"{np.isnan(Y).mean():.1%} missing; {held_out.sum()} ratings held out",
        flush=True,
    )
    model = BayesianSVIGPLVM(Y_train, args.latent_dim, num_inducing=args.num_inducing)
    seconds, _ = _train(model, Y_train, args)
    mean, variance = model.reconstruct(Y_train, rows=np.arange(Y.shape[0]), num_samples=32)
    mean, variance = mean.numpy(), variance.numpy()
    global_mean = np.nanmean(Y_train)
    movie_means = np.where(np.isnan(np.nanmean(Y_train, 0)), global_mean, np.nanmean(Y_train, 0))
    residual_var = np.nanvar(Y_train - movie_means)
    factorised = matrix_factorisation(Y_train, rank=args.latent_dim, penalty=10.0)
    fit_var = np.nanvar(Y_train - factorised)
    layout = "shared" if model.shared_covariance else "per-output"
    predictors = {
        f"B-SVI (Q={args.latent_dim}, M={args.num_inducing}, {layout} q(u) covariance)": (
            mean,
            variance,
        ),
        "movie mean (Gaussian, residual variance)": (
            np.broadcast_to(movie_means, Y.shape),
            np.full(Y.shape, residual_var),
        ),
        f"matrix factorisation (rank {args.latent_dim} + biases, ridge 10)": (
            factorised,
            np.full(Y.shape, fit_var),
        ),
        "global mean": (np.full(Y.shape, global_mean), np.full(Y.shape, np.nanvar(Y_train))),
    }
    lines = [
        f"B-SVI trained {args.iterations} steps (batch {args.batch_size}, lr "
        f"{args.learning_rate}) in {seconds:.0f} s.",
        "",
        "| predictor | RMSE on held-out ratings | NLPD per held-out rating |",
        "|---|---|---|",
    ]
    for name, (m, v) in predictors.items():
        lines.append(f"| {name} | {rmse(Y, m, held_out):.3f} | {nlpd(Y, m, v, held_out):.3f} |")
    counts = {
        "user gave": np.sum(~np.isnan(Y_train), axis=1)[:, None],
        "movie got": np.sum(~np.isnan(Y_train), axis=0)[None, :],
    }
    variances = variance[held_out]
    bins = [0, 5, 20, 50, 100, 200, 400, 1000]
    for whose, count in counts.items():
        per_rating = np.broadcast_to(count, Y.shape)[held_out]
        lines += [
            "",
            f"| ratings the {whose} in training | held-out ratings | mean predictive variance |",
            "|---|---|---|",
        ]
        for low, high in zip(bins[:-1], bins[1:]):
            chosen = (per_rating >= low) & (per_rating < high)
            if chosen.any():
                mean_variance = variances[chosen].mean()
                lines.append(f"| {low}-{high - 1} | {chosen.sum()} | {mean_variance:.3f} |")
    return "\n".join(lines)


def movielens(args) -> None:
    print("\n" + movielens_table(args))


def brendan_table(args) -> str:
    """Brendan faces with 39% of the pixels missing (the paper's configuration): RMSE on the
    hidden pixels from the trained q(x), beside baselines; with ``args.image_grid`` (a path)
    an image grid of truth / observed / reconstruction."""
    data = load_brendan_faces(scale=True)
    Y_train, hidden = random_missing(data.Y, 0.39, seed=1)
    print(f"Brendan faces: {data.Y.shape}, 39% of pixels hidden", flush=True)
    model = BayesianSVIGPLVM(Y_train, 5, num_inducing=args.num_inducing)
    seconds, _ = _train(model, Y_train, args)
    mean, variance = model.reconstruct(Y_train, rows=np.arange(len(Y_train)), num_samples=32)
    mean, variance = mean.numpy(), variance.numpy()
    column_means = np.nanmean(Y_train, axis=0)
    filled = np.where(np.isnan(Y_train), column_means, Y_train)
    # The nearest *other* frame: a frame is nearest to itself on its own observed pixels.
    neighbours = nearest_pose(filled, Y_train, exclude_self=True)
    layout = "shared" if model.shared_covariance else "per-output"
    lines = [
        f"B-SVI trained {args.iterations} steps (batch {args.batch_size}, lr "
        f"{args.learning_rate}) in {seconds:.0f} s; pixels scaled to [0, 1].",
        "",
        "| predictor | RMSE on hidden pixels | NLPD per hidden pixel |",
        "|---|---|---|",
        f"| B-SVI (Q=5, M={args.num_inducing}, {layout} q(u) covariance) | "
        f"{rmse(data.Y, mean, hidden):.4f} | {nlpd(data.Y, mean, variance, hidden):.3f} |",
        f"| column mean | {rmse(data.Y, np.broadcast_to(column_means, data.Y.shape), hidden):.4f}"
        " | - |",
        f"| nearest other frame | {rmse(data.Y, neighbours, hidden):.4f} | - |",
    ]
    if getattr(args, "image_grid", None):
        from gpflow_svi_gplvm.plotting import plot_image_grid

        shown = np.linspace(0, len(data.Y) - 1, 8).astype(int)
        figure = plot_image_grid(
            [data.Y[shown], Y_train[shown], mean[shown]],
            data.metadata["image_shape"],
            titles=["truth", "observed", "reconstructed"],
        )
        figure.savefig(args.image_grid, dpi=110, bbox_inches="tight")
    return "\n".join(lines)


def brendan(args) -> None:
    print("\n" + brendan_table(args))


def full_elbo(model, Y: np.ndarray, evaluations: int = 3, chunk: int = 250) -> float:
    """The bound on all N rows (mean of ``evaluations`` Monte Carlo estimates), in row chunks."""
    values = []
    for _ in range(evaluations):
        rows = 0.0
        for start in range(0, len(Y), chunk):
            idx = tf.range(start, min(start + chunk, len(Y)), dtype=tf.int64)
            rows += float(
                tf.reduce_sum(model.row_bounds(idx, tf.constant(Y[start : start + chunk])))
            )
        values.append(rows - float(model.prior_kl()))
    return float(np.mean(values))


def _layout_runs(Y_train: np.ndarray, build, learning_rate: float, args) -> dict[str, tuple]:
    """Per-output for ``--iterations`` steps; shared for as many (equal steps) and then on until
    it has trained as long as the per-output model did (equal wall time, at most 100x the
    steps). Returns {label: (model, steps, seconds)}."""
    runs = {}
    for shared in (False, True):
        model = build(shared)
        trainer = Trainer(
            model, Y_train, batch_size=args.batch_size, learning_rate=args.learning_rate
        )
        start = time.perf_counter()
        trainer.train(args.iterations, progress=not args.no_progress)
        seconds = time.perf_counter() - start
        label = "shared" if shared else "per-output"
        runs[f"{label}, equal steps"] = (model, trainer.num_steps, seconds)
        print(f"  {label}: {trainer.num_steps} steps in {seconds:.0f} s", flush=True)
    if args.quick:
        return runs
    budget = runs["per-output, equal steps"][2]
    model = build(True)
    trainer = Trainer(model, Y_train, batch_size=args.batch_size, learning_rate=learning_rate)
    start = time.perf_counter()
    while time.perf_counter() - start < budget and trainer.num_steps < 100 * args.iterations:
        trainer.train(500, progress=False)
    runs["shared, equal wall time"] = (model, trainer.num_steps, time.perf_counter() - start)
    print(f"  shared: {trainer.num_steps} steps in {runs['shared, equal wall time'][2]:.0f} s")
    return runs


def _scores(Y_true, mean, variance, scored) -> str:
    sd = np.sqrt(variance)
    coverage = np.mean(np.abs(Y_true - mean)[scored] <= 1.96 * sd[scored])
    return (
        f"{rmse(Y_true, mean, mask=scored):.4f} | {nlpd(Y_true, mean, variance, mask=scored):.3f} "
        f"| {coverage:.3f}"
    )


def covariance(args) -> None:
    """What sharing one q(u) covariance across outputs costs where it is not exact: MNIST with
    60% of the pixels missing and MovieLens-100K, B-SVI per-output vs shared."""
    data = load_mnist(num_train=args.num_train, num_test=0)
    Y_mnist, hidden = random_missing(data.Y, 0.6, seed=1)
    ratings = load_movielens100k().Y
    Y_ratings, held_out = random_missing(ratings, 0.1, seed=1)
    experiments = [
        (
            f"MNIST, {args.num_train} images, 60% missing, B-SVI Q=5 M={args.num_inducing}",
            data.Y,
            Y_mnist,
            hidden,
            lambda shared: BayesianSVIGPLVM(
                Y_mnist, 5, num_inducing=args.num_inducing, shared_covariance=shared
            ),
            "hidden training pixels",
            0.01,
        ),
        (
            "MovieLens-100K, 10% of ratings held out, B-SVI Q=15 M=34",
            ratings,
            Y_ratings,
            held_out,
            lambda shared: BayesianSVIGPLVM(
                Y_ratings, 15, num_inducing=min(34, args.num_inducing), shared_covariance=shared
            ),
            "held-out ratings",
            0.005,
        ),
    ]
    for title, Y_true, Y_train, scored, build, target, learning_rate in experiments:
        print(f"\n{title}: {args.iterations} steps, batch {args.batch_size}, lr {learning_rate}")
        rows = []
        runs = _layout_runs(Y_train, build, learning_rate, args)
        for label, (model, steps, seconds) in runs.items():
            mean, variance = model.reconstruct(
                Y_train, rows=np.arange(len(Y_train)), num_samples=32
            )
            scores = _scores(Y_true, mean.numpy(), variance.numpy(), scored)
            elbo = full_elbo(model, Y_train)
            rows.append(f"| {label} | {steps} | {seconds:.0f} | {elbo:.4g} | {scores} |")
        print(
            f"\n| q(u) covariance | steps | train s | full-data ELBO | RMSE on {target} | "
            "NLPD | 95% coverage |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|")
        print("\n".join(rows), flush=True)


def nearest_pose(Y_train: np.ndarray, Y: np.ndarray, exclude_self: bool = False) -> np.ndarray:
    """For each row of Y (NaN = hidden), the training row nearest on Y's observed entries
    (``exclude_self``: Y's rows are the training rows, and row n may not pick itself)."""
    observed = ~np.isnan(Y)
    filled = np.where(observed, Y, 0.0)
    # |y - t|^2 over observed entries, for all pairs, without forming [N, N_train, D].
    distances = (
        np.sum(filled**2, 1)[:, None]
        - 2.0 * filled @ Y_train.T
        + observed.astype(float) @ (Y_train**2).T
    )
    if exclude_self:
        np.fill_diagonal(distances, np.inf)
    return Y_train[np.argmin(distances, axis=1)]


def mocap_table(args) -> str:
    """RMSE (degrees) on blanked body parts of training and held-out poses, as markdown, for the
    baselines and the models named in ``args.models``."""
    data = load_mocap(zero_root_position=True)
    rng = np.random.default_rng(args.seed)
    train_rows = np.sort(rng.choice(len(data.Y), size=len(data.Y) // 5, replace=False))
    complete = np.delete(data.Y, train_rows, axis=0)  # the poses that are never blanked
    # Standardise on those poses only, so no blanked value informs anything; the zeroed root
    # position and any other constant channel carry no information and are dropped.
    used = np.std(complete, axis=0) > 0
    location, scale = complete[:, used].mean(0), complete[:, used].std(0)
    Y, Y_test, complete = ((a[:, used] - location) / scale for a in (data.Y, data.Y_test, complete))
    channels = {"bone": np.asarray(data.metadata["channel_table"]["bone"])[used]}
    print(
        f"MOCAP: {len(Y)} training and {len(Y_test)} held-out poses, {Y.shape[1]} channels; "
        f"a body part blanked in {len(train_rows)} training poses",
        flush=True,
    )

    def degrees(Y_true, Y_pred, hidden) -> float:
        return rmse(Y_true * scale, Y_pred * scale, mask=hidden)

    baselines = {
        "training mean": lambda rows: np.broadcast_to(complete.mean(0), rows.shape),
        "nearest complete pose": lambda rows: nearest_pose(complete, rows),
    }
    lines = [
        "| body part blanked | predictor | RMSE on training poses (deg) | "
        "RMSE on held-out poses (deg) | train s |",
        "|---|---|---|---|---|",
    ]
    for part in args.parts:
        Y_train, hidden_train = blank_bones(Y, channels, part, rows=train_rows)
        Y_held, hidden_test = blank_bones(Y_test, channels, part)
        for name, predict in baselines.items():
            lines.append(
                f"| {part} | {name} | {degrees(Y, predict(Y_train), hidden_train):.2f} "
                f"| {degrees(Y_test, predict(Y_held), hidden_test):.2f} | - |"
            )
        for name in args.models:
            model = MODELS[name](Y_train, 9, num_inducing=args.num_inducing, seed=args.seed)
            seconds, _ = _train(model, Y_train, args)
            train_pred, _ = model.reconstruct(
                Y_train[train_rows], rows=train_rows, num_samples=32, seed=args.seed
            )
            test_pred, _ = model.reconstruct(
                Y_held, iterations=args.inference_iterations, num_samples=32, seed=args.seed
            )
            train_error = degrees(Y[train_rows], train_pred.numpy(), hidden_train[train_rows])
            test_error = degrees(Y_test, test_pred.numpy(), hidden_test)
            lines.append(
                f"| {part} | {name} (Q=9, M={args.num_inducing}) | {train_error:.2f} "
                f"| {test_error:.2f} | {seconds:.0f} |"
            )
            print(f"  {part}: {name} {train_error:.2f} / {test_error:.2f} deg", flush=True)
    return "\n".join(lines)


def mocap(args) -> None:
    print("\n" + mocap_table(args))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "experiment",
        choices=["mnist", "movielens", "brendan", "encoders", "mocap", "covariance", "all"],
    )
    parser.add_argument("--num-train", type=int, default=2000)
    parser.add_argument("--num-test", type=int, default=500)
    parser.add_argument("--num-inducing", type=int, default=100)
    parser.add_argument("--latent-dim", type=int, default=10, help="MovieLens Q")
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--inference-iterations", type=int, default=300)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0, help="MOCAP: rows blanked, initialisation")
    parser.add_argument(
        "--parts", nargs="+", default=list(MOCAP_PARTS), help="MOCAP body parts to blank in turn"
    )
    parser.add_argument("--quick", action="store_true", help="tiny settings for a smoke run")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args()
    args.fractions, args.models = FRACTIONS, list(MODELS)
    if args.quick:
        args.num_train, args.num_test, args.num_inducing = 200, 50, 10
        args.iterations, args.inference_iterations, args.no_progress = 20, 5, True
        args.parts = args.parts[-1:]
    experiments = {"mnist": mnist, "movielens": movielens, "encoders": encoders, "mocap": mocap}
    experiments |= {"brendan": brendan, "covariance": covariance}
    chosen = experiments if args.experiment == "all" else {args.experiment: None}
    for name in chosen:
        experiments[name](args)
        print()


if __name__ == "__main__":
    main()
