r"""Rows of an on-disk AnnData (``.h5ad``), read a block at a time.

:class:`DiskRows` serves the count matrix of an ``.h5ad`` file (``X`` or a layer, CSR or dense)
with the reading interface of :class:`~gpflow_svi_gplvm.rows.sparse.SparseRows` while the matrix
stays on disk: only the rows asked for are read, in contiguous runs. It reads the file with
``h5py`` directly, because AnnData's backed mode keeps only ``X`` on disk and loads the layers.

Memory. CSR rows cost 8 bytes per non-zero entry (float32 value, int32 column), against 8 D
bytes per dense float64 row (at D = 2,000 and 15% non-zero: 2.4 kB against 16 kB a row).

- :meth:`DiskRows.load` brings rows [start, stop) into memory as CSR (a worker of a cluster holds
  its own rows only), one block of :data:`~.validation.ROWS_PER_BLOCK` rows read at a time.
- :meth:`DiskRows.batches` trains out of core on one machine by **block shuffling** (as the ML
  loaders of cellxgene-census and scvi-tools do): each epoch permutes the blocks of
  ``block_rows`` consecutive rows, groups ``buffer_blocks`` of them into a buffer, permutes the
  buffer's rows and cuts them into batches. A block is one contiguous read (sequential-read
  speed); a batch draws its rows from ``buffer_blocks`` places of the file (randomness close to
  full shuffling). It holds two buffers of CSR (the one being cut and the next, which tf.data
  reads while steps run) plus two prefetched dense batches [B, D]:
  :math:`2 \cdot \text{block\_rows} \cdot \text{buffer\_blocks} \cdot 8\,\text{nnz/row}` bytes
  (about 160 MB at the defaults and 300 non-zeros a row), whatever N.

A file changed or removed while open makes every later read raise a ``ValueError``: rows read
before and after a change would belong to different data.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

import h5py
import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from ..validation import check_integer, check_path, check_seed
from .shuffle_plan import ShufflePlan, block_rows_of
from .sparse import ROWS_PER_BLOCK, SparseRows, as_float32

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DiskRows", "read_frames", "BLOCK_ROWS", "BUFFER_BLOCKS"]

BLOCK_ROWS = 1024
"""Rows of one contiguous read of :meth:`DiskRows.batches`: at 300 non-zeros a row, 2.4 MB, large
enough that a read costs its bytes rather than its latency (a seek, an HDF5 chunk lookup)."""

BUFFER_BLOCKS = 32
"""Blocks shuffled together by :meth:`DiskRows.batches`: a batch of 256 rows draws about 8 rows
from each of 32 places of the file, so that rows stored in order (by donor, by sample) mix."""

PREFETCH_BATCHES = 2
"""Dense batches made ahead of the step that takes them."""

Transform = Callable[[np.ndarray, np.ndarray], np.ndarray]


class _Source:
    """One matrix element (CSR group or dense dataset) of an open HDF5 file, and the file's
    identity at opening, checked before every read."""

    def __init__(self, path: str, layer: str | None):
        self.path = os.path.abspath(path)
        if not os.path.isfile(self.path):
            raise ValueError(f"There is no file {self.path!r}: give the path of an .h5ad file.")
        self.stamp = self._stamp()
        try:
            self.file = h5py.File(self.path, "r")
        except OSError as error:
            raise ValueError(unreadable_h5ad(self.path, error)) from error
        self.name = _element_name(self.file, layer)
        self.element = self._element(layer)
        self.sparse = isinstance(self.element, h5py.Group)
        self.shape = self._shape()

    def _stamp(self) -> tuple[int, int, int]:
        status = os.stat(self.path)
        return status.st_ino, status.st_size, status.st_mtime_ns

    def _element(self, layer: str | None) -> h5py.Group | h5py.Dataset:
        if layer is not None and self.name not in self.file:
            layers = list(self.file.get("layers", {}))
            raw = " and no raw (raw/X)" if layer == "raw" else ""
            raise ValueError(
                f"{self.path!r} has no layer {layer!r}{raw}; its layers are {layers}. Pass "
                "layer=None to read X."
            )
        if self.name not in self.file:
            raise ValueError(f"{self.path!r} has no {self.name}: is it an AnnData (.h5ad) file?")
        element = self.file[self.name]
        encoding = element.attrs.get("encoding-type", element.attrs.get("h5sparse_format", ""))
        if isinstance(encoding, bytes):
            encoding = encoding.decode()
        if encoding in ("csc_matrix", "csc"):
            raise ValueError(
                f"{self.name} of {self.path!r} is stored CSC (by column): reading rows of it would "
                "scan the whole matrix. Write it CSR, e.g. adata.X = adata.X.tocsr() (likewise a "
                "layer) and adata.write_h5ad(path)."
            )
        if isinstance(element, h5py.Group) and encoding not in ("csr_matrix", "csr"):
            raise ValueError(f"{self.name} of {self.path!r} is neither a CSR nor a dense matrix.")
        if isinstance(element, h5py.Dataset) and element.ndim != 2:
            raise ValueError(f"{self.name} of {self.path!r} is not 2-D: shape {element.shape}.")
        return element

    def _shape(self) -> tuple[int, int]:
        shape = self.element.attrs["shape"] if self.sparse else self.element.shape
        N, D = (int(size) for size in shape)
        if N == 0 or D == 0:
            raise ValueError(f"{self.name} of {self.path!r} is empty (shape {(N, D)}).")
        return N, D

    def check(self) -> None:
        """Raise a ``ValueError`` if the file was closed, removed or changed since it was
        opened."""
        if not self.file:  # h5py's closed file is false
            raise ValueError(
                f"The DiskRows of {self.path!r} was closed (close(), or the end of its with "
                "block): open the file again with DiskRows.open(path) to read it."
            )
        try:
            stamp = self._stamp()
        except FileNotFoundError:
            raise ValueError(
                f"The file {self.path!r} was removed while being read; restore it and restart."
            ) from None
        if stamp != self.stamp:
            raise ValueError(
                f"The file {self.path!r} changed while being read (during training?): rows read "
                "before and after belong to different data. Restart from the file as it is now."
            )

    def read(self, start: int, stop: int) -> sp.csr_matrix:
        """Rows [start, stop) as CSR [stop - start, D'] (float32 values, int32 columns)."""
        self.check()
        where = f"{self.name} of {self.path!r}, rows {start}..{stop - 1},"
        if not self.sparse:
            return sp.csr_matrix(as_float32(self.element[start:stop], where))
        indptr = np.asarray(self.element["indptr"][start : stop + 1], dtype=np.int64)
        first, last = int(indptr[0]), int(indptr[-1])
        data = as_float32(self.element["data"][first:last], where)
        indices = np.asarray(self.element["indices"][first:last], dtype=np.int32)
        shape = (stop - start, self.shape[1])
        return sp.csr_matrix((data, indices, indptr - first), shape=shape)

    def stored_nnz(self, start: int, stop: int) -> int | None:
        """Entries stored for rows [start, stop) (CSR), ``None`` for a dense matrix."""
        if not self.sparse:
            return None
        self.check()
        indptr = self.element["indptr"]
        return int(indptr[stop]) - int(indptr[start])


class DiskRows:
    """N rows of D columns of an ``.h5ad`` file's matrix, read from disk as they are needed.

    Open one with :meth:`open`. Slices (``rows[a:b]`` [b - a, D]) and :meth:`take` give dense
    float64 rows, through ``transform(dense block, row numbers)`` if one is set (:meth:`view`),
    like :class:`~gpflow_svi_gplvm.rows.sparse.SparseRows`, so every whole-data pass of the
    package (:func:`~.sparse.row_blocks`) reads it unchanged. Values pass through float32.
    """

    def __init__(
        self, source: _Source, columns: np.ndarray | None, transform: Transform | None = None
    ):
        self._source = source
        self.columns = columns
        self.transform = transform
        self.facts: object = None
        """What one pass over these rows learnt, when one was made (a
        :class:`~gpflow_svi_gplvm.rows.facts.RowFacts`)."""

    @classmethod
    def open(
        cls, path: str | os.PathLike, layer: str | None = None, columns: np.ndarray | None = None
    ) -> DiskRows:
        """The matrix ``X`` (``layer=None``) or ``layers/<layer>`` of the ``.h5ad`` file at
        ``path``, keeping the var columns ``columns`` (integer indices [D], default all). It must
        be CSR or dense: CSC is refused, since reading its rows scans it whole."""
        source = _Source(os.fspath(check_path(path, "path")), layer)
        return cls(source, _checked_columns(columns, source.shape[1]))

    @property
    def path(self) -> str:
        return self._source.path

    @property
    def shape(self) -> tuple[int, int]:
        N, D = self._source.shape
        return N, D if self.columns is None else len(self.columns)

    @property
    def ndim(self) -> int:
        return 2

    def __len__(self) -> int:
        return self.shape[0]

    def close(self) -> None:
        """Close the file (every view of it too)."""
        self._source.file.close()

    def __enter__(self) -> DiskRows:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _read(self, start: int, stop: int) -> sp.csr_matrix:
        """Rows [start, stop) of the kept columns as CSR [stop - start, D], one contiguous read."""
        block = self._source.read(start, stop)
        return block if self.columns is None else block[:, self.columns]

    def _served(self, block: np.ndarray, rows: np.ndarray) -> np.ndarray:
        return block if self.transform is None else self.transform(block, rows)

    def __getitem__(self, rows: slice) -> np.ndarray:
        """Dense float64 rows [b, D] of a slice of rows, read a block at a time."""
        if not isinstance(rows, slice):
            raise TypeError("DiskRows is sliced by rows only (rows[a:b]); use take(indices).")
        start, stop, step = rows.indices(len(self))
        if step != 1:
            return self.take(np.arange(start, stop, step))
        stop = max(start, stop)
        out = np.empty((stop - start, self.shape[1]))
        for first in range(start, stop, ROWS_PER_BLOCK):
            last = min(first + ROWS_PER_BLOCK, stop)
            out[first - start : last - start] = self._read(first, last).toarray()
        return self._served(out, np.arange(start, stop))

    def take(self, rows: np.ndarray) -> np.ndarray:
        """Dense float64 rows [B, D] at the row numbers ``rows`` [B] (any order, repeats allowed):
        each run of consecutive distinct rows is one read."""
        rows = np.asarray(rows)
        if rows.ndim != 1 or not (rows.size == 0 or np.issubdtype(rows.dtype, np.integer)):
            raise ValueError(
                f"take needs a 1-D array of row numbers, got {rows.dtype} {rows.shape}."
            )
        if rows.size and (rows.min() < 0 or rows.max() >= len(self)):
            raise ValueError(
                f"Row numbers must lie in [0, {len(self)}), got {rows.min()}..{rows.max()}."
            )
        dense = self._read_rows(rows).toarray().astype(np.float64)
        return self._served(dense, rows)

    def _read_rows(self, rows: np.ndarray) -> sp.csr_matrix:
        """CSR rows [B, D] at the row numbers ``rows`` [B], one read per run of consecutive
        distinct rows (at most ROWS_PER_BLOCK long)."""
        unique, inverse = np.unique(rows, return_inverse=True)
        runs = np.split(unique, np.flatnonzero(np.diff(unique) != 1) + 1) if unique.size else []
        pieces = [
            self._read(int(run[i]), int(run[min(i + ROWS_PER_BLOCK, run.size) - 1]) + 1)
            for run in runs
            for i in range(0, run.size, ROWS_PER_BLOCK)
        ]
        if not pieces:
            return sp.csr_matrix((0, self.shape[1]), dtype=np.float32)
        return sp.vstack(pieces, format="csr")[inverse.reshape(-1)]

    def view(self, transform: Transform) -> DiskRows:
        """The same rows (the same open file) served through ``transform(dense block, rows)``."""
        return DiskRows(self._source, self.columns, transform)

    def row_sums(self) -> np.ndarray:
        """The sum of each row [N] over the kept columns (the library size of count data)."""
        sums = np.empty(len(self))
        for start in range(0, len(self), ROWS_PER_BLOCK):
            block = self._read(start, min(start + ROWS_PER_BLOCK, len(self)))
            sums[start : start + block.shape[0]] = block.astype(np.float64).sum(axis=1).A1
        return sums

    def load(self, start: int, stop: int) -> SparseRows:
        """Rows [start, stop) in memory as :class:`SparseRows` (CSR, float32 values, int32
        columns; row r of it is row start + r here, also for the transform), read a block of
        rows at a time: no dense block is larger than one block (dense files) or made at all."""
        start = check_integer(start, "start", minimum=0)
        stop = check_integer(stop, "stop", minimum=start)
        if stop > len(self):
            raise ValueError(f"stop must be at most the {len(self)} rows, got {stop}.")
        blocks = (
            self._read(first, min(first + ROWS_PER_BLOCK, stop))
            for first in range(start, stop, ROWS_PER_BLOCK)
        )
        capacity = self._source.stored_nnz(start, stop)
        if capacity is None:
            matrix = sp.vstack(list(blocks), format="csr", dtype=np.float32)
        else:
            matrix = _joined(blocks, stop - start, self.shape[1], capacity)
        matrix.indices = matrix.indices.astype(np.int32, copy=False)
        transform = self.transform
        if transform is None:
            return SparseRows(matrix)
        return SparseRows(matrix, lambda block, rows: transform(block, rows + start))

    def batches(
        self,
        batch_size: int,
        seed: int = 0,
        start: int = 0,
        block_rows: int = BLOCK_ROWS,
        buffer_blocks: int = BUFFER_BLOCKS,
    ) -> tf.data.Dataset:
        r"""Endless block-shuffled minibatches ``(idx [B] int64, Y [B, D] float64)``, B =
        min(batch_size, N), read from disk as they are served.

        Epoch e permutes the blocks of ``block_rows`` consecutive rows (stateless, from ``seed``
        and e), groups them ``buffer_blocks`` at a time into buffers, permutes each buffer's rows
        (from ``seed``, e and the buffer) and serves the buffers' rows in turn, cut into
        :math:`\lfloor N / B \rfloor` batches: the :math:`N \bmod B` rows at the epoch's end sit
        it out. Batch k is a function of (``seed``, k) alone: the stream begins at batch
        ``start`` and reads nothing before the buffer that batch begins in, so that a resumed run
        continues it. Each buffer is one contiguous read per block (plus the few rows of the next
        buffer that its last batch runs into), made by tf.data while the previous buffer's
        batches are served. Batches have a fixed size, so a step taking them traces once. A
        failed read (e.g. the file changed) raises ``tf.errors.InvalidArgumentError`` carrying
        the ``ValueError``'s message.
        """
        N, D = self.shape
        plan = ShufflePlan(
            N,
            min(check_integer(batch_size, "batch_size"), N),
            check_integer(block_rows, "block_rows", hint=f"typically {BLOCK_ROWS}"),
            check_integer(buffer_blocks, "buffer_blocks", hint=f"typically {BUFFER_BLOCKS}"),
            check_seed(seed),
        )
        start = check_integer(start, "start", minimum=0)

        def units(epoch: tf.Tensor) -> tf.data.Dataset:
            found = tf.numpy_function(
                lambda e: plan.units(int(e), start), [epoch], tf.int64, stateful=False
            )
            return tf.data.Dataset.from_tensor_slices(tf.reshape(found, [-1, 4]))

        def read(unit: tf.Tensor) -> list[tf.Tensor]:
            kinds = [tf.int64, tf.float32, tf.int32, tf.int64]
            return tf.numpy_function(lambda u: self._read_unit(plan, u), [unit], kinds)

        first_epoch = start // plan.batches_per_epoch
        # prefetch(1): the next buffer is read while this one's batches are served.
        buffers = tf.data.Dataset.counter(first_epoch).flat_map(units).map(read).prefetch(1)
        return buffers.flat_map(self._cut(plan.batch_size)).prefetch(PREFETCH_BATCHES)

    def _read_unit(self, plan: ShufflePlan, unit: np.ndarray) -> tuple[np.ndarray, ...]:
        """The rows of the batches [first, first + count) of an epoch that begin in buffer j,
        ``unit`` = (epoch, j, first, count), in serving order: row numbers [n] and CSR arrays
        (values, columns, row pointers [n + 1])."""
        epoch, number, first, count = (int(value) for value in unit)
        begin, end = plan.layout(epoch)[1][number : number + 2]
        bounds, order = plan.buffer(epoch, number)
        served = order[first * plan.batch_size - begin : (first + count) * plan.batch_size - begin]
        rows = block_rows_of(bounds)[served]
        matrix = sp.vstack([self._read(a, b) for a, b in bounds], format="csr")[served]
        last = (first + count) * plan.batch_size
        if last > end:  # the last batch runs into the next buffers
            later = plan.rows_at(epoch, end, last)
            rows = np.concatenate([rows, later])
            matrix = sp.vstack([matrix, self._read_rows(later)], format="csr")
        return (
            rows.astype(np.int64),
            matrix.data.astype(np.float32),
            matrix.indices.astype(np.int32),
            matrix.indptr.astype(np.int64),
        )

    def _cut(self, batch_size: int) -> Callable[..., tf.data.Dataset]:
        """The function cutting a unit's rows (:meth:`_read_unit`) into batches (idx [B], dense
        Y [B, D] float64, through the transform if one is set)."""
        B, D, transform = batch_size, self.shape[1], self.transform

        def served(Y: np.ndarray, idx: np.ndarray) -> np.ndarray:
            return np.asarray(self._served(Y, idx), np.float64)

        def batch(idx, data, indices, indptr, number) -> tuple[tf.Tensor, tf.Tensor]:
            first = number * B
            ends = indptr[first : first + B + 1]
            rows = tf.repeat(tf.range(B, dtype=tf.int64), ends[1:] - ends[:-1])
            columns = tf.cast(indices[ends[0] : ends[-1]], tf.int64)
            values = tf.cast(data[ends[0] : ends[-1]], tf.float64)
            # A segment sum into the flat [B D] is several times faster than scatter_nd on CPU.
            Y = tf.reshape(tf.math.unsorted_segment_sum(values, rows * D + columns, B * D), [B, D])
            idx = tf.ensure_shape(idx[first : first + B], [B])
            if transform is not None:
                Y = tf.ensure_shape(tf.numpy_function(served, [Y, idx], tf.float64), [B, D])
            return idx, Y

        def cut(idx, data, indices, indptr) -> tf.data.Dataset:
            numbers = tf.data.Dataset.range(tf.size(idx, out_type=tf.int64) // B)
            return numbers.map(lambda number: batch(idx, data, indices, indptr, number))

        return cut


def _checked_columns(columns: np.ndarray | None, num_columns: int) -> np.ndarray | None:
    """``columns`` as int64 indices [D] into ``num_columns`` var columns, or a ``ValueError``."""
    if columns is None:
        return None
    columns = np.asarray(columns)
    if columns.ndim != 1 or columns.size == 0 or not np.issubdtype(columns.dtype, np.integer):
        raise ValueError(
            "columns must be a non-empty 1-D array of integer indices into var, e.g. "
            f"np.flatnonzero(var['highly_variable']); got {columns.dtype} {columns.shape}."
        )
    if columns.min() < 0 or columns.max() >= num_columns:
        raise ValueError(
            f"columns must lie in [0, {num_columns}) (the var axis), got "
            f"{columns.min()}..{columns.max()}."
        )
    return columns.astype(np.int64)


def _joined(
    blocks: Iterator[sp.csr_matrix], num_rows: int, num_columns: int, capacity: int
) -> sp.csr_matrix:
    """CSR blocks [b_i, D] stacked into arrays allocated once for ``capacity`` entries, so that
    the rows never exist twice (as blocks and as the result)."""
    data, indices = np.empty(capacity, np.float32), np.empty(capacity, np.int32)
    indptr = np.zeros(num_rows + 1, np.int64)
    row = nnz = 0
    for block in blocks:
        data[nnz : nnz + block.nnz] = block.data
        indices[nnz : nnz + block.nnz] = block.indices
        indptr[row + 1 : row + 1 + block.shape[0]] = nnz + block.indptr[1:]
        row, nnz = row + block.shape[0], nnz + block.nnz
    # Fewer entries than stored when columns were dropped: shrink in place.
    data.resize(nnz, refcheck=False)
    indices.resize(nnz, refcheck=False)
    return sp.csr_matrix((data, indices, indptr), shape=(num_rows, num_columns))


def _element_name(file: h5py.File, layer: str | None) -> str:
    """Where ``layer`` is in an ``.h5ad`` file: None is ``X``; "raw" is ``raw/X`` (where scanpy
    keeps the unprocessed values) unless the file has a layer of that name."""
    if layer is None:
        return "X"
    if layer == "raw" and "raw" not in file.get("layers", {}):
        return "raw/X"
    return f"layers/{layer}"


def read_frames(path: str | os.PathLike, raw: bool = False) -> tuple[pd.DataFrame, ...]:
    """``obs`` [N rows] and ``var`` [D' rows] of an ``.h5ad`` file, read without its matrices
    (e.g. to choose ``columns`` for :meth:`DiskRows.open` from ``var``); with ``raw``, also
    ``raw/var``, the genes of ``raw/X`` (None when the file has no raw)."""
    try:
        from anndata.io import read_elem
    except ImportError:  # anndata < 0.11
        from anndata.experimental import read_elem
    try:
        file = h5py.File(os.fspath(path), "r")
    except OSError as error:
        raise ValueError(unreadable_h5ad(os.fspath(path), error)) from error
    with file:
        if not {"obs", "var"} <= set(file):
            raise ValueError(
                f"{os.fspath(path)} is an HDF5 file but not an AnnData (.h5ad): it has no obs "
                "and var. Write the cells with adata.write_h5ad(path)."
            )
        frames = read_elem(file["obs"]), read_elem(file["var"])
        if not raw:
            return frames
        return *frames, read_elem(file["raw/var"]) if "raw/var" in file else None


def unreadable_h5ad(path: str, error: OSError) -> str:
    """What to say of the file at ``path`` that h5py cannot open (``error``)."""
    return (
        f"{path} is not a readable AnnData (HDF5) file: it may be truncated, still being "
        f"written, or not an .h5ad at all (h5py: {str(error).splitlines()[0]}). Wait until it "
        "is written in full, or write it again with adata.write_h5ad(path)."
    )
