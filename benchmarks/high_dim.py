"""High-dimensional training speed and memory: per-output against shared q(u) covariances.

Usage (through speed.py, which documents the low-D benchmark)::

    python benchmarks/speed.py --high-d [mnist movielens single-cell single-cell-10k]
                               [--repeats 3] [--threads N] [--levers] [--quick]
                               [--contenders "B-SVI shared" ...]

For each shape it times a B-SVI and an AEB-SVI step with one q(u) covariance per output
(``shared_covariance=False``) and with one shared by all outputs (``True``), beside a plain
compiled GPflow SVGP step with known inputs of the same shapes (per-output covariances, the
zero-filled data; the floor of the per-output layout, a reference for the shared one):

| shape | N | D | Q | M | B | data |
|---|---:|---:|---:|---:|---:|---|
| mnist | 2,000 | 784 | 5 | 100 | 100 | Gaussian, 60% missing |
| movielens | 943 | 1,682 | 15 | 34 | 100 | Gaussian ratings 1-5, 93.7% missing |
| single-cell | 100,000 | 2,000 | 10 | 100 | 256 | Poisson counts, about 90% zeros |
| single-cell-10k | 10,000 | 2,000 | 10 | 100 | 256 | the same with fewer rows |

Data are synthetic and seeded (the step's cost depends on the shapes, not the values). Each
contender runs in a process of its own, so its peak memory is its own: ``peak MiB`` is the
process's peak resident memory beyond what it held once the data existed (TensorFlow, the data).
A step's time is the difference of two run lengths of one compiled ``Trainer`` divided by the
difference in steps (the first call, which traces, is not timed), the median over ``--repeats``.
Threads: one for mnist and movielens, all cores for the single-cell shapes, unless ``--threads``.
``--quick`` (a smoke run at tiny shapes) times its contenders one after another in one process
(each process start imports TensorFlow again): its ``peak MiB`` is that process's peak so far.
"""

from __future__ import annotations

import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from common import SEED, Shape, shapes, synthetic

SHAPES = ("mnist", "movielens", "single-cell", "single-cell-10k")
CONTENDERS = (
    "SVGP floor",
    "B-SVI per-output",
    "B-SVI shared",
    "AEB-SVI per-output",
    "AEB-SVI shared",
)
LEVERS = ("B-SVI shared, XLA", "B-SVI shared, float32")
"""``--levers``: the shared B-SVI step compiled with XLA (``jit_compile=True``), and computed in
float32 (``gpflow.config.set_default_float(np.float32)``, jitter 1e-4)."""
TARGET_SECONDS = 1.5  # length of the shorter timed run
# A smoke run (--quick) only checks that each contender trains and reports: short timed runs.
QUICK_TARGET_SECONDS = 0.1


# ----------------------------------------------------------------------- one contender, in-process


