"""The importance-weighted bound: what K draws of each row's latent cost (a step's time) and buy
(the held-out likelihood of new rows).

    python benchmarks/importance.py step [--repeats 7]
    python benchmarks/importance.py heldout oilflow qpcr mnist kang [--seeds 3 --kang-folder DIR]
    python benchmarks/importance.py heldout mnist --rows 1000 200 --steps 1000   # smaller
    python benchmarks/importance.py heldout oilflow --curve           # against training time
    python benchmarks/importance.py step heldout oilflow --quick      # a smoke run of each path

``step``: the compiled step's time at K = 1, 5 and 20 (``num_importance``), measured side by
side in one process: one compiled trainer per setting, a step's time the difference of runs of
``--step-iterations`` and twice as many steps over their difference, in wall and in process CPU
time, in ``--repeats`` rounds that alternate the trainers (ratios taken within a round, medians
over the rounds), for B-SVI, AEB-SVI and the planar flow (10 shared layers), each with one draw
per K (``num_samples=1``), at oil flow's shape (N=800, D=12, Q=10, M=25, batch 100) and MNIST's
(N=2000, D=784, 60% missing, Q=5, M=100, batch 100, one q(u) covariance shared by the outputs;
``--step-shapes`` picks). K = 1 is each model's ELBO as it trains by
default (B-SVI's in closed form over q(x) under a Gaussian likelihood).

``heldout``: for each data set, B-SVI (or ``--model``) trained at K = 1, 5 and 20 for the same
steps (equal steps), and at K = 5 and 20 for the steps that take K = 1's run's time (equal
seconds: the steps scaled by the step rates measured side by side in the same process, median
of five interleaved rounds of 100 steps), three seeds (the model's initialisation and the
minibatches; one split of the rows). The score is the held-out log-likelihood per test row,
log p(y*) of its observed entries, estimated by ``marginal_log_likelihood`` (256 draws of a
proposal made of the row's q(x*), from new-row inference or the encoder), averaged over the test
rows; the tables give its mean and standard error over the seeds, the paired difference from
K = 1 (mean and standard error over the seeds) and the estimator's mean Monte Carlo standard
error per row. With ``--curve``: the score of K = 1 and K = 5 (seed 0) after 1, 2 and 4 times the
data set's steps, beside their training seconds, so that equal seconds can be read off at
several budgets.

Data sets: oil flow (1000 x 12, 80/20 split), qPCR (437 x 48, 80/20), MNIST (the first 2000
training images, 60% of the pixels hidden at random, scored on 500 test images with 60% hidden),
and Kang et al.'s PBMC control cells (``pbmc_ctrl.h5ad`` of ``--kang-folder``, written by
``shared/data/kang_pbmc/fetch.sh``): the 1000 most variable genes (scanpy's Seurat flavour on
log-normalised counts), 2000 cells drawn at random for training and 400 for testing, their raw
counts under a negative binomial likelihood with a dispersion per gene and size factors (each
cell's total count over the training cells' mean), batch 100 and 1000 steps, scored 8 cells at a
time (the estimator's default chunk bounds the GP's intermediates, not the quadrature's [cells,
draws, genes, points], which at 1000 genes and 256 draws outgrew 16 GB). ``--rows TRAIN
TEST`` keeps the first rows of each set and ``--steps`` replaces the data set's steps. Data:
$GPFLOW_SVI_GPLVM_DATA.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import mean_and_error, wall_and_cpu_per_step  # noqa: E402
from speed import measure  # noqa: E402

from gpflow_svi_gplvm import (  # noqa: E402
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    FlowBayesianGPLVM,
    NegativeBinomial,
    fit,
)
from gpflow_svi_gplvm.datasets import (  # noqa: E402
    load_mnist,
    load_oilflow,
    load_qpcr,
    random_missing,
    train_test_split,
)
from gpflow_svi_gplvm.prediction.marginal_likelihood import marginal_log_likelihood  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

tf.get_logger().setLevel("ERROR")

KS = (1, 5, 20)
MODELS = {"bsvi": BayesianSVIGPLVM, "aeb": AmortisedBayesianGPLVM, "flow": FlowBayesianGPLVM}
NAMES = {"bsvi": "B-SVI", "aeb": "AEB-SVI", "flow": "B-SVI (flow)"}
STEP_SHAPES = {"oilflow": "oil flow", "mnist": "MNIST"}
KANG_FOLDER = Path.home() / ".cache" / "gpflow_svi_gplvm" / "kang_pbmc"  # fetch.sh's default


@dataclass
class HeldOut:
    """A data set split for the held-out comparison, and how its models are built and trained."""

    name: str
    Y_train: np.ndarray
    Y_test: np.ndarray
    latent_dim: int
    num_inducing: int
    batch_size: int
    iterations: int
    model: str = "bsvi"
    learning_rate: float = 0.01
    options: dict = field(default_factory=dict)
    test_size_factors: np.ndarray | None = None
    score_chunk_size: int | None = None

    def build(self, K: int, seed: int):
        options = {
            key: value() if callable(value) else value for key, value in self.options.items()
        }
        model_class = MODELS[self.model]
        return model_class(
            self.Y_train,
            self.latent_dim,
            self.num_inducing,
            num_importance=K,
            seed=seed,
            **options,
        )

    def score(self, model, num_samples: int) -> tuple[float, float]:
        """Mean held-out log p(y*) per test row and the estimator's mean standard error."""
        extra = {} if self.test_size_factors is None else {"size_factors": self.test_size_factors}
        result = marginal_log_likelihood(
            model, self.Y_test, num_samples, chunk_size=self.score_chunk_size, **extra
        )
        return float(np.mean(result.log_likelihood)), float(np.mean(result.standard_error))


