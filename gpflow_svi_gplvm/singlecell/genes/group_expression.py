r"""Group-level posterior expression: what the model says of a group of cells as a whole, summed
over its cells in one pass (lvm-DE's estimator, Boyeau et al. PNAS 2023, read off the GP).

For cell n with q(x_n), its own covariates :math:`c_n` and size factor :math:`s_n`, and gene d:

.. math::

    h_{nd} = \frac1K \sum_k E\big[e^{f_d(x_n, r_k)}\big] / L, \qquad
    \lambda_{nd} = s_n\, E\big[e^{f_d(x_n, c_n)}\big],

:math:`h` the normalised expression at the reference covariates :math:`r_1..r_K` (each batch in
turn with batch correction, else the cell's own) and a size factor of one over the model's
reference library L (``normalized_expression`` with ``library_size=1``), :math:`\lambda` the count
the model expects of the cell (with the offsets a query mapping learnt for its batch). The
expectations are over :math:`q(f \mid x)` (closed form, the log-normal mean) and over q(x) by
T draws :math:`x^{(t)} = \mu + \sqrt{v}\,\epsilon^{(t)}`, equally weighted (``weights="uniform"``)
or weighted by how well each explains the cell's counts (``weights="importance"``, as scvi-tools
names it), the self-normalised importance weights of the posterior p(x | y_n):

.. math::

    w^{(t)} \propto \exp\Big(\sum_{d} E_{q(f_d(x^{(t)}))} \log p(y_{nd} \mid f_d)\Big)\,
    \frac{N(x^{(t)}; 0, I)}{q(x^{(t)})}.

A group's expression is the mean of :math:`h_n` over its cells, and the uncertainty of that mean
as the expression of the population the cells were drawn from is the Bayesian bootstrap (Rubin
1981): S draws of Dirichlet(1, ..., 1) weights over the cells, made as independent Exp(1) numbers
:math:`e_n^{(s)}` normalised, so that a group's sums are the sums of its parts'
(:class:`GroupSums`: every category of ``obs[groupby]`` once, "the rest" as the sum of the other
categories). Beside them, the sums the counts term needs (:mod:`.observed_counts`): of
:math:`y`, :math:`\lambda`, :math:`y^2`, :math:`y\lambda`, :math:`\lambda^2` per gene.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import CellStates, cell_states
from .expression import NUMBERS_PER_CALL, reference_inputs
from .latent_weights import log_importance_weights, normalised

__all__ = ["GroupSums", "group_sums", "LATENT_DRAWS", "IMPORTANCE_DRAWS", "WEIGHTS"]

LATENT_DRAWS = 8
"""Draws of each cell's q(x) with ``weights="uniform"``."""

IMPORTANCE_DRAWS = 32
"""Draws of each cell's q(x) with ``weights="importance"`` (weighted, so more are needed)."""

WEIGHTS = ("uniform", "importance")


@dataclass
class GroupSums:
    """Sums over the cells of a group, per gene [G] (``resampled`` [S, G] and
    ``resampled_weight`` [S]: the bootstrap's weighted sums of :math:`h` and its weights)."""

    cells: int
    counts: np.ndarray
    counts_squared: np.ndarray
    cross: np.ndarray
    expected: np.ndarray
    expected_squared: np.ndarray
    normalised: np.ndarray
    resampled: np.ndarray
    resampled_weight: np.ndarray

    @classmethod
    def empty(cls, samples: int, genes: int) -> GroupSums:
        vectors = {f.name: np.zeros(genes) for f in fields(cls)[1:7]}
        resampled = np.zeros((samples, genes), np.float32)  # S x G a category: kept small
        return cls(0, **vectors, resampled=resampled, resampled_weight=np.zeros(samples))

    def __add__(self, other: GroupSums) -> GroupSums:
        return GroupSums(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(self)))

    @property
    def mean_normalised(self) -> np.ndarray:
        """The group's mean normalised expression [G] over its cells."""
        return self.normalised / max(self.cells, 1)

    def resampled_means(self) -> np.ndarray:
        """The bootstrap draws of the group's mean normalised expression [S, G]."""
        return self.resampled / self.resampled_weight[:, None]


