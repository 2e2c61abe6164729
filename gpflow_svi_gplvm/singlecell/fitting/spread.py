"""Whether an embedding collapsed: how far q(x)'s means spread across the cells, per latent
dimension, against each cell's own posterior standard deviation and the prior's (1)."""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator

import numpy as np

from ...distributed.workers import Workers

__all__ = ["EmbeddingSpread", "SPREAD_FLOOR", "SIGNAL_FLOOR"]

SPREAD_FLOOR = 1e-2
"""A latent dimension whose means spread less than this (a hundredth of the prior's standard
deviation) across the cells tells them apart in nothing."""
SIGNAL_FLOOR = 0.1
"""... nor one whose means spread less than this fraction of the cells' own posterior standard
deviation in that dimension (their positions are noise)."""


class EmbeddingSpread:
    """The sums over the blocks of q(x) a worker writes (means and variances [b, Q]), per latent
    dimension: the cells, the means' sum and sum of squares, and the variances' sum."""

    def __init__(self, latent_dim: int) -> None:
        self.sums = np.zeros((4, latent_dim))

    def tracked(
        self, blocks: Iterable[tuple[np.ndarray, np.ndarray]]
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """``blocks`` as they are, added to the sums as they pass."""
        for mean, variance in blocks:
            cells = np.full(mean.shape[1], float(len(mean)))
            self.sums += np.stack([cells, mean.sum(0), (mean**2).sum(0), variance.sum(0)])
            yield mean, variance

    def collapsed(self, workers: Workers | None = None) -> str | None:
        """Over every worker's cells (every worker calls it): a sentence saying how the embedding
        collapsed, when no latent dimension's means spread at least ``SPREAD_FLOOR`` and
        ``SIGNAL_FLOOR`` times the cells' posterior standard deviation; else None."""
        count, total, squares, variances = (workers or Workers()).sum(self.sums)
        count = np.maximum(count, 1)
        spread = np.sqrt(np.maximum(squares / count - (total / count) ** 2, 0.0))
        noise = np.sqrt(variances / count)
        if np.any(spread >= np.maximum(SPREAD_FLOOR, SIGNAL_FLOOR * noise)):
            return None
        widest = int(np.argmax(spread))
        return (
            f"The embedding collapsed: across the {int(count[0])} cells the means of q(x) spread "
            f"at most {spread[widest]:.2g} in any latent dimension (dimension {widest}), against "
            f"a posterior standard deviation of {noise[widest]:.2g} per cell there and the "
            "prior's 1, so it does not tell the cells apart. It is written all the same; try "
            "model='bsvi' (a latent table, not an encoder), more iterations or a lower "
            "learning_rate."
        )

    def warn_if_collapsed(self, workers: Workers | None = None) -> bool:
        """Warn (naming how) when :meth:`collapsed`; whether it did."""
        message = self.collapsed(workers)
        if message is not None:
            warnings.warn(message, stacklevel=4)  # the caller of SingleCellGPLVM.fit
        return message is not None
