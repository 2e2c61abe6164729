"""Where the cells' latents start: a PCA of their log-normalised counts with what the covariates
explain taken out, so that the latents start from what they are meant to end with."""

from __future__ import annotations

from typing import cast

import numpy as np

from ..components.initialisation import pca_latents
from ..distributed.workers import Workers
from ..rows.sparse import RowReader, row_blocks

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
    (and a constant) taken out: :math:`L - [1, C]\\,\\hat\\beta`. With ``workers``, of this
    worker's ``cells`` [n], from sums over every worker's cells."""
    workers = workers or Workers()
    factors = np.ones(rows.shape[0]) if sizes is None else sizes

    def normalised(block: np.ndarray, index: np.ndarray) -> np.ndarray:
        return np.log1p(block / factors[index, None]) if counts else block

    transform = normalised
    if covariates is not None:
        design = np.column_stack([np.ones(rows.shape[0]), covariates])  # [N, R + 1]
        moments = np.zeros((design.shape[1], rows.shape[1]))  # C^T L, a block at a time
        for design_block, block in zip(row_blocks(design), row_blocks(rows.view(normalised))):
            moments += design_block.T @ block
        # pinv: a one-hot batch beside the constant is collinear with it.
        gram, moments = workers.sum(design.T @ design), workers.sum(moments)
        effects = np.linalg.pinv(gram) @ moments  # [R + 1, D]

        def transform(block: np.ndarray, index: np.ndarray) -> np.ndarray:
            return normalised(block, index) - design[index] @ effects

    # pca_latents reads a block of rows at a time (row_blocks), which SparseRows serves.
    view = cast(np.ndarray, rows.view(transform))
    if workers.count == 1:
        return pca_latents(view, latent_dim, seed=seed)
    return pca_latents(view, latent_dim, seed=seed, rows=cells, workers=workers)
