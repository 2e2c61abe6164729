"""Where the cells' latents start: a PCA of their log-normalised counts with what the covariates
explain taken out, so that the latents start from what they are meant to end with."""

from __future__ import annotations

from typing import cast

import numpy as np

from ...components.pca import pca_latents, pca_sample
from ...distributed.workers import Workers
from ...rows.sparse import RowReader, row_blocks

__all__ = ["initial_latents"]


def initial_latents(
    rows: RowReader,
    latent_dim: int,
    *,
    counts: bool = True,
    sizes: np.ndarray | None = None,
    covariates: np.ndarray | None = None,
    seed: int = 0,
    workers: Workers | None = None,
    cells: np.ndarray | None = None,
) -> np.ndarray:
    """PCA scores [N, Q] of :math:`L = \\log(1 + y / s)` (of y itself unless ``counts``), s the
    size factors [N] (1 without), with each gene's least-squares fit on the covariates C [N, R]
    (and a constant) taken out: :math:`L - [1, C]\\,\\hat\\beta`, :math:`\\hat\\beta` fitted to the
    rows the PCA finds its directions from (all of them, or its sample of
    :data:`~gpflow_svi_gplvm.components.pca.PCA_SAMPLE_ROWS` rows when there are more: every row
    is then read once, for its scores). With ``workers``, of this worker's ``cells`` [n], from
    sums over every worker's cells."""
    workers = workers or Workers()
    factors = np.ones(rows.shape[0]) if sizes is None else sizes
    shard = cells if workers.count > 1 else None  # this worker's rows among all N

    def normalised(block: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.log1p(block / factors[index, None]) if counts else block

    transform = normalised
    if covariates is not None:
        design = np.column_stack([np.ones(rows.shape[0]), covariates])  # [N, R + 1]
        effects = _covariate_effects(rows.view(normalised), design, seed, workers, shard)

        def transform(block: np.ndarray, index: np.ndarray) -> np.ndarray:
            return normalised(block, index) - design[index] @ effects

    # pca_latents reads a block of rows at a time (row_blocks), which SparseRows serves.
    view = cast(np.ndarray, rows.view(transform))
    return pca_latents(view, latent_dim, seed=seed, rows=shard, workers=workers)


def _covariate_effects(
    normalised: RowReader,
    design: np.ndarray,
    seed: int,
    workers: Workers,
    shard: np.ndarray | None,
) -> np.ndarray:
    """The least-squares effects [R + 1, D] of the ``design`` [n, R + 1] on the ``normalised``
    rows [n, D], over the rows of every worker in the PCA's sample (:func:`pca_sample`)."""
    num_data = int(workers.sum(design.shape[0])) if shard is not None else design.shape[0]
    sample = pca_sample(normalised, num_data, shard, seed)
    index = getattr(sample, "index", None)  # the sampled rows among this worker's
    design = design if index is None else design[index]
    moments = np.zeros((design.shape[1], normalised.shape[1]))  # C^T L, a block at a time
    for design_block, block in zip(row_blocks(design), row_blocks(sample)):
        moments += design_block.T @ block
    # pinv: a one-hot batch beside the constant is collinear with it.
    gram, moments = workers.sum(design.T @ design), workers.sum(moments)
    return np.linalg.pinv(gram) @ moments
