r"""Each entry's variational expectation :math:`\ell = E_{N(f \mid m, v)} \log p(y \mid f)` and
its first and second derivatives in the mean m and variance v of q(f), in closed form where the
likelihood has one (:func:`~gpflow_svi_gplvm.likelihoods.registry.expectation_derivatives` picks
by the likelihood's type), by automatic differentiation otherwise.

The closed forms, each ``value`` without its terms of y alone (log-gamma, normalising
constants): a Gaussian of variance :math:`\sigma^2`, :math:`\ell = -((y - m)^2 + v) / 2\sigma^2`;
a Poisson with the exp link and bin size b (with :math:`e = b\, e^{m + v/2}`: :math:`\ell = y m
- e`, :math:`\ell_m = y - e`, :math:`\ell_v = \ell_{mv} = -e/2`, :math:`\ell_{mm} = -e`,
:math:`\ell_{vv} = -e/4`); :class:`~.negative_binomial.NegativeBinomial` by its own
Gauss-Hermite rule, with :math:`\sigma` the logistic function at its nodes and Price's theorem,
:math:`\partial_v E g = E g'' / 2`: :math:`\ell = y l - (y + r) E\,\mathrm{softplus}`,
:math:`\ell_m = y - (y + r) E\sigma`, :math:`\ell_{mm} = 2 \ell_v = -(y + r) E\sigma'`,
:math:`\ell_{mv} = -(y + r) E\sigma'' / 2`, :math:`\ell_{vv} = -(y + r) E\sigma^{(3)} / 4`.
The closed forms take Y with its missing entries filled; the caller masks them.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from gpflow.likelihoods import Gaussian, Poisson

from .masked import MaskedLikelihood
from .negative_binomial import NegativeBinomial

__all__ = [
    "ExpectationDerivatives",
    "gaussian_derivatives",
    "poisson_derivatives",
    "negative_binomial_derivatives",
    "automatic_derivatives",
]


class ExpectationDerivatives(NamedTuple):
    r""":math:`\ell = E_{N(f \mid m, v)} \log p(y \mid f)` per entry [..., D] up to a term of y
    alone (``value``) and its derivatives in the mean m and variance v: first (``mean``,
    ``variance``) and second (``mean_mean``, ``mean_variance``, ``variance_variance``)."""

    value: tf.Tensor
    mean: tf.Tensor
    variance: tf.Tensor
    mean_mean: tf.Tensor
    mean_variance: tf.Tensor
    variance_variance: tf.Tensor


def gaussian_derivatives(
    likelihood: Gaussian, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    """A Gaussian's (see the module)."""
    precision = tf.ones_like(mean) / tf.cast(likelihood.variance, mean.dtype)
    zeros = tf.zeros_like(mean)
    residual = Y - mean
    return ExpectationDerivatives(
        -0.5 * (tf.square(residual) + variance) * precision,
        residual * precision,
        -precision / 2,
        -precision,
        zeros,
        zeros,
    )


def poisson_derivatives(
    likelihood: Poisson, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    """A Poisson's with the exp inverse link (see the module)."""
    rate = tf.exp(mean + variance / 2.0) * tf.cast(likelihood.binsize, mean.dtype)
    return ExpectationDerivatives(Y * mean - rate, Y - rate, -rate / 2, -rate, -rate / 2, -rate / 4)


def negative_binomial_derivatives(
    likelihood: NegativeBinomial, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    """:class:`NegativeBinomial`'s, by its own Gauss-Hermite rule (see the module)."""
    r = tf.cast(likelihood._total_count(mean), mean.dtype)
    logits = mean - tf.math.log(r)
    points, weights = np.polynomial.hermite.hermgauss(likelihood.num_gauss_hermite_points)
    scale = tf.sqrt(variance)
    # E of softplus, sigma and sigma's three derivatives at the nodes
    moments = [tf.zeros_like(mean) for _ in range(5)]
    for t, w in zip(np.sqrt(2.0) * points, weights / np.sqrt(np.pi)):
        node = logits + scale * float(t)
        small = tf.exp(-tf.abs(node))  # e^{-|z|}: neither overflows
        s = tf.where(node >= 0.0, tf.ones_like(small), small) / (1.0 + small)
        slope = s * (1.0 - s)
        terms = (
            tf.nn.relu(node) + tf.math.log1p(small),
            s,
            slope,
            slope * (1.0 - 2.0 * s),
            slope * (1.0 - 6.0 * s * (1.0 - s)),
        )
        moments = [m + float(w) * term for m, term in zip(moments, terms)]
    total = Y + r
    return ExpectationDerivatives(
        Y * logits - total * moments[0],
        Y - total * moments[1],
        -total * moments[2] / 2,
        -total * moments[2],
        -total * moments[3] / 2,
        -total * moments[4] / 4,
    )


def automatic_derivatives(
    likelihood: MaskedLikelihood, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    """Any likelihood's, by differentiating the masked expectation's sum twice
    (each entry depends on its own mean and variance alone), in the model's precision."""
    low, high = mean.dtype, default_float()
    Y, mean, variance = (tf.cast(t, high) for t in (Y, mean, variance))
    X = tf.zeros_like(mean[..., :1])
    zero = tf.UnconnectedGradients.ZERO  # e.g. a Gaussian's value is linear in the variance
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([mean, variance])
        with tf.GradientTape() as inner:
            inner.watch([mean, variance])
            value = likelihood.entry_expectations(X, mean, variance, Y)
            total = tf.reduce_sum(value)
        d_mean, d_var = inner.gradient(total, [mean, variance], unconnected_gradients=zero)
        first, second = tf.reduce_sum(d_mean), tf.reduce_sum(d_var)
    d_mm, d_mv = outer.gradient(first, [mean, variance], unconnected_gradients=zero)
    d_vv = outer.gradient(second, variance, unconnected_gradients=zero)
    del outer
    found = (value, d_mean, d_var, d_mm, d_mv, d_vv)
    return ExpectationDerivatives(*(tf.cast(t, low) for t in found))
