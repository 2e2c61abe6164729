"""What the benchmark scripts share: a compiled step's time, seeded synthetic data at the shapes
they measure, a column's mean and standard error as the tables print it, and free loopback ports
for runs on several worker processes.

A script run as ``python benchmarks/<script>.py`` has this folder on ``sys.path``, so it imports
these with ``from common import ...``. This module imports NumPy only (TensorFlow is imported by
the scripts that train), so the parents of multi-process runs stay light; the plain GPflow SVGP
that the speed benchmarks take as their floor is in ``svgp_floor.py``.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Protocol

import numpy as np

SEED = 0
OIL_ROWS, OIL_DATA_DIM = 800, 12  # oil flow's first 800 rows, of its D = 12


class Trainable(Protocol):
    """A trainer of the package (``Trainer``) or of ``svgp_floor`` (``PlainTrainer``)."""

    def train(self, steps: int, steps_per_call: int, progress: bool) -> object: ...


def seconds_per_step(trainer: Trainable, short: int, long: int) -> float:
    """The time of one step: the difference of a long and a short run, over their difference."""
    return wall_and_cpu_per_step(trainer, short, long)[0]


def wall_and_cpu_per_step(trainer: Trainable, short: int, long: int) -> tuple[float, float]:
    """Wall and process CPU seconds (all threads) of one step, each the difference of a long and
    a short run over their difference. On a shared machine the CPU time moves less than the
    wall time with other jobs' load."""
    wall, cpu = [], []
    for steps in (short, long):
        start, cpu_start = time.perf_counter(), time.process_time()
        trainer.train(steps, steps_per_call=steps, progress=False)
        wall.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
    return (wall[1] - wall[0]) / (long - short), (cpu[1] - cpu[0]) / (long - short)


def mean_and_error(values) -> str:
    """``mean ± standard error`` (sample std / sqrt(n)) of ``values``; the mean alone for one."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return f"{values.mean():.4g}"
    se = values.std(ddof=1) / np.sqrt(len(values))
    return f"{values.mean():.4g} ± {se:.2g}"


def free_ports(count: int) -> list[int]:
    """``count`` distinct loopback ports free at the call (bound together, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# ----------------------------------------------------------------------------------------- data


def oil_flow_rows() -> tuple[np.ndarray, str]:
    """Y [800, 12]: oil flow when GPFLOW_SVI_GPLVM_DATA points at it, else seeded synthetic data;
    and a note of which."""
    folder = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    if folder:
        path = os.path.join(folder, "oilflow", "oilflow.npz")
        if os.path.exists(path):
            with np.load(path) as archive:
                Y = np.asarray(archive["Y"][:OIL_ROWS], dtype=np.float64)
            if Y.shape != (OIL_ROWS, OIL_DATA_DIM):
                raise ValueError(f"{path}: expected Y of shape [>=800, 12], got {Y.shape}.")
            return Y, f"oil flow ({path}, first {OIL_ROWS} rows)"
        note = f"synthetic (GPFLOW_SVI_GPLVM_DATA={folder!r} has no oilflow/oilflow.npz)"
    else:
        note = "synthetic (seeded; set GPFLOW_SVI_GPLVM_DATA for oil flow)"
    return synthetic_rows(OIL_ROWS), note


def synthetic_rows(num_rows: int) -> np.ndarray:
    """Y [num_rows, 12], seeded: a smooth map of a 2-D latent plus noise, well conditioned."""
    rng = np.random.default_rng(SEED)
    X = rng.standard_normal((num_rows, 2))
    W = rng.standard_normal((2, OIL_DATA_DIM))
    b = rng.uniform(0.0, 2.0 * np.pi, OIL_DATA_DIM)
    return np.sin(X @ W + b) + 0.1 * rng.standard_normal((num_rows, OIL_DATA_DIM))


@dataclass(frozen=True)
class Shape:
    num_data: int
    data_dim: int
    latent_dim: int
    num_inducing: int
    batch_size: int
    missing: float
    likelihood: str
    threads: int


def shapes() -> dict[str, Shape]:
    """The large-D shapes: MNIST's and MovieLens' sizes, and a single-cell atlas of 100,000 (or
    10,000) cells by 2,000 genes."""
    cores = os.cpu_count() or 1
    return {
        "mnist": Shape(2000, 784, 5, 100, 100, 0.6, "gaussian", 1),
        "movielens": Shape(943, 1682, 15, 34, 100, 0.937, "ratings", 1),
        "single-cell": Shape(100_000, 2000, 10, 100, 256, 0.0, "poisson", cores),
        "single-cell-10k": Shape(10_000, 2000, 10, 100, 256, 0.0, "poisson", cores),
    }


def synthetic(shape: Shape):
    """Y [N, D] (float64, NaN = missing) from a smooth map of a 3-D latent, generated in row
    blocks so that no temporary is as large as Y."""
    rng = np.random.default_rng(SEED)
    W = rng.standard_normal((3, shape.data_dim))
    Y = np.empty((shape.num_data, shape.data_dim))
    for start in range(0, shape.num_data, 10_000):
        rows = slice(start, min(start + 10_000, shape.num_data))
        f = np.sin(rng.standard_normal((rows.stop - rows.start, 3)) @ W)  # [rows, D] in [-1, 1]
        if shape.likelihood == "poisson":
            Y[rows] = rng.poisson(0.105 * np.exp(0.3 * f))  # about 90% zeros
        elif shape.likelihood == "ratings":
            Y[rows] = np.clip(np.round(3.0 + 1.5 * f + 0.5 * rng.standard_normal(f.shape)), 1, 5)
        else:
            Y[rows] = 1.0 / (1.0 + np.exp(-3.0 * f))  # pixel-like, in (0, 1)
        if shape.missing:
            Y[rows][rng.random(f.shape) < shape.missing] = np.nan
    return Y
