"""DiskRows reads an .h5ad file's rows as SparseRows holds them in memory, and serves
block-shuffled batches that are a function of (seed, batch number)."""

from __future__ import annotations

import os
import shutil
import tempfile

import anndata as ad
import h5py
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from gpflow_svi_gplvm.rows.h5ad import DiskRows, read_frames
from gpflow_svi_gplvm.rows.sparse import SparseRows, row_blocks

N, D, B, BLOCK, BUFFER = 600, 25, 64, 50, 4


def _counts(num_rows: int, seed: int = 0) -> sp.csr_matrix:
    rng = np.random.default_rng(seed)
    dense = rng.poisson(2.0, (num_rows, D)) * (rng.random((num_rows, D)) < 0.2)
    return sp.csr_matrix(dense.astype(np.float32))


def _write(path, X: sp.csr_matrix, **layers) -> str:
    obs = pd.DataFrame({"batch": pd.Categorical(np.arange(X.shape[0]) % 3)})
    obs.index = [f"cell{i}" for i in range(X.shape[0])]
    var = pd.DataFrame(index=[f"gene{j}" for j in range(X.shape[1])])
    ad.AnnData(X=X, obs=obs, var=var, layers=layers).write_h5ad(path)
    return str(path)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """The file and its matrices in memory: X (CSR), layers counts (CSR), dense and csc."""
    X, counts = _counts(N), _counts(N, seed=1)
    path = tmp_path_factory.mktemp("disk_rows") / "cells.h5ad"
    _write(path, X, counts=counts, dense=counts.toarray(), csc=counts.tocsc())
    return str(path), X.toarray().astype(np.float64), counts.toarray().astype(np.float64)


@pytest.fixture
def copy(data, tmp_path) -> str:
    """A copy of the file of its own, to change or remove."""
    return shutil.copy(data[0], tmp_path / "copy.h5ad")


