"""Time to accuracy: the full-data ELBO and the held-out RMSE against training seconds.

Usage::

    python benchmarks/convergence.py [--data oilflow|mnist] [--seeds 0 1 2]
                                     [--marks 500 1000 2000 3000 5000 10000]
                                     [--optimizers row row-k dense natgrad] [--gamma 0.1] [--quick]

Problems (``--data``), B-SVI with batch 100 and learning rate 0.01:

- ``oilflow``: the paper's protocol, an 80/20 split of the 1000 rows (seeded), Q=10, M=25; the
  held-out RMSE reconstructs the test rows from their own entries (q(x*) inferred with the
  trained globals frozen, as in ``reproduce_paper.py``);
- ``mnist``: 2000 training images with 60% of the pixels hidden (seeded), Q=5, M=100 (a shared
  q(u) covariance, the default at D=784); the held-out RMSE is on the hidden pixels.

Each optimiser setting trains one model per seed with one
:class:`~gpflow_svi_gplvm.training.trainer.Trainer` and stops at every mark to evaluate (evaluation
time is not counted as training time):

- ``elbo``: the full-data ELBO (all training rows in one batch), the mean of 5 evaluations;
- ``rmse``: the held-out RMSE above;
- ``seconds``: wall-clock training seconds up to the mark, the one-off compilation included.

Optimiser settings:

- ``row``: :class:`~gpflow_svi_gplvm.training.optimizers.RowSparseAdam` on every parameter, q(u)
  included (per-row tables move only on the batch's rows, bias-corrected with the step count
  t);
- ``row-k``: the same optimiser with ``bias_correction="row"``: each row bias-corrected by its own
  update count k;
- ``dense``: tf_keras' Adam on every variable (``fit(..., optimizer=tf_keras.optimizers.Adam())``);
- ``natgrad``: natural-gradient steps of size ``--gamma`` on q(u), ``RowSparseAdam`` on the rest
  (``q_u_optimizer="natgrad"``, the default for a Gaussian likelihood);
- ``natgrad+row-k``: the same with the per-row bias correction;
- ``default``: the package's defaults: natural gradients on q(u) for this Gaussian likelihood,
  ``latent_expectation="auto"`` (the closed form over q(x) on oil flow's complete data, Monte
  Carlo on MNIST's gaps under a shared covariance) and ``row_updates="auto"`` (dense updates of
  tables of at most 40,000 entries, N Q);
- ``default-sparse``: the defaults with ``row_updates="sparse"`` (the defaults before dense row
  updates existed);
- ``default+decay``, ``default+warm-up``, ``default+both``: the defaults with a step-size
  schedule (``SCHEDULES``): Adam's rate 0.01 / (1 + t / 5000), and/or natural-gradient steps
  whose size grows log-linearly from 1e-4 to 0.1 over the first 1000 steps.

All but the ``default`` settings estimate the expectation over q(x) by Monte Carlo with one draw
(``latent_expectation="monte-carlo"``), as every setting did before the closed form existed.

Prints a markdown table (means over seeds, and the spread of the ELBO) and writes a figure to
``benchmarks/figures/convergence_<data>.png``.

``--inference`` measures new-row inference instead: an oil-flow model trained for 5000 steps
(split and model seed 0), once as before the closed form and natural gradients existed (Monte
Carlo over q(x), q(u) by Adam) and once with the defaults (closed form, natural gradients), then
q(x*) of the test rows inferred with 5 inference seeds, for each ``LatentInference(averaging=...)``
(0: the last iterate of the 300 Adam steps; 0.5: the mean of the last 150 iterates). The spread
is the standard deviation of a row's q(x*) mean across the seeds, averaged over rows and latent
dimensions, also divided by the spread of the training rows' latent means (the standard deviation
over rows, averaged over dimensions), beside the mean standard deviation of q(x*) itself and the
test RMSE.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, LatentInference  # noqa: E402
from gpflow_svi_gplvm.datasets import (  # noqa: E402
    load_mnist,
    load_oilflow,
    random_missing,
    train_test_split,
)
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402
from gpflow_svi_gplvm.training.optimizers import RowSparseAdam  # noqa: E402
from gpflow_svi_gplvm.training.schedules import WarmUp  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

BATCH, LEARNING_RATE = 100, 0.01
ELBO_EVALUATIONS = 5
FIGURES = Path(__file__).resolve().parent / "figures"


@dataclass
class Problem:
    """A data set, how to build its model and how to score it held out."""

    title: str
    Y_train: np.ndarray
    build: Callable[[int, str], BayesianSVIGPLVM]
    """(seed, latent_expectation) -> model"""
    held_out_rmse: Callable[[BayesianSVIGPLVM, LatentInference], float]


def oilflow(seed: int) -> Problem:
    """The 80/20 split of the 1000 rows; test rows reconstructed from their own entries."""
    split = train_test_split(np.asarray(load_oilflow().Y, dtype=float), 0.2, seed)
    return Problem(
        "Oil flow, B-SVI (Q=10, M=25, batch 100, lr 0.01)",
        split.Y_train,
        lambda s, expectation: BayesianSVIGPLVM(
            split.Y_train, 10, 25, seed=s, latent_expectation=expectation
        ),
        lambda model, inference: rmse(split.Y_test, inference.reconstruct(split.Y_test)[0].numpy()),
    )


def mnist(seed: int) -> Problem:
    """2000 training images with 60% of their pixels hidden (seeded); scored on those pixels."""
    images = load_mnist(num_train=2000, num_test=0).Y
    Y_train, hidden = random_missing(images, 0.6, seed=seed)
    rows = np.arange(len(Y_train))

    def held_out_rmse(model, inference) -> float:
        return rmse(images, model.reconstruct(Y_train, rows=rows)[0].numpy(), mask=hidden)

    return Problem(
        "MNIST 2000 images, 60% missing, B-SVI (Q=5, M=100, shared q(u) covariance, batch 100, "
        "lr 0.01)",
        Y_train,
        lambda s, expectation: BayesianSVIGPLVM(
            Y_train, 5, 100, seed=s, latent_expectation=expectation
        ),
        held_out_rmse,
    )


PROBLEMS = {"oilflow": oilflow, "mnist": mnist}


def make_trainer(
    setting: str, model: BayesianSVIGPLVM, Y: np.ndarray, seed: int, gamma: float = 0.03
) -> Trainer:
    q_u = "natgrad" if setting.startswith(("natgrad", "default")) else "adam"
    if setting == "dense":
        optimizer = tf_keras.optimizers.Adam(LEARNING_RATE)
        return Trainer(
            model, Y, batch_size=BATCH, optimizer=optimizer, seed=seed, q_u_optimizer=q_u
        )
    options = dict(learning_rate=LEARNING_RATE, natgrad_gamma=gamma)
    options.update(SCHEDULES.get(setting, {}))
    # The settings from before row_updates existed keep moving only the batch's rows.
    defaults = setting.startswith("default") and setting != "default-sparse"
    row_updates = "auto" if defaults else "sparse"
    trainer = Trainer(
        model, Y, batch_size=BATCH, seed=seed, q_u_optimizer=q_u, row_updates=row_updates, **options
    )
    if setting.endswith("row-k"):  # swapped in before the step is first traced
        trainer.steps.optimizer = RowSparseAdam(
            trainer.steps.optimizer_variables, LEARNING_RATE, bias_correction="row"
        )
    return trainer


DECAY_STEPS, WARM_UP_END, WARM_UP_STEPS = 5000, 0.1, 1000
SCHEDULES = {
    "default+decay": dict(learning_rate=lambda t: LEARNING_RATE / (1.0 + t / DECAY_STEPS)),
    "default+warm-up": dict(natgrad_gamma=WarmUp(1e-4, WARM_UP_END, WARM_UP_STEPS)),
    "default+both": dict(
        learning_rate=lambda t: LEARNING_RATE / (1.0 + t / DECAY_STEPS),
        natgrad_gamma=WarmUp(1e-4, WARM_UP_END, WARM_UP_STEPS),
    ),
}
"""Schedules against the defaults' constant step sizes: Adam's rate halved at DECAY_STEPS
(inverse-time decay), and gamma grown log-linearly from 1e-4 to WARM_UP_END in WARM_UP_STEPS."""


def run(
    problem: Callable[[int], Problem],
    setting: str,
    seed: int,
    marks: list[int],
    quiet: bool = False,
    gamma: float = 0.03,
) -> list[dict]:
    """Train one model to each mark in turn; the measurements at every mark."""
    data = problem(seed)
    tf.random.set_seed(seed)
    model = data.build(seed, "auto" if setting.startswith("default") else "monte-carlo")
    trainer = make_trainer(setting, model, data.Y_train, seed, gamma)
    everything = (tf.range(len(data.Y_train), dtype=tf.int64), tf.constant(data.Y_train))
    full_elbo = tf.function(lambda: model.elbo(everything), input_signature=[])
    inference = LatentInference(model, seed=seed)
    measured, seconds = [], 0.0
    for mark in marks:
        start = time.perf_counter()
        trainer.train(mark - trainer.num_steps, progress=False)
        seconds += time.perf_counter() - start
        elbo = np.mean([full_elbo().numpy() for _ in range(ELBO_EVALUATIONS)])
        error = data.held_out_rmse(model, inference)
        measured.append(dict(steps=mark, seconds=seconds, elbo=float(elbo), rmse=error))
        if not quiet:
            print(
                f"  {setting:13s} seed {seed} step {mark:6d}: ELBO {elbo:9.1f}  held-out RMSE "
                f"{error:.4f}  {seconds:6.1f} s",
                flush=True,
            )
    return measured


def inference_spread(seeds: list[int], averagings: list[float]) -> str:
    """The spread of q(x*) over inference seeds, for a model trained as before the closed form
    and natural gradients existed (Monte Carlo, q(u) by Adam) and one with the defaults."""
    split = train_test_split(np.asarray(load_oilflow().Y, dtype=float), 0.2, 0)
    Y_train, Y_test = split.Y_train, split.Y_test
    lines = [
        "| model | averaging | spread of q(x*) means over seeds | spread / latent spread "
        "| q(x*) sd | test RMSE (min-max) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for expectation, q_u in [("monte-carlo", "adam"), ("auto", None)]:
        tf.random.set_seed(0)
        model = BayesianSVIGPLVM(Y_train, 10, 25, seed=0, latent_expectation=expectation)
        Trainer(
            model, Y_train, batch_size=BATCH, learning_rate=LEARNING_RATE, seed=0, q_u_optimizer=q_u
        ).train(5000, progress=False)
        # The spread of the training rows' latent means, averaged over dimensions.
        latent_spread = np.std(model.latent_mean().numpy(), axis=0).mean()
        label = "defaults" if q_u is None else "Monte Carlo, q(u) by Adam"
        for averaging in averagings:
            means, sds, errors = [], [], []
            for seed in seeds:
                inference = LatentInference(model, seed=seed, averaging=averaging)
                mean, variance = inference.infer(Y_test)
                means.append(mean.numpy())
                sds.append(np.sqrt(variance.numpy()).mean())
                errors.append(rmse(Y_test, inference.reconstruct(Y_test)[0].numpy()))
            spread = np.std(means, axis=0).mean()
            lines.append(
                f"| {label} | {averaging:g} | {spread:.4f} | {spread / latent_spread:.3f} "
                f"| {np.mean(sds):.4f} | {np.mean(errors):.4f} "
                f"({min(errors):.4f}-{max(errors):.4f}) |"
            )
            print(lines[-1], flush=True)
    return "\n".join(lines)


def table(results: dict[str, list[list[dict]]], marks: list[int]) -> str:
    lines = [
        "| optimiser | steps | full-data ELBO (mean; min-max over seeds) | held-out RMSE "
        "| train s |",
        "|---|---:|---:|---:|---:|",
    ]
    for setting, runs in results.items():
        for i, mark in enumerate(marks):
            elbos = [run[i]["elbo"] for run in runs]
            error = np.mean([run[i]["rmse"] for run in runs])
            seconds = np.mean([run[i]["seconds"] for run in runs])
            lines.append(
                f"| {setting} | {mark} | {np.mean(elbos):.0f} ({min(elbos):.0f} to "
                f"{max(elbos):.0f}) | {error:.4f} | {seconds:.1f} |"
            )
    return "\n".join(lines)


def plot(results: dict[str, list[list[dict]]], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for setting, runs in results.items():
        for k, run in enumerate(runs):
            seconds = [point["seconds"] for point in run]
            style = dict(color=f"C{list(results).index(setting)}", alpha=0.8)
            label = setting if k == 0 else None
            left.plot(seconds, [point["elbo"] for point in run], "o-", label=label, **style)
            right.plot(seconds, [point["rmse"] for point in run], "o-", label=label, **style)
    left.set(xlabel="training seconds", ylabel="full-data ELBO", yscale="symlog")
    right.set(xlabel="training seconds", ylabel="held-out RMSE", yscale="log")
    left.legend()
    figure.suptitle(f"{title}: one line per seed")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument(
        "--marks", type=int, nargs="+", default=[500, 1000, 2000, 3000, 5000, 10000]
    )
    parser.add_argument(
        "--optimizers",
        nargs="+",
        default=["row", "row-k", "dense"],
        choices=["row", "row-k", "dense", "natgrad", "natgrad+row-k", "default", "default-sparse"]
        + list(SCHEDULES),
    )
    parser.add_argument("--gamma", type=float, default=0.03, help="natural-gradient step size")
    parser.add_argument("--quick", action="store_true", help="one seed, marks 20 and 40")
    parser.add_argument("--data", choices=sorted(PROBLEMS), default="oilflow")
    parser.add_argument("--figure", type=Path, help="default: figures/convergence_<data>.png")
    parser.add_argument("--inference", action="store_true", help="new-row inference spread")
    args = parser.parse_args(argv)
    if args.inference:
        print(inference_spread([0, 1, 2, 3, 4], [0.0, 0.5]))
        return 0
    if args.quick:
        args.seeds, args.marks = args.seeds[:1], [20, 40]
    problem = PROBLEMS[args.data]
    run(problem, "row", args.seeds[0], [1], quiet=True)  # the first compilation costs extra
    results = {
        setting: [
            run(problem, setting, seed, sorted(args.marks), gamma=args.gamma) for seed in args.seeds
        ]
        for setting in args.optimizers
    }
    print(table(results, sorted(args.marks)))
    figure = args.figure or FIGURES / f"convergence_{args.data}.png"
    plot(results, problem(args.seeds[0]).title, figure)
    print(f"figure: {figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
