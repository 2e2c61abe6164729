"""Reproduce the paper's held-out reconstruction tables (Lalchand et al., AISTATS 2022).

The paper's test-RMSE table (its Table 3) and NLPD table (Table 4) cover oil flow, qPCR and taxi;
its MNIST missing-pixel table is Table 5. The command names below are this script's own:

    python benchmarks/reproduce_paper.py table1   # oil flow: Q=10, M=25, Gaussian
    python benchmarks/reproduce_paper.py table3   # qPCR (Q=11, M=40) and taxi (Poisson, Q=2, M=36)
    python benchmarks/reproduce_paper.py table4   # MNIST, 10/30/60% of pixels missing (B-SVI)
    python benchmarks/reproduce_paper.py mocap    # motion capture, body parts blanked
    python benchmarks/reproduce_paper.py brendan  # Brendan faces, 39% of pixels missing
    python benchmarks/reproduce_paper.py movielens  # MovieLens-100K, held-out ratings
    python benchmarks/reproduce_paper.py all [--seeds 3 --iterations 2000 --quick --output F]
    python benchmarks/reproduce_paper.py table1 table3 --config paper  # the paper's settings

Protocol: a seeded 80/20 split of rows (``datasets.train_test_split(Y, 0.2, seed)``); each of
Point / MAP / B-SVI / AEB-SVI is trained with ``fit`` on the training rows. ``--config ours``
(default): the package's defaults, minibatch min(100, N_train), learning rate 0.01, 3 seeds.
``--config paper`` (``table1`` / ``table3``): the paper's configuration table (learning rate 1e-3
and batch 100 for oil flow and qPCR, 5e-3 and batch 500 with 10 samples of x for taxi), its encoder
(:func:`~gpflow_svi_gplvm.latents.paper_encoder_options`), random initial latents, Monte Carlo over
q(x) as in the paper, Adam on every parameter (the paper names only "a gradient based optimiser"), 5
seeds; the number of steps is not in the paper (``--iterations``). Then the latents of the full test
rows (no hidden entries) are inferred with the model frozen (``LatentInference``: one encoder pass
for AEB-SVI, the row fit for the others), and the reconstruction is scored against the test
rows: test RMSE, and test NLPD per test row (minus the sum over a row's entries of
``inference.log_predictive_density``: each entry's exact predictive, the mixture over 64 draws of
q(x*) of the likelihood integrated over q(f), Gauss-Hermite with 100 points for the Poisson taxi
data; the paper does not define its NLPD). Mean +- standard error over seeds.
``table4`` (the paper's Table 5) is ``benchmarks/missing_data.py mnist`` (B-SVI, Q=5, M=100,
RMSE on hidden test pixels); the motion-capture table is ``benchmarks/missing_data.py mocap``.
The results file keeps one block per table, each with the command that made it: a run replaces
the blocks of the tables it ran and keeps the others, and the section starting with "## Notes";
a run of some ``--models`` only replaces their rows, so one model can be rerun on its own.
Data: the folder in $GPFLOW_SVI_GPLVM_DATA (see gpflow_svi_gplvm.datasets).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import mean_and_error  # noqa: E402
from gpflow.quadrature import NDiagGHQuadrature  # noqa: E402
from missing_data import (  # noqa: E402
    FRACTIONS,
    MOCAP_PARTS,
    MODELS,
    brendan_table,
    mnist_table,
    mocap_table,
    movielens_table,
)
from paper_config import PAPER_CONFIGURATION  # noqa: E402

import gpflow_svi_gplvm  # noqa: E402
from gpflow_svi_gplvm import LatentInference, fit  # noqa: E402
from gpflow_svi_gplvm.datasets import (  # noqa: E402
    load_oilflow,
    load_qpcr,
    load_taxi,
    train_test_split,  # noqa: E402
)
from gpflow_svi_gplvm.latents import paper_encoder_options  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402

tf.get_logger().setLevel("ERROR")  # retracing notices: one model per run, expected

# The paper's numbers (Point, MAP, B-SVI, AEB-SVI): its test-RMSE table (3 runs) and test-NLPD
# table (5 runs); no NLPD for taxi.
PAPER_RMSE = {
    "oilflow": (0.341, 0.569, 0.0925, 0.067),
    "qpcr": (0.624, 0.589, 0.554, 0.539),
    "taxi": (118.0, 134.0, 249.0, 232.0),
}
PAPER_NLPD = {"oilflow": (4.104, 8.16, -11.3105, -11.392), "qpcr": (32.916, 30.899, 27.844, 25.422)}


def _shape(name: str) -> tuple[int, int]:
    """Q and M of data set ``name`` in the paper's configuration table."""
    return PAPER_CONFIGURATION[name].latent_dim, PAPER_CONFIGURATION[name].num_inducing