# ---------------------------------------------------------------------------------------- data


def oilflow() -> HeldOut:
    split = train_test_split(load_oilflow().Y, 0.2, seed=0)
    return HeldOut("oil flow", split.Y_train, split.Y_test, 10, 25, 100, 3000)


def qpcr() -> HeldOut:
    split = train_test_split(load_qpcr().Y, 0.2, seed=0)
    return HeldOut("qPCR", split.Y_train, split.Y_test, 10, 25, 100, 3000)


def mnist() -> HeldOut:
    data = load_mnist(num_train=2000, num_test=500)
    Y_train, _ = random_missing(data.Y, 0.6, seed=1)
    Y_test, _ = random_missing(data.Y_test, 0.6, seed=2)
    return HeldOut("MNIST, 60% missing", Y_train, Y_test, 5, 100, 100, 2000)


def kang(folder: Path, train: int = 2000, test: int = 400, genes: int = 1000) -> HeldOut:
    import anndata
    import scanpy as sc

    adata = anndata.read_h5ad(folder / "pbmc_ctrl.h5ad")
    adata.var_names_make_unique()
    cells = np.random.default_rng(0).permutation(adata.n_obs)[: train + test]
    adata = adata[np.sort(cells)].copy()
    totals = np.asarray(adata.X.sum(axis=1)).ravel()
    logged = adata.copy()
    sc.pp.normalize_total(logged)
    sc.pp.log1p(logged)
    sc.pp.highly_variable_genes(logged, n_top_genes=genes)
    counts = adata[:, logged.var["highly_variable"].to_numpy()].X
    Y = np.asarray(counts.todense() if hasattr(counts, "todense") else counts, dtype=np.float64)
    order = np.random.default_rng(1).permutation(len(Y))
    train_rows, test_rows = order[:train], order[train:]
    factors = totals / totals[train_rows].mean()
    return HeldOut(
        f"Kang PBMC control, {genes} genes",
        Y[train_rows],
        Y[test_rows],
        10,
        50,
        100,
        1000,
        options=dict(
            likelihood=lambda: NegativeBinomial(num_outputs=genes),
            size_factors=factors[train_rows],
        ),
        test_size_factors=factors[test_rows],
        score_chunk_size=8,
    )


# --------------------------------------------------------------------------------- step cost


def step_entries(shape: str, K: int, names: list[str]) -> dict:
    """{(column, model): Trainer factory} for the step benchmark at one K, models ``names``."""
    rng = np.random.default_rng(0)
    if shape == "oil flow":
        Y, Q, M = rng.standard_normal((800, 12)), 10, 25
    else:
        Y = np.where(rng.random((2000, 784)) < 0.6, np.nan, rng.random((2000, 784)))
        Q, M = 5, 100
    entries = {}
    for name in names:

        def trainer(model_class=MODELS[name]):
            options = {"num_layers": 10} if model_class is FlowBayesianGPLVM else {}
            model = model_class(Y, Q, M, num_samples=1, num_importance=K, **options)
            return Trainer(model, Y, batch_size=100)

        entries[(f"K={K}", NAMES[name])] = trainer
    return entries


