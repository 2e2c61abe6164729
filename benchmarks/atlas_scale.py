"""Atlas scale: the single-cell face on several workers and out of core, read from an .h5ad file.

Usage::

    python benchmarks/atlas_scale.py workers [--cells 1000000] [--workers 1 2 4] [--steps 300]
    python benchmarks/atlas_scale.py out-of-core [--cells 10000000] [--reference 1000000]
                                                 [--no-reference]
    python benchmarks/atlas_scale.py quality [--cells 10000] [--steps 3000]
    python benchmarks/atlas_scale.py model [--per-step-ms 60] [--workers 64]
    python benchmarks/atlas_scale.py ... --quick          # a smoke run: tiny sizes

The atlas is :func:`gpflow_svi_gplvm.datasets.atlas_blocks` (gamma-Poisson counts of 7 types in 2
batches, 2,000 genes, 30% non-zero: 609 genes a cell) written block by block to an ``.h5ad`` file
(CSR ``X`` and ``obs["batch"]``), so that no atlas ever passes through memory whole; files are
kept in ``--folder`` for later runs. Every fit is ``SingleCellGPLVM(10, batch_key="batch")`` (B-SVI,
negative binomial, size factors, the batch in the kernel) with its defaults and 256 cells a
worker and step.

1. ``workers``: one process per worker (``MultiWorkerMirroredStrategy`` over loopback, one
   thread each), each reading only its cells from the file. Per worker: its cells, the MiB of
   their CSR counts and of their latent tables (mean, variance and their Adam moments: 6 n Q
   numbers), its peak resident memory, and rows per second (steps timed between two callbacks
   after the first, so tracing is left out); the numbers all-reduced per step, counted from the
   model's global parameters (the tables never cross the network), at two N.
2. ``out-of-core``: one process fits ``--cells`` cells streamed from disk in block-shuffled
   batches (:meth:`~gpflow_svi_gplvm.rows.h5ad.DiskRows.batches`), against the same fit of the
   ``--reference`` file's cells held in memory (an AnnData): peak memory, rows per second, and
   the ELBO (mean over the last tenth of the steps against the tenth before). The large file is
   the reference's cells repeated (renamed), copied at the disk's speed (:func:`tile_atlas`).
3. ``quality``: one process against two workers on the same ``--cells`` atlas and global batch
   (256): rows per second and the embeddings' scores
   (:func:`gpflow_svi_gplvm.metrics.embedding_scores`: k-means ARI and NMI against the cell
   types, cell-type ASW, batch ASW).
4. ``model``: memory per worker, step time and epoch time for 10^8 cells on ``--workers``
   workers, from the measured step and a ring all-reduce of the global parameters on a
   10 Gbit/s network (50 microseconds per message).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from common import free_ports

GENES, LATENT_DIM, BATCH = 2000, 10, 256
BANDWIDTH, LATENCY = 10e9 / 8, 50e-6


def write_atlas(path: Path, cells: int, block: int = 20_000, genes: int = GENES) -> Path:
    """An .h5ad of ``cells`` simulated cells of ``genes`` genes, written a block of rows at a
    time."""
    if path.exists():
        return path
    import anndata
    import h5py
    import pandas as pd

    from gpflow_svi_gplvm.datasets import atlas_blocks

    cell_type, batch, _, _, blocks = atlas_blocks(cells, genes, seed=0, block=block)
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(np.array(["a", "b"])[batch]),
            "cell_type": pd.Categorical(cell_type.astype(str)),
        },
        index=[f"cell{i}" for i in range(cells)],
    )
    var = pd.DataFrame(index=[f"gene{j}" for j in range(genes)])
    staging = path.with_name(path.name + ".partial")
    anndata.AnnData(obs=obs, var=var).write_h5ad(staging)
    with h5py.File(staging, "a") as file:
        if "X" in file:
            del file["X"]
        X = file.create_group("X")
        X.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        X.attrs["shape"] = np.array([cells, genes])
        data = X.create_dataset("data", (0,), np.float32, maxshape=(None,), chunks=(2**20,))
        indices = X.create_dataset("indices", (0,), np.int32, maxshape=(None,), chunks=(2**20,))
        indptr = [np.zeros(1, np.int64)]
        for counts in blocks:
            nnz = len(data)
            data.resize((nnz + counts.nnz,))
            indices.resize((nnz + counts.nnz,))
            data[nnz:] = counts.data
            indices[nnz:] = counts.indices
            indptr.append(counts.indptr[1:].astype(np.int64) + nnz)
        X.create_dataset("indptr", data=np.concatenate(indptr))
    staging.rename(path)
    return path


def tile_atlas(source: Path, path: Path, times: int, rows_per_copy: int = 200_000) -> Path:
    """An .h5ad of ``source``'s cells repeated ``times`` times (renamed), copied a block of rows
    at a time: a large file at the speed of the disk, for memory and throughput (its cells are
    not new draws)."""
    if path.exists():
        return path
    import anndata
    import h5py
    import pandas as pd

    from gpflow_svi_gplvm.rows.h5ad import read_frames

    obs, var = read_frames(source)
    cells = len(obs)
    tiled = pd.concat([obs] * times)
    tiled.index = [f"cell{i}" for i in range(cells * times)]
    staging = path.with_name(path.name + ".partial")
    anndata.AnnData(obs=tiled, var=var).write_h5ad(staging)
    with h5py.File(source, "r") as old, h5py.File(staging, "a") as file:
        if "X" in file:
            del file["X"]
        X = file.create_group("X")
        X.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        X.attrs["shape"] = np.array([cells * times, var.shape[0]])
        nnz = int(old["X/indptr"][-1])
        indptr = old["X/indptr"][:].astype(np.int64)
        for name in ("data", "indices"):
            chunk = (min(2**20, nnz * times),)
            target = X.create_dataset(name, (nnz * times,), old[f"X/{name}"].dtype, chunks=chunk)
            for copy in range(times):
                for first in range(0, cells, rows_per_copy):
                    a, b = indptr[first], indptr[min(first + rows_per_copy, cells)]
                    target[copy * nnz + a : copy * nnz + b] = old[f"X/{name}"][a:b]
        starts = [indptr[:-1] + copy * nnz for copy in range(times)] + [np.array([nnz * times])]
        X.create_dataset("indptr", data=np.concatenate(starts))
    staging.rename(path)
    return path


# ------------------------------------------------------------------------------ a worker


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fit_process(request: dict) -> dict:
    """One fit in this process (a worker of ``TF_CONFIG``'s cluster, or alone)."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from gpflow_svi_gplvm import multi_worker_strategy

    strategy = multi_worker_strategy() if os.environ.get("TF_CONFIG") else None
    import anndata

    from gpflow_svi_gplvm.distributed.workers import Workers
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    workers = Workers.of(strategy)
    global_batch = request.get("global_batch", BATCH * workers.count)
    worker_batch = global_batch // workers.count  # this worker's cells a step
    marks: list[tuple[int, float]] = []
    data = request["path"]
    if request.get("in_memory"):
        data = anndata.read_h5ad(request["path"])
    begin = time.perf_counter()
    model = SingleCellGPLVM(LATENT_DIM, batch_key="batch").fit(
        data,
        request["steps"],
        batch_size=global_batch,
        progress=False,
        strategy=strategy,
        output=request["output"],
        callback=lambda step: marks.append((step, time.perf_counter())),
        callback_every=request["every"],
    )
    seconds = time.perf_counter() - begin
    (first, start), (last, stop) = marks[0], marks[-1]
    svi = model.model
    tables = {variable.ref() for variable in svi.table_variables}
    global_numbers = sum(
        int(np.prod(v.shape)) for v in svi.trainable_variables if v.ref() not in tables
    )
    table_rows = svi.num_table_rows
    held = workers.count > 1 or request.get("in_memory")
    csr_mib = _csr_mib(request["path"], workers) if held else None
    elbo = model.history.elbo
    tenth = max(len(elbo) // 10, 1)
    return {
        "worker": workers.index,
        "workers": workers.count,
        "cells": table_rows,
        "csr_mib": csr_mib,
        "tables_mib": 6 * table_rows * LATENT_DIM * 8 / 2**20,
        "peak_mib": peak_mib(),
        "rows_per_second": worker_batch * (last - first) / (stop - start),
        "seconds": seconds,
        # Until the first step: the build (reading the data) and the step's trace.
        "start_seconds": start - begin - first * (stop - start) / (last - first),
        "all_reduced_numbers": global_numbers + 2,  # the loss and the tables' fault count
        "elbo_last": float(np.mean(elbo[-tenth:])),
        "elbo_before": float(np.mean(elbo[-2 * tenth : -tenth])),
    }


def _csr_mib(path: str, workers) -> float:
    """The MiB of this worker's cells' CSR counts (float32 values, int32 columns, int64 row
    starts), read from the file's row starts."""
    import h5py

    from gpflow_svi_gplvm.rows.shard import worker_rows

    with h5py.File(path, "r") as file:
        indptr = file["X/indptr"]
        rows = worker_rows(len(indptr) - 1, workers.index, workers.count)
        nnz = int(indptr[rows[-1] + 1] - indptr[rows[0]])
    return (8 * nnz + 8 * (len(rows) + 1)) / 2**20


# ------------------------------------------------------------------------------ the parent


def launch(request: dict, num_workers: int) -> list[dict]:
    """``num_workers`` processes running :func:`fit_process` (a loopback cluster when more than
    one); their results, in worker order."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(num_workers)]}
    with tempfile.TemporaryDirectory() as scratch:
        processes = []
        for index in range(num_workers):
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
            env.pop("TF_CONFIG", None)
            if num_workers > 1:
                task = {"type": "worker", "index": index}
                env["TF_CONFIG"] = json.dumps({"cluster": cluster, "task": task})
            out = Path(scratch) / f"{index}.json"
            command = [sys.executable, __file__, "--run", json.dumps(request), str(out)]
            processes.append((subprocess.Popen(command, env=env), out))
        for process, _ in processes:
            if process.wait() != 0:
                raise RuntimeError(f"a worker failed (exit {process.returncode})")
        return [json.loads(out.read_text()) for _, out in processes]


def workers_table(args: argparse.Namespace, folder: Path) -> None:
    path = write_atlas(folder / f"atlas_{args.cells}.h5ad", args.cells)
    print(f"{args.cells} cells x {GENES} genes: {path.stat().st_size / 2**30:.2f} GiB on disk")
    print(
        "\n| workers | worker | its cells | CSR MiB | tables MiB | peak MiB | over CSR + tables "
        "| rows/s (all workers) | all-reduced numbers per step |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    alone = None
    for count in args.workers:
        request = {
            "path": str(path),
            "steps": args.steps,
            "every": max(args.steps // 3, 1),
            "output": str(folder / f"out_{count}"),
            "in_memory": count == 1,  # one worker holds every cell's CSR, as each worker its own
        }
        results = launch(request, count)
        rate = min(r["rows_per_second"] for r in results) * count
        alone = alone or rate
        for r in results:
            held = (r["csr_mib"] or 0) + r["tables_mib"]
            print(
                f"| {count} | {r['worker']} | {r['cells']} | {r['csr_mib'] or 0:.0f} "
                f"| {r['tables_mib']:.0f} | {r['peak_mib']:.0f} "
                f"| {(r['peak_mib'] - held) / 1024:.2f} GiB | {rate:.0f} ({rate / alone:.2f}x) "
                f"| {r['all_reduced_numbers']} |"
            )


def out_of_core(args: argparse.Namespace, folder: Path) -> None:
    small = write_atlas(folder / f"atlas_{args.reference}.h5ad", args.reference)
    times = max(args.cells // args.reference, 1)
    big = tile_atlas(small, folder / f"atlas_{args.reference}x{times}.h5ad", times)
    print(f"out of core: the {args.reference} cells repeated {times} times, renamed")
    print(
        "\n| run | cells | on disk GiB | peak MiB | rows/s | build s | seconds in all "
        "| ELBO, last tenth | tenth before |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    runs = (("in memory", small, True), ("out of core", big, False))
    for name, path, in_memory in runs[1:] if args.no_reference else runs:
        request = {
            "path": str(path),
            "steps": args.steps,
            "every": max(args.steps // 5, 1),
            "output": str(folder / f"out_{name.replace(' ', '_')}"),
            "in_memory": in_memory,
        }
        r = launch(request, 1)[0]
        print(
            f"| {name} | {r['cells']} | {path.stat().st_size / 2**30:.2f} | {r['peak_mib']:.0f} "
            f"| {r['rows_per_second']:.0f} | {r['start_seconds']:.0f} | {r['seconds']:.0f} "
            f"| {r['elbo_last']:.1f} "
            f"| {r['elbo_before']:.1f} |"
        )


def quality(args: argparse.Namespace, folder: Path) -> None:
    """One process against two workers on the same atlas and global batch: the embeddings'
    scores (:func:`gpflow_svi_gplvm.metrics.embedding_scores`)."""
    from gpflow_svi_gplvm.metrics import embedding_scores
    from gpflow_svi_gplvm.rows.h5ad import read_frames

    path = write_atlas(folder / f"atlas_{args.cells}.h5ad", args.cells)
    obs, _ = read_frames(path)
    print(f"\n{args.cells} cells, {args.steps} steps of {BATCH} cells in all")
    print("\n| run | rows/s | ARI | NMI | cell-type ASW | batch ASW |")
    print("|---|---:|---:|---:|---:|---:|")
    for count in (1, 2):
        output = folder / f"quality_{count}"
        request = {
            "path": str(path),
            "steps": args.steps,
            "every": max(args.steps // 5, 1),
            "output": str(output),
            "in_memory": count == 1,
            "global_batch": BATCH,
        }
        rate = min(r["rows_per_second"] for r in launch(request, count))
        embedding = np.load(output / "X_gplvm.npy")
        score = embedding_scores(embedding, obs["cell_type"].to_numpy(), obs["batch"].to_numpy())
        print(
            f"| {count} worker(s) | {rate * count:.0f} | {score['ARI']:.3f} | {score['NMI']:.3f} "
            f"| {score['cell-type ASW']:.3f} | {score['batch ASW']:.3f} |"
        )


def cost_model(args: argparse.Namespace) -> None:
    """10^8 cells on ``args.workers`` workers from a measured step."""
    cells, workers = 10**8, args.workers
    per_worker = cells / workers
    csr = per_worker * (0.15 * GENES * 8 + 8) / 2**30
    tables = 6 * per_worker * LATENT_DIM * 8 / 2**30
    numbers = args.all_reduced
    ring = 2 * (workers - 1) * (LATENCY + numbers * 8 / workers / BANDWIDTH)
    step = args.per_step_ms / 1e3 + ring
    rows = BATCH * workers / step
    print(
        f"\n10^8 cells on {workers} workers ({per_worker:.3g} cells each, {BATCH} a step): "
        f"CSR counts {csr:.1f} GiB + latent tables {tables:.2f} GiB + 1.5 GiB per worker; "
        f"step {args.per_step_ms:.0f} ms + all-reduce {ring * 1e3:.2f} ms = {step * 1e3:.1f} ms; "
        f"{rows:.0f} rows/s; an epoch {cells / rows / 3600:.1f} h."
    )


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--run":
        Path(sys.argv[3]).write_text(json.dumps(fit_process(json.loads(sys.argv[2]))))
        return 0
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("part", choices=["workers", "out-of-core", "quality", "model"])
    parser.add_argument("--cells", type=int)
    parser.add_argument("--reference", type=int, default=1_000_000)
    parser.add_argument(
        "--no-reference", action="store_true", help="out of core: skip the in-memory fit"
    )
    parser.add_argument("--workers", type=int, nargs="+")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--per-step-ms", type=float, default=60.0)
    parser.add_argument("--all-reduced", type=int, default=0, help="numbers per step")
    parser.add_argument("--folder", type=Path, help="where the .h5ad files go (kept)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: tiny sizes")
    args = parser.parse_args(argv)
    if args.quick:
        args.cells, args.reference, args.steps = 800, 400, 6
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.folder or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if args.part == "workers":
            args.cells = args.cells or 1_000_000
            args.workers = args.workers or [1, 2, 4]
            workers_table(args, folder)
        elif args.part == "out-of-core":
            args.cells = args.cells or 10_000_000
            out_of_core(args, folder)
        elif args.part == "quality":
            args.cells = args.cells or 10_000
            quality(args, folder)
        else:
            args.workers = (args.workers or [64])[0]
            cost_model(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