# name: (loader, Q, M, likelihood factory)
DATASETS = {
    "oilflow": (load_oilflow, *_shape("oilflow"), lambda: None),
    "qpcr": (load_qpcr, *_shape("qpcr"), lambda: None),
    # 100 Gauss-Hermite points: the test NLPD integrates the Poisson over q(f) by quadrature.
    "taxi": (
        load_taxi,
        *_shape("taxi"),
        lambda: gpflow.likelihoods.Poisson(quadrature=NDiagGHQuadrature(1, 100)),
    ),
}
TABLES = {"table1": ("oilflow",), "table3": ("qpcr", "taxi")}
FIGURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures")
TABLE4_ELBO_PLOT = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "figures", "table4_elbo.png"
)
BLOCK_ORDER = (
    "oilflow",
    "qpcr",
    "taxi",
    "oilflow_paper",
    "qpcr_paper",
    "taxi_paper",
    "mnist",
    "brendan",
    "movielens",
    "mocap",
)
# The protocol's settings under the package's defaults (``--config ours``), shared by the
# benchmarks that follow it.
OURS = dict(config="ours", learning_rate=0.01, max_rows=0, inference_iterations=300)
# A smoke run (--quick) of all four models trains each on one data set only: every table and every
# model's path still runs once, at a third of the cost of every pairing.
QUICK_MODELS = {"oilflow": ("Point", "MAP"), "qpcr": ("AEB-SVI",), "taxi": ("B-SVI",)}
_BLOCK = re.compile(r"^<!-- table: (\w+) -->$", re.MULTILINE)
# A table's provenance line: _`command`: budget; date._, or _Point, MAP: `command`: ..._
_PROVENANCE = re.compile(r"^_(?:(?P<models>[\w, -]+): )?`")