def step_table(shape: str, args: argparse.Namespace) -> str:
    """Wall and CPU ms per step of every (K, model) trainer, in rounds alternating the trainers;
    a round's ratios are taken within the round, and the table gives medians over the rounds."""
    names = ["bsvi"] if args.quick else list(MODELS)
    factories = {}
    for K in KS:
        factories.update(step_entries(shape, K, names))
    short, long = args.step_iterations, 2 * args.step_iterations
    trainers = {}
    for key, factory in factories.items():
        start = time.perf_counter()
        trainers[key] = factory()
        trainers[key].train(short, steps_per_call=short, progress=False)  # the trace, untimed
        print(f"  warm-up {key}: {time.perf_counter() - start:.0f} s", flush=True)
    rounds = []
    for number in range(args.repeats):
        keys = list(trainers)
        keys = keys[number % len(keys) :] + keys[: number % len(keys)]
        rounds.append({key: wall_and_cpu_per_step(trainers[key], short, long) for key in keys})
        print(f"  round {number + 1}/{args.repeats} done", flush=True)
    lines = [
        f"{shape}: ms per step, wall / CPU (medians of {args.repeats} rounds alternating the "
        f"trainers; a step's time is the difference of runs of {long} and {short} steps over "
        f"{long - short}); the ratios to K = 1 are per round, wall / CPU",
        "",
        "| model | K = 1 | K = 5 | K = 20 | K = 5 step / K = 1 step | K = 20 / K = 1 |",
        "|---|---|---|---|---|---|",
    ]

    def median(values) -> float:
        return statistics.median(list(values))

    for name in (NAMES[n] for n in names):
        cells = []
        for K in KS:
            wall, cpu = (median(1e3 * r[f"K={K}", name][i] for r in rounds) for i in (0, 1))
            cells.append(f"{wall:.1f} / {cpu:.1f}")
        for K in KS[1:]:
            wall, cpu = (
                median(r[f"K={K}", name][i] / r["K=1", name][i] for r in rounds) for i in (0, 1)
            )
            cells.append(f"{wall:.2f}x / {cpu:.2f}x")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def step(args: argparse.Namespace) -> None:
    shapes = ["oilflow"] if args.quick else args.step_shapes
    for shape in (STEP_SHAPES[name] for name in shapes):
        print("\n" + step_table(shape, args) + "\n", flush=True)


# ------------------------------------------------------------------------------ held-out score


def step_rates(data: HeldOut, args: argparse.Namespace) -> dict[int, float]:
    """Steps per second of each K's model on ``data``, side by side (median of rounds)."""

    def trainer(K: int):
        return lambda: Trainer(data.build(K, 0), data.Y_train, batch_size=data.batch_size)

    entries = {("rate", f"K={K}"): trainer(K) for K in KS}
    iterations = args.rate_iterations
    results = measure(entries, iterations, args.rate_repeats, iterations)["rate"]
    return {K: results[f"K={K}"].median for K in KS}


def heldout_table(data: HeldOut, args: argparse.Namespace) -> str:
    rates = step_rates(data, args)
    T = data.iterations
    runs = [(K, T, "equal steps") for K in KS]
    runs += [(K, max(1, round(T * rates[K] / rates[1])), "equal seconds") for K in KS[1:]]
    scores: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for seed in range(args.seeds):
        for K, steps, _ in runs:
            if (K, steps) in scores and len(scores[K, steps]) > seed:
                continue
            model = data.build(K, seed)
            start = time.perf_counter()
            fit(
                model,
                data.Y_train,
                iterations=steps,
                batch_size=data.batch_size,
                learning_rate=data.learning_rate,
                seed=seed,
                progress=False,
            )
            seconds = time.perf_counter() - start
            score = data.score(model, args.num_samples)
            scores.setdefault((K, steps), []).append(score)
            print(
                f"  {data.name} seed {seed} K={K} {steps} steps ({seconds:.0f} s): held-out "
                f"{score[0]:.3f} per row (MC s.e. {score[1]:.3f})",
                flush=True,
            )
    baseline = np.array([s[0] for s in scores[1, T]])
    lines = [
        f"{data.name}: {NAMES[data.model]}, Q={data.latent_dim}, M={data.num_inducing}, batch "
        f"{data.batch_size}, {len(data.Y_train)} training rows, {len(data.Y_test)} test rows of "
        f"D={data.Y_train.shape[1]}; steps per second at K = 1, 5, 20: "
        + ", ".join(f"{rates[K]:.1f}" for K in KS),
        "",
        "| K | steps | held-out log p(y*) per row | difference from K = 1 (paired) | "
        "MC s.e. per row |",
        "|---|---|---|---|---|",
    ]
    for K, steps, kind in runs:
        values = np.array([s[0] for s in scores[K, steps]])
        difference = "-" if K == 1 else mean_and_error(values - baseline)
        error = np.mean([s[1] for s in scores[K, steps]])
        label = f"{K}" if K == 1 else f"{K}, {kind}"
        lines.append(
            f"| {label} | {steps} | {mean_and_error(values)} | {difference} | {error:.3f} |"
        )
    return "\n".join(lines)


