r"""A simulated single-cell atlas: gamma-Poisson counts of cell types seen through batches.

For cell n of type :math:`t_n` in batch :math:`b_n` and gene d,

.. math::

    \log p_{nd} = \beta_d + \delta_{t_n d} + \gamma_{b_n d} + \kappa\, \tau_n \omega_{t_n d},
    \quad \mu_{nd} = l_n \frac{p_{nd}}{\sum_{d'} p_{nd'}}, \quad
    \lambda_{nd} \sim \mathrm{Gamma}(1/\phi_d,\ \phi_d \mu_{nd}), \quad
    y_{nd} \sim \mathrm{Poisson}(\lambda_{nd}),

so :math:`y_{nd}` is negative binomial with mean :math:`\mu_{nd}` and variance
:math:`\mu + \phi_d \mu^2`. :math:`\beta_d \sim N(0, 1.5^2)` are the genes' base levels; each
cell type differentially expresses its own ``de_fraction`` of the genes,
:math:`\delta \sim \pm\,\mathrm{LogNormal}(\log \text{de\_scale}, 0.4)`; each batch shifts every
gene, :math:`\gamma_{bd} \sim N(0, \text{batch\_scale}^2)`, and has its own library sizes,
:math:`\log l_n \sim N(\log L_{b_n}, 0.35^2)` with :math:`L_b` spread over a factor of two around
``library_size``; dispersions :math:`\phi_d \sim \mathrm{LogNormal}(\log 0.3, 0.5)`.

Cells fall into batches evenly at random and into types with shares :math:`\pi`
(``type_proportions``, equal by default), or with ``composition`` :math:`\alpha` each batch's own
shares :math:`\pi_b \sim \mathrm{Dirichlet}(\alpha \pi)` (unequal composition: the smaller
:math:`\alpha`, the more the batches differ). With ``programme_scale`` :math:`\kappa > 0`, cells
vary continuously within their type: :math:`\tau_n \sim U(-1, 1)` is each cell's position along
its type's programme :math:`\omega_t`, N(0, 1) on the type's own ``de_fraction`` of the genes.
Cells are drawn in blocks into a CSR matrix, so a million cells never pass through a dense
matrix.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from ..options import takes_options_of
from ..validation import check_integer

__all__ = ["AtlasBlocks", "AtlasEffects", "SimulatedAtlas", "simulate_atlas", "atlas_blocks"]


@dataclass
class AtlasEffects:
    """The effects an atlas was drawn with (:func:`simulate_atlas`'s model): what a method
    that reads genes should recover."""

    base: np.ndarray
    """[D] the genes' base levels :math:`\\beta_d`."""
    type_effects: np.ndarray
    """[T, D] :math:`\\delta_{td}`, non-zero on the genes each type expresses differentially."""
    batch_shifts: np.ndarray
    """[B, D] :math:`\\gamma_{bd}`, each batch's shift of every gene."""
    programme: np.ndarray
    """[T, D] :math:`\\kappa\\,\\omega_{td}` (zeros without a programme)."""
    dispersion: np.ndarray
    """[D] :math:`\\phi_d`."""

    def proportions(
        self, cell_type: np.ndarray, position: np.ndarray, batch: np.ndarray | None = None
    ) -> np.ndarray:
        """Each cell's expected share of its library per gene [n, D],
        :math:`p_{nd} / \\sum_{d'} p_{nd'}`, of cells of types ``cell_type`` [n] at programme
        positions ``position`` [n]: in batches ``batch`` [n], or batch-free (no shift) when
        None. Times the library size, the expected counts."""
        weights = self._weights(cell_type, position, batch)
        return weights / weights.sum(axis=1, keepdims=True)

    def _weights(
        self, cell_type: np.ndarray, position: np.ndarray, batch: np.ndarray | None
    ) -> np.ndarray:
        """[n, D] the shares up to a factor a cell: exp of the logits less their maximum."""
        logits = self.base + self.type_effects[cell_type]
        if batch is not None:
            logits = logits + self.batch_shifts[batch]
        logits = logits + position[:, None] * self.programme[cell_type]
        return np.exp(logits - logits.max(axis=1, keepdims=True))


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
    programme: np.ndarray
    """[N] each cell's position :math:`\\tau_n` in [-1, 1] along its type's programme (zeros
    without one)."""
    effects: AtlasEffects
    """The effects the counts were drawn with."""

    def batch_free_proportions(self, cells=slice(None)) -> np.ndarray:
        """The expected shares of the library [n, D] of ``cells`` (an index or mask of rows)
        without their batch's shift: the truth that batch-corrected expression estimates."""
        return self.effects.proportions(self.cell_type[cells], self.programme[cells])


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
    type_proportions: Sequence[float] | None = None,
    composition: float | None = None,
    programme_scale: float = 0.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, AtlasBlocks]:
    """The cell types [N], batches [N], library sizes [N] and programme positions [N] of
    :func:`simulate_atlas`'s cells, and their counts as CSR blocks of ``block`` rows [block, D],
    drawn as they are consumed (:class:`AtlasBlocks`, which holds the effects), so that an atlas
    larger than memory can be written to disk a block at a time. Without ``type_proportions``,
    ``composition`` and ``programme_scale`` a seed draws the same atlas as before these options
    existed."""
    num_cells, num_genes = (
        check_integer(num_cells, "num_cells"),
        check_integer(num_genes, "num_genes"),
    )
    shares = _type_shares(type_proportions, num_types, composition, programme_scale)
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 1.5, num_genes)
    de = _type_genes(rng, num_types, num_genes, de_fraction, lambda n: _de(rng, de_scale, n))
    shift = rng.normal(0.0, batch_scale, (num_batches, num_genes))
    levels = library_size * np.exp(np.linspace(-0.35, 0.35, num_batches))
    dispersion = rng.lognormal(np.log(0.3), 0.5, num_genes)
    if shares is None and composition is None:
        cell_type = rng.integers(0, num_types, num_cells)
        batch = rng.integers(0, num_batches, num_cells)
    else:
        shares = np.full(num_types, 1.0 / num_types) if shares is None else shares
        batch, cell_type = _batches_and_types(rng, num_cells, num_batches, shares, composition)
    library = np.exp(rng.normal(np.log(levels[batch]), 0.35))
    position, programme = np.zeros(num_cells), np.zeros((num_types, num_genes))
    if programme_scale > 0:
        programme = programme_scale * _type_genes(
            rng, num_types, num_genes, de_fraction, lambda n: rng.normal(0.0, 1.0, n)
        )
        position = rng.uniform(-1.0, 1.0, num_cells)

    effects = AtlasEffects(base, de, shift, programme, dispersion)
    draw = _CountDraw(rng, effects, cell_type, batch, library, position)
    return cell_type, batch, library, position, AtlasBlocks(draw, num_cells, block)