def run_one(name: str, model_name: str, seed: int, args, model_options: dict | None = None) -> dict:
    """Train one model on one seeded split; test RMSE and NLPD per row of the test rows.
    ``model_options`` go to the model's constructor on top of the configuration's."""
    loader, Q, M, make_likelihood = DATASETS[name]
    Y = np.asarray(loader().Y, dtype=float)
    if args.max_rows and len(Y) > args.max_rows:
        Y = Y[np.random.default_rng(1234).permutation(len(Y))[: args.max_rows]]
    split = train_test_split(Y, 0.2, seed)
    Y_train, Y_test = split.Y_train, split.Y_test
    M = min(M, len(Y_train))
    options: dict[str, Any]
    training: dict[str, Any]
    if args.config == "paper":
        paper = PAPER_CONFIGURATION[name]
        options = dict(
            latent_init="random", latent_expectation="monte-carlo", num_samples=paper.num_samples
        )
        if model_name == "AEB-SVI":
            options.update(paper_encoder_options(Y.shape[1], Q))
        training = dict(
            learning_rate=paper.learning_rate, batch_size=paper.batch_size, q_u_optimizer="adam"
        )
    else:
        options, training = {}, dict(learning_rate=args.learning_rate, batch_size=100)
    options.update(model_options or {})
    training["batch_size"] = min(training["batch_size"], len(Y_train))
    tf.random.set_seed(seed)
    start = time.perf_counter()
    model = MODELS[model_name](Y_train, Q, M, likelihood=make_likelihood(), seed=seed, **options)
    fit(model, Y_train, iterations=args.iterations, seed=seed, progress=False, **training)
    train_seconds = time.perf_counter() - start
    # The paper encodes AEB-SVI's test rows in one pass of the encoder (tolerance=None).
    tolerance = None if model.latent.amortised else "auto"
    inference = LatentInference(model, args.inference_iterations, seed=seed, tolerance=tolerance)
    mean, _ = inference.reconstruct(Y_test)
    log_density, _ = inference.log_density(Y_test, Y_test)
    result = {
        "rmse": rmse(Y_test, mean.numpy()),
        "nlpd": -float(np.mean(np.sum(log_density.numpy(), axis=1))),
        "seconds": time.perf_counter() - start,
        "train_seconds": train_seconds,
    }
    print(
        f"  {name:8s} {model_name:8s} seed {seed}: RMSE {result['rmse']:.4g}  "
        f"NLPD {result['nlpd']:.4g}  ({result['train_seconds']:.0f} s train, "
        f"{result['seconds']:.0f} s total)",
        flush=True,
    )
    return result


PROTOCOL_NOTES = """## Protocol

- Seeded 80/20 split of rows, `datasets.train_test_split(Y, 0.2, seed)` with seed = 0, 1, 2...;
  the four models are trained on the training rows with `fit` (under the defaults: natural
  gradients for q(u) and Adam for the rest, minibatch min(100, N_train)).
- Test rows are reconstructed in full (no hidden entries): `model.reconstruct(Y_test)` infers
  q(x*) with the model frozen (for AEB-SVI with `tolerance=None`: one encoder pass, as in the
  paper; the row fit of `LatentInference` for the others, zero latent variance for Point / MAP)
  and integrates over it by sampling (64 draws).
- Test RMSE: reconstruction mean vs the test rows. Test NLPD: minus the sum over a test row's D
  entries of log p(y*_nd), averaged over test rows, where p(y*_nd) is the exact predictive of
  the entry, `inference.log_predictive_density`: the mixture over the 64 draws of q(x*) of the
  likelihood integrated over q(f_d(x)) (closed form for the Gaussian; for the Poisson taxi data
  Gauss-Hermite quadrature with 100 points). The paper does not define its NLPD, so this
  convention is ours. Mean ± standard error over seeds (sample std / sqrt(seeds)).
"""


def table(name: str, results: dict, config: str = "ours") -> str:
    paper_rmse = PAPER_RMSE[name]
    paper_nlpd = PAPER_NLPD.get(name, (None,) * 4)
    settings = "the package's defaults"
    if config == "paper":
        paper = PAPER_CONFIGURATION[name]
        settings = (
            f"the paper's configuration: lr {paper.learning_rate:g}, batch {paper.batch_size}, "
            f"{paper.num_samples} sample(s) of x, the paper's encoder, random initial latents"
        )
    lines = [
        f"**{name}** (Q={DATASETS[name][1]}, M={DATASETS[name][2]}"
        + (", Poisson likelihood" if name == "taxi" else ", Gaussian likelihood")
        + f"; {settings}; {len(next(iter(results.values())))} seed(s))",
        "",
        "| model | test RMSE (ours) | test RMSE (paper) | test NLPD (ours) | test NLPD (paper) "
        "| seconds / run |",
        "|---|---|---|---|---|---|",
    ]
    for model_name, runs in results.items():
        i = list(MODELS).index(model_name)
        pn = "not given" if paper_nlpd[i] is None else f"{paper_nlpd[i]:g}"
        lines.append(
            f"| {model_name} | {mean_and_error([r['rmse'] for r in runs])} | {paper_rmse[i]:g} "
            f"| {mean_and_error([r['nlpd'] for r in runs])} | {pn} "
            f"| {np.mean([r['seconds'] for r in runs]):.0f} |"
        )
    return "\n".join(lines)


