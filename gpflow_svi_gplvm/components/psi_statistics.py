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

Summed over the observed entries of a row this has no Monte Carlo variance. The last four terms
are :math:`\psi_0 + \langle \Psi_2, G_d \rangle` with
:math:`G_d = a_d a_d^T + B_d - K_{uu}^{-1}` [M, M]. On complete data the row needs only
:math:`\sum_d G_d`, so :math:`\Psi_2` meets the outputs once (a step costs O(B M^2 Q + D M^2 +
M^3)); with missing entries each row weighs :math:`\langle \Psi_2, G_d \rangle` by its own
observed outputs, O(B M^2 D), more than Monte Carlo's O(B M D) with a shared q(u) covariance,
which is why ``latent_expectation="auto"`` leaves that case to Monte Carlo.
"""

from __future__ import annotations

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

from ..likelihoods import base_likelihood, is_masked, likelihood_facts

__all__ = [
    "LATENT_EXPECTATIONS",
    "closed_form_applies",
    "closed_form_data_term",
    "closed_form_predictive",
    "diagonal_psi_statistics",
    "full_psi_2",
]

LATENT_EXPECTATIONS = ("auto", "closed-form", "monte-carlo")
"""The values of ``latent_expectation``."""


def closed_form_applies(model: SVGP) -> str | None:
    """None when the closed form covers ``model``'s kernel, likelihood, mean function and
    inducing inputs, else the reason it does not (for error messages)."""
    if type(model.kernel) is not SquaredExponential:
        return f"the kernel is {type(model.kernel).__name__}, not a SquaredExponential"
    if likelihood_facts(model.likelihood).noise_variance is None:
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
    [B, Q, Q]. ``model`` must pass :func:`closed_form_applies`.

    In the terms of the module docstring an entry's expected square is
    :math:`r^2 - 2 r \psi_1^T a_d + \psi_0 + \langle \Psi_2, G_d \rangle` with
    :math:`G_d = a_d a_d^T + B_d - K_{uu}^{-1}` [M, M]; unmasked, the row needs only
    :math:`\langle \Psi_2, \sum_d G_d \rangle`, one product of the flattened :math:`\Psi_2`
    [B, M^2] with an M^2 vector."""
    kernel, inducing = model.kernel, model.inducing_variable
    variance = likelihood_facts(likelihood).noise_variance
    if not isinstance(kernel, SquaredExponential) or not isinstance(inducing, InducingPoints):
        raise ValueError(f"No closed form for this model: {closed_form_applies(model)}.")
    if variance is None:
        raise ValueError(f"No closed form for a {type(base_likelihood(likelihood)).__name__}.")
    masked = is_masked(likelihood)
    psi_0, psi_1, psi_2 = _psi_statistics(kernel, inducing, mean, covariance)
    a, G = _inducing_moments(model, summed=not masked)  # [M, D], [M^2, D or 1]

    observed = tf.logical_not(tf.math.is_nan(Y))
    weights = tf.cast(observed, Y.dtype)  # [B, D]
    offset = model.mean_function(mean)  # [B, D] (constant in x)
    residual = tf.where(observed, Y - offset, tf.zeros_like(Y))
    counts = tf.reduce_sum(weights, axis=-1)  # [B]

    cross = tf.reduce_sum(residual * tf.linalg.matmul(psi_1, a), axis=-1)  # [B]
    second = tf.linalg.matmul(_flattened(psi_2), G)  # [B, D or 1]: <Psi_2, G_d>
    second = tf.reduce_sum(weights * second, axis=-1) if masked else second[:, 0]
    expected_square = (
        tf.reduce_sum(tf.square(residual), axis=-1) - 2.0 * cross + second + counts * psi_0
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

    Costs O(B M^2 D), like one closed-form step with gaps. ``model`` must pass
    :func:`closed_form_applies`."""
    psi_0, psi_1, psi_2 = _psi_statistics(model.kernel, model.inducing_variable, mean, covariance)
    a, G = _inducing_moments(model, summed=False)
    projected = tf.linalg.matmul(psi_1, a)  # [B, D]
    second = tf.linalg.matmul(_flattened(psi_2), G)  # [B, D]
    variance = second - tf.square(projected) + psi_0[:, None]
    noise = likelihood_facts(model.likelihood).noise_variance
    return model.mean_function(mean) + projected, tf.maximum(variance, 0.0) + noise


def _flattened(psi_2: tf.Tensor) -> tf.Tensor:
    r""":math:`\Psi_2` [B, M, M] as [B, M^2]."""
    return tf.reshape(psi_2, tf.stack([tf.shape(psi_2)[0], -1]))


@check_shapes(
    "return[0]: [M, D]",
    "return[1]: [M2, L]",
)
def _inducing_moments(model: SVGP, summed: bool) -> tuple[tf.Tensor, tf.Tensor]:
    r""":math:`a = K_{uu}^{-1} E[u]` [M, D] and the flattened second-moment weights
    :math:`G_d = a_d a_d^T + B_d - K_{uu}^{-1}` as columns [M^2, D], or their sum over the
    outputs [M^2, 1] when ``summed``, with :math:`B_d = K_{uu}^{-1}\mathrm{Cov}[u_d]K_{uu}^{-1}`.

    q(u) is parameterised by m = ``q_mu`` [M, D] and :math:`S_d = L_d L_d^T` (``q_sqrt``), with
    :math:`K_{uu} = L_z L_z^T` and prior covariance P = I whitened (:math:`u = L_z v`), else
    :math:`P = K_{uu}`. Then :math:`G_d = T(m_d m_d^T + S_d - P)` for the map
    :math:`T(H) = L_z^{-T} H L_z^{-1}` whitened, :math:`K_{uu}^{-1} H K_{uu}^{-1}` otherwise, so the
    sum over outputs is one M x M map of :math:`[m, L][m, L]^T - D P`."""
    kernel, inducing = model.kernel, model.inducing_variable
    Kmm = Kuu(inducing, kernel, jitter=gpflow.config.default_jitter())
    Lz = tf.linalg.cholesky(Kmm)
    q_mu = tf.convert_to_tensor(model.q_mu)  # [M, D]
    L = tf.linalg.band_part(tf.convert_to_tensor(model.q_sqrt), -1, 0)  # [F, M, M]
    M, num_outputs = tf.shape(q_mu)[0], tf.shape(q_mu)[1]
    prior = tf.eye(M, dtype=Kmm.dtype) if model.whiten else Kmm
    if summed:
        # A shared factor stands for all D outputs: sqrt(D) L L^T sqrt(D).
        repeats = tf.cast(num_outputs, L.dtype) if L.shape[0] == 1 else tf.constant(1, L.dtype)
        factors = tf.reshape(tf.transpose(L, [1, 0, 2]), tf.stack([M, -1]))  # [M, F M]
        columns = tf.concat([q_mu, tf.sqrt(repeats) * factors], axis=1)
        H = tf.linalg.matmul(columns, columns, transpose_b=True)
        H -= tf.cast(num_outputs, H.dtype) * prior
    else:
        means = tf.transpose(q_mu)[:, :, None]  # [D, M, 1]
        H = tf.linalg.matmul(means, means, transpose_b=True)  # [D, M, M]
        H += tf.linalg.matmul(L, L, transpose_b=True) - prior
    Lz_batch = tf.broadcast_to(Lz, tf.shape(H))
    if model.whiten:
        a = tf.linalg.triangular_solve(Lz, q_mu, lower=True, adjoint=True)
        half = tf.linalg.triangular_solve(Lz_batch, H, lower=True, adjoint=True)  # Lz^-T H
        G = tf.linalg.triangular_solve(
            Lz_batch, tf.linalg.matrix_transpose(half), lower=True, adjoint=True
        )
    else:
        a = tf.linalg.cholesky_solve(Lz, q_mu)
        half = tf.linalg.cholesky_solve(Lz_batch, H)  # K^-1 H
        G = tf.linalg.cholesky_solve(Lz_batch, tf.linalg.matrix_transpose(half))
    G = tf.reshape(G, tf.stack([-1, M * M]))  # [D or 1, M^2]
    return a, tf.transpose(G)


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
    return psi_0, psi_1, full_psi_2(kernel, inducing.Z, mean, covariance)


@check_shapes(
    "Z: [M, Q]",
    "mean: [batch, Q]",
    "covariance: [batch, Q, Q]",
    "return: [batch, M, M]",
)
def full_psi_2(
    kernel: SquaredExponential, Z: tf.Tensor, mean: tf.Tensor, covariance: tf.Tensor
) -> tf.Tensor:
    r""":math:`\Psi_2` [B, M, M] of a squared-exponential (ARD) kernel under
    :math:`q(x_n) = N(\mu_n, S_n)` (``mean`` [B, Q], ``covariance`` [B, Q, Q]), Z [M, Q]: with
    :math:`C_n = L_n L_n^T = \mathrm{diag}(l^2) / 2 + S_n` and :math:`\bar z = (z_m + z_k) / 2`,

    .. math::

        \Psi_{2,nmk} = \sigma^4 e^{-\sum_q (z_{mq} - z_{kq})^2 / 4 l_q^2}
        \frac{\prod_q l_q / \sqrt 2}{|L_n|}
        e^{-\frac12 (\mu_n - \bar z)^T C_n^{-1} (\mu_n - \bar z)},

    GPflow's ``expectation`` written with einsum products, which TensorFlow's oneDNN graph
    rewrite leaves alone (a batched matmul followed by additions it tries to fuse, and logs at
    every trace that it cannot for float64)."""
    lengthscales = tf.broadcast_to(kernel.lengthscales, tf.shape(mean)[-1:])
    squared = tf.square(lengthscales)  # [Q]
    C = tf.linalg.cholesky(0.5 * tf.linalg.diag(squared) + covariance)  # [B, Q, Q]
    log_det = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(C)), axis=-1)  # [B]
    scale = tf.exp(0.5 * tf.reduce_sum(tf.math.log(0.5 * squared)) - log_det)  # [B]
    B = tf.shape(mean)[0]
    mu = tf.linalg.triangular_solve(C, mean[:, :, None], lower=True)[:, :, 0]  # [B, Q]
    half_z = tf.tile(0.5 * tf.transpose(Z)[None], tf.stack([B, 1, 1]))
    z = tf.linalg.triangular_solve(C, half_z, lower=True)  # [B, Q, M]: L^-1 z_m / 2
    # |L^-1 (mu - z_m / 2 - z_k / 2)|^2, expanded
    offset = tf.reduce_sum(tf.square(z), axis=1) - 2.0 * tf.einsum("bq,bqm->bm", mu, z)  # [B, M]
    exponent = (
        tf.reduce_sum(tf.square(mu), axis=-1)[:, None, None]
        + offset[:, :, None]
        + offset[:, None, :]
        + 2.0 * tf.einsum("bqm,bqk->bmk", z, z)
    )
    separations = tf.reduce_sum(tf.square((Z[:, None, :] - Z[None, :, :]) / lengthscales), -1)
    return (
        tf.square(kernel.variance)
        * tf.exp(-0.25 * separations)
        * scale[:, None, None]
        * tf.exp(-0.5 * exponent)
    )


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
    and ``variance`` [B, Q]), with Z [M, Q], offsets :math:`u_{nmq} = \mu_{nq} - z_{mq}` and
    :math:`c = l^2 + s`, :math:`d = l^2 + 2 s`:

    .. math::

        \psi_1 = \sigma^2 \prod_q \sqrt{l_q^2 / c_{nq}}\, e^{-\sum_q u_{nmq}^2 / 2 c_{nq}},

        \Psi_2 = \sigma^4 \prod_q \sqrt{l_q^2 / d_{nq}}\,
        e^{-\sum_q (u_{nmq}^2 + u_{nkq}^2) / 2 d_{nq}
        - \sum_q s_{nq} (z_{mq} - z_{kq})^2 / 2 d_{nq} l_q^2}.

    This is the usual :math:`\Psi_2` exponent, :math:`(\mu_n - \bar z)^2 / d + (z_m - z_k)^2 / 4
    l^2` with :math:`\bar z = (z_m + z_k) / 2`, regrouped by
    :math:`u_m u_k = (u_m^2 + u_k^2 - (z_m - z_k)^2) / 2`: the [B, M, M] part is one matrix
    product [B, Q] x [Q, M^2] of positive weights and squares (as :math:`s \to 0` it vanishes and
    :math:`\Psi_2 \to \psi_1 \psi_1^T`), and the [B, M] parts of :math:`\psi_1` and
    :math:`\Psi_2` are one product [2B, 2Q] x [2Q, M] of the expanded squares. GPflow's general
    ``expectation`` factorises a full covariance per row instead.
    """
    lengthscales = tf.broadcast_to(kernel.lengthscales, tf.shape(mean)[-1:])
    squared = tf.square(lengthscales)  # [Q]
    psi_0 = tf.fill(tf.shape(mean)[:1], tf.convert_to_tensor(kernel.variance))
    widths_1 = squared + variance  # [B, Q]
    widths_2 = squared + 2.0 * variance
    log_scale_1 = 0.5 * tf.reduce_sum(tf.math.log(squared / widths_1), axis=-1, keepdims=True)
    log_scale_2 = 0.5 * tf.reduce_sum(tf.math.log(squared / widths_2), axis=-1)  # [B]
    # Both weights w (1 / c and 1 / 2d) at once.
    weights = tf.concat([1.0 / widths_1, 0.5 / widths_2], axis=0)  # [2B, Q]
    exponents = _weighted_squared_offsets(tf.concat([mean, mean], axis=0), Z, weights)
    exponent_1, half_2 = tf.split(exponents, 2, axis=0)
    psi_1 = kernel.variance * tf.exp(log_scale_1 - 0.5 * exponent_1)
    separations = tf.reshape(tf.square(Z[:, None, :] - Z[None, :, :]), [-1, tf.shape(Z)[1]])
    coupling = tf.linalg.matmul(
        variance / (2.0 * widths_2 * squared), separations, transpose_b=True
    )  # [B, M^2]
    shape = tf.stack([tf.shape(mean)[0], tf.shape(Z)[0], tf.shape(Z)[0]])
    exponent_2 = (
        log_scale_2[:, None, None]
        - half_2[:, :, None]
        - half_2[:, None, :]
        - tf.reshape(coupling, shape)
    )
    psi_2 = tf.square(kernel.variance) * tf.exp(exponent_2)
    return psi_0, psi_1, psi_2


def _weighted_squared_offsets(mean: tf.Tensor, Z: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
    r""":math:`\sum_q w_{nq} (\mu_{nq} - z_{mq})^2` [B, M] for ``mean`` and ``weights`` [B, Q] and
    Z [M, Q]: the squares expanded, one [B, 2Q] x [2Q, M] product."""
    expanded = tf.linalg.matmul(
        tf.concat([weights * mean, weights], axis=1),
        tf.concat([-2.0 * Z, tf.square(Z)], axis=1),
        transpose_b=True,
    )
    return tf.reduce_sum(weights * tf.square(mean), axis=-1, keepdims=True) + expanded
