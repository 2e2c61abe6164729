"""The training step on the GPU and on the CPU side by side, and one full run on the GPU.

Usage::

    bash benchmarks/gpu_check.sh [--smoke]

For each device (the first GPU when TensorFlow sees one; the CPU, with the GPU hidden by
``CUDA_VISIBLE_DEVICES=-1``), in its own process, and each float (float64, float32): B-SVI with the
package's defaults at three shapes, on ``benchmarks/high_dim.py``'s synthetic data, its step timed
as the difference of two run lengths of one compiled Trainer (``steps`` and ``2 steps``, after a
warm-up call that traces):

- oil flow: N=800, D=12, Q=10, M=25, batch 100 (oil flow's size);
- MNIST: N=2000, D=784, Q=5, M=100, batch 100, 60% missing (``high_dim.py``'s shape);
- single cell: N=100,000, D=2000, Q=10, M=100, batch 256, Poisson counts (``high_dim.py``'s).

Then one full run on the first device (the GPU when there is one): oil flow-sized synthetic data
with 20% of the entries hidden, 2000 steps, and the RMSE of the hidden entries' reconstruction.
``--smoke``: tiny shapes and few steps (what CI runs on its CPU, to keep this script working).
Prints one table; exits 0 when every run finished.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import replace

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import common  # noqa: E402  (the shapes and synthetic data of high_dim.py)
from common import Shape  # noqa: E402

FLOATS = ("float64", "float32")


def shapes(smoke: bool) -> dict[str, Shape]:
    """Oil flow's size and ``benchmarks/high_dim.py``'s MNIST and single-cell shapes (tiny ones
    for ``smoke``)."""
    found = common.shapes()
    chosen = {
        "oil flow": Shape(800, 12, 10, 25, 100, 0.0, "gaussian", os.cpu_count() or 1),
        "MNIST": found["mnist"],
        "single cell": found["single-cell"],
    }
    if not smoke:
        return chosen
    return {
        name: replace(
            shape, num_data=200, data_dim=min(shape.data_dim, 16), num_inducing=10, batch_size=50
        )
        for name, shape in chosen.items()
    }


def build(shape: Shape, float_name: str):
    """B-SVI (defaults) on ``common.synthetic`` data of ``shape`` in ``float_name``, and its
    Trainer."""
    import gpflow
    import numpy as np

    import gpflow_svi_gplvm as svi

    gpflow.config.set_default_float(np.dtype(float_name))
    gpflow.config.set_default_jitter(1e-4 if float_name == "float32" else 1e-6)
    Y = common.synthetic(shape)
    poisson = shape.likelihood == "poisson"
    options = {"likelihood": gpflow.likelihoods.Poisson()} if poisson else {}
    model = svi.BayesianSVIGPLVM(Y, shape.latent_dim, num_inducing=shape.num_inducing, **options)
    return svi.Trainer(model, Y, batch_size=shape.batch_size, seed=0)


def step_seconds(trainer, steps: int) -> float:
    """Seconds per step: the difference of a ``2 steps`` and a ``steps`` run over ``steps``."""
    trainer.train(steps, steps_per_call=steps, progress=False)  # traces
    times = []
    for length in (steps, 2 * steps):
        start = time.perf_counter()
        trainer.train(length, steps_per_call=steps, progress=False)
        times.append(time.perf_counter() - start)
    return max(times[1] - times[0], 0.0) / steps


def device_run(smoke: bool) -> dict:
    """This process's device and, per shape and float, the step's milliseconds."""
    import warnings

    import tensorflow as tf

    gpus = tf.config.list_physical_devices("GPU")
    device = (
        tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")
        if gpus
        else "CPU"
    )
    steps = 20 if smoke else 200
    results = {}
    for name, shape in shapes(smoke).items():
        for float_name in FLOATS:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", UserWarning)  # the missing-data notice
                results[f"{name}, {float_name}"] = 1e3 * step_seconds(
                    build(shape, float_name), steps
                )
    return {"device": device, "gpu": bool(gpus), "steps_ms": results}


def full_run(smoke: bool) -> dict:
    """One training run of oil flow's size with 20% hidden; the hidden entries' RMSE."""
    import warnings

    import numpy as np

    import gpflow_svi_gplvm as svi

    truth = common.synthetic(shapes(smoke)["oil flow"])
    hidden = np.random.default_rng(1).random(truth.shape) < 0.2
    Y = np.where(hidden, np.nan, truth)
    iterations = 100 if smoke else 2000
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        model = svi.BayesianSVIGPLVM(Y, 10, num_inducing=25)
    start = time.perf_counter()
    svi.fit(model, Y, iterations=iterations, batch_size=100, seed=0, progress=False)
    seconds = time.perf_counter() - start
    mean, _ = model.reconstruct(Y, rows=np.arange(len(Y)))
    rmse = float(np.sqrt(np.mean((mean.numpy()[hidden] - truth[hidden]) ** 2)))
    return {"iterations": iterations, "seconds": seconds, "rmse": rmse}


def first_run(smoke: bool) -> dict:
    """:func:`device_run` on the first device; with no GPU, :func:`full_run` too (under ``full``):
    it would run on this CPU in a process of its own."""
    result = device_run(smoke)
    if not result["gpu"]:
        result["full"] = full_run(smoke)
    return result


def in_subprocess(what: str, smoke: bool, hide_gpu: bool) -> dict:
    environment = dict(os.environ, **({"CUDA_VISIBLE_DEVICES": "-1"} if hide_gpu else {}))
    command = [sys.executable, os.path.abspath(__file__), "--part", what]
    command += ["--smoke"] if smoke else []
    result = subprocess.run(command, capture_output=True, text=True, env=environment)
    if result.returncode != 0:
        raise RuntimeError(f"{what} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (CI, on a CPU)")
    parts = {"first": first_run, "device": device_run, "full": full_run}
    parser.add_argument("--part", choices=list(parts), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:  # a child: one device's measurements, as JSON
        print(json.dumps(parts[args.part](args.smoke)))
        return 0
    started = time.perf_counter()
    first = in_subprocess("first", args.smoke, hide_gpu=False)
    columns = {first["device"]: first}
    if first["gpu"]:
        cpu = in_subprocess("device", args.smoke, hide_gpu=True)
        columns[cpu["device"]] = cpu
    else:
        print("No GPU visible to TensorFlow: the CPU column only.")
    names = list(columns)
    print(
        f"\n| B-SVI step, ms | {' | '.join(names)} |" + ("" if len(names) < 2 else " CPU / GPU |")
    )
    print("|---|" + "---:|" * (len(names) + (len(names) > 1)))
    for row in first["steps_ms"]:
        cells = [columns[n]["steps_ms"][row] for n in names]
        ratio = f" {cells[1] / cells[0]:.1f} |" if len(cells) > 1 else ""
        print(f"| {row} | " + " | ".join(f"{c:.2f}" for c in cells) + " |" + ratio)
    full = first.get("full") or in_subprocess("full", args.smoke, hide_gpu=False)
    print(
        f"\nFull run on {names[0]}: {full['iterations']} steps in {full['seconds']:.1f} s, "
        f"hidden-entry RMSE {full['rmse']:.4f}; total {time.perf_counter() - started:.0f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
