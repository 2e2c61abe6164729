"""Training speed of the four GPLVMs against a plain compiled GPflow SVGP step (the floor).

Usage::

    python benchmarks/speed.py [--iterations 500] [--repeats 21] [--steps-per-call 100]
                               [--jit] [--breakdown] [--quick]
    python benchmarks/speed.py --high-d [SHAPE ...]     # see benchmarks/high_dim.py
    python benchmarks/speed.py --paper-runtime          # the paper's run-time table

``--paper-runtime`` times the four models at the shapes of the paper's run-time table (oil flow,
qPCR and motion capture at its configuration table's N, Q, M and batch size; motion capture with
44.5% of the entries hidden, on the stand-in subject of ``load_mocap``), once under the paper's
settings (Monte Carlo over q(x), Adam on every parameter, its encoder) and once under the
package's defaults, and prints them beside the paper's iterations per second.

At the paper's oil-flow size (N=800, D=12, Q=10, M=25, batch 100, one latent sample) it times
``gpflow_svi_gplvm.training.trainer.Trainer(model, Y, batch_size=100).train(...)`` for PointGPLVM,
MAPGPLVM, BayesianSVIGPLVM (B-SVI) and AmortisedBayesianGPLVM (AEB-SVI), and a plain GPflow SVGP
with known inputs X [N, Q] of the same shapes, trained as a GPflow user would: the usual ``tf.data``
pipeline of (X, Y) (shuffle rows / repeat / batch with drop_remainder / prefetch), the same
``tf_keras`` Adam built before the first step, and ``steps_per_call`` steps inside one
``tf.function`` via ``tf.range``. The SVGP step has no finiteness guard, so the ratio to it is the
whole difference between the package and plain GPflow: latent module, ELBO, Trainer, and the
package's pipeline (the Trainer gathers whole batches of shuffled rows inside its step, which costs
less than batching row by row; the ``--breakdown`` entry "B-SVI, the floor's pipeline" shows how
much).

Every contender is warmed up by one call (its compilation) that is not timed; then each repeat runs
``--iterations`` steps of every contender in turn (round-robin, with a rotating start), so machine
noise falls on all alike. The table reports the median steps/s over the repeats.

Data are synthetic and seeded, unless the environment variable ``GPFLOW_SVI_GPLVM_DATA`` names a
folder holding ``oilflow/oilflow.npz`` (key ``Y``; the first 800 rows are used).

``--breakdown`` adds diagnostic contenders ("[diag] ...") that split the gap to the floor: B-SVI
in the floor's plain loop (the Trainer's own cost), an SVIGPLVM with the floor's fixed, known
inputs (the package's ELBO without latent parameters), loss-and-gradient-only steps (the
optimiser's share), B-SVI with tf_keras' dense Adam on every variable (what ``optimizer=``
gives), B-SVI on 10x the rows with the same batch (does a step's cost grow with N?), AEB-SVI with
a values-only encoder (no mask input, no input hiding, as the paper's reads), B-SVI fed by the
floor's row-by-row pipeline instead of the Trainer's whole-batch gathers, B-SVI without the
closed-form expectation over q(x) and/or without natural gradients on q(u) (its defaults on this
Gaussian data), and B-SVI with a MaskedLikelihood.

Machine noise: ``CPU ms/step`` (process CPU time per step, all threads) is less sensitive to other
work on a shared machine than wall time; the ratios are printed both as ratios of medians and as
medians of the per-round ratios (each round measures all contenders back to back).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import high_dim  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import oil_flow_rows, synthetic_rows  # noqa: E402
from gpflow.config import default_float  # noqa: E402
from gpflow.keras import tf_keras  # noqa: E402
from missing_data import MODELS  # noqa: E402
from paper_config import PAPER_CONFIGURATION  # noqa: E402
from svgp_floor import PlainTrainer, floor_dataset, floor_model  # noqa: E402

import gpflow_svi_gplvm as svi  # noqa: E402
from gpflow_svi_gplvm import datasets  # noqa: E402
from gpflow_svi_gplvm.components.initialisation import pca_latents  # noqa: E402
from gpflow_svi_gplvm.datasets import random_missing  # noqa: E402
from gpflow_svi_gplvm.latents import LatentBatch, LatentVariables, paper_encoder_options  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer, make_dataset  # noqa: E402

NUM_DATA, DATA_DIM, LATENT_DIM, NUM_INDUCING, BATCH_SIZE, NUM_SAMPLES = 800, 12, 10, 25, 100, 1
LEARNING_RATE = 1e-2
SEED = 0

FLOOR = "SVGP floor (known X)"

# Targets printed beside the measurements.
MAX_BSVI_SLOWDOWN = 1.15  # svgp_steps_per_s / bsvi_steps_per_s
MIN_AEB_VS_BSVI = 0.8  # aeb_steps_per_s / bsvi_steps_per_s
MIN_BSVI_STEPS_PER_S = 500.0  # on 2 CPU cores


# ----------------------------------------------------------------------------------- contenders


class FixedLatent(LatentVariables):
    """Diagnostic latent module: x_n are fixed, known inputs (a constant table, no parameters).

    An SVIGPLVM with this module computes the same bound as the SVGP floor, through the package's
    ELBO and Trainer, so its gap to the floor is the package's cost without any latent parameters.
    """

    def __init__(self, inputs: np.ndarray):
        super().__init__(inputs.shape[1])
        self.num_data = inputs.shape[0]
        self.inputs = tf.constant(inputs, dtype=default_float())

    def moments(self, idx, Y):
        mean = tf.gather(self.inputs, idx)
        return mean, tf.zeros_like(mean)

    def __call__(self, idx, Y, num_samples, *args, **kwargs) -> LatentBatch:
        mean, variance = self.moments(idx, Y)
        return LatentBatch(mean[None], tf.zeros_like(mean[:, 0]), mean, variance)


def contenders(Y: np.ndarray, jit: bool, breakdown: bool) -> dict[str, Callable[[], object]]:
    """Name -> a factory of an object with ``train(iterations, steps_per_call, progress)``."""
    X = pca_latents(Y, LATENT_DIM, seed=SEED)  # known inputs of the right shape and scale
    common = dict(num_inducing=NUM_INDUCING, num_samples=NUM_SAMPLES, seed=SEED)

    def package(model_factory, data=Y, optimizer=None, q_u_optimizer=None):
        return lambda: Trainer(
            model_factory(),
            data,
            batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE,
            optimizer=optimizer(LEARNING_RATE) if optimizer else None,
            seed=SEED,
            jit_compile=jit,
            q_u_optimizer=q_u_optimizer,
        )

    def floor(update=True):
        return lambda: PlainTrainer(
            floor_model(Y, X, NUM_INDUCING),
            floor_dataset(X, Y, BATCH_SIZE),
            LEARNING_RATE,
            SEED,
            jit,
            update=update,
        )

    def plain_loop(model_factory, update=True):
        def build():
            model = model_factory()
            dataset = make_dataset(model, Y, BATCH_SIZE, seed=SEED)
            loss_kwargs = {"training": True}  # what the package's Trainer passes
            return PlainTrainer(model, dataset, LEARNING_RATE, SEED, jit, loss_kwargs, update)

        return build

    def bsvi(data=Y, **kwargs):
        return lambda: svi.BayesianSVIGPLVM(data, LATENT_DIM, **common, **kwargs)

    def aeb(**kwargs):
        return lambda: svi.AmortisedBayesianGPLVM(Y, LATENT_DIM, **common, **kwargs)

    entries: dict[str, Callable[[], object]] = {
        FLOOR: floor(),
        "Point": package(lambda: svi.PointGPLVM(Y, LATENT_DIM, **common)),
        "MAP": package(lambda: svi.MAPGPLVM(Y, LATENT_DIM, **common)),
        "B-SVI": package(bsvi()),
        "AEB-SVI": package(aeb()),
    }
    if not breakdown:
        return entries
    noise = max(0.1 * float(np.nanmean(np.nanvar(Y, axis=0))), 1e-3)
    big = synthetic_rows(10 * NUM_DATA)
    entries.update(
        {
            # The package's model in the floor's plain loop: the gap to B-SVI is the Trainer's own
            # cost (finiteness guard, distribution-strategy wrapper, early exit).
            "[diag] B-SVI, plain loop (not Trainer)": plain_loop(bsvi()),
            # The package's ELBO and Trainer with the floor's known inputs: no latent parameters.
            "[diag] SVIGPLVM, fixed known X": package(
                lambda: svi.SVIGPLVM(Y, LATENT_DIM, latent=FixedLatent, **common)
            ),
            # Loss and gradients only: the gap to the plain loop's full step is the optimiser's.
            "[diag] SVGP floor, no update": floor(update=False),
            "[diag] B-SVI, plain loop, no update": plain_loop(bsvi(), update=False),
            "[diag] AEB-SVI, plain loop, no update": plain_loop(aeb(), update=False),
            # The package's RowSparseAdam moves only the batch's rows of q(x); this is tf_keras'
            # Adam on every variable (what optimizer= gives), which rewrites all N rows each step.
            "[diag] B-SVI, dense Adam": package(bsvi(), optimizer=tf_keras.optimizers.Adam),
            # Same batch, 10x the rows: does a step's cost grow with N?
            f"[diag] B-SVI, N={10 * NUM_DATA}": package(bsvi(big), data=big),
            "[diag] AEB-SVI, values-only encoder": package(
                aeb(missing_aware=False, hide_fraction=0.0)
            ),
            # The package's Trainer gathers whole batches; this is the floor's row-by-row
            # pipeline of (idx, y) instead, so the gap to B-SVI is the pipeline's share.
            "[diag] B-SVI, the floor's pipeline": package(
                bsvi(), data=floor_dataset(np.arange(NUM_DATA, dtype=np.int64), Y, BATCH_SIZE)
            ),
            # The default B-SVI takes its expectation over q(x) in closed form and natural
            # gradients on q(u); each lever alone, and neither (the step before they existed).
            "[diag] B-SVI, Monte Carlo, q(u) by Adam": package(
                bsvi(latent_expectation="monte-carlo"), q_u_optimizer="adam"
            ),
            "[diag] B-SVI, Monte Carlo, natural gradients": package(
                bsvi(latent_expectation="monte-carlo"), q_u_optimizer="natgrad"
            ),
            "[diag] B-SVI, closed form, q(u) by Adam": package(bsvi(), q_u_optimizer="adam"),
            "[diag] B-SVI, MaskedLikelihood": package(
                bsvi(likelihood=svi.MaskedLikelihood(gpflow.likelihoods.Gaussian(noise)))
            ),
        }
    )
    return entries


# ------------------------------------------------------------------------------------ measuring


@dataclass
class Result:
    name: str
    compile_seconds: float = float("nan")
    steps_per_s: list[float] = field(default_factory=list)
    cpu_ms_per_step: list[float] = field(default_factory=list)
    tracing_count: int = -1
    error: str | None = None

    @property
    def median(self) -> float:
        return _median(self.steps_per_s)


def measure(
    entries: dict[tuple[str, str], Callable[[], object]],
    iterations: int,
    repeats: int,
    steps_per_call: int,
) -> dict[str, dict[str, Result]]:
    """{column label: {name: Result}}; all (label, name) contenders interleaved in every round."""
    results = {key: Result(key[1]) for key in entries}
    trainers = {}
    for key, factory in entries.items():
        # Warm-up: build, then one call of steps_per_call steps (tracing + compilation), untimed.
        start = time.perf_counter()
        try:
            trainers[key] = factory()
            trainers[key].train(steps_per_call, steps_per_call=steps_per_call, progress=False)
        except Exception as error:  # report and go on: one broken contender spoils no others
            results[key].error = f"{type(error).__name__}: {error}"
            trainers.pop(key, None)
        results[key].compile_seconds = time.perf_counter() - start
        print(f"  warm-up [{key[0]}] {key[1]}: {results[key].compile_seconds:.1f} s", flush=True)

    keys = list(trainers)
    for repeat in range(repeats):
        shift = repeat % len(keys) if keys else 0
        line = []
        for key in keys[shift:] + keys[:shift]:
            start, cpu_start = time.perf_counter(), time.process_time()
            try:
                trainers[key].train(iterations, steps_per_call=steps_per_call, progress=False)
                rate = iterations / (time.perf_counter() - start)
                cpu = 1e3 * (time.process_time() - cpu_start) / iterations
            except Exception as error:
                results[key].error = f"{type(error).__name__}: {error}"
                rate = cpu = float("nan")
            results[key].steps_per_s.append(rate)
            results[key].cpu_ms_per_step.append(cpu)
            short = key[1].split(" (")[0] + ("" if key[0] == "graph" else f" {key[0]}")
            line.append(f"{short} {rate:.0f}")
        print(f"  repeat {repeat + 1}/{repeats}: " + ", ".join(line), flush=True)
    for key, trainer in trainers.items():
        results[key].tracing_count = trainer.tracing_count
    columns: dict[str, dict[str, Result]] = {}
    for (label, name), result in results.items():
        columns.setdefault(label, {})[name] = result
    return columns


# ------------------------------------------------------------------------------------ reporting


def _median(values: list[float]) -> float:
    finite = [v for v in values if np.isfinite(v)]
    return statistics.median(finite) if finite else float("nan")


def paired_median_ratio(numerator: Result, denominator: Result) -> float:
    """Median over repeats of numerator/denominator taken in the same round (noise-paired)."""
    pairs = [
        a / b
        for a, b in zip(numerator.steps_per_s, denominator.steps_per_s)
        if np.isfinite(a) and np.isfinite(b) and b > 0
    ]
    return statistics.median(pairs) if pairs else float("nan")


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def report(columns: dict[str, dict[str, Result]]) -> None:
    header = ["model"]
    for label in columns:
        header += [
            f"{label} steps/s (median)",
            f"{label} range",
            f"{label} ms/step",
            f"{label} CPU ms/step",
            f"{label} floor/model",
        ]
    header.append("compile s")
    print()
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|")
    first = next(iter(columns.values()))
    for name in first:
        row = [name]
        for results in columns.values():
            result, floor = results[name], results[FLOOR]
            if result.error and not np.isfinite(result.median):
                row += ["failed", "", "", "", ""]
                continue
            finite = [v for v in result.steps_per_s if np.isfinite(v)]
            row += [
                f"{result.median:.0f}",
                f"{min(finite):.0f}-{max(finite):.0f}",
                f"{1e3 / result.median:.2f}",
                f"{_median(result.cpu_ms_per_step):.2f}",
                f"{paired_median_ratio(floor, result):.2f}x",
            ]
        row.append(" / ".join(f"{r[name].compile_seconds:.1f}" for r in columns.values()))
        print("| " + " | ".join(row) + " |")
    for results in columns.values():
        for result in results.values():
            if result.error:
                lines = [line.strip() for line in result.error.splitlines() if line.strip()]
                brief = lines[0] if len(lines) < 3 else f"{lines[0]} ... {lines[-1]}"
                print(f"\n{result.name} failed: {brief}")
            if result.tracing_count not in (-1, 1):
                print(f"\n{result.name}: the step was traced {result.tracing_count} times (not 1)")

    print(
        "\nfloor/model: SVGP floor steps/s over the model's, median of the per-round ratios "
        "(rounds measure all contenders back to back, so slow spells cancel). CPU ms/step: "
        "process CPU time per step (all threads), less sensitive to other load than wall time."
    )
    for label, results in columns.items():
        floor, bsvi, aeb = results[FLOOR], results["B-SVI"], results["AEB-SVI"]
        slowdown = paired_median_ratio(floor, bsvi)
        aeb_ratio = paired_median_ratio(aeb, bsvi)
        cpu = {name: _median(r.cpu_ms_per_step) for name, r in results.items()}
        print(
            f"\nTargets [{label}] (verdicts on the paired ratio; ratio of medians and of CPU "
            "ms/step in brackets):"
        )
        print(
            f"  B-SVI vs SVGP floor: svgp/bsvi = {slowdown:.2f}x "
            f"[medians {floor.median / bsvi.median:.2f}x, CPU {cpu['B-SVI'] / cpu[FLOOR]:.2f}x]"
            f"   target <= {MAX_BSVI_SLOWDOWN:.2f}x: {verdict(slowdown <= MAX_BSVI_SLOWDOWN)}"
        )
        print(
            f"  AEB-SVI vs B-SVI:    aeb/bsvi  = {aeb_ratio:.2f}x "
            f"[medians {aeb.median / bsvi.median:.2f}x, CPU {cpu['B-SVI'] / cpu['AEB-SVI']:.2f}x]"
            f"   target >= {MIN_AEB_VS_BSVI:.2f}x: {verdict(aeb_ratio >= MIN_AEB_VS_BSVI)}"
        )
        best = max((v for v in bsvi.steps_per_s if np.isfinite(v)), default=float("nan"))
        print(
            f"  B-SVI speed:         {bsvi.median:.0f} steps/s (median; best round "
            f"{best:.0f})   target >= {MIN_BSVI_STEPS_PER_S:.0f} steps/s on 2 CPU "
            f"cores: {verdict(bsvi.median >= MIN_BSVI_STEPS_PER_S)}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=500, help="steps per timed repeat")
    parser.add_argument("--repeats", type=int, default=21, help="timed rounds over all contenders")
    parser.add_argument(
        "--steps-per-call", type=int, default=100, help="steps inside one compiled call"
    )
    parser.add_argument("--jit", action="store_true", help="add a jit_compile=True column")
    parser.add_argument(
        "--breakdown", action="store_true", help="add diagnostic contenders that split the gap"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: 20 steps per call x 2 repeats"
    )
    parser.add_argument(
        "--high-d",
        nargs="*",
        choices=high_dim.SHAPES,
        help="instead: per-output vs shared q(u) covariance at these high-D shapes (default all; "
        "see benchmarks/high_dim.py); --repeats then counts timings per contender (default 3)",
    )
    parser.add_argument("--threads", type=int, help="--high-d: threads (default per shape)")
    parser.add_argument(
        "--levers", action="store_true", help="--high-d: add the XLA and float32 shared steps"
    )
    parser.add_argument(
        "--paper-runtime",
        action="store_true",
        help="instead: the paper's run-time table (oil flow, qPCR, motion capture), its figures "
        "beside ours under its settings and under the defaults",
    )
    parser.add_argument(
        "--contenders",
        nargs="+",
        choices=high_dim.CONTENDERS + high_dim.LEVERS,
        help="--high-d: time only these",
    )
    args = parser.parse_args(argv)
    if args.high_d is not None:
        repeats = 3 if "--repeats" not in (argv or sys.argv) else args.repeats
        high_dim.run(
            args.high_d or list(high_dim.SHAPES),
            repeats,
            args.threads,
            args.quick,
            args.levers,
            args.contenders,
        )
        return 0
    if args.quick:  # every contender and every table, each step's cost measured once
        args.iterations, args.repeats = min(args.iterations, 20), min(args.repeats, 2)
        args.steps_per_call = min(args.steps_per_call, 20)
    if args.paper_runtime:
        paper_runtime(args.iterations, args.repeats, args.steps_per_call)
        return 0
    if args.iterations < 1 or args.repeats < 1 or args.steps_per_call < 1:
        parser.error("--iterations, --repeats and --steps-per-call must be >= 1")

    Y, data_note = oil_flow_rows()
    print(
        f"gpflow_svi_gplvm {svi.__version__} ({_package_revision()}), GPflow {gpflow.__version__}, "
        f"TensorFlow {tf.__version__}, Python {platform.python_version()}, "
        f"{os.cpu_count()} CPU cores, float: {np.dtype(default_float()).name}"
    )
    print(
        f"N={NUM_DATA} D={DATA_DIM} Q={LATENT_DIM} M={NUM_INDUCING} batch={BATCH_SIZE} "
        f"J={NUM_SAMPLES}; data: {data_note}"
    )
    print(
        f"{args.iterations} steps x {args.repeats} repeats per contender, "
        f"{args.steps_per_call} steps per compiled call, round-robin; warm-up call untimed"
    )
    print(f"load average at start: {_load()}")
    started = time.perf_counter()
    entries = {("graph", k): v for k, v in contenders(Y, False, args.breakdown).items()}
    if args.jit:
        entries |= {("xla", k): v for k, v in contenders(Y, True, args.breakdown).items()}
    report(measure(entries, args.iterations, args.repeats, args.steps_per_call))
    report_inference(Y, 100 if args.quick else 1000, 20 if args.quick else 200)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average at end: {_load()}")
    return 0


# The paper's run-time table: average iterations per second (Point, MAP, B-SVI, AEB-SVI; no
# AEB-SVI on motion capture, which it trains with gaps).
PAPER_RUNTIME = {
    "oilflow": (167.56, 168.42, 164.43, 89.42),
    "qpcr": (133.59, 126.41, 113.85, 54.61),
    "mocap": (161.72, 159.64, 140.79, None),
}
# Motion capture trains with gaps: 44.5% missing, as in the paper's NLPD table.
PAPER_RUNTIME_MISSING = {"oilflow": 0.0, "qpcr": 0.0, "mocap": 0.445}


def paper_runtime_data(name: str) -> tuple[np.ndarray, str]:
    """Y [N, D] of the paper's data set ``name`` at its configuration's N (rows repeated or cut;
    motion capture: the stand-in subject with 44.5% of the entries hidden), or synthetic data of
    that shape when the data folder lacks it."""
    num_data, missing = PAPER_CONFIGURATION[name].num_data, PAPER_RUNTIME_MISSING[name]
    loaders = {"oilflow": "load_oilflow", "qpcr": "load_qpcr", "mocap": "load_mocap"}
    try:
        Y = np.asarray(getattr(datasets, loaders[name])(download=False).Y, dtype=np.float64)
        note = name
    except (OSError, ValueError) as error:
        shape = (num_data, PAPER_CONFIGURATION[name].data_dim)
        Y = np.random.default_rng(SEED).standard_normal(shape)
        note = f"synthetic {name}-shaped data ({type(error).__name__})"
    Y = Y[np.arange(num_data) % len(Y)]
    if missing:
        Y, _ = random_missing(Y, missing, seed=SEED)
    return Y, note


def paper_runtime(iterations: int, repeats: int, steps_per_call: int) -> None:
    """Steps per second of the four models at the shapes of the paper's run-time table, under
    the paper's settings (Monte Carlo over q(x), Adam on every parameter, its encoder) and under
    the package's defaults, beside the paper's figures."""
    entries = {}
    for name in PAPER_RUNTIME:
        paper = PAPER_CONFIGURATION[name]
        latent_dim, num_inducing, batch_size = (
            paper.latent_dim,
            paper.num_inducing,
            paper.batch_size,
        )
        Y, note = paper_runtime_data(name)
        print(f"{name}: Y {Y.shape}, Q={latent_dim}, M={num_inducing}, batch {batch_size}; {note}")
        for model_name, model_class in MODELS.items():
            for config in ("paper's settings", "defaults"):
                options: dict = dict(num_inducing=num_inducing, seed=SEED)
                q_u_optimizer = None
                if config == "paper's settings":
                    options["latent_expectation"] = "monte-carlo"
                    q_u_optimizer = "adam"
                    if model_name == "AEB-SVI":
                        options.update(paper_encoder_options(Y.shape[1], latent_dim))

                def factory(
                    Y=Y, cls=model_class, q=latent_dim, o=options, u=q_u_optimizer, b=batch_size
                ):
                    return Trainer(
                        cls(Y, q, **o),
                        Y,
                        batch_size=b,
                        learning_rate=LEARNING_RATE,
                        seed=SEED,
                        q_u_optimizer=u,
                    )

                entries[(f"{name}, {config}", model_name)] = factory
    columns = measure(entries, iterations, repeats, steps_per_call)
    print("\n| data set | model | paper it/s | ours, paper's settings | ours, defaults |")
    print("|---|---|---:|---:|---:|")
    for name, paper in PAPER_RUNTIME.items():
        for model_name, figure in zip(MODELS, paper):
            cells = [
                f"{columns[f'{name}, {config}'][model_name].median:.0f}"
                for config in ("paper's settings", "defaults")
            ]
            shown = "-" if figure is None else f"{figure:g}"
            print(f"| {name} | {model_name} | {shown} | {cells[0]} | {cells[1]} |")


def report_inference(Y: np.ndarray, num_new: int, training_steps: int = 200) -> None:
    """Seconds to infer q(x*) for ``num_new`` new rows, after compilation (target B-SVI < 5 s), by
    models trained ``training_steps`` steps."""
    new_rows = synthetic_rows(num_new)
    print(
        f"\ninfer_latents for {num_new} new rows (D={DATA_DIM}, Q={LATENT_DIM}), "
        "LatentInference(model, iterations=300)'s other defaults"
    )
    print("| model | first call (traces) s | next call s |")
    print("|---|---:|---:|")
    common = dict(num_inducing=NUM_INDUCING, num_samples=NUM_SAMPLES, seed=SEED)
    for name, model_class in [
        ("B-SVI", svi.BayesianSVIGPLVM),
        ("AEB-SVI", svi.AmortisedBayesianGPLVM),
    ]:
        model = model_class(Y, LATENT_DIM, **common)
        Trainer(model, Y, batch_size=BATCH_SIZE, seed=SEED).train(training_steps, progress=False)
        inference = svi.LatentInference(model, iterations=300)
        times = []
        for _ in range(2):
            start = time.perf_counter()
            inference.latents(new_rows)[0].numpy()
            times.append(time.perf_counter() - start)
        print(f"| {name} | {times[0]:.2f} | {times[1]:.3f} |")


def _package_revision() -> str:
    """The package's git commit (with "+dirty" when its files differ from it), or "n/a"."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(svi.__file__)))
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True
        ).stdout.strip()
        changes = subprocess.run(
            ["git", "status", "--porcelain", "--", "gpflow_svi_gplvm"],
            cwd=root,
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        return "n/a"
    return (commit + ("+dirty" if changes else "")) if commit else "n/a"


def _load() -> str:
    """The 1/5/15-minute load averages: above the core count, other work competes for the CPU."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


if __name__ == "__main__":
    sys.exit(main())