def _mnist_settings(args) -> argparse.Namespace:
    """``table4`` (the paper's Table 5) settings for ``missing_data.mnist_table`` (B-SVI, Q=5,
    M=100)."""
    return argparse.Namespace(
        num_train=args.mnist_train,
        num_test=args.mnist_test,
        num_inducing=10 if args.quick else 100,
        iterations=args.mnist_iterations or args.iterations,
        inference_iterations=args.inference_iterations,
        batch_size=100,
        learning_rate=args.learning_rate,
        no_progress=args.quick,
        elbo_plot=None if args.quick else TABLE4_ELBO_PLOT,
        fractions=FRACTIONS[-1:] if args.quick else FRACTIONS,  # a smoke run: one cell
    )


def _mocap_settings(args) -> argparse.Namespace:
    """Motion-capture settings for ``missing_data.mocap_table`` (four models, Q=9, M=50; a smoke
    run: the amortised model only, the others' paths run in the other tables)."""
    return argparse.Namespace(
        num_inducing=10 if args.quick else 50,
        iterations=args.iterations,
        inference_iterations=args.inference_iterations,
        batch_size=100,
        learning_rate=args.learning_rate,
        seed=0,
        parts=MOCAP_PARTS[-1:] if args.quick else MOCAP_PARTS,
        models=["AEB-SVI"] if args.quick else list(MODELS),
        no_progress=args.quick,
    )


def _paper_settings(name: str, args) -> argparse.Namespace:
    """Brendan / MovieLens at the paper's configuration (M, Q, learning rate, batch size)."""
    paper = PAPER_CONFIGURATION[name]
    return argparse.Namespace(
        num_inducing=10 if args.quick else paper.num_inducing,
        latent_dim=paper.latent_dim,
        learning_rate=paper.learning_rate,
        batch_size=paper.batch_size,
        iterations=args.iterations,
        no_progress=args.quick,
        image_grid=None if args.quick else os.path.join(FIGURES, f"{name}_reconstructions.png"),
    )


def merge_results(
    old: str, header: str, blocks: dict[str, str], models: Sequence[str] = tuple(MODELS)
) -> str:
    """The results file: ``header``, then one block per table (this run's ``blocks`` replace
    those of the same name in ``old``; the others stay), then the notes section of ``old``.
    A run of some ``models`` only keeps the other models' rows of its tables (:func:`merge_rows`).
    """
    notes_start = old.find("\n## Notes")
    notes = "" if notes_start < 0 else old[notes_start:]
    body = old if notes_start < 0 else old[:notes_start]
    markers = list(_BLOCK.finditer(body))
    kept = {
        m.group(1): body[m.start() : markers[i + 1].start() if i + 1 < len(markers) else None]
        for i, m in enumerate(markers)
    }
    for name, text in blocks.items():
        if name in DATASETS and set(models) != set(MODELS):
            text = merge_rows(kept.get(name, ""), text, models)
        kept[name] = f"<!-- table: {name} -->\n{text}"
    ordered = [kept[name].strip() for name in BLOCK_ORDER if name in kept]
    return header.rstrip() + "\n\n" + "\n\n".join(ordered) + "\n" + notes


