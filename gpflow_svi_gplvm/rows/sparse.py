"""Rows of a large, mostly-zero matrix kept sparse and densified a block at a time.

A count matrix of single cells (N cells x D genes, about 10% non-zero) is held as CSR (float32
values, int32 columns: 8 bytes per non-zero entry, against 8 N D bytes dense). :class:`SparseRows`
reads any row-sliceable source (a NumPy array, a SciPy sparse matrix, an AnnData's backed
on-disk matrix) in row blocks, and gives dense float64 rows by slicing (``rows[a:b]`` [b - a, D]),
which is how every whole-data pass of the package reads Y (:func:`row_blocks`), or
by index, one minibatch at a time (:meth:`SparseRows.take`): the dense N x D matrix never exists.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np
import scipy.sparse as sp

if TYPE_CHECKING:
    import tensorflow as tf

__all__ = [
    "SparseRows",
    "RowReader",
    "RowStream",
    "row_blocks",
    "ROWS_PER_BLOCK",
    "as_float32",
    "FLOAT32_INTEGERS",
]

ROWS_PER_BLOCK = 4096
"""Rows read at a time by whole-data passes, so that no temporary is as large as Y."""

FLOAT32_INTEGERS = 2**24
"""Every integer up to this one is a float32; above it some are not (2^24 + 1 reads as 2^24)."""


def as_float32(values: np.ndarray, where: str) -> np.ndarray:
    """``values`` as float32, the rows' storage; a ``ValueError`` (naming ``where``) for an
    integer above :data:`FLOAT32_INTEGERS` that float32 would turn into another integer: a
    count read as another count. Other values keep float32's relative precision."""
    converted = np.asarray(values).astype(np.float32)
    values = np.asarray(values)
    if not values.size or values.dtype.kind not in "iuf":
        return converted
    large = np.abs(values) > FLOAT32_INTEGERS
    if large.any():
        changed = large & (values == np.round(values)) & (converted != values)
        if changed.any():
            first = np.unravel_index(np.argmax(changed), values.shape)
            raise ValueError(
                f"{where} holds the integer {values[first]} (at {tuple(map(int, first))}), above "
                f"2^24 = {FLOAT32_INTEGERS:,}: rows are stored as float32, which would read it "
                f"as {converted[first]:.0f}. Counts so large are not read exactly: scale them "
                "down (or cap them) first."
            )
    return converted


def row_blocks(Y, rows: int = ROWS_PER_BLOCK):
    """Consecutive blocks Y[i : i + rows] [<= rows, D] covering Y [N, D], as NumPy arrays: views
    of an array, copies of a block of a tensor or variable."""
    for start in range(0, Y.shape[0], rows):
        if hasattr(Y, "sparse_read"):
            # A variable read sparsely (as training does) copies itself whole on a dense read.
            yield Y.sparse_read(np.arange(start, min(start + rows, Y.shape[0]))).numpy()
        else:
            yield np.asarray(Y[start : start + rows])


@runtime_checkable
class RowReader(Protocol):
    """Rows read a block at a time, never all at once: :class:`SparseRows` in memory, or
    :class:`~gpflow_svi_gplvm.rows.h5ad.DiskRows` on disk. Slices give dense float64 rows."""

    @property
    def shape(self) -> tuple[int, int]: ...

    def __getitem__(self, rows: slice) -> np.ndarray: ...

    def take(self, rows: np.ndarray) -> np.ndarray: ...

    def view(self, transform: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> RowReader: ...

    def row_sums(self) -> np.ndarray: ...


@runtime_checkable
class RowStream(RowReader, Protocol):
    """Rows too many for memory, served in minibatches from where they are stored
    (:class:`~gpflow_svi_gplvm.rows.h5ad.DiskRows`): batch k of :meth:`batches` is a function of
    the seed and k alone, so that a resumed run restarts the stream at its step."""

    def batches(self, batch_size: int, seed: int = 0, start: int = 0) -> tf.data.Dataset: ...


class SparseRows:
    """N rows of D columns held as CSR; slices and :meth:`take` give dense float64 rows.

    Build it with :meth:`from_matrix`. ``transform`` (optional) maps each dense block and its
    row numbers to the values served (e.g. log-normalised counts for a PCA), so a view of the
    same rows costs nothing (:meth:`view`).
    """

    def __init__(
        self,
        matrix: sp.csr_matrix,
        transform: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
    ):
        self.matrix = matrix
        self.transform = transform
        self.facts: object = None
        """What one pass over these rows learnt, when one was made (a
        :class:`~gpflow_svi_gplvm.rows.facts.RowFacts`)."""

    @classmethod
    def from_matrix(
        cls,
        source,
        columns: np.ndarray | None = None,
        check: Callable[[np.ndarray, int], None] | None = None,
        rows_per_block: int = ROWS_PER_BLOCK,
    ) -> SparseRows:
        """Read ``source`` [N, D'] (anything sliced by rows into a NumPy array or SciPy sparse
        matrix) a block of rows at a time, keep ``columns`` (indices [D], default all) and store
        the result as CSR. ``check(block, first_row)`` sees each dense block first and may
        raise. A CSR matrix already stored so (float32 values, int32 columns), all of whose
        columns are kept, is held as it is, not copied (it is only ever read)."""
        if _stored_as_kept(source, columns):
            for start in range(0, source.shape[0], rows_per_block):
                if check is not None:
                    check(source[start : start + rows_per_block].toarray(), start)
            return cls(source)
        blocks = []
        for start in range(0, source.shape[0], rows_per_block):
            block = source[start : start + rows_per_block]
            block = block.tocsr() if sp.issparse(block) else sp.csr_matrix(np.asarray(block))
            if columns is not None:
                block = block[:, columns]
            if check is not None:
                check(block.toarray(), start)
            values = as_float32(block.data, f"the matrix, rows {start}..,")
            blocks.append(sp.csr_matrix((values, block.indices, block.indptr), block.shape))
        matrix = sp.vstack(blocks, format="csr") if blocks else sp.csr_matrix((0, 0))
        matrix.indices = matrix.indices.astype(np.int32)
        return cls(matrix)

    @property
    def shape(self) -> tuple[int, int]:
        return self.matrix.shape

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.matrix.shape[0]

    def __getitem__(self, rows: slice) -> np.ndarray:
        """Dense float64 rows [b, D] of a slice of rows."""
        if not isinstance(rows, slice):
            raise TypeError("SparseRows is sliced by rows only (rows[a:b]); use take(indices).")
        return self.take(np.arange(self.shape[0])[rows])

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Dense float64 rows [B, D] at the row numbers ``rows`` [B]."""
        rows = np.asarray(rows)
        block = self.matrix[rows].toarray().astype(np.float64)
        return block if self.transform is None else self.transform(block, rows)

    def view(self, transform: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> SparseRows:
        """The same rows served through ``transform(dense block, row numbers)``."""
        return SparseRows(self.matrix, transform)

    def row_sums(self) -> np.ndarray:
        """The sum of each row [N] (the library size of count data)."""
        return np.asarray(self.matrix.sum(axis=1), dtype=np.float64).reshape(-1)


def _stored_as_kept(source, columns: np.ndarray | None) -> bool:
    """Is ``source`` a CSR matrix that :meth:`SparseRows.from_matrix` would store unchanged?"""
    if not (sp.issparse(source) and source.format == "csr"):
        return False
    every_column = columns is None or np.array_equal(columns, np.arange(source.shape[1]))
    return (
        every_column
        and source.dtype == np.float32
        and source.indices.dtype == np.int32
        and source.has_canonical_format
    )
