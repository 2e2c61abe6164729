r"""The effects of batches the model was not fitted with (query mapping, ``map_query``).

**New batches** (the scArches idea, ``map_query``): a cell of batch b unseen in training has the
zero one-hot of the fitted batches in its GP input, and its batch's effect is an offset per gene
on f, :math:`f_d = g_d(x, 0) + \gamma_{bd}`, with the prior
:math:`\gamma_{bd} \sim N(0, \bar w)`, :math:`\bar w` the mean of the fitted batches' variances
in the linear covariate kernel (their effects' prior). :math:`\gamma_b` is fitted by MAP with
every parameter of the model frozen, alternating with the q(x*) of up to ``fit_cells`` of the
batch's cells: given the cells' q(x*), each :math:`\gamma_{bd}` maximises
:math:`\sum_n E \log p(y_{nd} \mid f_{nd} + \gamma_{bd}) - \gamma_{bd}^2 / (2 \bar w)`, one
concave problem per gene solved by Newton's method, each step at most :data:`MAX_STEP` (a gene the
fitted cells hardly express, whose exp link is flat where the steps start, would otherwise jump to
:math:`\bar w \sum_n y_{nd}` and overflow). The offsets start from the batch's pooled
counts per unit size factor against the fitted cells' typical rate.
"""

from __future__ import annotations

from collections.abc import Sequence

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from ...compiled import GraphFunction
from ...likelihoods import expectation_derivatives
from ...models import SVIGPLVM
from ...prediction.laplace import LOW

__all__ = ["BatchOffsets", "MAX_STEP", "OffsetUpdates", "new_batch_prior_variance"]

MAX_STEP = 1.0
"""The largest move of an offset in one Newton step, on f's scale (an e-fold for a log link)."""


class BatchOffsets:
    """The offsets on f [K, D] of batches learnt by a query mapping, by category; a cell of
    another batch has offset zero."""

    def __init__(self, categories: Sequence = (), offsets: np.ndarray | None = None):
        self.categories = list(categories)
        self.offsets = np.zeros((0, 0)) if offsets is None else np.asarray(offsets)

    def add(self, categories: Sequence, offsets: np.ndarray) -> None:
        """Keep ``offsets`` [k, D] of the new ``categories``."""
        table = offsets if not self.categories else np.concatenate([self.offsets, offsets])
        self.categories += list(categories)
        self.offsets = table

    def of(self, batches: np.ndarray, genes: int) -> np.ndarray:
        """The offsets [n, D] of cells of ``batches`` [n] (zeros for other categories)."""
        found = np.zeros((len(batches), genes))
        for k, category in enumerate(self.categories):
            found[batches == category] = self.offsets[k]
        return found


class OffsetUpdates:
    """Newton's method on each new batch's offsets :math:`\\gamma_{kd}` [K, D], given its
    cells' latents (see the module), compiled: one concave problem per gene and batch."""

    def __init__(self, model: SVIGPLVM, prior_variance: float, steps: int = 60):
        self.model, self.prior_variance, self.steps = model, prior_variance, steps
        dtype, D = default_float(), model.data_dim
        self.update = GraphFunction(
            self._update,
            [
                tf.TensorSpec([None, D], dtype),  # the cells' counts
                tf.TensorSpec([None, None], dtype),  # their GP inputs at their latents
                tf.TensorSpec([None], tf.int64),  # each cell's batch, among the new ones
                tf.TensorSpec([None, D], dtype),  # the offsets the steps start from
            ],
        )

    def __call__(self, Y, inputs, latents, which, start) -> np.ndarray:
        at = latents if inputs is None else np.concatenate([latents, inputs], axis=1)
        return self.update(Y, at, which.astype(np.int64), start).numpy()

    def _update(self, Y, at, which, start):
        """The offsets [K, D] after damped Newton steps from ``start`` [K, D] until none moves by
        more than 1e-6, the cells' terms (counts Y [n, D], q(f) at their GP inputs ``at``) in single
        precision (:data:`~gpflow_svi_gplvm.prediction.laplace.LOW`), the offsets in the model's."""
        mean, variance = (tf.cast(t, LOW) for t in self.model.predict_f(at))  # without offsets
        counts, count = tf.cast(Y, LOW), tf.shape(start)[0]
        precision = tf.constant(1.0 / self.prior_variance, start.dtype)

        def step(i, gamma, _):
            shifted = mean + tf.cast(tf.gather(gamma, which), LOW)
            d = expectation_derivatives(self.model.likelihood, counts, shifted, variance)
            first, second = (
                tf.cast(tf.math.unsorted_segment_sum(t, which, count), gamma.dtype)
                for t in (d.mean, d.mean_mean)
            )
            move = tf.clip_by_value(
                (first - gamma * precision) / (second - precision), -MAX_STEP, MAX_STEP
            )
            return i + 1, gamma - move, tf.reduce_max(tf.abs(move))

        def more(i, gamma, moved):
            return (i < self.steps) & (moved > 1e-6)

        state = (tf.constant(0), start, tf.constant(np.inf, start.dtype))
        return tf.while_loop(more, step, state)[1]


def new_batch_prior_variance(model: SVIGPLVM, batch_columns: int) -> float:
    """:math:`\\bar w`: the mean variance of the fitted batches' columns (the first
    ``batch_columns`` covariates) in the model's linear covariate kernel."""
    kernel = getattr(model.kernel, "covariate_kernel", None)
    variance = getattr(kernel, "variance", None)
    if not isinstance(kernel, gpflow.kernels.Linear) or variance is None:
        raise ValueError(
            "map_query learns new batches' effects with the prior of the fitted batches' in the "
            "model's linear covariate kernel, which this model does not have (a covariate "
            f"kernel {type(kernel).__name__}): fit with the default kernel."
        )
    values = np.atleast_1d(variance.numpy())  # one for all columns, or one each
    return float(np.mean(values if values.size == 1 else values[:batch_columns]))
