"""The rows one worker holds of a data set split over several workers: a contiguous block each,
kept dense on the worker's CPU or sparse (CSR)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
import tensorflow as tf
from numpy.typing import ArrayLike

from ..distributed.owned import outside_strategy
from ..distributed.workers import Workers
from ..validation import check_integer, check_observations
from .sparse import SparseRows

# Bytes copied at a time into a shard's variable: the allocator keeps small freed buffers
# resident, so small blocks keep that overhead small.
_COPY_BYTES = 2**20

__all__ = ["RowShard", "worker_rows"]


def worker_rows(num_data: int, worker: int, num_workers: int) -> np.ndarray:
    """The rows [n] of worker ``worker`` of ``num_workers`` when N rows are split into contiguous
    blocks of sizes differing by at most one: :math:`[\\lfloor wN/W \\rfloor,
    \\lfloor (w+1)N/W \\rfloor)`."""
    start, stop = (num_data * w // num_workers for w in (worker, worker + 1))
    return np.arange(start, stop, dtype=np.int64)


class RowShard:
    """The rows of a data set Y [N, D] that one worker holds: ``Y`` [n, D] (NaN = missing, or
    ``mask`` [n, D], True = observed) and their row numbers ``rows`` [n] in Y, for training on
    several workers without any of them holding all of Y.

    A model built from a shard inside ``strategy.scope()`` and ``fit(model, shard,
    strategy=strategy)`` train on the union of the workers' shards: every row 0..N-1 on exactly
    one worker, whose latent rows live on that worker alone. A dense ``Y`` is kept once, in a
    variable on this worker's CPU (a copy of ``Y``: drop your array, or pass a memory-mapped one,
    to keep one copy resident); :meth:`for_worker` takes this worker's block of a (memory-mapped)
    array. Sparse rows (:class:`~gpflow_svi_gplvm.rows.sparse.SparseRows` or a SciPy sparse
    matrix, e.g. counts read from an AnnData file) stay CSR, 8 bytes per non-zero entry, and each
    minibatch is densified on its own.
    """

    def __init__(
        self,
        Y: ArrayLike | SparseRows | sp.spmatrix,
        rows: ArrayLike,
        num_data: int,
        mask: ArrayLike | None = None,
    ):
        self.num_data = check_integer(num_data, "num_data", hint="N, the rows of all shards")
        self.Y: tf.Variable | SparseRows
        if isinstance(Y, SparseRows) or sp.issparse(Y):
            if mask is not None:
                raise ValueError("Sparse rows hold every entry: a mask cannot be given with them.")
            self.Y = Y if isinstance(Y, SparseRows) else SparseRows.from_matrix(Y)
            self.rows = _check_rows(rows, self.Y.shape[0], self.num_data)
            return
        Y = check_observations(Y, "the shard's Y", mask=mask)
        self.rows = _check_rows(rows, len(Y), self.num_data)
        self.Y = _rows_on_cpu(Y)

    @property
    def sparse(self) -> bool:
        """Whether the rows are held as CSR (each minibatch densified on its own)."""
        return isinstance(self.Y, SparseRows)

    @classmethod
    def for_worker(
        cls,
        Y: np.ndarray | sp.spmatrix,
        strategy: tf.distribute.Strategy | None = None,
        mask: ArrayLike | None = None,
    ) -> RowShard:
        """This worker's contiguous block of the rows of Y [N, D] (:func:`worker_rows`), for a
        ``strategy`` (default: the one in scope). With ``np.load(path, mmap_mode="r")`` only
        those rows are read; a SciPy sparse Y stays sparse."""
        Y = Y if hasattr(Y, "shape") else np.asarray(Y)
        workers = Workers.of(strategy)
        rows = worker_rows(Y.shape[0], workers.index, workers.count)
        block = slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) else slice(0, 0)
        if sp.issparse(Y):
            return cls(sp.csr_matrix(Y)[block], rows, Y.shape[0], mask=mask)
        mask = None if mask is None else np.asarray(mask)[block]
        return cls(np.asarray(Y[block]), rows, Y.shape[0], mask=mask)

    @property
    def num_rows(self) -> int:
        """n, the rows this worker holds."""
        return int(self.Y.shape[0])

    @property
    def data_dim(self) -> int:
        return int(self.Y.shape[1])

    def check(self, workers: Workers) -> None:
        """A ``ValueError`` on every worker unless the workers' shards have one N and one D and
        hold every row exactly once; it names the workers to change."""
        layout = workers.stack([self.num_data, self.data_dim])
        for column, what in enumerate(("N (num_data)", "D (columns)")):
            odd = [i for i in range(workers.count) if layout[i, column] != layout[0, column]]
            if odd:
                sizes = ", ".join(f"worker {i}: {layout[i, column]}" for i in range(workers.count))
                raise ValueError(
                    f"The workers' shards disagree on {what} ({sizes}): give every worker rows "
                    f"of the same data set, with the same num_data."
                )
        held = workers.sum(np.bincount(self.rows, minlength=self.num_data).astype(np.int32))
        twice = workers.stack(int(np.sum(held[self.rows] > 1)))
        if twice.any():
            owners = ", ".join(f"worker {i}" for i in np.flatnonzero(twice))
            first = int(np.flatnonzero(held > 1)[0])
            raise ValueError(
                f"{int(np.sum(held > 1))} rows are held by more than one worker ({owners} hold "
                f"some, e.g. row {first}): give each worker rows no other worker has."
            )
        if (held == 0).any() and workers.count == 1:
            raise ValueError(
                f"This process holds {self.num_rows} of the N={self.num_data} rows and no other "
                "worker is in sight: build the model inside `with strategy.scope():` of the "
                "MultiWorkerMirroredStrategy whose workers hold the other rows, and pass that "
                "strategy to fit (or give the shard every row)."
            )
        if (held == 0).any():
            missing = np.flatnonzero(held == 0)
            raise ValueError(
                f"{len(missing)} of the N={self.num_data} rows are held by no worker (e.g. row "
                f"{int(missing[0])}): the shards must cover every row 0..N-1, or build the shards "
                "with num_data equal to the rows they hold."
            )

    def check_against(self, num_data: int, data_dim: int, workers: Workers) -> None:
        """:meth:`check`, then a ``ValueError`` on every worker unless the shards are rows of a
        data set of N = ``num_data`` rows and D = ``data_dim`` columns (the model's)."""
        self.check(workers)
        with workers.agreeing():
            if (self.num_data, self.data_dim) != (num_data, data_dim):
                raise ValueError(
                    f"the shard holds rows of a data set of N={self.num_data}, D={self.data_dim}, "
                    f"but the model was built for N={num_data}, D={data_dim}: train on the rows "
                    "the model was built from."
                )


def _rows_on_cpu(Y: np.ndarray) -> tf.Variable:
    """Y [n, D] in a non-trainable variable on this process's CPU, written in blocks of about a
    MiB so that besides Y it costs one copy and no larger temporary."""

    def create() -> tf.Variable:
        with tf.device("/cpu:0"):
            zeros = tf.fill(Y.shape, tf.constant(0, Y.dtype))
            return tf.Variable(zeros, trainable=False, name="rows")

    # A worker's rows must never become a variable mirrored from the chief's (nor copied to
    # every device).
    rows = outside_strategy(create)
    step = max(1, _COPY_BYTES // max(1, Y.shape[1] * Y.itemsize))
    for start in range(0, len(Y), step):
        block = np.asarray(Y[start : start + step])
        positions = tf.range(start, start + len(block), dtype=tf.int64)
        rows.scatter_update(tf.IndexedSlices(tf.constant(block), positions))
    return rows


def _check_rows(rows: ArrayLike, num_rows: int, num_data: int) -> np.ndarray:
    """``rows`` as int64 [n], or a ``ValueError``: not integers, not one per row of the shard,
    repeated, or outside [0, num_data)."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or len(rows) != num_rows:
        raise ValueError(
            f"rows must be the shard's {num_rows} row numbers in the whole data set, a 1-D integer "
            f"array, got {rows.dtype} {rows.shape}."
        )
    if num_rows and (rows.min() < 0 or rows.max() >= num_data):
        raise ValueError(
            f"rows must lie in [0, num_data={num_data}), got {rows.min()}..{rows.max()}: pass "
            "num_data = the rows of all shards together."
        )
    if len(np.unique(rows)) != num_rows:
        raise ValueError("rows repeats a row number: each row of the data set appears once.")
    return rows.astype(np.int64)
