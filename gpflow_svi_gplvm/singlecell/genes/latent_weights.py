r"""Importance weights over q(x): draws of a cell's q(x) weighed by how well each explains its
counts, so that averages over them are over the posterior p(x | y) rather than q(x) (scvi-tools'
``weights="importance"``; for this model, as in :mod:`~gpflow_svi_gplvm.components.importance`).

Draws :math:`x^{(t)} \sim q(x_n)`, t = 1..T, of cell n have the log weights

.. math::

    \log w^{(t)} = \sum_d E_{q(f_d(x^{(t)}))} \log p(y_{nd} \mid f_d)
    + \log N(x^{(t)}; 0, I) - \log q(x^{(t)}),

normalised over t (:func:`normalised`); the data term is the likelihood's variational
expectation at the cell's own covariates, size factor and batch offsets. As T grows the
weighted average of any function of x tends to its expectation under the posterior of x given
the counts, with the GP's q(f) in place of f.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from scipy.stats import norm

__all__ = ["log_importance_weights", "normalised"]


def log_importance_weights(
    model,
    x: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    observed: np.ndarray,
    offsets: np.ndarray | None,
    sizes: np.ndarray,
    Y: np.ndarray,
) -> np.ndarray:
    """The log importance weights [T, b] of draws x [T, b, Q] of cells with q(x) ``mean``,
    ``variance`` [b, Q], observed inputs [b, R] (log size factor 0), ``offsets`` [1, b, D] or
    None, size factors [b] and counts Y [b, D] (see the module); 0 for a cell without counts."""
    observed = observed.copy()
    counted = sizes > 0
    if model.size_factor_reference is not None:
        observed[:, -1] = np.log(np.where(counted, sizes, 1.0))
    inputs = np.concatenate([x, np.broadcast_to(observed, x.shape[:2] + observed.shape[1:])], -1)
    X = tf.constant(inputs, default_float())
    f_mean, f_var = model.predict_f_at_draws(X)
    if offsets is not None:
        f_mean = f_mean + offsets[0]
    counts = tf.broadcast_to(tf.constant(Y, default_float()), tf.shape(f_mean))
    data = model.likelihood.variational_expectations(X, f_mean, f_var, counts).numpy()
    log_prior = norm.logpdf(x).sum(axis=-1)
    log_q = norm.logpdf(x, loc=mean, scale=np.sqrt(variance)).sum(axis=-1)
    return np.where(counted, data + log_prior - log_q, 0.0)


def normalised(log_weights: np.ndarray) -> np.ndarray:
    """Weights [T, b] summing to one over the draws t, from their logarithms [T, b]."""
    weights = np.exp(log_weights - log_weights.max(axis=0))
    return weights / weights.sum(axis=0)
