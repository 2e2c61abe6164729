"""Training on several workers: speed, memory and what crosses the network per step.

Usage::

    python benchmarks/multiworker.py [--shape single-cell] [--rows N] [--batches 256 ...]
                                     [--repeats 3] [--quick]

1. **One worker against two** (``MultiWorkerMirroredStrategy`` over loopback, one process per
   worker, one thread each, on this machine): a B-SVI step at the ``--shape`` of
   ``benchmarks/high_dim.py`` (default single-cell: N = 100,000, D = 2,000, Q = 10, M = 100,
   Poisson counts, one shared q(u) covariance), each worker with the single worker's batch
   (so the two train on twice the rows per step). A step's time is the difference of two run
   lengths of one compiled ``Trainer`` over the difference in steps, the median of ``--repeats``.
   Each process reads its rows from one ``.npy`` file (memory-mapped: a worker reads only its
   block into a :class:`~gpflow_svi_gplvm.RowShard`) and reports its resident memory: before
   the data, once its rows are held, and at the end of training.
2. **Bytes summed across workers per step**, counted from the model's gradients at the MNIST and
   single-cell shapes: the step's one all-reduce carries the global parameters' gradients, the
   loss and a count of non-finite table gradients; the latent tables are each worker's own and
   their rows never cross the network.
3. **A model of the step at 8 and 32 workers** on a 10 Gbit/s network: the one-worker step
   measured above plus the step's one ring all-reduce, :math:`2 (W - 1)` messages of 50
   microseconds latency each carrying 1/W of the bytes, with the single-cell shape at N = 10^7
   as the worked example.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import Shape, free_ports, shapes, synthetic

BANDWIDTH = 10e9 / 8  # bytes per second: 10 Gbit/s
LATENCY = 50e-6  # seconds per message
TARGET_SECONDS = 3.0  # length of the shorter timed run


def resident_mib() -> float:
    """This process's anonymous resident memory (what it allocated; pages of a memory-mapped file
    are the file system's cache, counted apart by the kernel), after a garbage collection."""
    gc.collect()
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


# ------------------------------------------------------------------------------ one process


def run_process(request: dict) -> dict:
    """Build and time B-SVI in this process: alone, or as one worker of ``TF_CONFIG``'s cluster."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from gpflow_svi_gplvm import multi_worker_strategy

    strategy = multi_worker_strategy() if os.environ.get("TF_CONFIG") else None
    import gpflow

    import gpflow_svi_gplvm as svi
    from gpflow_svi_gplvm.distributed.workers import Workers

    shape = Shape(**{**request["shape"], "batch_size": request["batch_size"]})
    workers = Workers.of(strategy)
    tf.constant(1.0).numpy()  # TensorFlow's runtime starts before the baseline
    before = resident_mib()
    data = svi.RowShard.for_worker(np.load(request["path"], mmap_mode="r"), strategy)
    held = resident_mib()
    shard_mib = data.num_rows * data.data_dim * 8 / 2**20
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = svi.BayesianSVIGPLVM(
            data,
            shape.latent_dim,
            shape.num_inducing,
            likelihood=gpflow.likelihoods.Poisson(),
            shared_covariance=True,
        )
    built = resident_mib()
    trainer = svi.Trainer(
        model, data, batch_size=shape.batch_size * workers.count, strategy=strategy
    )
    trainer.train(1, steps_per_call=1, progress=False)  # traces: not timed

    def timed(steps: int) -> float:
        begin = time.perf_counter()
        trainer.train(steps, steps_per_call=steps, progress=False)
        return time.perf_counter() - begin

    estimate = _agreed(workers, timed(3) / 3)
    short = max(2, int(request["target_seconds"] / estimate))
    per_step = [(timed(3 * short) - timed(short)) / (2 * short) for _ in range(request["repeats"])]
    return {
        "worker": workers.index,
        "workers": workers.count,
        "seconds_per_step": statistics.median(per_step),
        "spread": [min(per_step), max(per_step)],
        "rows_per_step": shape.batch_size * workers.count,
        "shard_rows": data.num_rows,
        "shard_mib": shard_mib,
        "resident_before_mib": before,
        "resident_held_mib": held,
        "resident_built_mib": built,
        "resident_end_mib": resident_mib(),
        "peak_mib": peak_mib(),
        "traces": trainer.tracing_count,
    }


def _agreed(workers, value: float) -> float:
    """The chief's ``value`` on every worker (their run lengths must match)."""
    return float(workers.stack(value)[0])


