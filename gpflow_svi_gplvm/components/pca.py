"""The principal components where latents start: a NaN-aware PCA of the rows, read a block at a
time, its directions found from a sample of the rows when they are many."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..distributed.workers import Workers
from ..rows.facts import read_facts
from ..rows.sparse import row_blocks

__all__ = ["pca_latents", "pca_sample", "PCA_SAMPLE_ROWS", "PCA_SAMPLE_RUN"]


def pca_latents(
    Y: np.ndarray,
    latent_dim: int,
    seed: int = 0,
    rows: np.ndarray | None = None,
    workers: Workers | None = None,
) -> np.ndarray:
    r"""Principal-component scores [N, Q] of Y [N, D] with NaNs imputed by their column means:

    .. math::

        X = (\tilde Y - \bar y) V_Q / s_1,

    where :math:`\tilde Y` is the imputed Y, :math:`\bar y` [D] its column means, :math:`V_Q`
    [D, Q] the leading Q right singular vectors and :math:`s_1` the standard deviation of the
    first score, so the first dimension has unit variance like the N(0, I) prior and the others
    keep their relative scale. Dimensions beyond the rank of Y
    are filled with small noise (sd 0.01), so that no two latent dimensions start identical.

    V_Q comes from a randomised subspace iteration (Halko et al., 2011): Q + 10 directions, 5
    products with :math:`\tilde Y_c^\top \tilde Y_c` (:math:`\tilde Y_c` centred) in row blocks,
    then the SVD of :math:`\tilde Y_c` projected on them from its QR (no squared singular values):
    O(N D Q) time, O((N + D) Q) memory besides Y, exact up to rounding when min(N, D) <= Q + 10.
    Signs are fixed: each singular vector's largest entry is positive. With more than
    :data:`PCA_SAMPLE_ROWS` rows, :math:`\bar y` and V_Q are those of a sample of that many rows
    (runs of :data:`PCA_SAMPLE_RUN` consecutive rows at seeded places, so that rows on disk are
    read in runs), and every row is read once more for its scores: about 10 passes over a large
    Y become one. With ``workers``, Y [n, D] is this worker's rows (``rows`` [n] among all N,
    whose sample and noise are as on one machine) and every pass over the data a sum over
    workers (the QR stacks the workers' R factors).
    """
    workers = workers or Workers()
    Y = np.asarray(Y, dtype=float) if isinstance(Y, (list, tuple)) else Y
    num_data = int(workers.sum(Y.shape[0])) if rows is not None else Y.shape[0]
    sample = pca_sample(Y, num_data, rows, seed)
    column_means, vt = _principal_directions(sample, latent_dim, seed, workers)

    scores = _projected(Y, column_means, vt.T)
    moments = [scores[:, 0].sum(), np.square(scores[:, 0]).sum()] if len(vt) else [0.0, 0.0]
    total, squares = workers.sum(moments)
    scale = np.sqrt(max(squares / num_data - (total / num_data) ** 2, 0.0))
    scores /= scale if scale > 0 else 1.0  # in place: [N, Q] may be most of memory
    missing = latent_dim - scores.shape[1]
    if missing > 0:
        noise = 0.01 * np.random.default_rng(seed).standard_normal((num_data, missing))
        scores = np.concatenate([scores, noise if rows is None else noise[rows]], axis=1)
    return scores


PCA_SAMPLE_ROWS = 2**15
r"""Rows beyond which :func:`pca_latents` finds the principal directions from a sample of this
many rows (a starting point: their sampling error, of order :math:`1 / \sqrt{32768}`, is far
below what training moves the latents)."""

PCA_SAMPLE_RUN = 512
"""Consecutive rows of one piece of :func:`pca_latents`' sample (64 pieces)."""


def pca_sample(Y, num_data: int, rows: np.ndarray | None, seed: int):
    """The rows of Y [n, D] (of all N = ``num_data``; ``rows`` [n] their numbers among them)
    in :func:`pca_latents`' sample: Y itself when N <= PCA_SAMPLE_ROWS, else a reader of the
    sampled rows Y holds (runs at seeded places of the N rows), served a block at a time."""
    if num_data <= PCA_SAMPLE_ROWS:
        return Y
    runs = -(-num_data // PCA_SAMPLE_RUN)
    rng = np.random.default_rng([seed, PCA_SAMPLE_ROWS])
    starts = np.sort(rng.choice(runs, size=PCA_SAMPLE_ROWS // PCA_SAMPLE_RUN, replace=False))
    chosen = (starts[:, None] * PCA_SAMPLE_RUN + np.arange(PCA_SAMPLE_RUN)).reshape(-1)
    chosen = chosen[chosen < num_data]
    local = chosen if rows is None else np.flatnonzero(np.isin(rows, chosen))
    return _RowSubset(Y, local)


class _RowSubset:
    """Rows ``index`` [k] of Y [N, D], read when sliced (``subset[a:b]`` [b - a, D])."""

    def __init__(self, Y, index: np.ndarray):
        self.Y, self.index = Y, index
        self.shape = (len(index), Y.shape[1])

    def __getitem__(self, rows: slice) -> np.ndarray:
        picked = self.index[rows]
        if isinstance(self.Y, np.ndarray):
            return self.Y[picked]
        if hasattr(self.Y, "sparse_read"):  # a variable: read the rows alone, as row_blocks does
            return self.Y.sparse_read(picked).numpy()
        return self.Y.take(picked)  # SparseRows, DiskRows: a run of rows is one read


def _principal_directions(
    Y, latent_dim: int, seed: int, workers: Workers
) -> tuple[np.ndarray, np.ndarray]:
    """Column means [D] of Y [n, D] (NaN imputed, of all ``workers``' rows) and its leading
    right singular vectors centred, as rows [min(Q, rank), D], signs fixed."""
    column_means = read_facts(Y, workers).mean
    num_data, data_dim = int(workers.sum(Y.shape[0])), Y.shape[1]

    def gram_times(matrix: np.ndarray) -> np.ndarray:  # centred Y^T centred Y @ matrix [D, k]
        product = np.zeros((data_dim, matrix.shape[1]))
        for block in row_blocks(Y):
            block = _centred(block, column_means)
            product += block.T @ (block @ matrix)
        return workers.sum(product)

    basis = _subspace(gram_times, data_dim, min(latent_dim + 10, num_data, data_dim), seed)
    singular_values, vt = _projected_svd(_projected(Y, column_means, basis), workers)
    rank = int(np.sum(singular_values > singular_values[0] * 1e-10)) if singular_values[0] else 0
    vt = vt[: min(latent_dim, rank)] @ basis.T
    vt *= np.sign(vt[np.arange(len(vt)), np.argmax(np.abs(vt), axis=1)])[:, None]
    return column_means, vt


def _projected(Y, column_means: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """Y [n, D], NaN imputed by the ``column_means`` [D] and centred, times ``basis`` [D, k]:
    [n, k], a block of rows at a time."""
    projected, first = np.zeros((Y.shape[0], basis.shape[1])), 0
    for block in row_blocks(Y):
        projected[first : first + len(block)] = _centred(block, column_means) @ basis
        first += len(block)
    return projected


def _centred(block: np.ndarray, column_means: np.ndarray) -> np.ndarray:
    """A block of rows [b, D] less the ``column_means`` [D] (finite), a gap's value imputed by
    its column's mean: 0 once centred."""
    centred = block - column_means
    centred[np.isnan(centred)] = 0.0
    return centred


def _subspace(
    gram_times: Callable[[np.ndarray], np.ndarray], data_dim: int, width: int, seed: int
) -> np.ndarray:
    """An orthonormal basis [D, width] of the leading right singular subspace: 5 products of a
    random start with the Gram matrix (``gram_times``), each orthonormalised."""
    basis = np.random.default_rng(seed).standard_normal((data_dim, width))
    for _ in range(5):
        basis = np.linalg.qr(gram_times(basis))[0]
    return basis


def _projected_svd(projected: np.ndarray, workers: Workers) -> tuple[np.ndarray, np.ndarray]:
    """Singular values [k] and right singular vectors (rows of [k, k]) of all workers' rows of
    ``projected`` [n, k] together, from the R factor of the QR of their stacked R factors."""
    width = projected.shape[1]
    factor = np.zeros((width, width))
    local = np.linalg.qr(projected, mode="r")
    factor[: len(local)] = local
    stacked = workers.stack(factor).reshape(-1, width)
    _, singular_values, vt = np.linalg.svd(np.linalg.qr(stacked, mode="r"))
    return singular_values, vt