def group_sums(
    fitted: FittedCells,
    adata,
    codes: np.ndarray,
    categories: int,
    columns: np.ndarray,
    references: list,
    samples: int,
    weights: str,
    rng: np.random.Generator,
) -> list[GroupSums]:
    """The :class:`GroupSums` of each category 0..``categories`` - 1, the cells' category in
    ``codes`` [N] (-1: in no group), of the genes at ``columns`` [G] of the model's, at the
    ``references`` (batch categories, or [None]: each cell's own), with ``samples`` bootstrap
    draws and ``weights`` over q(x)."""
    adata = opened(adata)
    rows, _ = fitted.registration.read_new(adata)
    sums = [GroupSums.empty(samples, len(columns)) for _ in range(categories)]
    draws = LATENT_DRAWS if weights == "uniform" else IMPORTANCE_DRAWS
    for states in cell_states(fitted, adata):
        chosen = np.flatnonzero(codes[states.cells] >= 0)
        step = max(1, NUMBERS_PER_CALL // (draws * fitted.model.data_dim))
        for start in range(0, len(chosen), step):
            part = chosen[start : start + step]
            Y = np.asarray(rows[states.cells][part], dtype=float)
            rates = _cell_rates(fitted, states, part, Y, references, draws, weights, rng)
            block_codes = codes[states.cells][part]
            for code in np.unique(block_codes):
                mine = block_codes == code
                counts, expected, normalised = (v[mine][:, columns] for v in (Y, *rates))
                _accumulate(sums[code], counts, expected, normalised, rng)
    return sums


def _accumulate(sums: GroupSums, Y, expected, normalised, rng) -> None:
    """Add a block of one group's cells (counts, expected counts and normalised expression
    [b, G]) to its sums, with fresh bootstrap weights."""
    sums.cells += len(Y)
    sums.counts += Y.sum(axis=0)
    sums.counts_squared += (Y**2).sum(axis=0)
    sums.cross += (Y * expected).sum(axis=0)
    sums.expected += expected.sum(axis=0)
    sums.expected_squared += (expected**2).sum(axis=0)
    sums.normalised += normalised.sum(axis=0)
    boot = rng.exponential(size=(len(sums.resampled_weight), len(Y)))
    sums.resampled += boot @ normalised
    sums.resampled_weight += boot.sum(axis=1)


def _cell_rates(
    fitted: FittedCells,
    states: CellStates,
    part: np.ndarray,
    Y: np.ndarray,
    references: list,
    draws: int,
    weights: str,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """The expected counts :math:`\\lambda` and normalised expression :math:`h` [b, D] of the
    cells ``part`` of a block (their counts Y [b, D]), see the module."""
    model = fitted.model
    mean, variance = states.mean[part], states.variance[part]
    obs = states.obs.iloc[part]
    draws = draws if variance.any() else 1  # a point q(x): one draw, exact
    x = mean + np.sqrt(variance) * rng.standard_normal((draws,) + mean.shape)  # [T, b, Q]
    own, own_offsets = reference_inputs(fitted, obs, [None], {})
    at_own = _rates(model, x, own[0], None if own_offsets is None else own_offsets[0])
    log_weights = np.zeros(x.shape[:2])
    sizes = np.ones(len(part)) if states.size_factors is None else states.size_factors[part]
    if weights == "importance" and draws > 1:
        log_weights = log_importance_weights(
            model, x, mean, variance, own[0], own_offsets, sizes, Y
        )
    w = normalised(log_weights)  # [T, b]
    inputs, offsets = reference_inputs(fitted, obs, references, {})
    at_references = sum(
        _rates(model, x, inputs[k], None if offsets is None else offsets[k])
        for k in range(len(references))
    ) / len(references)
    reference = model.size_factor_reference
    level = 1.0 if reference is None else float(reference.numpy())
    expected = sizes[:, None] * np.einsum("tb,tbd->bd", w, at_own)
    return expected, np.einsum("tb,tbd->bd", w, at_references) / level


def _rates(model, x: np.ndarray, observed: np.ndarray, offsets: np.ndarray | None) -> np.ndarray:
    """:math:`E_{q(f \\mid x)} e^{f}` [T, b, D] at draws x [T, b, Q] beside the ``observed``
    inputs [b, R] (a log size factor 0), with ``offsets`` [b, D] on f."""
    inputs = np.concatenate([x, np.broadcast_to(observed, x.shape[:2] + observed.shape[1:])], -1)
    f_mean, f_var = model.predict_f_at_draws(tf.constant(inputs, default_float()))
    shift = 0.0 if offsets is None else offsets
    return np.exp(f_mean.numpy() + shift + f_var.numpy() / 2.0)