# ------------------------------------------------------------------------------ the parent


def launch(request: dict, num_workers: int) -> list[dict]:
    """``num_workers`` processes (a loopback cluster when more than one); their results."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(num_workers)]}
    processes = []
    for index in range(num_workers):
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
        env.pop("TF_CONFIG", None)
        if num_workers > 1:
            env["TF_CONFIG"] = json.dumps(
                {"cluster": cluster, "task": {"type": "worker", "index": index}}
            )
        processes.append(
            subprocess.Popen(
                [sys.executable, os.path.abspath(__file__), "--process", json.dumps(request)],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    results = []
    for process in processes:
        out, err = process.communicate()
        lines = out.strip().splitlines()
        if process.returncode != 0 or not lines:
            raise RuntimeError(f"a worker failed (exit {process.returncode}): {err[-2000:]}")
        results.append(json.loads(lines[-1]))
    return results


def write_data(shape: Shape, folder: Path) -> Path:
    path = folder / f"Y_{shape.num_data}x{shape.data_dim}.npy"
    if not path.exists():
        np.save(path, synthetic(shape))
    return path


@functools.cache
def gradient_bytes(shape: Shape) -> dict:
    """Bytes of the one all-reduce of a step at ``shape`` (float64): the global parameters'
    gradients, the loss and the count of non-finite table gradients, whatever the workers
    and the batch (the tables' rows stay on their worker)."""
    import gpflow

    import gpflow_svi_gplvm as svi

    rng = np.random.default_rng(0)
    small = np.abs(rng.standard_normal((max(shape.num_inducing, 200), shape.data_dim)))
    model = svi.BayesianSVIGPLVM(
        np.round(small),
        shape.latent_dim,
        shape.num_inducing,
        likelihood=gpflow.likelihoods.Poisson(),
        shared_covariance=shape.data_dim >= 100,
    )
    tables = {id(p.unconstrained_variable) for p in model.latent.row_parameters}
    dense = sum(int(np.prod(v.shape)) * 8 for v in model.trainable_variables if id(v) not in tables)
    return {"dense": dense + 2 * 8, "rows": 0}


def ring_seconds(workers: int, size: dict) -> float:
    """A ring all-reduce of ``size``'s bytes: 2 (W - 1) messages, each worker sending and
    receiving 2 (W - 1) / W of the bytes."""
    if workers == 1:
        return 0.0
    total = size["dense"] + size["rows"]
    return 2 * (workers - 1) * (LATENCY + total / workers / BANDWIDTH)


def report(runs: dict[int, tuple[dict, list[dict]]], shape: Shape) -> None:
    print(
        "\n| rows per worker and step | one worker: s/step | rows/s | two workers: s/step "
        "| rows/s | rows/s, two over one |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for batch, (single, pair) in runs.items():
        one = single["seconds_per_step"]
        two = max(worker["seconds_per_step"] for worker in pair)
        print(
            f"| {batch} | {one:.4f} | {batch / one:.0f} | {two:.4f} | {2 * batch / two:.0f} "
            f"| {2 * batch / two / (batch / one):.2f}x |"
        )
    print("\nResident anonymous memory (MiB), after a garbage collection, at the first batch size:")
    print(
        "\n| process | rows held | their MiB | before the data | its rows held | model built "
        "| end of training | peak RSS |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    single, pair = next(iter(runs.values()))
    for name, result in [("one worker", single)] + [(f"worker {r['worker']}", r) for r in pair]:
        print(
            f"| {name} | {result['shard_rows']} | {result['shard_mib']:.0f} "
            f"| {result['resident_before_mib']:.0f} | {result['resident_held_mib']:.0f} "
            f"| {result['resident_built_mib']:.0f} | {result['resident_end_mib']:.0f} "
            f"| {result['peak_mib']:.0f} |"
        )
    for result in [single] + pair:
        grew = result["resident_held_mib"] - result["resident_before_mib"]
        print(
            f"worker {result['worker']} of {result['workers']}: holding its rows "
            f"added {grew:.0f} MiB, {grew / result['shard_mib']:.3f}x their "
            f"{result['shard_mib']:.0f} MiB"
        )


def projection(seconds_per_step: float, shape: Shape, num_data: int = 10**7) -> None:
    """The step and an epoch of ``num_data`` rows at 1, 2, 8 and 32 workers on 10 Gbit/s."""
    print(
        f"\nModel at N = {num_data:.0e} ({shape.data_dim} columns, Q={shape.latent_dim}, "
        f"M={shape.num_inducing}, {shape.batch_size} rows per worker and step): the measured "
        f"one-worker step, {seconds_per_step * 1e3:.1f} ms, plus a ring all-reduce on a "
        "10 Gbit/s network (50 us per message)"
    )
    print(
        "\n| workers | all-reduced per step | communication ms | step ms | rows/s | epoch "
        "| Y per worker (float64) | latent tables per worker |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    tables = 6 * num_data * shape.latent_dim * 8  # mean, variance, two Adam moments of each
    for workers in (1, 2, 8, 32):
        size = gradient_bytes(shape)
        comm = ring_seconds(workers, size)
        step = seconds_per_step + comm
        rows_per_second = shape.batch_size * workers / step
        print(
            f"| {workers} | {(size['dense'] + size['rows']) / 2**20:.2f} MiB "
            f"| {comm * 1e3:.2f} | {step * 1e3:.1f} | {rows_per_second:.0f} "
            f"| {num_data / rows_per_second / 60:.1f} min "
            f"| {num_data * shape.data_dim * 8 / workers / 2**30:.1f} GiB "
            f"| {tables / workers / 2**30:.2f} GiB |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", default="single-cell", choices=sorted(shapes()))
    parser.add_argument("--rows", type=int, help="N (default: the shape's)")
    parser.add_argument("--batches", type=int, nargs="+", help="rows per worker and step")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--folder", type=Path, help="where the data file goes (default: a temp)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    args = parser.parse_args(argv)
    shape = shapes()[args.shape]
    if args.rows:
        shape = Shape(**{**shape.__dict__, "num_data": args.rows})
    target = TARGET_SECONDS
    if args.quick:
        shape = Shape(400, 30, 3, 10, 40, 0.0, "poisson", 1)
        target = 0.1
    batches = args.batches or [shape.batch_size]
    print("Bytes of a step's all-reduce (float64; B-SVI, shared q(u)):")
    print("\n| shape | D | Q | M | all-reduced per step, any N, batch or worker count |")
    print("|---|---:|---:|---:|---:|")
    for name in ("mnist", "single-cell"):
        size = shapes()[name]
        print(
            f"| {name} | {size.data_dim} | {size.latent_dim} | {size.num_inducing} "
            f"| {gradient_bytes(size)['dense'] / 2**20:.2f} MiB |"
        )
    runs = {}
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        path = str(write_data(shape, folder))
        print(
            f"\n{args.shape}: N={shape.num_data} D={shape.data_dim} Q={shape.latent_dim} "
            f"M={shape.num_inducing}, Poisson, one thread per process",
            flush=True,
        )
        for batch in batches:
            request = {
                "shape": shape.__dict__,
                "path": path,
                "batch_size": batch,
                "repeats": 1 if args.quick else args.repeats,
                "target_seconds": target,
            }
            runs[batch] = (launch(request, 1)[0], launch(request, 2))
            print(f"  {batch} rows per worker: done", flush=True)
    report(runs, shape)
    first = batches[0]
    projection(runs[first][0]["seconds_per_step"], Shape(**{**shape.__dict__, "batch_size": first}))
    return 0


if __name__ == "__main__" and sys.argv[1:2] == ["--process"]:
    print(json.dumps(run_process(json.loads(sys.argv[2]))))
elif __name__ == "__main__":
    sys.exit(main())
