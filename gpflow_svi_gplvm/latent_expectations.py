r"""The data term's expectation over q(x) in closed form (psi statistics) for a Gaussian likelihood.

For a squared-exponential kernel, a Gaussian likelihood :math:`N(y \mid f, \sigma^2)`, a constant
(or zero) mean function :math:`c` and Gaussian :math:`q(x_n)`, the expected log likelihood of an
entry has a closed form in

.. math::

    \psi_0 = E[k(x_n, x_n)],\quad \psi_1 = E[k(Z, x_n)]\ [M],\quad
    \Psi_2 = E[k(Z, x_n) k(x_n, Z)]\ [M, M]

(:func:`gpflow.expectations.expectation`), with :math:`r = y_{nd} - c_d`,
:math:`a_d = K_{uu}^{-1} E[u_d]` and :math:`B_d = K_{uu}^{-1} \mathrm{Cov}[u_d] K_{uu}^{-1}`:

.. math::

    E_{q(x_n)} E_{q(f_d)} \log p(y_{nd} | f_d) = -\tfrac12 \log 2\pi\sigma^2
    - \frac{1}{2\sigma^2}\big[r^2 - 2 r \psi_1^T a_d + a_d^T \Psi_2 a_d
    + \psi_0 - \mathrm{tr}(K_{uu}^{-1}\Psi_2) + \mathrm{tr}(B_d \Psi_2)\big].

Summed over the observed entries of a row this has no Monte Carlo variance. On complete data
the sums over outputs meet :math:`\Psi_2` once (a step costs O(B M^2 + D M^2)); with missing
entries the sum of :math:`a_d^T \Psi_2 a_d` over a row's observed outputs costs O(B M^2 D), more
than Monte Carlo's O(B M D) with a shared q(u) covariance, which is why
``latent_expectation="auto"`` leaves that case to Monte Carlo.
"""

from __future__ import annotations

from typing import NamedTuple

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.covariances import Kuu
from gpflow.expectations import expectation
from gpflow.inducing_variables import InducingPoints
from gpflow.kernels import SquaredExponential
from gpflow.likelihoods import Likelihood
from gpflow.models import SVGP
from gpflow.probability_distributions import Gaussian

from .likelihoods import MaskedLikelihood, base_likelihood

__all__ = [
    "LATENT_EXPECTATIONS",
    "closed_form_applies",
    "closed_form_data_term",
    "closed_form_predictive",
    "diagonal_psi_statistics",
]

LATENT_EXPECTATIONS = ("auto", "closed-form", "monte-carlo")
"""The values of ``latent_expectation``."""


def closed_form_applies(model: SVGP) -> str | None:
    """None when the closed form covers ``model``'s kernel, likelihood, mean function and
    inducing inputs, else the reason it does not (for error messages)."""
    if type(model.kernel) is not SquaredExponential:
        return f"the kernel is {type(model.kernel).__name__}, not a SquaredExponential"
    if _noise_variance(model.likelihood) is None:
        base = base_likelihood(model.likelihood)
        return f"the likelihood is {type(base).__name__}, not a Gaussian with one variance"
    constant = (gpflow.mean_functions.Constant, gpflow.mean_functions.Zero)
    if not isinstance(model.mean_function, constant):
        return f"the mean function is {type(model.mean_function).__name__}, not a constant"
    if type(model.inducing_variable) is not InducingPoints:
        return "the inducing variable is not InducingPoints"
    return None


