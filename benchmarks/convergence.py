"""Time to accuracy: the full-data ELBO and the held-out RMSE against training seconds.

Usage::

    python benchmarks/convergence.py [--seeds 0 1 2] [--marks 500 1000 2000 3000 5000 10000]
                                     [--optimizers row row-k dense] [--quick]

Oil flow as in the paper's protocol (an 80/20 split of the 1000 rows, seeded), B-SVI with Q=10,
M=25, batch 100 and learning rate 0.01. Each optimiser setting trains one model per seed with one
:class:`~gpflow_svi_gplvm.training.Trainer` and stops at every mark to evaluate (evaluation time
is not counted as training time):

- ``elbo``: the full-data ELBO (all training rows in one batch), the mean of 5 evaluations;
- ``rmse``: the test rows reconstructed from their own entries (q(x*) inferred with the trained
  globals frozen, as in ``reproduce_paper.py``), RMSE against the test rows;
- ``seconds``: wall-clock training seconds up to the mark, the one-off compilation included.

Optimiser settings:

- ``row``: the package's default, :class:`~gpflow_svi_gplvm.optimizers.RowSparseAdam` (per-row
  tables move only on the batch's rows, bias-corrected with the step count t);
- ``row-k``: the same optimiser with ``bias_correction="row"``: each row bias-corrected by its own
  update count k;
- ``dense``: tf_keras' Adam on every variable (``fit(..., optimizer=tf_keras.optimizers.Adam())``).

Prints a markdown table (means over seeds, and the spread of the ELBO) and writes a figure to
``benchmarks/figures/convergence_oilflow.png``.

``--inference`` measures new-row inference instead: one model trained for 5000 steps (split and
model seed 0), then q(x*) of the test rows inferred with 5 inference seeds, for each
``LatentInference(averaging=...)`` (0: the last iterate of the 300 Adam steps; 0.5: the mean of
the last 150 iterates). The spread is the standard deviation of a row's q(x*) mean across the
seeds, averaged over rows and latent dimensions, beside the mean standard deviation of q(x*) itself
and the test RMSE.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, LatentInference  # noqa: E402
from gpflow_svi_gplvm.datasets import load_oilflow  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402
from gpflow_svi_gplvm.optimizers import RowSparseAdam  # noqa: E402
from gpflow_svi_gplvm.protocols import train_test_split  # noqa: E402
from gpflow_svi_gplvm.training import Trainer  # noqa: E402

LATENT_DIM, NUM_INDUCING, BATCH, LEARNING_RATE = 10, 25, 100, 0.01
ELBO_EVALUATIONS = 5
FIGURE = Path(__file__).resolve().parent / "figures" / "convergence_oilflow.png"


def make_trainer(setting: str, model: BayesianSVIGPLVM, Y: np.ndarray, seed: int) -> Trainer:
    if setting == "dense":
        optimizer = tf_keras.optimizers.Adam(LEARNING_RATE)
        return Trainer(model, Y, BATCH, optimizer=optimizer, seed=seed)
    trainer = Trainer(model, Y, BATCH, LEARNING_RATE, seed=seed)
    if setting == "row-k":  # swapped in before the step is first traced
        trainer.optimizer = RowSparseAdam(trainer.variables, LEARNING_RATE, bias_correction="row")
    return trainer


def run(setting: str, seed: int, marks: list[int], quiet: bool = False) -> list[dict]:
    """Train one model to each mark in turn; the measurements at every mark."""
    split = train_test_split(np.asarray(load_oilflow().Y, dtype=float), 0.2, seed)
    Y_train, Y_test = split.Y_train, split.Y_test
    tf.random.set_seed(seed)
    model = BayesianSVIGPLVM(Y_train, LATENT_DIM, NUM_INDUCING, seed=seed)
    trainer = make_trainer(setting, model, Y_train, seed)
    everything = (tf.range(len(Y_train), dtype=tf.int64), tf.constant(Y_train))
    full_elbo = tf.function(lambda: model.elbo(everything), input_signature=[])
    inference = LatentInference(model, seed=seed)
    measured, seconds = [], 0.0
    for mark in marks:
        start = time.perf_counter()
        trainer.train(mark - trainer.num_steps, progress=False)
        seconds += time.perf_counter() - start
        elbo = np.mean([full_elbo().numpy() for _ in range(ELBO_EVALUATIONS)])
        mean, _ = inference.reconstruct(Y_test)
        error = rmse(Y_test, mean.numpy())
        measured.append(dict(steps=mark, seconds=seconds, elbo=float(elbo), rmse=error))
        if not quiet:
            print(
                f"  {setting:13s} seed {seed} step {mark:6d}: ELBO {elbo:9.1f}  test RMSE "
                f"{error:.4f}  {seconds:6.1f} s",
                flush=True,
            )
    return measured


def inference_spread(seeds: list[int], averagings: list[float]) -> str:
    split = train_test_split(np.asarray(load_oilflow().Y, dtype=float), 0.2, 0)
    Y_train, Y_test = split.Y_train, split.Y_test
    tf.random.set_seed(0)
    model = BayesianSVIGPLVM(Y_train, LATENT_DIM, NUM_INDUCING, seed=0)
    Trainer(model, Y_train, BATCH, LEARNING_RATE, seed=0).train(5000, progress=False)
    lines = [
        "| averaging | spread of q(x*) means over seeds | q(x*) sd | test RMSE (min-max) |",
        "|---:|---:|---:|---:|",
    ]
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
            f"| {averaging:g} | {spread:.4f} | {np.mean(sds):.4f} | {np.mean(errors):.4f} "
            f"({min(errors):.4f}-{max(errors):.4f}) |"
        )
        print(lines[-1], flush=True)
    return "\n".join(lines)


def table(results: dict[str, list[list[dict]]], marks: list[int]) -> str:
    lines = [
        "| optimiser | steps | full-data ELBO (mean; min-max over seeds) | test RMSE | train s |",
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


def plot(results: dict[str, list[list[dict]]], path: Path) -> None:
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
    right.set(xlabel="training seconds", ylabel="held-out test RMSE", yscale="log")
    left.legend()
    figure.suptitle("Oil flow, B-SVI (Q=10, M=25, batch 100, lr 0.01): one line per seed")
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
        choices=["row", "row-k", "dense"],
    )
    parser.add_argument("--quick", action="store_true", help="one seed, marks 20 and 40")
    parser.add_argument("--figure", type=Path, default=FIGURE)
    parser.add_argument("--inference", action="store_true", help="new-row inference spread")
    args = parser.parse_args(argv)
    if args.inference:
        print(inference_spread([0, 1, 2, 3, 4], [0.0, 0.5]))
        return 0
    if args.quick:
        args.seeds, args.marks = args.seeds[:1], [20, 40]
    run("row", args.seeds[0], [1], quiet=True)  # the process's first compilation costs extra
    results = {
        setting: [run(setting, seed, sorted(args.marks)) for seed in args.seeds]
        for setting in args.optimizers
    }
    print(table(results, sorted(args.marks)))
    plot(results, args.figure)
    print(f"figure: {args.figure}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
