r"""A trained model's q(f | x) at new rows' latent points, with its derivatives in x, every
parameter frozen: what Laplace inference of new rows (:mod:`.laplace`) steps on.

With inducing points Z, :math:`K_{ZZ} = L L^\top` and one q(u) covariance shared by the D
outputs, a row's GP input :math:`X = [x, c]` (latents, observed inputs) gives

.. math::

    m(x) = k_{XZ} W + \mu_0(X) + o, \qquad v(x) = k_{XX} - k_{XZ} P k_{ZX},

with :math:`W = L^{-\top} m_u`, :math:`P = L^{-\top}(I - S) L^{-1}` (whitened; unwhitened
:math:`W = K_{ZZ}^{-1} m_u`, :math:`P = K_{ZZ}^{-1} - K_{ZZ}^{-1} S K_{ZZ}^{-1}`), the means [D]
and one variance for every output. The Jacobian of the means, :math:`J = \partial_x k_{XZ}\, W`
[Q, D], is one product of the kernel's Jacobian [Q, M] with W per row, the work of the D
outputs; everything else costs the kernel's M (or M²) per row.

:class:`FrozenGP` takes the kernel's derivatives by forward-mode (Jacobian) and nested
reverse-mode (curvature) differentiation, for any kernel and mean function;
:class:`SquaredExponentialGP` writes them out for a squared exponential kernel on the latents
(with ARD), summed with any kernel on the observed inputs, and a mean function that does not
read x (the single-cell model's): :math:`\partial_q k_m = -k_m \delta_{mq}`,
:math:`\partial_q \partial_p k_m = k_m (\delta_{mq} \delta_{mp} - [q = p] / \ell_q^2)` with
:math:`\delta_{mq} = (x_q - z_{mq}) / \ell_q^2`, no graph of derivatives to build or run.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.base import Parameter
from gpflow.config import default_jitter
from gpflow.kernels import Kernel
from gpflow.mean_functions import MeanFunction

from ..components.covariates import CovariateKernel, SizeFactorOffset
from .new_row_model import NewRowModel

__all__ = ["FrozenGP", "LaplaceModel", "SquaredExponentialGP", "Slopes", "frozen_gp", "LOW"]

LOW = tf.float32
r"""The precision of the work over the D outputs (their means, Jacobians and the likelihood's
terms), which CPUs with wide vector units run at several times double precision's throughput;
the latents, the steps and q(x*) stay in the model's. A row's :math:`\phi` is then known to about
:math:`10^{-7}` of its terms' size, which places its mode to a small fraction of q(x*)'s spread
(steps below that cannot be judged)."""


class LaplaceModel(NewRowModel, Protocol):
    """What the frozen GP and :class:`~gpflow_svi_gplvm.prediction.laplace.LaplaceLatents` read
    of a trained model, such as :class:`~gpflow_svi_gplvm.SVIGPLVM`: new-row inference's reads,
    and the SVGP's prior and q(u), which the frozen GP projects once."""

    kernel: Kernel
    mean_function: MeanFunction
    q_mu: Parameter
    q_sqrt: Parameter
    whiten: bool


class Slopes(NamedTuple):
    r"""The derivatives in x of a block's q(f | x) at its latent points: the kernel's Jacobian
    :math:`\partial_x k_{XZ}` [A, Q, M], the mean function's [A, Q, D] in :data:`LOW`
    precision (None where it does not read x) and the variance's [A, Q]."""

    kernel: tf.Tensor
    prior_mean: tf.Tensor | None
    variance: tf.Tensor


def frozen_gp(model: LaplaceModel) -> FrozenGP:
    """:class:`SquaredExponentialGP` where ``model``'s kernel and mean function allow it, else
    :class:`FrozenGP`."""
    if SquaredExponentialGP.applies(model):
        return SquaredExponentialGP(model)
    return FrozenGP(model)