@dataclass
class _CountDraw:
    """Draws the counts of rows of an atlas from its effects (in order: they share ``rng``)."""

    rng: np.random.Generator
    effects: AtlasEffects
    cell_type: np.ndarray
    batch: np.ndarray
    library: np.ndarray
    position: np.ndarray

    def __call__(self, rows: slice) -> sp.csr_matrix:
        weights = self.effects._weights(self.cell_type[rows], self.position[rows], self.batch[rows])
        # The library times the weights, then over their sum: the order the atlases were drawn in.
        mean = self.library[rows, None] * weights / weights.sum(axis=1, keepdims=True)
        dispersion = self.effects.dispersion
        rate = self.rng.gamma(1.0 / dispersion, dispersion * mean)
        return sp.csr_matrix(self.rng.poisson(rate).astype(np.float32))


class AtlasBlocks:
    """The counts of an atlas as CSR blocks of ``block`` rows [block, D], drawn as they are
    consumed (once); :attr:`effects` are the effects they are drawn with."""

    def __init__(self, draw: _CountDraw, num_cells: int, block: int):
        self._draw, self.num_cells, self.block = draw, num_cells, block
        self.effects = draw.effects

    def __iter__(self) -> Iterator[sp.csr_matrix]:
        for start in range(0, self.num_cells, self.block):
            yield self._draw(slice(start, min(start + self.block, self.num_cells)))


