"""Rows per second of minibatches read from an .h5ad file on disk, against the same rows in memory.

Usage::

    python benchmarks/disk_rows.py [--cells 200000] [--genes 2000] [--density 0.15]
                                   [--batch-size 256] [--batches 400] [--quick]

Writes a simulated count matrix (CSR, float32 counts) to a temporary .h5ad a block at a time,
then times, in one process and in this order: ``DiskRows.batches`` (block shuffling at the
default block and buffer sizes) for ``--batches`` batches; ``DiskRows.load`` of every row into
memory; ``SparseRows.take`` of the same batches' rows from memory. Each timing reports rows/s,
and the process's peak resident memory after it (peaks only grow: the in-memory rows are loaded
last). The file is deleted at the end. The file has just been written, so it is read from the
page cache: the timings are the reader's cost, not a cold disk's.

Measured once with the defaults (``python benchmarks/disk_rows.py``; 2 CPU cores shared with
other jobs, load average about 6, so the rates are lower bounds)::

    200000 cells x 2000 genes, 60002973 non-zeros, file 469 MiB;
    block 1024 rows, buffer 32 blocks, batch 256

    | reader | rows/s | peak RSS (GiB) |
    |---|---|---|
    | (before reading) | | 0.97 |
    | DiskRows.batches (disk, block-shuffled) | 11,607 | 1.19 |
    | DiskRows.load (disk to CSR in memory) | 75,168 | 1.36 |
    | SparseRows.take (memory, same batches) | 87,744 | 1.36 |
"""

from __future__ import annotations

import argparse
import os
import resource
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

WRITE_ROWS = 4096


def write_counts(path: str, cells: int, genes: int, density: float) -> int:
    """A CSR count matrix [cells, genes] written to ``path`` as an .h5ad, a block of rows at a
    time; returns its number of non-zero entries."""
    import anndata
    import h5py
    import numpy as np
    import pandas as pd

    write_elem = getattr(anndata, "io", anndata.experimental).write_elem
    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as file:
        group = file.create_group("X")
        group.attrs.update({"encoding-type": "csr_matrix", "encoding-version": "0.1.0"})
        group.attrs["shape"] = np.array([cells, genes])
        data = group.create_dataset("data", (0,), np.float32, maxshape=(None,), chunks=(2**18,))
        indices = group.create_dataset("indices", (0,), np.int32, maxshape=(None,), chunks=(2**18,))
        indptr = np.zeros(cells + 1, np.int64)
        for start in range(0, cells, WRITE_ROWS):
            rows, columns = np.nonzero(
                rng.random((min(WRITE_ROWS, cells - start), genes)) < density
            )
            nnz = data.shape[0]
            data.resize((nnz + rows.size,))
            indices.resize((nnz + rows.size,))
            data[nnz:] = rng.poisson(2.0, rows.size) + 1
            indices[nnz:] = columns
            indptr[start + 1 : start + 1 + WRITE_ROWS] = nnz + np.cumsum(
                np.bincount(rows, minlength=min(WRITE_ROWS, cells - start))
            )
        group.create_dataset("indptr", data=indptr)
        write_elem(file, "obs", pd.DataFrame(index=[f"cell{i}" for i in range(cells)]))
        write_elem(file, "var", pd.DataFrame(index=[f"gene{j}" for j in range(genes)]))
        return int(indptr[-1])


def peak_gib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--density", type=float, default=0.15)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--batches", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help="20,000 cells, 40 batches")
    args = parser.parse_args(argv)
    if args.quick:
        args.cells, args.batches = 20_000, 40

    import numpy as np

    from gpflow_svi_gplvm.rows.h5ad import BLOCK_ROWS, BUFFER_BLOCKS, DiskRows

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "cells.h5ad")
        nnz = write_counts(path, args.cells, args.genes, args.density)
        size = os.path.getsize(path) / 2**20
        print(f"{args.cells} cells x {args.genes} genes, {nnz} non-zeros, file {size:.0f} MiB; ")
        print(f"block {BLOCK_ROWS} rows, buffer {BUFFER_BLOCKS} blocks, batch {args.batch_size}\n")
        print(
            f"| reader | rows/s | peak RSS (GiB) |\n|---|---|---|\n| (before reading) | | "
            f"{peak_gib():.2f} |"
        )
        with DiskRows.open(path) as rows:
            start, seen = time.perf_counter(), []
            for idx, _ in rows.batches(args.batch_size).take(args.batches):
                seen.append(idx.numpy())
            rate = args.batches * args.batch_size / (time.perf_counter() - start)
            print(f"| DiskRows.batches (disk, block-shuffled) | {rate:,.0f} | {peak_gib():.2f} |")
            start = time.perf_counter()
            memory = rows.load(0, args.cells)
            rate = args.cells / (time.perf_counter() - start)
            print(f"| DiskRows.load (disk to CSR in memory) | {rate:,.0f} | {peak_gib():.2f} |")
        start = time.perf_counter()
        for idx in seen:
            np.asarray(memory.take(idx))
        rate = args.batches * args.batch_size / (time.perf_counter() - start)
        print(f"| SparseRows.take (memory, same batches) | {rate:,.0f} | {peak_gib():.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