def merge_rows(old_block: str, new_block: str, models: Sequence[str]) -> str:
    """``new_block``, from a run of ``models`` only, with ``old_block``'s rows of the other models
    put back (in the order of MODELS). Each old provenance line (``_[models: ]`command`: ..._``)
    stays, naming only the models whose rows it still describes, above the new one.
    """
    old_lines = old_block.strip().splitlines()
    others = {
        _row_model(line): line for line in old_lines if _row_model(line) not in (None, *models)
    }
    if not others:
        return new_block
    lines = new_block.splitlines()
    rows = {_row_model(line): line for line in lines if _row_model(line)} | others
    first = next(i for i, line in enumerate(lines) if _row_model(line))
    merged = [line for line in lines if not _row_model(line)]
    merged[first:first] = [rows[m] for m in MODELS if m in rows]
    provenance = []
    for line in old_lines:
        match = _PROVENANCE.match(line)
        if match:
            tagged = match["models"].split(", ") if match["models"] else MODELS
            still = [m for m in tagged if m in others]
            if still:
                provenance += [f"_{_provenance_tag(still)}{line[match.end() - 1 :]}", ""]
    return "\n".join(merged[:-1] + provenance + merged[-1:])


def _provenance_tag(models: Sequence[str]) -> str:
    """What a provenance line names before its command: nothing for all four models."""
    return "" if set(models) == set(MODELS) else ", ".join(models) + ": "