def _de(rng: np.random.Generator, de_scale: float, n: int) -> np.ndarray:
    return rng.choice([-1.0, 1.0], n) * rng.lognormal(np.log(de_scale), 0.4, n)


def _type_genes(
    rng: np.random.Generator,
    num_types: int,
    num_genes: int,
    fraction: float,
    draw: Callable[[int], np.ndarray],
) -> np.ndarray:
    """[T, D]: each type's own ``fraction`` of the genes (at least one) holding ``draw(n)``."""
    values = np.zeros((num_types, num_genes))
    for t in range(num_types):
        genes = rng.choice(num_genes, max(1, int(fraction * num_genes)), replace=False)
        values[t, genes] = draw(len(genes))
    return values


def _type_shares(
    type_proportions: Sequence[float] | None,
    num_types: int,
    composition: float | None,
    programme_scale: float,
) -> np.ndarray | None:
    """The types' shares [T] (summing to one; None for equal shares), the options checked."""
    if composition is not None and not (np.isfinite(composition) and composition > 0):
        raise ValueError(
            f"composition must be a positive number (a Dirichlet concentration), got "
            f"{composition}; leave it None for the same type shares in every batch."
        )
    if not (np.isfinite(programme_scale) and programme_scale >= 0):
        raise ValueError(f"programme_scale must be a number >= 0, got {programme_scale}.")
    if type_proportions is None:
        return None
    shares = np.asarray(type_proportions, dtype=float)
    if shares.shape != (num_types,) or not np.all(np.isfinite(shares) & (shares > 0)):
        raise ValueError(
            f"type_proportions must hold num_types = {num_types} positive numbers (relative "
            f"sizes of the types), got {list(np.atleast_1d(shares))}."
        )
    return shares / shares.sum()


def _batches_and_types(
    rng: np.random.Generator,
    num_cells: int,
    num_batches: int,
    shares: np.ndarray,
    composition: float | None,
) -> tuple[np.ndarray, np.ndarray]:
    """Each cell's batch [N], evenly at random, and type [N], by its batch's type shares:
    ``shares`` [T] in every batch, or with ``composition`` alpha each batch's own draw
    Dirichlet(alpha * shares)."""
    batch = rng.integers(0, num_batches, num_cells)
    per_batch = np.tile(shares, (num_batches, 1))
    if composition is not None:
        per_batch = rng.dirichlet(composition * shares, num_batches)
    uniform = rng.random(num_cells)
    cell_type = np.empty(num_cells, dtype=np.int64)
    for b in range(num_batches):
        cells = batch == b
        found = np.searchsorted(np.cumsum(per_batch[b]), uniform[cells], side="right")
        cell_type[cells] = np.minimum(found, len(shares) - 1)  # a cumulative sum may end below 1
    return batch, cell_type


@takes_options_of(atlas_blocks)
def simulate_atlas(*args: Any, **options: Any) -> SimulatedAtlas:
    """Draw ``num_cells`` cells of ``num_types`` types over ``num_batches`` batches, with
    ``num_genes`` genes, as in this module's model; the options are :func:`atlas_blocks`' (the
    counts of ``block`` cells are drawn at a time)."""
    cell_type, batch, library, position, blocks = atlas_blocks(*args, **options)
    counts = sp.vstack(list(blocks), format="csr")
    return SimulatedAtlas(counts, cell_type, batch, library, position, blocks.effects)