def _epoch_order(num_rows, batch_size, block, buffer, seed, epoch) -> np.ndarray:
    """The row numbers an epoch serves [num_rows // B, B], built from the definition: blocks
    permuted, ``buffer`` at a time, each buffer's rows (blocks ascending) permuted."""
    num_blocks = -(-num_rows // block)
    blocks = np.random.default_rng([seed, epoch, 0]).permutation(num_blocks)
    served = []
    for number, first in enumerate(range(0, num_blocks, buffer)):
        chosen = np.sort(blocks[first : first + buffer])
        rows = np.concatenate(
            [np.arange(b * block, min(b * block + block, num_rows)) for b in chosen]
        )
        served.append(rows[np.random.default_rng([seed, epoch, 1, number]).permutation(rows.size)])
    whole = num_rows // batch_size
    return np.concatenate(served)[: whole * batch_size].reshape(whole, batch_size)


def _take(dataset: tf.data.Dataset, count: int) -> tuple[np.ndarray, np.ndarray]:
    pairs = [(idx.numpy(), Y.numpy()) for idx, Y in dataset.take(count)]
    return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


def test_slices_take_and_row_sums_match_sparse_rows(data):
    path, X, _ = data
    rows, reference = DiskRows.open(path), SparseRows.from_matrix(sp.csr_matrix(X))
    assert rows.shape == (N, D) and rows.ndim == 2 and len(rows) == N
    for part in (slice(0, N), slice(17, 333), slice(590, 700), slice(5, 400, 7), slice(9, 9)):
        np.testing.assert_array_equal(rows[part], reference[part])
        assert rows[part].dtype == np.float64
    picks = np.array([599, 3, 4, 5, 3, 250, 0])
    np.testing.assert_array_equal(rows.take(picks), reference.take(picks))
    np.testing.assert_array_equal(rows.row_sums(), reference.row_sums())
    np.testing.assert_array_equal(np.vstack(list(row_blocks(rows, 128))), X)


def test_layer_columns_and_dense_storage(data):
    path, _, counts = data
    columns = np.array([7, 0, 24, 3])
    for layer in ("counts", "dense"):
        rows = DiskRows.open(path, layer=layer, columns=columns)
        assert rows.shape == (N, 4)
        np.testing.assert_array_equal(rows[100:250], counts[100:250][:, columns])
        np.testing.assert_array_equal(rows.take([5, 1, 5]), counts[[5, 1, 5]][:, columns])
        np.testing.assert_array_equal(rows.row_sums(), counts[:, columns].sum(axis=1))
        np.testing.assert_array_equal(rows.load(10, 590)[0:580], counts[10:590][:, columns])


def test_load_is_csr_of_the_rows(data):
    path, X, _ = data
    loaded = DiskRows.open(path).load(123, 577)
    assert isinstance(loaded, SparseRows) and sp.isspmatrix_csr(loaded.matrix)
    assert loaded.matrix.data.dtype == np.float32 and loaded.matrix.indices.dtype == np.int32
    np.testing.assert_array_equal(loaded.matrix.toarray(), X[123:577])
    assert DiskRows.open(path).load(5, 5).shape == (0, D)


def test_views_see_global_row_numbers(data):
    path, X, _ = data

    def transform(block, rows):
        return np.log1p(block) + rows[:, None]

    rows = DiskRows.open(path).view(transform)
    expected = np.log1p(X) + np.arange(N)[:, None]
    np.testing.assert_allclose(rows[40:90], expected[40:90])
    np.testing.assert_allclose(rows.take([9, 2]), expected[[9, 2]])
    np.testing.assert_allclose(rows.load(300, 400)[0:100], expected[300:400])
    idx, Y = _take(rows.batches(B, block_rows=BLOCK, buffer_blocks=BUFFER), 3)
    np.testing.assert_allclose(Y, expected[idx])


def test_frames_are_read_without_the_matrix(data):
    obs, var = read_frames(data[0])
    assert list(obs["batch"].astype(int)[:4]) == [0, 1, 2, 0] and len(obs) == N
    assert list(var.index[:2]) == ["gene0", "gene1"]


def test_bad_input_is_refused(data, tmp_path):
    path = data[0]
    with pytest.raises(ValueError, match="stored CSC.*Write it CSR"):
        DiskRows.open(path, layer="csc")
    with pytest.raises(ValueError, match="no layer 'spliced'.*'counts'"):
        DiskRows.open(path, layer="spliced")
    for nothing in (None, "", 7):
        with pytest.raises(ValueError, match="path must be a non-empty str or pathlib.Path"):
            DiskRows.open(nothing)
    with pytest.raises(ValueError, match="There is no file"):
        DiskRows.open(tmp_path / "missing.h5ad")
    (tmp_path / "notes.h5ad").write_text("not HDF5")
    with pytest.raises(
        ValueError, match=r"not a readable AnnData \(HDF5\) file: it may be truncated"
    ):
        DiskRows.open(tmp_path / "notes.h5ad")
    for columns in ([0, D], [0.5], [[1, 2]]):
        with pytest.raises(ValueError, match="columns must"):
            DiskRows.open(path, columns=np.array(columns))
    rows = DiskRows.open(path)
    with pytest.raises(ValueError, match=r"Row numbers must lie in \[0, 600\)"):
        rows.take([N])
    with pytest.raises(ValueError, match="stop must be at most"):
        rows.load(0, N + 1)
    with pytest.raises(ValueError, match="block_rows must be a positive integer"):
        rows.batches(B, block_rows=0)


def test_a_closed_file_is_named_when_read_again(data):
    for layer in (None, "dense"):
        with DiskRows.open(data[0], layer=layer) as rows:
            first = rows[0:2]
        for read in (lambda: rows[0:2], lambda: rows.take([1]), rows.row_sums):
            with pytest.raises(ValueError, match="was closed .*DiskRows.open\\(path\\)"):
                read()
    np.testing.assert_allclose(first, data[2][0:2])


def test_a_truncated_file_or_hdf5_without_cells_is_named(data, tmp_path):
    truncated = tmp_path / "truncated.h5ad"
    truncated.write_bytes(open(data[0], "rb").read()[:5000])
    for read in (DiskRows.open, read_frames):
        with pytest.raises(ValueError, match="not a readable AnnData .* may be truncated, still"):
            read(truncated)
    with h5py.File(tmp_path / "plain.h5", "w") as file:
        file["X"] = np.ones((2, 2))
    with pytest.raises(ValueError, match="an HDF5 file but not an AnnData .*no obs and var"):
        read_frames(tmp_path / "plain.h5")


def test_a_changed_or_removed_file_stops_reading(data, copy, tmp_path):
    rows = DiskRows.open(copy)
    batches = iter(rows.batches(B, block_rows=BLOCK, buffer_blocks=1))
    next(batches)
    status = os.stat(copy)
    os.utime(copy, ns=(status.st_atime_ns, status.st_mtime_ns + 10**9))
    with pytest.raises(ValueError, match="changed while being read"):
        rows[0:10]
    with pytest.raises(tf.errors.InvalidArgumentError, match="changed while being read"):
        for _ in range(N // B):
            next(batches)
    replaced = DiskRows.open(copy)
    os.replace(_write(tmp_path / "new.h5ad", _counts(N, seed=5)), copy)
    with pytest.raises(ValueError, match="changed while being read"):
        replaced.take([1])
    removed = DiskRows.open(copy)
    os.remove(copy)
    with pytest.raises(ValueError, match="was removed"):
        removed.row_sums()


def test_batches_follow_block_shuffling_and_cover_each_row_once_an_epoch(data):
    path, X, _ = data
    rows = DiskRows.open(path)
    dataset = rows.batches(B, seed=3, block_rows=BLOCK, buffer_blocks=BUFFER)
    assert dataset.element_spec[0].shape == (B,) and dataset.element_spec[1].shape == (B, D)
    per_epoch = N // B
    idx, Y = _take(dataset, 2 * per_epoch)
    np.testing.assert_array_equal(Y, X[idx])
    for epoch in range(2):
        served = idx[epoch * per_epoch : (epoch + 1) * per_epoch]
        np.testing.assert_array_equal(served, _epoch_order(N, B, BLOCK, BUFFER, 3, epoch))
        assert np.unique(served).size == per_epoch * B
    # Not sequential: a batch mixes rows of about BUFFER blocks.
    assert min(np.unique(batch // BLOCK).size for batch in idx) >= BUFFER - 1
    again, _ = _take(rows.batches(B, seed=3, block_rows=BLOCK, buffer_blocks=BUFFER), per_epoch)
    np.testing.assert_array_equal(again, idx[:per_epoch])
    other, _ = _take(rows.batches(B, seed=4, block_rows=BLOCK, buffer_blocks=BUFFER), 2)
    assert not np.array_equal(other, idx[:2])
    (whole,), _ = _take(rows.batches(10 * N), 1)
    np.testing.assert_array_equal(np.sort(whole), np.arange(N))


def test_resumed_batches_repeat_the_run_without_reading_skipped_buffers(data, monkeypatch):
    path = data[0]
    rows = DiskRows.open(path)
    run, _ = _take(rows.batches(B, seed=1, block_rows=BLOCK, buffer_blocks=BUFFER), 25)
    for start in (1, 6, 9, 17):
        resumed, _ = _take(
            rows.batches(B, seed=1, start=start, block_rows=BLOCK, buffer_blocks=BUFFER), 3
        )
        np.testing.assert_array_equal(resumed, run[start : start + 3])
    reads: list[tuple[int, int]] = []
    read = rows._source.read
    monkeypatch.setattr(rows._source, "read", lambda a, b: reads.append((a, b)) or read(a, b))
    # Batch 7 of epoch 0 lies in its third (last) buffer: the first reads are that buffer's
    # blocks (ascending), the two before it are not read; later reads belong to epoch 1.
    start = 7
    assert 2 * BUFFER * BLOCK <= start * B < 3 * BUFFER * BLOCK
    _take(rows.batches(B, seed=1, start=start, block_rows=BLOCK, buffer_blocks=BUFFER), 1)
    order = np.random.default_rng([1, 0, 0]).permutation(N // BLOCK)
    third = [(b * BLOCK, b * BLOCK + BLOCK) for b in np.sort(order[2 * BUFFER : 3 * BUFFER])]
    assert reads[:BUFFER] == third


@settings(max_examples=15, deadline=None)
@given(
    num_rows=st.integers(1, 120),
    batch_size=st.integers(1, 40),
    block=st.integers(1, 30),
    buffer=st.integers(1, 5),
)
def test_each_epoch_serves_floor_n_over_b_batches_without_repeats(
    num_rows, batch_size, block, buffer
):
    X = _counts(num_rows, seed=num_rows)
    with tempfile.TemporaryDirectory() as folder:
        rows = DiskRows.open(_write(os.path.join(folder, "cells.h5ad"), X))
        size = min(batch_size, num_rows)
        per_epoch = num_rows // size
        dataset = rows.batches(batch_size, seed=7, block_rows=block, buffer_blocks=buffer)
        idx, Y = _take(dataset, 2 * per_epoch)
        rows.close()
    assert idx.shape == (2 * per_epoch, size)
    np.testing.assert_array_equal(Y, X.toarray()[idx])
    for epoch in range(2):
        served = idx[epoch * per_epoch : (epoch + 1) * per_epoch].reshape(-1)
        assert np.unique(served).size == per_epoch * size
        np.testing.assert_array_equal(
            served, _epoch_order(num_rows, size, block, buffer, 7, epoch).reshape(-1)
        )


def test_a_csr_matrix_stored_as_kept_is_held_in_place_and_still_checked():
    counts = _counts(N)
    counts.indices = counts.indices.astype(np.int32)
    seen = []
    rows = SparseRows.from_matrix(counts, None, lambda block, first: seen.append(first))
    assert rows.matrix is counts and seen == list(range(0, N, 4096))  # no copy; every block seen
    np.testing.assert_array_equal(rows[:], counts.toarray())
    for other in (counts.astype(np.float64), counts[:, ::-1]):  # another dtype, other columns
        copied = SparseRows.from_matrix(other, None)
        assert copied.matrix is not other and copied.matrix.dtype == np.float32
        np.testing.assert_array_equal(copied[:], other.toarray())
    picked = SparseRows.from_matrix(counts, np.array([3, 1]))
    np.testing.assert_array_equal(picked[:], counts[:, [3, 1]].toarray())

    def refuse(block, first):
        raise ValueError("a bad count")

    with pytest.raises(ValueError, match="a bad count"):
        SparseRows.from_matrix(counts, None, refuse)


def test_a_count_float32_cannot_hold_is_refused_in_memory_and_on_disk(tmp_path):
    """2^24 + 1 would be read as 2^24: an integer matrix holding it is refused where it is read
    (exactly representable large integers, and large fractions, are read as they are)."""
    counts = _counts(40).astype(np.int64)
    counts[7, 3] = 2**24 + 1
    for read in (
        lambda: SparseRows.from_matrix(counts),
        lambda: DiskRows.open(_write(tmp_path / "big.h5ad", counts)).take(np.arange(40)),
    ):
        with pytest.raises(ValueError, match=r"holds the integer 16777217 .* as 16777216"):
            read()
    fine = counts.astype(np.float64)
    fine[7, 3] = 2**25  # a float32 exactly
    fine[8, 3] = 1.5e9 + 0.25  # not an integer: float32's relative precision is kept
    rows = SparseRows.from_matrix(sp.csr_matrix(fine))
    assert rows[7:8][0, 3] == 2**25 and rows[8:9][0, 3] == np.float32(1.5e9 + 0.25)
