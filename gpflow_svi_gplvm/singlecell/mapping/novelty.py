r"""How unlike every reference cell a new cell is: a novelty in [0, 1] on the reference's own
scale, for cells of a type the reference never saw.

Such a cell is still placed by its q(x*), at the mode of its posterior under the frozen GP, but
no reference cell lies about it. Its *isolation* is its mean distance to its k nearest reference
cells in the latent space, each dimension in units of the GP's lengthscale there (the distance
the kernel reads; dimensions the GP does not use count for little):

.. math::

    r(x^*) = \frac{1}{k} \sum_{j=1}^{k} \lVert (x^* - x_{(j)}) / \ell \rVert,

:math:`x_{(j)}` the j-th nearest of the reference cells' q(x) means, :math:`\ell` [Q] the
lengthscales. Its *novelty* is the share of reference cells less isolated than it, each
reference cell's own isolation measured among the other reference cells (itself left out):

.. math::

    \mathrm{novelty}(x^*) = \frac{1}{S} \sum_{s=1}^{S} [\, r_{-s}(x_s) < r(x^*) \,]

over the S reference cells: those of the model's latent table a saved model keeps (up to
:data:`~gpflow_svi_gplvm.prediction.new_row_model.MAX_CANDIDATES` training cells drawn at
random, the same before and after ``save``/``load``). A query cell like the
reference's cells then has a novelty spread evenly over [0, 1], whatever the reference and the
query, and one above 0.99 is more isolated than 99% of the reference's cells. Measured by
holding a cell type out of a reference (``benchmarks/results/mapping.md``).
"""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

__all__ = ["NEIGHBOURS", "Novelty"]

NEIGHBOURS = 15
"""k, the reference cells a cell's isolation averages over."""


class Novelty:
    """The novelty of new cells (see the module) against the S reference cells' q(x) ``means``
    [S, Q] under ``lengthscales`` [Q]; ``neighbours``: k."""

    def __init__(self, means: np.ndarray, lengthscales: np.ndarray, neighbours: int = NEIGHBOURS):
        if len(means) < 2:
            raise ValueError(
                f"A novelty needs two or more reference cells to compare with, got {len(means)}."
            )
        self.lengthscales = np.asarray(lengthscales, dtype=np.float64)
        points = np.asarray(means, dtype=np.float64) / self.lengthscales
        self.neighbours = min(neighbours, len(points) - 1)
        self.tree = cKDTree(points)
        # Each reference cell's nearest is itself, at distance 0: the next k are the others'.
        found = self.tree.query(points, self.neighbours + 1)[0]
        self.reference_isolation = np.sort(found[:, 1:].mean(axis=1))
        """The reference cells' own isolation [S], in increasing order."""

    def isolation(self, means: np.ndarray) -> np.ndarray:
        """r [n] of cells whose q(x*) ``means`` [n, Q] are given."""
        found = self.tree.query(np.asarray(means) / self.lengthscales, self.neighbours)[0]
        return np.reshape(found, (len(means), -1)).mean(axis=1)

    def __call__(self, means: np.ndarray) -> np.ndarray:
        """The novelty [n] in [0, 1] of cells whose q(x*) ``means`` [n, Q] are given."""
        below = np.searchsorted(self.reference_isolation, self.isolation(means), side="left")
        return below / len(self.reference_isolation)
