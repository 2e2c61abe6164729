r"""Natural-gradient steps on q(u) (Salimbeni, Eleftheriadis & Hensman, AISTATS 2018).

q(u) is F Gaussian factors, each over K outputs that share one covariance: per-output
covariances are F = D factors of K = 1 output (``q_sqrt`` [D, M, M]), a shared covariance is
F = 1 factor of K = D outputs (``q_sqrt`` [1, M, M]). For a factor with means m [M, K] and
covariance :math:`S = L L^\top` [M, M] the sufficient statistics are
:math:`(u_k,\ \sum_k u_k u_k^\top)`, so

.. math::

    \theta_1 = S^{-1} m,\quad \theta_2 = -\tfrac12 S^{-1},\qquad
    \eta_1 = m,\quad \eta_2 = K S + m m^\top,

and a natural-gradient step of size :math:`\gamma` on the loss is

.. math::

    \theta \leftarrow \theta - \gamma\, \frac{\partial\,\mathrm{loss}}{\partial \eta}.

With K = 1 this is GPflow's ``NaturalGradient`` (``XiNat``); for a Gaussian likelihood, a full
batch and :math:`\gamma = 1` one step lands on the optimal q(u) for the current latents and
hyperparameters.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gpflow
import tensorflow as tf
from check_shapes import check_shapes

from .schedules import StepSize

__all__ = ["InducingNaturalGradient"]


class InducingNaturalGradient(tf.Module):
    """Natural-gradient steps with step size ``gamma`` on a model's ``q_mu`` [M, D] and
    ``q_sqrt`` ([D, M, M] per output or [1, M, M] shared), from the loss's gradients with respect to
    their unconstrained variables (:attr:`variables_to_train`), as the Trainer's tape gives them.
    ``gamma`` is a number in (0, 1] or a schedule of the step count
    (:class:`~gpflow_svi_gplvm.training.schedules.StepSize`, e.g. a
    :class:`~gpflow_svi_gplvm.training.schedules.WarmUp`). A step whose new covariance is not
    positive
    definite leaves q(u) as it is and counts itself in :attr:`rejected_steps`."""

    def __init__(
        self,
        q_mu: gpflow.Parameter,
        q_sqrt: gpflow.Parameter,
        gamma: float | Callable[[tf.Tensor], tf.Tensor] | StepSize = 0.03,
    ) -> None:
        super().__init__()
        self.q_mu, self.q_sqrt = q_mu, q_sqrt
        self.gamma = StepSize.of(gamma, gamma=True)
        self.variables_to_train = (q_mu.unconstrained_variable, q_sqrt.unconstrained_variable)
        self.rejected_steps = tf.Variable(0, dtype=tf.int64, trainable=False, name="rejected")

    def apply_gradients(self, gradients: Sequence[tf.Tensor], step: tf.Tensor | int = 0) -> None:
        """One step from the loss's gradients (``q_mu``'s [M, D], ``q_sqrt``'s unconstrained
        one) with respect to :attr:`variables_to_train`; ``step`` (0 at the first) sets gamma."""
        mean_gradient, sqrt_gradient = gradients
        # A new tensor: TFP bijectors cache forward/inverse pairs, and the gradient below must
        # flow through the inverse, not the cached variable.
        L = tf.identity(tf.convert_to_tensor(self.q_sqrt))  # [F, M, M]
        shared = L.shape[0] == 1
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(L)
            # Without a transform the variable is L itself.
            transform = self.q_sqrt.transform
            unconstrained = L if transform is None else transform.inverse(L)
        # d loss / dL by the chain rule through L -> unconstrained.
        L_gradient = tape.gradient(unconstrained, L, output_gradients=sqrt_gradient)
        m = _factor_means(self.q_mu, shared)  # [F, M, K]
        identity = tf.eye(tf.shape(L)[-1], dtype=L.dtype)
        L_inverse = tf.linalg.triangular_solve(L, identity)
        precision = tf.linalg.matmul(L_inverse, L_inverse, transpose_a=True)  # S^-1
        # d loss / dS through L = chol(S) (Murray 2016, as TensorFlow's Cholesky gradient).
        middle = tf.linalg.band_part(tf.linalg.matmul(L, L_gradient, transpose_a=True), -1, 0)
        middle = tf.linalg.set_diag(middle, 0.5 * tf.linalg.diag_part(middle))
        S_gradient = _symmetric(
            tf.linalg.matmul(tf.linalg.matmul(L_inverse, middle, transpose_a=True), L_inverse)
        )
        # m = eta_1, S = (eta_2 - eta_1 eta_1^T) / K.
        num_outputs = tf.cast(tf.shape(m)[-1], m.dtype)
        eta_2_gradient = S_gradient / num_outputs
        eta_1_gradient = _factor_means(mean_gradient, shared) - 2.0 * tf.linalg.matmul(
            eta_2_gradient, m
        )
        gamma = tf.cast(self.gamma(step), m.dtype)
        theta_1 = tf.linalg.matmul(precision, m) - gamma * eta_1_gradient
        precision += 2.0 * gamma * eta_2_gradient  # theta_2 = -precision / 2
        new_L = _inverse_cholesky(precision)
        new_m = tf.linalg.matmul(new_L, tf.linalg.matmul(new_L, theta_1, transpose_a=True))
        # Rounding can leave the new precision indefinite when Kuu is badly conditioned (data on
        # a scale of thousands, say): its factor is then NaN, and q(u) keeps its value.
        accepted = tf.logical_and(
            tf.reduce_all(tf.math.is_finite(new_L)), tf.reduce_all(tf.math.is_finite(new_m))
        )
        self.rejected_steps.assign_add(tf.cast(tf.logical_not(accepted), tf.int64))
        self.q_mu.assign(tf.where(accepted, _output_means(new_m, shared), self.q_mu))
        self.q_sqrt.assign(tf.where(accepted, new_L, L))


@check_shapes("precision: [batch..., M, M]", "return: [batch..., M, M]")
def _inverse_cholesky(precision: tf.Tensor) -> tf.Tensor:
    r"""The lower Cholesky factor of :math:`P^{-1}`, P = ``precision`` [..., M, M], from one
    factorisation: with :math:`J` the order-reversing permutation,

    .. math::

        J P J = R R^\top \;\Rightarrow\;
        P^{-1} = (J R^{-\top} J)(J R^{-\top} J)^\top,

    and :math:`J R^{-\top} J` is lower triangular."""
    reversed_factor = tf.linalg.cholesky(tf.reverse(precision, axis=[-2, -1]))
    identity = tf.eye(tf.shape(precision)[-1], dtype=precision.dtype)
    upper = tf.linalg.triangular_solve(reversed_factor, identity, adjoint=True)  # R^-T
    return tf.reverse(upper, axis=[-2, -1])


@check_shapes("matrices: [batch..., M, M]", "return: [batch..., M, M]")
def _symmetric(matrices: tf.Tensor) -> tf.Tensor:
    return 0.5 * (matrices + tf.linalg.matrix_transpose(matrices))


def _factor_means(q_mu: tf.Tensor, shared: bool) -> tf.Tensor:
    """q_mu [M, D] as the factors' means: [1, M, D] shared, [D, M, 1] per output."""
    q_mu = tf.convert_to_tensor(q_mu)
    return q_mu[None] if shared else tf.transpose(q_mu)[:, :, None]


def _output_means(means: tf.Tensor, shared: bool) -> tf.Tensor:
    """The inverse of :func:`_factor_means`: [M, D]."""
    return means[0] if shared else tf.transpose(means[:, :, 0])