def _row_model(line: str) -> str | None:
    """The model of a table row ``| model | ...``, else None."""
    cells = line.split("|")
    name = cells[1].strip() if line.startswith("| ") and len(cells) > 2 else None
    return name if name in MODELS else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "command",
        nargs="+",
        choices=["table1", "table3", "table4", "brendan", "movielens", "mocap", "all"],
    )
    parser.add_argument(
        "--config",
        choices=["ours", "paper"],
        default="ours",
        help="table1 / table3 under the package's defaults or the paper's configuration",
    )
    parser.add_argument("--seeds", type=int, default=None, help="default 3 (paper config: 5)")
    parser.add_argument("--iterations", type=int, default=None, help="default 2000 (quick: 10)")
    parser.add_argument(
        "--learning-rate", type=float, default=None, help="default 0.01 (not with --config paper)"
    )
    parser.add_argument("--inference-iterations", type=int, default=None, help="default 300")
    parser.add_argument("--max-rows", type=int, default=None, help="subsample rows (quick)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="tiny smoke run: 1 seed, 10 steps, 200 rows, each model on one data set",
    )
    parser.add_argument("--mnist-train", type=int, default=2000, help="MNIST training images")
    parser.add_argument("--mnist-test", type=int, default=500, help="MNIST test images")
    parser.add_argument(
        "--mnist-iterations",
        type=int,
        default=None,
        help="MNIST Adam steps (default: --iterations)",
    )
    parser.add_argument(
        "--models", nargs="+", choices=list(MODELS), default=list(MODELS), help="default: all four"
    )
    parser.add_argument("--output", default=None, help="default benchmarks/results/paper.md")
    args = parser.parse_args(argv)
    if args.config == "paper":
        if args.learning_rate is not None:
            parser.error("--config paper takes each data set's learning rate from the paper")
        if not set(args.command) <= {"table1", "table3"}:
            parser.error("--config paper applies to table1 and table3 (oil flow, qPCR, taxi)")
    args.learning_rate = args.learning_rate or OURS["learning_rate"]
    args.seeds = args.seeds or (5 if args.config == "paper" else 3)
    if args.quick:
        args.seeds = 1
        args.iterations = args.iterations or 10
        args.inference_iterations = args.inference_iterations or 10
        args.max_rows = args.max_rows or 200
        args.mnist_train, args.mnist_test = 100, 20
    args.iterations = args.iterations or 2000
    args.inference_iterations = args.inference_iterations or OURS["inference_iterations"]
    output = args.output
    if output is None and not args.quick:
        output = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "paper.md")

    every = ["table1", "table3", "table4", "brendan", "movielens", "mocap"]
    commands = every if "all" in args.command else args.command
    command_line = f"python benchmarks/reproduce_paper.py {' '.join(sys.argv[1:] or [])}"
    date = f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d}"
    total_start = time.perf_counter()
    blocks = {}

    def record(name: str, text: str, budget: str, models: str = "") -> None:
        print("\n" + text + "\n", flush=True)
        blocks[name] = f"{text}\n\n_{models}`{command_line}`: {budget}; {date}._"

    for name in [name for command in commands for name in TABLES.get(command, ())]:
        models = args.models
        if args.quick and set(models) == set(MODELS):
            models = list(QUICK_MODELS[name])
        print(f"{name}: {args.seeds} seed(s) x {models} x {args.iterations} steps", flush=True)
        results = {m: [run_one(name, m, s, args) for s in range(args.seeds)] for m in models}
        rates = f"lr {args.learning_rate}" if args.config == "ours" else "the paper's lr"
        budget = (
            f"{args.iterations} training steps ({rates}), "
            f"{args.inference_iterations} steps of test-latent inference"
            + (" (an encoder pass for AEB-SVI)" if "AEB-SVI" in models else "")
        )
        block = name if args.config == "ours" else f"{name}_paper"
        record(block, table(name, results, args.config), budget, _provenance_tag(models))
    if "table4" in commands:
        settings = _mnist_settings(args)
        budget = (
            f"{settings.num_train} / {settings.num_test} train / test images, "
            f"{settings.iterations} Adam steps, "
            f"{settings.inference_iterations} steps of test-latent inference"
        )
        started = time.perf_counter()
        text = mnist_table(settings)
        budget += f", {time.perf_counter() - started:.0f} s for the whole grid"
        if settings.elbo_plot:  # results/paper.md sits beside figures/
            text += "\n\n![MNIST: minibatch ELBO traces](../figures/table4_elbo.png)"
        record("mnist", "**mnist** (the paper's Table 5)\n\n" + text, budget)
    captions = {
        "brendan": "**brendan** (Brendan faces, 39% of the pixels missing; the paper's M=120, "
        "Q=5, lr 0.01, batch 450)",
        "movielens": "**movielens** (MovieLens-100K, 10% of the ratings held out; the paper's "
        "M=34, Q=15, lr 0.005, batch 100)",
    }
    for name, make_table in (("brendan", brendan_table), ("movielens", movielens_table)):
        if name in commands:
            settings = _paper_settings(name, args)
            text = make_table(settings)
            if name == "brendan" and settings.image_grid:
                text += (
                    "\n\nAn image grid (truth / observed / reconstructed) is written to "
                    "benchmarks/figures/brendan_reconstructions.png; it is not kept in the "
                    "repository, since the faces carry no licence."
                )
            record(name, captions[name] + "\n\n" + text, f"{settings.iterations} Adam steps")
    if "mocap" in commands:
        settings = _mocap_settings(args)
        caption = (
            "**mocap** (CMU subject 35 walk / jog for the paper's unnamed subject; one body part "
            "blanked in 20% of the training poses and in the held-out trials)"
        )
        budget = f"{settings.iterations} Adam steps"
        record("mocap", caption + "\n\n" + mocap_table(settings), budget)
    if output:
        header = "\n".join(
            [
                "# Reproduction of the paper's reconstruction tables",
                "",
                "Each table ends with the command that produced it (`$GPFLOW_SVI_GPLVM_DATA` "
                "pointed at the data folder).",
                "",
                f"Versions: gpflow_svi_gplvm {getattr(gpflow_svi_gplvm, '__version__', '?')}, "
                f"TensorFlow {tf.__version__}, GPflow {gpflow.__version__}, "
                f"NumPy {np.__version__}, Python {platform.python_version()}.",
                f"Machine: {platform.machine()}, {os.cpu_count()} CPU cores. Last run: {date}, "
                f"{time.perf_counter() - total_start:.0f} s.",
                "",
                PROTOCOL_NOTES,
                "## Results",
            ]
        )
        old = open(output).read() if os.path.exists(output) else ""
        with open(output, "w") as f:
            f.write(merge_results(old, header, blocks, args.models))
        print(f"wrote {output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