@check_shapes(
    "mean: [batch, Q]",
    "covariance: [batch, Q, ...]",
    "Y: [batch, D]",
    "return: [batch]",
)
def closed_form_data_term(
    model: SVGP, likelihood: Likelihood, mean: tf.Tensor, covariance: tf.Tensor, Y: tf.Tensor
) -> tf.Tensor:
    r""":math:`\sum_{d \in O_n} E_{q(x_n)} E_{q(f_d(x_n))} \log p(y_{nd} \mid f_d)` per row [B]
    under ``model``'s q(u), kernel and mean function and the Gaussian ``likelihood`` (masked or
    not), for q(x_n) with ``mean`` [B, Q] and ``covariance``: marginal variances [B, Q] or full
    [B, Q, Q]. ``model`` must pass :func:`closed_form_applies`."""
    kernel, inducing = model.kernel, model.inducing_variable
    variance = _noise_variance(likelihood)
    if not isinstance(kernel, SquaredExponential) or not isinstance(inducing, InducingPoints):
        raise ValueError(f"No closed form for this model: {closed_form_applies(model)}.")
    if variance is None:
        raise ValueError(f"No closed form for a {type(base_likelihood(likelihood)).__name__}.")
    f = _f_statistics(model, mean, covariance)
    psi_1, psi_2, a = f.psi_1, f.psi_2, f.a

    masked = isinstance(likelihood, MaskedLikelihood)
    observed = tf.logical_not(tf.math.is_nan(Y))
    weights = tf.cast(observed, Y.dtype)  # [B, D]
    offset = model.mean_function(mean)  # [B, D] (constant in x)
    residual = tf.where(observed, Y - offset, tf.zeros_like(Y))
    counts = tf.reduce_sum(weights, axis=-1)  # [B]

    cross = tf.reduce_sum(residual * tf.linalg.matmul(psi_1, a), axis=-1)  # [B]
    if masked:
        quadratic = tf.reduce_sum(weights * tf.einsum("bmk,kd,md->bd", psi_2, a, a), axis=-1)
    else:
        quadratic = tf.einsum("bmk,mk->b", psi_2, tf.linalg.matmul(a, a, transpose_b=True))
    if f.posterior_traces.shape[-1] == 1:  # one covariance shared by every output
        posterior = counts * f.posterior_traces[:, 0]
    else:
        posterior = tf.reduce_sum(weights * f.posterior_traces, axis=-1)
    expected_square = (
        tf.reduce_sum(tf.square(residual), axis=-1)
        - 2.0 * cross
        + quadratic
        + counts * f.prior_variance
        + posterior
    )
    return -0.5 * counts * tf.math.log(2.0 * np.pi * variance) - 0.5 * expected_square / variance


@check_shapes(
    "mean: [batch, Q]",
    "covariance: [batch, Q, ...]",
    "return[0]: [batch, D]",
    "return[1]: [batch, D]",
)
def closed_form_predictive(
    model: SVGP, mean: tf.Tensor, covariance: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor]:
    r"""Mean and variance [B, D] of :math:`p(y_{nd}) = E_{q(x_n)} E_{q(f_d(x_n))} N(y_{nd} \mid
    f_d, \sigma^2)` for q(x_n) with ``mean`` [B, Q] and ``covariance`` ([B, Q] marginal or
    [B, Q, Q] full), exactly (no draws of x), in the terms of the module docstring:

    .. math::

        E[y_{nd}] = c_d + \psi_1^T a_d,\qquad
        V[y_{nd}] = a_d^T \Psi_2 a_d - (\psi_1^T a_d)^2 + \psi_0
        - \mathrm{tr}(K_{uu}^{-1}\Psi_2) + \mathrm{tr}(B_d \Psi_2) + \sigma^2.

    Costs O(B M^2 D), like one closed-form step. ``model`` must pass
    :func:`closed_form_applies`."""
    f = _f_statistics(model, mean, covariance)
    projected = tf.linalg.matmul(f.psi_1, f.a)  # [B, D]
    quadratic = tf.einsum("bmk,kd,md->bd", f.psi_2, f.a, f.a)
    variance = quadratic - tf.square(projected) + f.prior_variance[:, None] + f.posterior_traces
    noise = _noise_variance(model.likelihood)
    return model.mean_function(mean) + projected, tf.maximum(variance, 0.0) + noise


class _FStatistics(NamedTuple):
    """What the closed forms need of q(f(x_n)) under Gaussian q(x_n), for a batch of B rows."""

    psi_1: tf.Tensor
    """[B, M]"""
    psi_2: tf.Tensor
    """[B, M, M]"""
    a: tf.Tensor
    r"""[M, D]: :math:`K_{uu}^{-1} E[u]`."""
    prior_variance: tf.Tensor
    r"""[B]: :math:`\psi_0 - \mathrm{tr}(K_{uu}^{-1}\Psi_2)`."""
    posterior_traces: tf.Tensor
    r"""[B, D or 1]: :math:`\mathrm{tr}(B_d \Psi_2)`."""


