r"""q(u) with one covariance shared by the D outputs:
:math:`q(u_d) = \mathcal{N}(m_d, S)`, :math:`S = L L^\top` [M, M].

With per-output covariances the predictive variance of every output needs its own
:math:`L_d^\top A` [M, B], which costs B M^2 D per step. Sharing S makes the predictive variance
one [B] vector for all outputs, so a step costs O(B M D + B M^2 + M^3) and q(u) holds M D + M^2
numbers.
It is exact at the optimum when every output has the same Gaussian likelihood and the same
observed rows (the optimal S_d does not depend on d then) and a restriction of the variational
family otherwise.

Both functions take ``q_sqrt`` as [1, M, M] (the layout a model stores) and ``q_mu`` as [M, D],
whitened (:math:`u = L_z v`, :math:`K_{uu} = L_z L_z^\top`, :math:`q(v_d) = \mathcal{N}(m_d, S)`)
or not (:math:`q(u_d) = \mathcal{N}(m_d, S)`).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter
from gpflow.config import default_jitter
from gpflow.covariances import Kuf, Kuu
from gpflow.inducing_variables import InducingVariables
from gpflow.kernels import Kernel
from gpflow.models import SVGP
from gpflow.posteriors import PrecomputeCacheType, create_posterior
from gpflow.utilities import to_default_float, triangular

__all__ = ["SharedCovarianceSVGP", "shared_conditional", "shared_prior_kl", "covariance_layout"]


@check_shapes(
    "X: [batch, Q]",
    "q_mu: [M, D]",
    "q_sqrt: [1, M, M]",
    "return[0]: [batch, D]",
    "return[1]: [batch]",
)
def shared_conditional(
    X: tf.Tensor,
    inducing_variable: InducingVariables,
    kernel: Kernel,
    q_mu: tf.Tensor,
    q_sqrt: tf.Tensor,
    jitter: float,
    whiten: bool,
) -> tuple[tf.Tensor, tf.Tensor]:
    r"""Marginals of :math:`q(f(X)) = \int p(f \mid u)\, q(u)\, du`: mean [B, D] and
    variance [B],

    .. math::

        \mu_n = A_n^\top m, \qquad
        \sigma^2_n = k(x_n, x_n) - a_n^\top a_n + \lVert L^\top A_n \rVert^2,

    with :math:`a_n = L_z^{-1} k_u(x_n)` and :math:`A_n = a_n` (whitened) or
    :math:`K_{uu}^{-1} k_u(x_n)`, and no mean function.
    """
    Kmm = Kuu(inducing_variable, kernel, jitter=jitter)  # [M, M]
    Kmn = Kuf(inducing_variable, kernel, X)  # [M, B]
    Lz = tf.linalg.cholesky(Kmm)
    A = tf.linalg.triangular_solve(Lz, Kmn, lower=True)  # [M, B]
    variance = kernel(X, full_cov=False) - tf.reduce_sum(tf.square(A), axis=0)
    if not whiten:
        A = tf.linalg.triangular_solve(tf.linalg.adjoint(Lz), A, lower=False)
    L = tf.linalg.band_part(q_sqrt[0], -1, 0)  # [M, M]
    projected = tf.linalg.matmul(L, A, transpose_a=True)  # [M, B]
    variance += tf.reduce_sum(tf.square(projected), axis=0)
    mean = tf.linalg.matmul(A, q_mu, transpose_a=True)  # [B, D]
    return mean, variance


@check_shapes("q_mu: [M, D]", "q_sqrt: [1, M, M]", "return: []")
def shared_prior_kl(
    inducing_variable: InducingVariables,
    kernel: Kernel,
    q_mu: tf.Tensor,
    q_sqrt: tf.Tensor,
    jitter: float,
    whiten: bool,
) -> tf.Tensor:
    r""":math:`\sum_d \mathrm{KL}(\mathcal{N}(m_d, S) \,\|\, \mathcal{N}(0, K))`, K = I
    (whitened) or :math:`K_{uu}`: a scalar,

    .. math::

        2 \mathrm{KL} = D \operatorname{tr}(K^{-1} S) + \sum_d m_d^\top K^{-1} m_d - D M
        + D \log|K| - D \log|S|.
    """
    num_inducing = tf.shape(q_mu)[0]
    num_outputs = to_default_float(tf.shape(q_mu)[1])
    L = tf.linalg.band_part(q_sqrt[0], -1, 0)
    log_det_S = 2.0 * tf.reduce_sum(tf.math.log(tf.abs(tf.linalg.diag_part(L))))
    if whiten:
        trace = tf.reduce_sum(tf.square(L))
        mahalanobis = tf.reduce_sum(tf.square(q_mu))
        log_det_K = tf.zeros([], q_mu.dtype)
    else:
        Lz = tf.linalg.cholesky(Kuu(inducing_variable, kernel, jitter=jitter))
        trace = tf.reduce_sum(tf.square(tf.linalg.triangular_solve(Lz, L, lower=True)))
        mahalanobis = tf.reduce_sum(tf.square(tf.linalg.triangular_solve(Lz, q_mu, lower=True)))
        log_det_K = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(Lz)))
    twice_kl = (
        num_outputs * (trace - to_default_float(num_inducing) + log_det_K - log_det_S) + mahalanobis
    )
    return 0.5 * twice_kl


class SharedCovarianceSVGP(SVGP):
    """GPflow's SVGP whose q(u) covariance is one per output (``q_sqrt`` [D, M, M]) or, with
    ``shared_covariance``, one factor for all D outputs (``q_sqrt`` [1, M, M]): its predictions,
    KL and posterior then come from :func:`shared_conditional` and :func:`shared_prior_kl`."""

    shared_covariance: bool = False
    """Whether q(u) has one covariance for all outputs."""

    def _share_q_sqrt(self, shared: bool, num_inducing: int) -> None:
        """With ``shared``, one q(u) covariance factor [1, M, M] for all D outputs."""
        self.shared_covariance = shared
        if shared:
            self.q_diag = False
            self.q_sqrt = Parameter(np.eye(num_inducing)[None], transform=triangular())

    @property
    def covariance_layout(self) -> str:
        """How q(u) stores its covariance, in words (used in error messages)."""
        return covariance_layout(self.shared_covariance, self.num_latent_gps)

    @inherit_check_shapes
    def predict_f(
        self, Xnew: tf.Tensor, full_cov: bool = False, full_output_cov: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean [B, D] and variance of q(f(Xnew)), as GPflow's SVGP.

        With a shared covariance the marginal variance is one [B] vector for all outputs,
        broadcast to [B, D]; full covariances fall back to GPflow's conditional.
        """
        if not self.shared_covariance or full_cov or full_output_cov:
            return super().predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
        mean, variance = shared_conditional(Xnew, *self._shared_q_u())
        mean += self.mean_function(Xnew)
        return mean, tf.broadcast_to(variance[:, None], tf.shape(mean))

    @inherit_check_shapes
    def prior_kl(self) -> tf.Tensor:
        r""":math:`\sum_d \mathrm{KL}(q(u_d) \| p(u_d))`: a scalar."""
        if not self.shared_covariance:
            return super().prior_kl()
        return shared_prior_kl(*self._shared_q_u())

    def _shared_q_u(self) -> tuple[InducingVariables, Kernel, Parameter, Parameter, float, bool]:
        """The arguments after X of :func:`shared_conditional` and of :func:`shared_prior_kl`:
        the inducing variables, kernel, q(u) (``q_mu`` [M, D], ``q_sqrt`` [1, M, M]), jitter and
        whitening of this model."""
        return (
            self.inducing_variable,
            self.kernel,
            self.q_mu,
            self.q_sqrt,
            default_jitter(),
            self.whiten,
        )

    def posterior(self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR):
        """GPflow's posterior object; a shared covariance is given to it repeated per output
        (D M^2 numbers), since GPflow's posteriors hold one factor per output."""
        if not self.shared_covariance:
            return super().posterior(precompute_cache)
        M = self.inducing_variable.num_inducing
        return create_posterior(
            self.kernel,
            self.inducing_variable,
            self.q_mu,
            tf.broadcast_to(self.q_sqrt, [self.num_latent_gps, M, M]),
            whiten=self.whiten,
            mean_function=self.mean_function,
            precompute_cache=precompute_cache,
        )


def covariance_layout(shared: bool, num_outputs: int) -> str:
    """The q(u) covariance layout in words, with its ``shared_covariance`` value."""
    if shared:
        return "one q(u) covariance shared by all outputs (shared_covariance=True)"
    return f"one q(u) covariance per output, {num_outputs} in all (shared_covariance=False)"