class FrozenGP:
    """The frozen model's q(f | x) at GP inputs [x, c] (see the module): mean [A, D] in
    :data:`LOW` precision and one variance [A, 1], and their derivatives in x."""

    def __init__(self, model: LaplaceModel):
        self.model = model
        Z = model.inducing_variable.Z
        Kzz = model.kernel.K(Z) + default_jitter() * tf.eye(tf.shape(Z)[0], dtype=Z.dtype)
        L = tf.linalg.cholesky(Kzz)
        q_mu = tf.convert_to_tensor(model.q_mu)
        S_factor = tf.convert_to_tensor(model.q_sqrt)[0]  # [M, M], shared by the outputs
        eye = tf.eye(tf.shape(L)[0], dtype=L.dtype)
        L_inv = tf.linalg.triangular_solve(L, eye, lower=True)  # L^-1
        if model.whiten:
            W = tf.linalg.matmul(L_inv, q_mu, transpose_a=True)  # L^-T m_u
            inner = eye - tf.matmul(S_factor, S_factor, transpose_b=True)
        else:
            W = tf.linalg.cholesky_solve(L, q_mu)  # Kzz^-1 m_u
            S = tf.matmul(S_factor, S_factor, transpose_b=True)
            inner = eye - tf.matmul(L_inv, tf.matmul(S, L_inv, transpose_b=True))
        self.P = tf.matmul(L_inv, tf.matmul(inner, L_inv), transpose_a=True)  # [M, M]
        self.W = tf.cast(W, LOW)  # [M, D]
        self.Z = Z
        self.latent_dim = int(model.latent_dim)

    def _parts(self, X: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        model = self.model
        return model.kernel.K(X, self.Z), model.kernel.K_diag(X), model.mean_function(X)

    @staticmethod
    def _joined(x: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
        return tf.concat([x, inputs], axis=1) if inputs.shape[1] else x

    def at(
        self, x: tf.Tensor, inputs: tf.Tensor, offsets: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean [A, D] and variance [A, 1] of f at latent points x [A, Q] of rows with observed
        ``inputs`` [A, R] and ``offsets`` [A, D] (or [1, 1])."""
        K, diag, prior_mean = self._parts(self._joined(x, inputs))
        return self._moments(K, diag, prior_mean, offsets)

    def _moments(self, K, diag, prior_mean, offsets) -> tuple[tf.Tensor, tf.Tensor]:
        mean = tf.matmul(tf.cast(K, LOW), self.W) + tf.cast(prior_mean, LOW) + offsets
        variance = diag - tf.reduce_sum(tf.matmul(K, self.P) * K, axis=1)
        return mean, tf.cast(tf.maximum(variance, 1e-12), LOW)[:, None]

    def rate(self, x: tf.Tensor, inputs: tf.Tensor, likelihood) -> tf.Tensor:
        """The likelihood's predictive mean [C, D] at latent points x [C, Q] with ``inputs``."""
        mean, variance = self.at(x, inputs, tf.zeros([1, 1], LOW))
        wide = tf.cast(tf.broadcast_to(variance, tf.shape(mean)), x.dtype)
        return tf.cast(likelihood.predict_mean_and_var(x, tf.cast(mean, x.dtype), wide)[0], LOW)

    def reduced(self, weights: tf.Tensor) -> tf.Tensor:
        r""":math:`W a` [A, M] of weights a [A, D] over the outputs, in the latents' precision: what
        the means' sums :math:`\sum_d a_d m_d(x)` read of them, bar the mean function."""
        return tf.cast(tf.matmul(weights, self.W, transpose_b=True), self.Z.dtype)

    def along(self, slopes: Slopes, reduced: tf.Tensor, weights: tf.Tensor) -> tf.Tensor:
        r""":math:`\sum_d a_d \partial_x m_d` [A, Q] for weights a [A, D] (``weights``, with
        ``reduced`` = :meth:`reduced` of them): the kernel's Jacobian times W a, no [A, Q, D]
        Jacobian."""
        found = tf.linalg.matvec(slopes.kernel, reduced)
        if slopes.prior_mean is not None:
            found += tf.cast(tf.linalg.matvec(slopes.prior_mean, weights), found.dtype)
        return found

    def mean_jacobian(self, slopes: Slopes, columns: tf.Tensor | None = None) -> tf.Tensor:
        r""":math:`\partial_x m` [A, Q, D'] of the outputs ``columns`` [D'] (default all): the
        kernel's Jacobian [A Q, M] times W in one product (a batched one runs several times
        slower)."""
        W = self.W if columns is None else tf.gather(self.W, columns, axis=1)
        shape = tf.shape(slopes.kernel)
        flat = tf.reshape(tf.cast(slopes.kernel, LOW), [-1, shape[2]])
        found = tf.reshape(tf.matmul(flat, W), [shape[0], shape[1], tf.shape(W)[1]])
        if slopes.prior_mean is not None:
            prior = slopes.prior_mean
            found += prior if columns is None else tf.gather(prior, columns, axis=2)
        return found

    def with_jacobians(self, x: tf.Tensor, inputs: tf.Tensor, offsets: tf.Tensor):
        """:meth:`at` and its :class:`Slopes`: the kernel's and the mean function's Jacobians
        by one forward-mode pass per latent dimension."""
        X = self._joined(x, inputs)
        K, diag, prior_mean = self._parts(X)
        mean, variance = self._moments(K, diag, prior_mean, offsets)
        kernel_rows, diag_rows, prior_rows = [], [], []
        for q in range(self.latent_dim):
            tangent = tf.one_hot(tf.fill(tf.shape(x)[:1], q), tf.shape(X)[1], dtype=X.dtype)
            with tf.autodiff.ForwardAccumulator(X, tangent) as accumulator:
                K_q, diag_q, prior_q = self._parts(X)
            kernel_rows.append(accumulator.jvp(K_q))
            diag_rows.append(accumulator.jvp(diag_q))
            prior_rows.append(accumulator.jvp(prior_q))
        dK = tf.stack(kernel_rows, axis=1)  # [A, Q, M]
        prior_jac = None
        if all(row is not None for row in prior_rows):  # a mean function that reads x
            prior_jac = tf.cast(tf.stack(prior_rows, axis=1), LOW)
        variance_jac = -2.0 * tf.reduce_sum(dK * tf.matmul(K, self.P)[:, None, :], axis=2)
        if all(row is not None for row in diag_rows):  # a kernel whose k(x, x) moves with x
            variance_jac += tf.stack(diag_rows, axis=1)
        return (mean, variance), Slopes(dK, prior_jac, variance_jac)

    def curvature(
        self,
        x: tf.Tensor,
        inputs: tf.Tensor,
        mean_weights: tf.Tensor,
        reduced: tf.Tensor,
        variance_weight: tf.Tensor,
    ) -> tf.Tensor:
        r""":math:`\sum_d a_d \nabla^2 m_d(x) + b \nabla^2 v(x)` [A, Q, Q] per row, for weights
        a [A, D] (``mean_weights``; ``reduced`` = :meth:`reduced` of them) and b [A]
        (``variance_weight``): the second-order part of the Hessian of
        :math:`\sum_d \ell_d(m_d(x), v(x))`, of a scalar per row whose cost is the kernel's,
        not the D outputs' (:math:`\sum_d a_d m_d = K_{xZ} W a + \mu_0^\top a`)."""
        high = x.dtype
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                K, diag, prior_mean = self._parts(self._joined(x, inputs))
                variance = diag - tf.reduce_sum(tf.matmul(K, self.P) * K, axis=1)
                weighted = (
                    tf.reduce_sum(K * reduced, axis=1)
                    + tf.reduce_sum(prior_mean * tf.cast(mean_weights, high), axis=1)
                    + variance_weight * variance
                )
                total = tf.reduce_sum(weighted)
            gradient = inner.gradient(total, x)
        return outer.batch_jacobian(gradient, x)


class SquaredExponentialGP(FrozenGP):
    """:class:`FrozenGP` with the derivatives of a squared exponential kernel on the latents
    written out (see the module)."""

    @staticmethod
    def applies(model: LaplaceModel) -> bool:
        """Whether ``model`` has a squared exponential kernel reading every latent dimension
        (alone, or summed with a kernel on the observed inputs) and a mean function that does
        not read x (a constant or zero, with or without the log size factor)."""
        kernel = model.kernel
        if isinstance(kernel, CovariateKernel):
            if kernel.combination != "sum":
                return False
            kernel = kernel.latent_kernel
        if type(kernel) is not gpflow.kernels.SquaredExponential:
            return False
        dims = kernel.active_dims
        Q = int(model.latent_dim)
        every = isinstance(dims, slice) and dims == slice(None, None, None)
        if not (every or np.array_equal(np.asarray(dims), np.arange(Q))):
            return False
        mean = model.mean_function
        mean = mean.base if isinstance(mean, SizeFactorOffset) else mean
        return type(mean) in (gpflow.mean_functions.Constant, gpflow.mean_functions.Zero)

    def __init__(self, model: LaplaceModel):
        super().__init__(model)
        kernel = model.kernel
        self.observed_kernel, self.num_observed = None, 0
        if isinstance(kernel, CovariateKernel):
            self.observed_kernel, self.num_observed = kernel.covariate_kernel, kernel.num_covariates
            kernel = kernel.latent_kernel
        Q = self.latent_dim
        lengthscales = tf.convert_to_tensor(kernel.lengthscales)
        self.inverse_squares = tf.broadcast_to(1.0 / tf.square(lengthscales), [Q])  # [Q]
        self.kernel_variance = tf.convert_to_tensor(kernel.variance)
        Z = tf.convert_to_tensor(self.Z)
        self.Zx = Z[:, :Q]
        self.Zc = Z[:, Q : Q + self.num_observed]

    def _latent_parts(self, x: tf.Tensor, inputs: tf.Tensor):
        r"""The latent kernel's values [A, M], the scaled differences
        :math:`\delta_{mq}` [A, M, Q], and the whole kernel's values [A, M] and diagonal [A]."""
        gap = x[:, None, :] - self.Zx[None]  # [A, M, Q]
        scaled = gap * self.inverse_squares
        latent = self.kernel_variance * tf.exp(-0.5 * tf.reduce_sum(scaled * gap, axis=2))
        diag = self.kernel_variance * tf.ones_like(x[:, 0])
        K = latent
        if self.observed_kernel is not None:
            c = inputs[:, : self.num_observed]
            K = K + self.observed_kernel.K(c, self.Zc)
            diag = diag + self.observed_kernel.K_diag(c)
        return latent, scaled, K, diag

    def _prior_mean(self, x: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
        return self.model.mean_function(self._joined(x, inputs))

    def at(self, x, inputs, offsets):
        _, _, K, diag = self._latent_parts(x, inputs)
        return self._moments(K, diag, self._prior_mean(x, inputs), offsets)

    def with_jacobians(self, x, inputs, offsets):
        latent, scaled, K, diag = self._latent_parts(x, inputs)
        mean, variance = self._moments(K, diag, self._prior_mean(x, inputs), offsets)
        dK = -tf.linalg.matrix_transpose(latent[:, :, None] * scaled)  # [A, Q, M]
        variance_jac = -2.0 * tf.reduce_sum(dK * tf.matmul(K, self.P)[:, None, :], axis=2)
        return (mean, variance), Slopes(dK, None, variance_jac)

    def curvature(self, x, inputs, mean_weights, reduced, variance_weight):
        latent, scaled, K, _ = self._latent_parts(x, inputs)
        b = variance_weight[:, None]
        # sum_m c_m d2k_m with c = W a - 2 b K P (the means' and the variance's second term)
        c = (reduced - 2.0 * b * tf.matmul(K, self.P)) * latent  # [A, M]
        second = tf.matmul(scaled * c[:, :, None], scaled, transpose_a=True)  # [A, Q, Q]
        second -= tf.linalg.diag(tf.reduce_sum(c, axis=1)[:, None] * self.inverse_squares)
        # the variance's first term, -2 b dK P dK^T
        dK = -tf.linalg.matrix_transpose(latent[:, :, None] * scaled)  # [A, Q, M]
        projected = tf.reshape(
            tf.matmul(tf.reshape(dK, [-1, tf.shape(dK)[2]]), self.P), tf.shape(dK)
        )
        outer = tf.matmul(projected, dK, transpose_b=True)  # [A, Q, Q]
        return second - 2.0 * b[:, :, None] * outer
