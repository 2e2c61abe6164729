"""Point latents: x_n a free parameter per row, unregularised (the sparse GPLVM) or with a prior
(MAP)."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import inherit_check_shapes
from gpflow.base import Parameter
from gpflow.config import default_float

from .base import RowLatentVariables, row_table
from .batch import LatentBatch

__all__ = ["PointLatent", "MAPLatent"]


class PointLatent(RowLatentVariables):
    r"""x_n is a free parameter (a delta :math:`q(x_n) = \delta(x_n - \mu_n)`); no row term. The
    sparse GPLVM."""

    def __init__(self, initial_mean: np.ndarray, name: str | None = None):
        initial_mean = np.asarray(initial_mean)
        num_data, latent_dim = initial_mean.shape
        super().__init__(num_data, latent_dim, name=name)
        self.mean = row_table(initial_mean, "latent_mean")

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean,)

    def row_term(self, x: tf.Tensor) -> tf.Tensor:
        """The row term at the point x [B, Q]: zero for the unregularised point estimate."""
        return tf.zeros_like(x[:, 0])

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        return rows[0], tf.zeros_like(rows[0])

    @inherit_check_shapes
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        # A delta q(x) needs one "sample" whatever num_samples is: all draws would be identical.
        mean, variance = self.moments_of(rows)
        return LatentBatch(mean[None], self.row_term(mean), mean, variance)

    @inherit_check_shapes
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (mean,)

    def noise(self, idx: tf.Tensor, num_samples: int) -> tf.Tensor:
        """A point estimate draws nothing: an empty [0, B, Q] tensor."""
        return tf.zeros(tf.stack([0, tf.shape(idx)[0], self.latent_dim]), dtype=default_float())


class MAPLatent(PointLatent):
    r"""x_n a free parameter regularised by :math:`\log p(x_n)` (default
    :math:`p = \mathcal{N}(0, I)`): the MAP GPLVM."""

    def __init__(
        self,
        initial_mean: np.ndarray,
        prior: tfp.distributions.Distribution | None = None,
        name: str | None = None,
    ):
        super().__init__(initial_mean, name=name)
        if prior is None:
            zeros = tf.zeros(self.latent_dim, dtype=default_float())
            prior = tfp.distributions.MultivariateNormalDiag(zeros, tf.ones_like(zeros))
        if not isinstance(prior, tfp.distributions.Distribution):
            raise ValueError(
                f"prior must be a TFP distribution over a latent vector (event shape "
                f"[{self.latent_dim}]) or None for N(0, I), got {prior!r}: e.g. "
                "tfp.distributions.MultivariateStudentTLinearOperator(...)."
            )
        if tuple(prior.event_shape) != (self.latent_dim,):
            raise ValueError(
                f"The MAP prior must have event shape [{self.latent_dim}] (one density over a "
                f"whole latent vector), got {tuple(prior.event_shape)}. Wrap a scalar prior in "
                "tfp.distributions.Independent(..., reinterpreted_batch_ndims=1)."
            )
        self.prior = prior

    def row_term(self, x: tf.Tensor) -> tf.Tensor:
        """log p(x_n) [B], once per row."""
        return self.prior.log_prob(x)
