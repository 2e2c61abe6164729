"""Gaussian latents with parameters per row: q(x_n) = N(mu_n, diag s_n), the B-SVI family."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import inherit_check_shapes
from gpflow.base import Parameter
from gpflow.utilities import positive

from .base import RowLatentVariables, checked_variance, row_table
from .batch import LatentBatch

__all__ = ["GaussianLatent", "diagonal_gaussian_batch"]


class GaussianLatent(RowLatentVariables):
    r"""q(x_n) = N(mu_n, diag s_n) with per-row parameters; row term -KL(q(x_n) || N(0, I)):

    .. math::

        \mathrm{KL} = \frac{1}{2} \sum_q \left(s_{nq} + \mu_{nq}^2 - 1 - \log s_{nq}\right).
    """

    gaussian = True
    has_density = True

    def __init__(
        self,
        initial_mean: np.ndarray,
        initial_variance: float | np.ndarray = 0.1,
        name: str | None = None,
    ):
        initial_mean = np.asarray(initial_mean)
        num_data, latent_dim = initial_mean.shape
        super().__init__(num_data, latent_dim, name=name)
        variance = checked_variance(initial_variance, initial_mean.shape)
        # The variance first: its transform's inverse takes several [N, Q] temporaries.
        self.variance = row_table(variance, "latent_variance", positive())
        self.mean = row_table(initial_mean, "latent_mean")

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean, self.variance)

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        return rows[0], rows[1]

    @inherit_check_shapes
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        return diagonal_gaussian_batch(rows, num_samples, noise)

    @inherit_check_shapes
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """New rows start at the median trained variance of each dimension."""
        median = tfp.stats.percentile(self.variance, 50.0, axis=0, interpolation="midpoint")
        return mean, tf.broadcast_to(median, tf.shape(mean))


def diagonal_gaussian_batch(
    rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
) -> LatentBatch:
    r"""The :class:`LatentBatch` of :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, s_n)` for rows
    (means, variances), each [B, Q], drawn with ``noise`` [S, B or 1, Q]; the row term is
    :math:`-\mathrm{KL}(q(x_n) \| N(0, I))`. At a draw :math:`x = \mu + \sqrt{s}\, \epsilon`,
    :math:`\log q(x) = -\frac12 \sum_q (\epsilon_q^2 + \log 2 \pi s_q)` and its gradient in x
    is :math:`-\epsilon / \sqrt{s}`."""
    mean, variance = rows
    scale = tf.sqrt(variance)
    samples = mean + scale * noise
    kl = 0.5 * tf.reduce_sum(variance + tf.square(mean) - 1.0 - tf.math.log(variance), -1)
    log_density = -0.5 * tf.reduce_sum(tf.square(noise) + tf.math.log(2.0 * np.pi * variance), -1)
    gradient = -noise / scale
    return LatentBatch(samples, -kl, mean, variance, None, log_density, gradient)
