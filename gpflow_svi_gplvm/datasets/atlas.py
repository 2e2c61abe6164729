r"""A simulated single-cell atlas: gamma-Poisson counts of cell types seen through batches.

For cell n of type :math:`t_n` in batch :math:`b_n` and gene d,

.. math::

    \log p_{nd} = \beta_d + \delta_{t_n d} + \gamma_{b_n d}, \quad
    \mu_{nd} = l_n \frac{p_{nd}}{\sum_{d'} p_{nd'}}, \quad
    \lambda_{nd} \sim \mathrm{Gamma}(1/\phi_d,\ \phi_d \mu_{nd}), \quad
    y_{nd} \sim \mathrm{Poisson}(\lambda_{nd}),

so :math:`y_{nd}` is negative binomial with mean :math:`\mu_{nd}` and variance
:math:`\mu + \phi_d \mu^2`. :math:`\beta_d \sim N(0, 1.5^2)` are the genes' base levels; each
cell type differentially expresses its own ``de_fraction`` of the genes,
:math:`\delta \sim \pm\,\mathrm{LogNormal}(\log \text{de\_scale}, 0.4)`; each batch shifts every
gene, :math:`\gamma_{bd} \sim N(0, \text{batch\_scale}^2)`, and has its own library sizes,
:math:`\log l_n \sim N(\log L_{b_n}, 0.35^2)` with :math:`L_b` spread over a factor of two around
``library_size``; dispersions :math:`\phi_d \sim \mathrm{LogNormal}(\log 0.3, 0.5)`. Cells are
drawn in blocks into a CSR matrix, so a million cells never pass through a dense matrix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..options import takes_options_of
from ..validation import check_integer

__all__ = ["SimulatedAtlas", "simulate_atlas", "atlas_blocks"]


@dataclass
class SimulatedAtlas:
    """Counts and labels of a simulated atlas (:func:`simulate_atlas`)."""

    counts: sp.csr_matrix
    """[N, D] float32 counts."""
    cell_type: np.ndarray
    """[N] int: the type of each cell."""
    batch: np.ndarray
    """[N] int: the batch of each cell."""
    library_size: np.ndarray
    """[N] the library size l_n each cell was drawn with (its expected total count)."""


def atlas_blocks(
    num_cells: int = 10_000,
    num_genes: int = 2000,
    num_types: int = 7,
    num_batches: int = 2,
    library_size: float = 2000.0,
    de_fraction: float = 0.1,
    de_scale: float = 1.5,
    batch_scale: float = 0.5,
    seed: int = 0,
    block: int = 10_000,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, Iterator[sp.csr_matrix]]:
    """The cell types [N], batches [N] and library sizes [N] of :func:`simulate_atlas`'s cells,
    and their counts as CSR blocks of ``block`` rows [block, D], drawn as they are consumed, so
    that an atlas larger than memory can be written to disk a block at a time."""
    num_cells, num_genes = (
        check_integer(num_cells, "num_cells"),
        check_integer(num_genes, "num_genes"),
    )
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 1.5, num_genes)
    de = np.zeros((num_types, num_genes))
    for t in range(num_types):
        genes = rng.choice(num_genes, max(1, int(de_fraction * num_genes)), replace=False)
        sign = rng.choice([-1.0, 1.0], len(genes))
        de[t, genes] = sign * rng.lognormal(np.log(de_scale), 0.4, len(genes))
    shift = rng.normal(0.0, batch_scale, (num_batches, num_genes))
    levels = library_size * np.exp(np.linspace(-0.35, 0.35, num_batches))
    dispersion = rng.lognormal(np.log(0.3), 0.5, num_genes)
    cell_type = rng.integers(0, num_types, num_cells)
    batch = rng.integers(0, num_batches, num_cells)
    library = np.exp(rng.normal(np.log(levels[batch]), 0.35))

    def blocks() -> Iterator[sp.csr_matrix]:
        for start in range(0, num_cells, block):
            rows = slice(start, min(start + block, num_cells))
            logits = base + de[cell_type[rows]] + shift[batch[rows]]
            proportions = np.exp(logits - logits.max(axis=1, keepdims=True))
            mean = library[rows, None] * proportions / proportions.sum(axis=1, keepdims=True)
            rate = rng.gamma(1.0 / dispersion, dispersion * mean)
            yield sp.csr_matrix(rng.poisson(rate).astype(np.float32))

    return cell_type, batch, library, blocks()


@takes_options_of(atlas_blocks)
def simulate_atlas(*args: Any, **options: Any) -> SimulatedAtlas:
    """Draw ``num_cells`` cells of ``num_types`` types, spread evenly at random over
    ``num_batches`` batches, with ``num_genes`` genes, as in this module's model; the options
    are :func:`atlas_blocks`' (the counts of ``block`` cells are drawn at a time)."""
    cell_type, batch, library, blocks = atlas_blocks(*args, **options)
    return SimulatedAtlas(sp.vstack(list(blocks), format="csr"), cell_type, batch, library)