def curve_table(data: HeldOut, args: argparse.Namespace) -> str:
    """Held-out log p(y*) per row against steps and training seconds (the first step's tracing
    left out), for K = 1 and 5, one seed: equal seconds at every budget of the curve."""
    checkpoints = [data.iterations * f for f in (1, 2, 4)]
    lines = [
        f"{data.name}: {NAMES[data.model]}, seed 0, held-out log p(y*) per test row as training "
        "goes on",
        "",
        "| K | steps | training seconds | held-out log p(y*) per row |",
        "|---|---|---|---|",
    ]
    for K in (1, 5):
        model = data.build(K, 0)
        trainer = Trainer(model, data.Y_train, batch_size=data.batch_size, seed=0)
        trainer.train(1, progress=False)  # the trace, untimed
        seconds = 0.0
        for steps in checkpoints:
            start = time.perf_counter()
            trainer.train(steps - trainer.num_steps, progress=False)
            seconds += time.perf_counter() - start
            score, error = data.score(model, args.num_samples)
            lines.append(f"| {K} | {steps} | {seconds:.0f} | {score:.3f} (MC s.e. {error:.3f}) |")
            print("  " + lines[-1], flush=True)
    return "\n".join(lines)


def shrunk(
    data: HeldOut, train: int, test: int, iterations: int, max_inducing: int | None = None
) -> HeldOut:
    """A copy of ``data`` on its first ``train`` training and ``test`` test rows, trained for
    ``iterations`` steps, with at most ``max_inducing`` inducing points."""
    options = dict(data.options)
    if "size_factors" in options:
        options["size_factors"] = options["size_factors"][:train]
    factors = None if data.test_size_factors is None else data.test_size_factors[:test]
    return replace(
        data,
        Y_train=data.Y_train[:train],
        Y_test=data.Y_test[:test],
        iterations=iterations,
        num_inducing=min(data.num_inducing, max_inducing or data.num_inducing),
        options=options,
        test_size_factors=factors,
    )


def heldout(args: argparse.Namespace) -> None:
    loaders = {
        "oilflow": oilflow,
        "qpcr": qpcr,
        "mnist": mnist,
        "kang": lambda: kang(Path(args.kang_folder)),
    }
    for name in args.datasets or list(loaders):
        data = loaders[name]()
        if args.model is not None:
            data.model = args.model
        if args.quick:
            data = shrunk(data, 200, 20, 40, max_inducing=10)
        elif args.rows or args.steps:
            train, test = args.rows or (len(data.Y_train), len(data.Y_test))
            data = shrunk(data, train, test, args.steps or data.iterations)
        table = curve_table if args.curve else heldout_table
        print("\n" + table(data, args) + "\n", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commands", nargs="+", help="step, heldout, then data sets")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--num-samples", type=int, default=256, help="draws per test row")
    parser.add_argument("--model", choices=list(MODELS), help="instead of each data set's")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--step-iterations", type=int, default=100)
    parser.add_argument(
        "--step-shapes", nargs="+", choices=list(STEP_SHAPES), default=list(STEP_SHAPES)
    )
    parser.add_argument("--rate-iterations", type=int, default=100)
    parser.add_argument("--rate-repeats", type=int, default=5)
    parser.add_argument("--kang-folder", default=os.environ.get("KANG_FOLDER", KANG_FOLDER))
    parser.add_argument(
        "--rows", nargs=2, type=int, metavar=("TRAIN", "TEST"), help="the first rows of each set"
    )
    parser.add_argument("--steps", type=int, help="instead of each data set's")
    parser.add_argument("--curve", action="store_true", help="held-out score against time")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny and short")
    args = parser.parse_args()
    commands = [c for c in args.commands if c in ("step", "heldout")]
    args.datasets = [c for c in args.commands if c not in ("step", "heldout")]
    if args.quick:
        args.seeds, args.num_samples, args.repeats, args.rate_repeats = 1, 16, 1, 1
        args.step_iterations, args.rate_iterations = 10, 10
    if "step" in commands:
        step(args)
    if "heldout" in commands:
        heldout(args)


if __name__ == "__main__":
    main()