def measure_one(
    name: str, shape: Shape, repeats: int, target_seconds: float = TARGET_SECONDS
) -> dict:
    """Build ``name`` at ``shape``, warm it up, time it (the shorter timed run lasts about
    ``target_seconds``); returns what the parent prints."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(shape.threads)
    tf.config.threading.set_inter_op_parallelism_threads(shape.threads)
    import gpflow

    if name.endswith("float32"):  # this process is the contender's own: set it globally
        gpflow.config.set_default_float(np.float32)
        gpflow.config.set_default_jitter(1e-4)

    from svgp_floor import PlainTrainer, floor_dataset, floor_model

    import gpflow_svi_gplvm as svi
    from gpflow_svi_gplvm.training.trainer import Trainer

    Y = synthetic(shape)
    likelihood = (
        gpflow.likelihoods.Poisson if shape.likelihood == "poisson" else gpflow.likelihoods.Gaussian
    )
    baseline = _resident_mib()
    start = time.perf_counter()
    trainer: PlainTrainer | Trainer
    if name == "SVGP floor":
        X = np.random.default_rng(SEED).standard_normal((shape.num_data, shape.latent_dim))
        filled = np.nan_to_num(Y)
        model = floor_model(filled, X, shape.num_inducing, likelihood())
        trainer = PlainTrainer(
            model, floor_dataset(X, filled, shape.batch_size), 1e-2, SEED, jit_compile=False
        )
    else:
        family, layout = name.split(",")[0].split()
        model_class = svi.BayesianSVIGPLVM if family == "B-SVI" else svi.AmortisedBayesianGPLVM
        model = model_class(
            Y,
            shape.latent_dim,
            shape.num_inducing,
            likelihood=likelihood(),
            shared_covariance=layout == "shared",
            seed=SEED,
        )
        trainer = Trainer(
            model,
            Y,
            batch_size=shape.batch_size,
            learning_rate=1e-2,
            seed=SEED,
            jit_compile=name.endswith("XLA"),
        )
    trainer.train(1, steps_per_call=1, progress=False)  # traces: not timed
    compile_seconds = time.perf_counter() - start

    def timed(steps: int) -> float:
        begin = time.perf_counter()
        trainer.train(steps, steps_per_call=steps, progress=False)
        return time.perf_counter() - begin

    estimate = timed(2) / 2
    short = max(2, int(target_seconds / max(estimate, 1e-6)))
    per_step = []
    for _ in range(repeats):
        per_step.append((timed(3 * short) - timed(short)) / (2 * short))
    return {
        "seconds_per_step": statistics.median(per_step),
        "spread": [min(per_step), max(per_step)],
        "steps_timed": 4 * short * repeats,
        "peak_mib": _peak_mib() - baseline,
        "data_mib": Y.nbytes / 2**20,
        "compile_seconds": compile_seconds,
        "threads": shape.threads,
        "tracing_count": trainer.tracing_count,
    }


def _resident_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# --------------------------------------------------------------------------------------- report


def run(
    names: list[str],
    repeats: int,
    threads: int | None,
    quick: bool,
    levers: bool,
    only: list[str] | None = None,
) -> None:
    """Each contender of each shape (or those in ``only``) in a process of its own; prints one
    table per shape."""
    table = shapes()
    for shape_name in names:
        shape = table[shape_name]
        if threads is not None:
            shape = Shape(**{**shape.__dict__, "threads": threads})
        if quick:  # a smoke run: small N, D and M, one repeat
            shape = Shape(300, 40, shape.latent_dim, 10, 50, shape.missing, shape.likelihood, 1)
        print(
            f"\n{shape_name}: N={shape.num_data} D={shape.data_dim} Q={shape.latent_dim} "
            f"M={shape.num_inducing} B={shape.batch_size} {shape.likelihood}, "
            f"{shape.missing:.1%} missing, {shape.threads} thread(s)",
            flush=True,
        )
        chosen = [n for n in CONTENDERS + (LEVERS if levers else ()) if not only or n in only]
        # The float32 lever sets GPflow's default float for its process: it comes last.
        groups = [chosen] if quick else [[name] for name in chosen]
        results = {}
        for group in groups:
            results |= _in_subprocess(group, shape, 1 if quick else repeats, quick)
            for name in group:
                brief = (
                    results[name].get("error") or f"{results[name]['seconds_per_step']:.4f} s/step"
                )
                print(f"  {name}: {brief}", flush=True)
        _print_table(results)


def _in_subprocess(
    names: list[str], shape: Shape, repeats: int, quick: bool = False
) -> dict[str, dict]:
    """Each of ``names`` measured one after another in one new process: name to result."""
    target_seconds = QUICK_TARGET_SECONDS if quick else TARGET_SECONDS
    request = json.dumps(
        dict(names=names, shape=shape.__dict__, repeats=repeats, target_seconds=target_seconds)
    )
    process = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--worker", request],
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
    )
    lines = process.stdout.strip().splitlines()
    if process.returncode != 0 or not lines:
        tail = [line for line in process.stderr.splitlines() if line.strip()][-1:]
        return {
            name: {"error": f"failed (exit {process.returncode}): {' '.join(tail)}"}
            for name in names
        }
    return json.loads(lines[-1])


def _print_table(results: dict[str, dict]) -> None:
    floor = results.get("SVGP floor", {}).get("seconds_per_step", float("nan"))
    print(
        "\n| contender | s/step | steps/s | vs floor | range s/step | peak MiB beyond data "
        "| compile s |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, result in results.items():
        if "error" in result:
            print(f"| {name} | {result['error']} | | | | | |")
            continue
        seconds = result["seconds_per_step"]
        low, high = result["spread"]
        versus = f"{seconds / floor:.3f}x" if np.isfinite(floor) else "-"
        print(
            f"| {name} | {seconds:.4f} | {1 / seconds:.1f} | {versus} "
            f"| {low:.4f}-{high:.4f} | {result['peak_mib']:.0f} | {result['compile_seconds']:.1f} |"
        )
    data = next((r["data_mib"] for r in results.values() if "data_mib" in r), float("nan"))
    print(f"(data Y itself: {data:.0f} MiB; vs floor: the step's time over the SVGP floor's)")


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    request = json.loads(sys.argv[2])
    shape = Shape(**request["shape"])
    results = {
        name: measure_one(name, shape, request["repeats"], request["target_seconds"])
        for name in request["names"]
    }
    print(json.dumps(results))
