r"""The rates of a fitted model at rows' q(x): their expectation and variance, and the
posterior covariance of f at pairs of inputs.

Row n, with :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, v_n)` and observed inputs :math:`r` beside its
latents (covariates and log size factor, :mod:`~gpflow_svi_gplvm.components.covariates`), has for
output d the rate :math:`\lambda_{nd} = \sigma(f_d([x_n, r]))`, :math:`\sigma` the likelihood's
inverse link (:class:`~gpflow_svi_gplvm.likelihoods.registry.LikelihoodFacts`): ``exp`` for
counts, the identity for a Gaussian. Given x, :math:`q(f_d(x)) = N(m_d(x), k_d(x))` and the
moments are closed form,

.. math::

    \exp:\ E[\lambda] = e^{m + k/2},\ E[\lambda \lambda'] = e^{m + m' + (k + k')/2 + c};
    \qquad \text{identity}:\ E[\lambda] = m,\ E[\lambda \lambda'] = m m' + c,

with :math:`c` the posterior covariance of f at the two inputs (:func:`paired_covariance`).
Over q(x) the expectation takes S draws :math:`x^{(s)} = \mu + \sqrt{v}\, \epsilon^{(s)}`: q(x)
is replaced by those draws, and given them every moment is exact. With K references
:math:`r_1 .. r_K` (a batch set to each of several categories) the rate is their average
:math:`\bar\lambda = \frac1K \sum_k \lambda(r_k)`, whose second moment needs :math:`c` between
the references at one x.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float, default_jitter
from gpflow.covariances import Kuf, Kuu

from ..likelihoods import base_likelihood, likelihood_facts

__all__ = ["inverse_link", "paired_covariance", "rate_moments", "PAIRS_PER_CALL"]

PAIRS_PER_CALL = 512
"""Pairs of inputs whose prior covariance one kernel call takes (an [n, n] matrix, its diagonal
kept), so that memory stays bounded however many pairs there are."""


def inverse_link(likelihood) -> str:
    """ "exp" for a count likelihood with a log link, "identity" for a Gaussian; a
    ``ValueError`` for any other (no rate to read)."""
    link = likelihood_facts(likelihood).inverse_link
    if link is not None:
        return link
    raise ValueError(
        f"Rates are read through a log link (Poisson, NegativeBinomial) or a Gaussian's identity, "
        f"not {type(base_likelihood(likelihood)).__name__}."
    )


@check_shapes("Xa: [n, W]", "Xb: [n, W]", "return: [n, D]")
def paired_covariance(model, Xa: tf.Tensor, Xb: tf.Tensor) -> tf.Tensor:
    r""":math:`\mathrm{Cov}_q(f_d(a_n), f_d(b_n))` [n, D] for the pairs of GP inputs ``Xa``,
    ``Xb`` [n, W] (rows paired) of an SVGP ``model`` (whitened or not; q(u) covariance per output
    [D, M, M] or shared [1, M, M]):

    .. math::

        k(a, b) - \alpha_a^\top \alpha_b + (L^\top A_a)^\top (L^\top A_b), \qquad
        \alpha = L_z^{-1} k_u(\cdot),

    with :math:`A = \alpha` (whitened) or :math:`L_z^{-\top}\alpha`; at a = b it is the
    marginal variance of ``predict_f``.
    """
    kernel, inducing = model.kernel, model.inducing_variable
    Lz = tf.linalg.cholesky(Kuu(inducing, kernel, jitter=default_jitter()))  # [M, M]
    prior = tf.concat(
        [
            tf.linalg.diag_part(kernel.K(Xa[i : i + PAIRS_PER_CALL], Xb[i : i + PAIRS_PER_CALL]))
            for i in range(0, int(Xa.shape[0]), PAIRS_PER_CALL)
        ]
        or [tf.zeros([0], Xa.dtype)],
        axis=0,
    )  # [n]
    alpha_a = tf.linalg.triangular_solve(Lz, Kuf(inducing, kernel, Xa), lower=True)  # [M, n]
    alpha_b = tf.linalg.triangular_solve(Lz, Kuf(inducing, kernel, Xb), lower=True)
    covariance = prior - tf.reduce_sum(alpha_a * alpha_b, axis=0)  # [n]
    if not model.whiten:
        alpha_a = tf.linalg.triangular_solve(tf.linalg.adjoint(Lz), alpha_a, lower=False)
        alpha_b = tf.linalg.triangular_solve(tf.linalg.adjoint(Lz), alpha_b, lower=False)
    L = tf.linalg.band_part(tf.convert_to_tensor(model.q_sqrt), -1, 0)  # [1 or D, M, M]
    projected_a = tf.linalg.matmul(L, alpha_a, transpose_a=True)  # [1 or D, M, n]
    projected_b = tf.linalg.matmul(L, alpha_b, transpose_a=True)
    covariance = covariance[None] + tf.reduce_sum(projected_a * projected_b, axis=1)  # [., n]
    return tf.broadcast_to(tf.transpose(covariance), [tf.shape(Xa)[0], model.num_latent_gps])


@check_shapes(
    "mean: [B, Q]",
    "variance: [B, Q]",
    "references: [K, B, R]",
    "noise: [S, Q]",
    "offsets: [K, B, D]",
    "return[0]: [B, D]",
    "return[1]: [B, D]",
)
def rate_moments(
    model,
    mean: np.ndarray,
    variance: np.ndarray,
    references: np.ndarray,
    noise: np.ndarray,
    second_moment: bool = False,
    offsets: np.ndarray | None = None,
) -> tuple[tf.Tensor, tf.Tensor | None]:
    r"""The expectation [B, D] of the rate averaged over the K ``references`` [K, B, R]
    (observed inputs of each row, R = 0 for a model without), :math:`E[\bar\lambda_{nd}]`,
    under :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, v_n)` (``mean``, ``variance`` [B, Q]) drawn
    as :math:`\mu + \sqrt{v}\, \epsilon` with the standard ``noise`` [S, Q] (the same draws for
    every row) and :math:`q(f \mid x)`; with ``second_moment`` also
    :math:`E[\bar\lambda_{nd}^2]` [B, D] (None without). ``offsets`` [K, B, D]: known shifts
    of f at each reference (a batch's effect learnt apart). Memory: [S, B, D] tensors, K + 2 of
    them (K^2 pair covariances in turn with ``second_moment``)."""
    link = inverse_link(model.likelihood)
    dtype = default_float()
    mean, variance = tf.constant(mean, dtype), tf.constant(variance, dtype)
    draws = mean[None] + tf.sqrt(variance)[None] * tf.constant(noise, dtype)[:, None, :]
    shape = tf.shape(draws)  # [S, B, Q]
    inputs = [
        tf.concat(
            [draws, tf.broadcast_to(tf.constant(r, dtype), [shape[0], shape[1], r.shape[1]])], -1
        )
        for r in references
    ]  # K x [S, B, Q + R]
    moments = [model.predict_f_at_draws(X) for X in inputs]  # K x ([S, B, D], [S, B, D])
    if offsets is not None:
        moments = [(m + tf.constant(o, dtype), v) for (m, v), o in zip(moments, offsets)]
    K = len(moments)
    if link == "exp":
        first = tf.add_n([tf.exp(m + v / 2.0) for m, v in moments]) / K
    else:
        first = tf.add_n([m for m, _ in moments]) / K
    if not second_moment:
        return tf.reduce_mean(first, axis=0), None
    second = tf.zeros_like(first)
    for k in range(K):
        for j in range(k, K):
            (m_k, v_k), (m_j, v_j) = moments[k], moments[j]
            covariance = v_k if j == k else _paired(model, inputs[k], inputs[j])
            if link == "exp":
                term = tf.exp(m_k + m_j + (v_k + v_j) / 2.0 + covariance)
            else:
                term = m_k * m_j + covariance
            second += term if j == k else 2.0 * term
    return tf.reduce_mean(first, axis=0), tf.reduce_mean(second, axis=0) / K**2


def _paired(model, Xa: tf.Tensor, Xb: tf.Tensor) -> tf.Tensor:
    """:func:`paired_covariance` of inputs [S, B, W] paired elementwise: [S, B, D]."""
    width = tf.shape(Xa)[-1]
    flat = paired_covariance(model, tf.reshape(Xa, [-1, width]), tf.reshape(Xb, [-1, width]))
    return tf.reshape(flat, tf.concat([tf.shape(Xa)[:2], [-1]], axis=0))