def _f_statistics(model: SVGP, mean: tf.Tensor, covariance: tf.Tensor) -> _FStatistics:
    """The psi statistics of q(x_n) (``mean`` [B, Q], ``covariance`` [B, Q] or [B, Q, Q]) and the
    moments of q(u) they meet."""
    kernel, inducing = model.kernel, model.inducing_variable
    psi_0, psi_1, psi_2 = _psi_statistics(kernel, inducing, mean, covariance)
    Lz = tf.linalg.cholesky(Kuu(inducing, kernel, jitter=gpflow.config.default_jitter()))
    a, B = _whitened_moments(Lz, model.q_mu, model.q_sqrt, model.whiten)
    # tr(K Psi_2) = sum(K * Psi_2) for symmetric K: O(B M^2) per matrix K.
    Kmm_inverse = tf.linalg.cholesky_solve(Lz, tf.eye(tf.shape(Lz)[0], dtype=Lz.dtype))
    prior_trace = tf.einsum("mk,bmk->b", Kmm_inverse, psi_2)
    posterior_traces = tf.einsum("fmk,bmk->bf", B, psi_2)
    return _FStatistics(psi_1, psi_2, a, psi_0 - prior_trace, posterior_traces)


def _noise_variance(likelihood: Likelihood) -> tf.Tensor | None:
    """The one noise variance [] of a Gaussian ``likelihood`` (masked or not), else None."""
    base = base_likelihood(likelihood)
    if type(base) is not gpflow.likelihoods.Gaussian or base.variance is None:
        return None
    return base.variance if base.variance.shape.rank == 0 else None


