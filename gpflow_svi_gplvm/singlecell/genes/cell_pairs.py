r"""The log-fold change between two groups sampled from pairs of single cells: scVI's
``differential_expression(mode="change")`` (Boyeau et al. 2019), read off the GP.

A sample draws a cell a of group A and a cell b of B at random, :math:`x_a \sim q(x_a)` and
:math:`x_b \sim q(x_b)` (with ``weights="importance"`` one of
:data:`~.group_expression.IMPORTANCE_DRAWS` draws of each, picked by its importance weight,
:mod:`.latent_weights`), both at the same reference covariates (each reference batch in turn, the
samples split evenly over them; or each cell's own), and :math:`(f_d(a), f_d(b))` jointly from
:math:`q(f \mid x)` (their covariance :func:`~gpflow_svi_gplvm.prediction.rates.paired_covariance`
kept: what the two share, such as the batch effect's uncertainty, cancels in the difference):

.. math::

    \mathrm{LFC}_d = \big(f_d(a) - f_d(b)\big) / \ln 2.

Its spread holds the variation from cell to cell within each group as well as the model's
uncertainty: it answers whether a cell of A differs from a cell of B, and its probabilities of
:math:`|\mathrm{LFC}| > \delta` rarely near one for a change of the groups' means
(benchmarks/results/differential_expression.md).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from ...prediction.rates import paired_covariance
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import cell_size_factors, latent_moments
from .expression import reference_inputs
from .group_expression import IMPORTANCE_DRAWS
from .latent_weights import log_importance_weights, normalised

__all__ = ["CellPairs", "PAIRS_PER_CALL"]

PAIRS_PER_CALL = 1024
"""Sampled pairs of cells whose f one call takes ([pairs, D] tensors)."""


class CellPairs:
    """Samples of the LFC between two groups of ``adata``'s cells, from their q(x) and
    q(f | x), for the genes at ``columns`` [G]."""

    def __init__(self, fitted: FittedCells, adata, columns: np.ndarray, weights: str, rng) -> None:
        self.fitted, self.adata = fitted, opened(adata)
        self.latents = latent_moments(fitted, self.adata)
        self.columns, self.weights, self.rng = columns, weights, rng
        self.rows = self.library = None
        if weights == "importance":
            self.rows, self.library = fitted.registration.read_new(self.adata)
        reference = fitted.model.size_factor_reference
        self.level = 1.0 if reference is None else float(reference.numpy())

    def compare(
        self, cells1: np.ndarray, cells2: np.ndarray, references: list, n_samples: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """LFC samples [n, G] (log2) of ``n_samples`` pairs split evenly over the
        ``references``, and the two groups' mean normalised expression [G]."""
        per_batch = max(1, n_samples // len(references))
        lfcs, scales1, scales2 = [], [], []
        for batch in references:
            a = self.rng.choice(cells1, per_batch)
            b = self.rng.choice(cells2, per_batch)
            for start in range(0, per_batch, PAIRS_PER_CALL):
                part = slice(start, start + PAIRS_PER_CALL)
                lfc, scale1, scale2 = self._pairs(a[part], b[part], batch)
                lfcs.append(lfc)
                scales1.append(scale1)
                scales2.append(scale2)
        return (
            np.concatenate(lfcs),
            np.concatenate(scales1).mean(axis=0),
            np.concatenate(scales2).mean(axis=0),
        )

    def _latents(self, cells: np.ndarray) -> np.ndarray:
        """A draw of each cell's q(x) [n, Q], or of its posterior by importance weights."""
        mean, variance = (moment[cells] for moment in self.latents)
        if self.weights == "uniform" or not variance.any():
            return mean + np.sqrt(variance) * self.rng.standard_normal(mean.shape)
        x = mean + np.sqrt(variance) * self.rng.standard_normal((IMPORTANCE_DRAWS,) + mean.shape)
        assert self.rows is not None and self.library is not None
        obs = self.adata.obs.iloc[cells]
        sizes = cell_size_factors(self.fitted, obs, self.library[cells])
        sizes = np.ones(len(cells)) if sizes is None else sizes
        observed, offsets = reference_inputs(self.fitted, obs, [None], {})
        Y = np.asarray(self.rows.take(cells), dtype=float)
        log_weights = log_importance_weights(
            self.fitted.model, x, mean, variance, observed[0], offsets, sizes, Y
        )
        weights = normalised(log_weights)  # [T, n]
        picked = (self.rng.random(len(cells)) > np.cumsum(weights, axis=0)).sum(axis=0)
        return x[np.minimum(picked, len(x) - 1), np.arange(len(cells))]

    def _inputs(self, cells: np.ndarray, batch) -> tuple[tf.Tensor, np.ndarray | float]:
        """GP inputs [n, Q + R]: a draw of each cell's latent, its covariates (the batch set to
        ``batch``, or its own), a log size factor of 0; and the cells' offsets on f [n, G] (of
        a batch a query mapping learnt; zeros otherwise)."""
        observed, offsets = reference_inputs(self.fitted, self.adata.obs.iloc[cells], [batch], {})
        shift = 0.0 if offsets is None else offsets[0][:, self.columns]
        return tf.constant(np.concatenate([self._latents(cells), observed[0]], axis=1)), shift

    def _pairs(self, a: np.ndarray, b: np.ndarray, batch) -> tuple[np.ndarray, ...]:
        model = self.fitted.model
        (Xa, shift_a), (Xb, shift_b) = self._inputs(a, batch), self._inputs(b, batch)
        mean_a, var_a = (m.numpy()[:, self.columns] for m in model.predict_f(Xa))
        mean_b, var_b = (m.numpy()[:, self.columns] for m in model.predict_f(Xb))
        mean_a, mean_b = mean_a + shift_a, mean_b + shift_b
        covariance = paired_covariance(model, Xa, Xb).numpy()[:, self.columns]
        spread = np.sqrt(np.maximum(var_a + var_b - 2.0 * covariance, 0.0))
        noise = self.rng.standard_normal(mean_a.shape)
        lfc = ((mean_a - mean_b + spread * noise) / np.log(2.0)).astype(np.float32)
        scale_a = np.exp(mean_a + var_a / 2.0) / self.level
        scale_b = np.exp(mean_b + var_b / 2.0) / self.level
        return lfc, scale_a, scale_b
