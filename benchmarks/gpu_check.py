"""The training step on the GPU and on the CPU side by side, and one full run on the GPU.

Usage::

    bash benchmarks/gpu_check.sh [--smoke]

For each device (the first GPU when TensorFlow sees one; the CPU, with the GPU hidden by
``CUDA_VISIBLE_DEVICES=-1``), in its own process, and each float (float64, float32): B-SVI with the
package's defaults at three shapes, its step timed as the difference of two run lengths of one
compiled Trainer (``steps`` and ``2 steps``, after a warm-up call that traces):

- oil flow: N=800, D=12, Q=10, M=25, batch 100 (synthetic rows of oil flow's size);
- MNIST: N=2000, D=784, Q=5, M=100, batch 100, 60% missing (as ``benchmarks/high_dim.py``);
- single cell: N=100,000, D=2000, Q=10, M=100, batch 256, Poisson counts, shared q(u) covariance.

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

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# name: (N, D, Q, M, batch, missing fraction, likelihood)
SHAPES = {
    "oil flow": (800, 12, 10, 25, 100, 0.0, "gaussian"),
    "MNIST": (2000, 784, 5, 100, 100, 0.6, "gaussian"),
    "single cell": (100_000, 2000, 10, 100, 256, 0.0, "poisson"),
}
SMOKE = {
    name: (200, min(D, 16), Q, 10, 50, m, lik) for name, (_, D, Q, _, _, m, lik) in SHAPES.items()
}
FLOATS = ("float64", "float32")


def synthetic(N: int, D: int, missing: float, likelihood: str, seed: int = 0):
    """Y [N, D] from a smooth map of a 3-D latent (NaN where missing; counts for Poisson)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    f = np.sin(rng.standard_normal((N, 3)) @ rng.standard_normal((3, D)))
    if likelihood == "poisson":
        return rng.poisson(0.105 * np.exp(0.3 * f)).astype(float)
    Y = f + 0.1 * rng.standard_normal(f.shape)
    Y[rng.random(Y.shape) < missing] = np.nan
    return Y


def build(shape: tuple, float_name: str):
    """B-SVI (defaults) on synthetic data of ``shape`` in ``float_name``, and its Trainer."""
    import gpflow
    import numpy as np

    import gpflow_svi_gplvm as svi

    N, D, Q, M, batch, missing, likelihood = shape
    gpflow.config.set_default_float(np.dtype(float_name))
    gpflow.config.set_default_jitter(1e-4 if float_name == "float32" else 1e-6)
    Y = synthetic(N, D, missing, likelihood)
    options = {"likelihood": gpflow.likelihoods.Poisson()} if likelihood == "poisson" else {}
    model = svi.BayesianSVIGPLVM(Y, Q, num_inducing=M, **options)
    return svi.Trainer(model, Y, batch_size=batch, seed=0)


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
    for name, shape in (SMOKE if smoke else SHAPES).items():
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

    truth = synthetic(800, 12, 0.0, "gaussian")
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
    parser.add_argument("--part", choices=["device", "full"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:  # a child: one device's measurements, as JSON
        part = device_run if args.part == "device" else full_run
        print(json.dumps(part(args.smoke)))
        return 0
    started = time.perf_counter()
    first = in_subprocess("device", args.smoke, hide_gpu=False)
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
    full = in_subprocess("full", args.smoke, hide_gpu=False)
    print(
        f"\nFull run on {names[0]}: {full['iterations']} steps in {full['seconds']:.1f} s, "
        f"hidden-entry RMSE {full['rmse']:.4f}; total {time.perf_counter() - started:.0f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