@check_shapes(
    "inducing.Z: [M, Q]",
    "mean: [batch, Q]",
    "covariance: [batch, Q, ...]",
    "return[0]: [batch]",
    "return[1]: [batch, M]",
    "return[2]: [batch, M, M]",
)
def _psi_statistics(
    kernel: SquaredExponential, inducing: InducingPoints, mean: tf.Tensor, covariance: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    r""":math:`\psi_0` [B], :math:`\psi_1` [B, M] and :math:`\Psi_2` [B, M, M] for q(x_n) with
    ``mean`` [B, Q] and ``covariance``: marginal variances [B, Q] or full [B, Q, Q]."""
    if covariance.shape.rank == 2:
        return diagonal_psi_statistics(kernel, inducing.Z, mean, covariance)
    distribution = Gaussian(mean, covariance)
    psi_0 = expectation(distribution, kernel)
    psi_1 = expectation(distribution, (kernel, inducing))
    psi_2 = expectation(distribution, (kernel, inducing), (kernel, inducing))
    return psi_0, psi_1, psi_2


@check_shapes(
    "Lz: [M, M]",
    "q_mu: [M, D]",
    "q_sqrt: [L, M, M]",
    "return[0]: [M, D]",
    "return[1]: [L, M, M]",
)
def _whitened_moments(
    Lz: tf.Tensor, q_mu: tf.Tensor, q_sqrt: tf.Tensor, whiten: bool
) -> tuple[tf.Tensor, tf.Tensor]:
    r""":math:`a = K_{uu}^{-1} E[u]` [M, D] and :math:`B = K_{uu}^{-1} \mathrm{Cov}[u]
    K_{uu}^{-1}` [L, M, M] (L = D, or 1 for a shared covariance) from q(u)'s ``q_mu`` and
    ``q_sqrt``, with :math:`K_{uu} = L_z L_z^\top`. Whitened, :math:`u = L_z v`, so
    :math:`a = L_z^{-\top} m` and :math:`B = (L_z^{-\top} L)(L_z^{-\top} L)^\top`."""
    q_sqrt = tf.linalg.band_part(q_sqrt, -1, 0)
    if whiten:
        a = tf.linalg.triangular_solve(Lz, q_mu, lower=True, adjoint=True)
        factors = tf.linalg.triangular_solve(
            tf.broadcast_to(Lz, tf.shape(q_sqrt)), q_sqrt, lower=True, adjoint=True
        )
    else:
        a = tf.linalg.cholesky_solve(Lz, q_mu)
        factors = tf.linalg.cholesky_solve(tf.broadcast_to(Lz, tf.shape(q_sqrt)), q_sqrt)
    return a, tf.linalg.matmul(factors, factors, transpose_b=True)


@check_shapes(
    "Z: [M, Q]",
    "mean: [batch, Q]",
    "variance: [batch, Q]",
    "return[0]: [batch]",
    "return[1]: [batch, M]",
    "return[2]: [batch, M, M]",
)
def diagonal_psi_statistics(
    kernel: SquaredExponential, Z: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    r""":math:`\psi_0` [B], :math:`\psi_1` [B, M] and :math:`\Psi_2` [B, M, M] of a
    squared-exponential (ARD) kernel under :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, s_n)` (``mean``
    and ``variance`` [B, Q]), with Z [M, Q]:

    .. math::

        \psi_1 = \sigma^2 \prod_q \sqrt{l_q^2 / c_{nq}}\,
        e^{-\sum_q (\mu_{nq} - z_{mq})^2 / 2 c_{nq}},\quad c = l^2 + s,

        \Psi_2 = \sigma^4 \prod_q \sqrt{l_q^2 / d_{nq}}\,
        e^{-\sum_q (z_{mq} - z_{kq})^2 / 4 l_q^2 - \sum_q (\mu_{nq} - \bar z_q)^2 / d_{nq}},
        \quad d = l^2 + 2 s,\ \bar z = (z_m + z_k) / 2.

    The squares are expanded so that the sums over q are matrix products ([B, Q] x [Q, M^2])
    rather than a [B, M, M, Q] tensor; GPflow's general ``expectation`` factorises a full
    covariance per row instead.
    """
    num_inducing = tf.shape(Z)[0]
    lengthscales = tf.broadcast_to(kernel.lengthscales, tf.shape(mean)[-1:])
    squared = tf.square(lengthscales)  # [Q]
    psi_0 = tf.fill(tf.shape(mean)[:1], tf.convert_to_tensor(kernel.variance))

    def gaussian_overlap(points: tf.Tensor, widths: tf.Tensor) -> tf.Tensor:
        """sum_q (mean_nq - p_q)^2 / widths_nq for points [P, Q]: [B, P]."""
        return (
            tf.reduce_sum(tf.square(mean) / widths, axis=-1, keepdims=True)
            - 2.0 * tf.linalg.matmul(mean / widths, points, transpose_b=True)
            + tf.linalg.matmul(1.0 / widths, tf.square(points), transpose_b=True)
        )

    widths_1 = squared + variance  # [B, Q]
    log_scale_1 = 0.5 * tf.reduce_sum(tf.math.log(squared / widths_1), axis=-1, keepdims=True)
    psi_1 = kernel.variance * tf.exp(log_scale_1 - 0.5 * gaussian_overlap(Z, widths_1))

    widths_2 = squared + 2.0 * variance
    log_scale_2 = 0.5 * tf.reduce_sum(tf.math.log(squared / widths_2), axis=-1, keepdims=True)
    midpoints = tf.reshape(0.5 * (Z[:, None, :] + Z[None, :, :]), [-1, tf.shape(Z)[1]])
    separation = tf.reduce_sum(
        tf.square(Z[:, None, :] - Z[None, :, :]) / (4.0 * squared), axis=-1
    )  # [M, M]
    exponent = log_scale_2 - gaussian_overlap(midpoints, widths_2)  # [B, M^2]
    shape = tf.stack([tf.shape(mean)[0], num_inducing, num_inducing])
    psi_2 = tf.square(kernel.variance) * tf.exp(tf.reshape(exponent, shape) - separation)
    return psi_0, psi_1, psi_2
