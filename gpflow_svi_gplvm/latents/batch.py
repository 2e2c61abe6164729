"""What a latent family returns for a minibatch of rows, and how new rows are fitted."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import tensorflow as tf

__all__ = ["LatentBatch", "NewRowFit"]


class LatentBatch(NamedTuple):
    """What a latent module returns for a minibatch of B rows."""

    samples: tf.Tensor
    """[S, B, Q] draws of x_n (S = number of samples; 1 for a deterministic latent)."""
    row_term: tf.Tensor
    """[B] the row's term of the bound: 0, log p(x_n) or -KL(q(x_n) || p(x_n))."""
    mean: tf.Tensor
    """[B, Q] mean of q(x_n)."""
    variance: tf.Tensor
    """[B, Q] marginal variances of q(x_n) (zeros for a point estimate)."""
    scale: tf.Tensor | None = None
    """[B, Q, Q] lower Cholesky factor of a full covariance of q(x_n); None when q(x_n) is
    diagonal (or a point)."""
    log_density: tf.Tensor | None = None
    """[S, B] log q(x_n^{(s)}) at each draw, for the importance-weighted bound
    (:mod:`~gpflow_svi_gplvm.components.importance`) and held-out likelihoods; None where q(x_n)
    has no density (a point) or does not factorise over rows (a joint flow)."""
    density_gradient: tf.Tensor | None = None
    """[S, B, Q] the gradient in x of log q(x) at each draw with q's parameters held fixed: the
    path that doubly reparameterised gradients follow; None where ``log_density`` is."""

    @property
    def covariance(self) -> tf.Tensor:
        """The covariance of a Gaussian q(x_n): marginal variances [B, Q], or full [B, Q, Q]
        where there is a ``scale``."""
        if self.scale is None:
            return self.variance
        return tf.linalg.matmul(self.scale, self.scale, transpose_b=True)


class NewRowFit(NamedTuple):
    """How q(x*) of new rows is fitted by a family that must optimise it (see
    :meth:`LatentVariables.new_rows`); an amortised family ignores it."""

    objective: Callable[[LatentBatch, tf.Tensor, tf.Tensor], tf.Tensor]
    """(batch of A of the rows, their Y [A, D], their positions [A] among the B rows fitted) ->
    each of those rows' part of the bound [A], maximised over q(x*)."""
    initial_mean: Callable[[tf.Tensor], tf.Tensor]
    """Y [B, D] -> [B, Q]: where the mean of q(x*) of each row starts."""
    num_samples: int
    """Draws of x* per step."""
    iterations: int
    """Adam steps; with a ``tolerance``, the most Newton steps a row takes."""
    learning_rate: float
    """Adam's step size."""
    averaging_start: int
    """The first step whose iterate enters the average that gives q(x*)."""
    seed: int
    """Seed of the stateless draws of each step, common to all rows."""
    tolerance: float | None = None
    """For a deterministic objective: each row takes damped Newton steps until its Newton
    decrement falls below ``tolerance`` (relative to its part of the bound; see
    :mod:`~gpflow_svi_gplvm.latents.new_rows`). None: ``iterations`` Adam steps and the average of
    the iterates from ``averaging_start`` on."""
