r"""The importance-weighted bound: K draws of each row's latent, weighed by how well each explains
the row (Burda et al., 2016; for latent-variable GPs, Salimbeni et al., 2019).

Draws :math:`x_{nk} \sim q(x_n)`, k = 1..K, of row n have the log weights

.. math::

    \log w_{nk} = \sum_{d \in O_n} E_{q(f_d(x_{nk}))} \log p(y_{nd} \mid f_d)
    + \log p(x_{nk}) - \log q(x_{nk}),

and the bound on a minibatch B of rows is

.. math::

    \mathcal{L}_K = \frac{N}{|B|} \sum_{n \in B} \log \frac1K \sum_k w_{nk}
    - \sum_d \mathrm{KL}\big(q(u_d) \,\|\, p(u_d)\big).

It bounds :math:`\log p(Y)` from below: given u, :math:`\log \frac1K \sum_k p(y_n \mid u, x_{nk})
p(x_{nk}) / q(x_{nk})` does (in expectation over the draws), and its expectation over q(u) is at
least the same expression with each :math:`\log p(y_n \mid u, x_{nk})` replaced by its expectation
over q(u), because log-sum-exp is convex (Jensen's inequality); that expectation is the sum of the
likelihood's variational expectations above (closed form for Gaussian and Poisson likelihoods,
Gauss-Hermite quadrature otherwise, observed entries only). K = 1 is the ELBO with
:math:`-\mathrm{KL}(q(x_n) \| p(x_n))` estimated from the draw, and the bound's expectation grows
with K (Burda et al., 2016, Theorem 1) towards the bound with each row's x integrated out
exactly, :math:`\sum_n \log \int p(x)\, e^{d_n(x)}\, dx - \mathrm{KL}(q(u) \| p(u))`, with
:math:`d_n(x)` the data term above. ``num_samples`` S independent K-draw estimates of each row
are averaged; p(x) = N(0, I).

Gradients. The globals (kernel, likelihood, q(u), Z) take the estimator's own gradient,
:math:`\sum_k \tilde w_{nk} \nabla \log w_{nk}` with the normalised weights
:math:`\tilde w_{nk} = w_{nk} / \sum_j w_{nj}`. For q(x)'s parameters :math:`\phi` (the latent
tables, an encoder, flow layers) that gradient's signal-to-noise ratio falls as K grows
(Rainforth et al., 2018); the doubly reparameterised gradient (DReG; Tucker et al., 2019),

.. math::

    \sum_k \tilde w_{nk}^2\, \frac{\partial \log w_{nk}}{\partial x_{nk}}
    \frac{\partial x_{nk}}{\partial \phi},

with :math:`\log q(x)` differentiated through the draw only (its parameters held, the batch's
``density_gradient``), has the same expectation, and Tucker et al. show that its signal-to-noise
ratio does not fall as K grows. Both come out of one backward pass: the gradient that reaches a
draw is multiplied by its normalised weight on its way on to :math:`\phi`
(:class:`WeightedDraws`).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes

from ..latents import LatentBatch, LatentVariables
from ..latents.flows import log_prior
from ..validation import check_integer

__all__ = [
    "WeightedDraws",
    "check_draws_fit_in_memory",
    "check_num_importance",
    "importance_weighted_rows",
    "log_weights",
]


def check_num_importance(
    num_importance: object, latent: LatentVariables, latent_expectation: str
) -> int:
    """``num_importance`` K as an int, or a ``ValueError`` saying what to use instead: K must be
    a positive integer, and K > 1 needs a q(x_n) with a density (not a point or MAP estimate, nor
    a joint flow) and draws of x (not ``latent_expectation="closed-form"``)."""
    K = check_integer(num_importance, "num_importance", hint="1 is the ELBO; 5 to 20 is typical")
    if K == 1:
        return K
    if not latent.has_density:
        raise ValueError(
            f"num_importance={K} weighs draws of q(x_n) by their density, but "
            f"{type(latent).__name__} has none for each row (point and MAP estimates have no "
            "q(x) to draw from; a joint flow's density is all rows' together): use "
            "BayesianSVIGPLVM, AmortisedBayesianGPLVM or FlowBayesianGPLVM with "
            "flow_parameters='shared' or 'per-row', or num_importance=1."
        )
    if latent_expectation == "closed-form":
        raise ValueError(
            f"num_importance={K} weighs draws of x, but latent_expectation='closed-form' takes "
            "the expectation over q(x) without any: use latent_expectation='auto' (draws when "
            "num_importance > 1) or 'monte-carlo', or num_importance=1."
        )
    return K


def check_draws_fit_in_memory(
    num_samples: int, num_importance: int, batch_size: int, data_dim: int, latent_dim: int
) -> None:
    """A ``ValueError`` naming the size when one step's draws, S K of x [B, Q] and of f's mean
    and variance [B, D] each, cannot fit in this machine's memory (a step would fail deep inside
    TensorFlow instead)."""
    draws = num_samples * num_importance
    needed = draws * batch_size * (latent_dim + 2 * data_dim) * 8
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if needed > memory:
        raise ValueError(
            f"num_importance={num_importance} with num_samples={num_samples} draws {draws} x "
            f"per row: a step of batch_size={batch_size} rows of D={data_dim} needs about "
            f"{needed / 2**30:,.0f} GiB for the draws alone, more than this machine's "
            f"{memory / 2**30:,.0f} GiB: lower num_importance (5 to 20 is typical) or "
            "batch_size."
        )


class WeightedDraws:
    r"""The identity on draws x [S K, B, ...] whose gradient, on its way back to q(x)'s
    parameters, is multiplied by each draw's :attr:`weights` [S K, B]: set once the draws'
    weights are known (after the draws themselves), read by the backward pass. This turns the
    importance-weighted estimator's path gradient :math:`\sum_k \tilde w_k \partial_\phi \log w_k`
    into DReG's :math:`\sum_k \tilde w_k^2 \partial_\phi \log w_k` without a second pass."""

    def __init__(self) -> None:
        self.weights: tf.Tensor | None = None

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        @tf.custom_gradient
        def identity(x: tf.Tensor):
            def gradient(upstream: tf.Tensor) -> tf.Tensor:
                if self.weights is None:
                    raise ValueError("WeightedDraws: the weights were never set.")
                return upstream * self.weights[..., None]

            return tf.identity(x), gradient

        return identity(x)


@check_shapes(
    "batch.samples: [draws, batch, QR]",
    "batch.log_density: [draws, batch]",
    "batch.density_gradient: [draws, batch, Q]",
    "data_terms: [draws, batch]",
    "return: [draws, batch]",
)
def log_weights(
    batch: LatentBatch, data_terms: tf.Tensor, latent_dim: int, path_only: bool = False
) -> tf.Tensor:
    r""":math:`\log w = d + \log p(x) - \log q(x)` [draws, B] of a latent ``batch`` (its draws'
    first ``latent_dim`` columns are x) with data terms d [draws, B]. ``path_only``: the value is
    the same, but :math:`\log q` is differentiated through the draws alone (with the batch's
    ``density_gradient``), as DReG needs."""
    x = batch.samples[..., :latent_dim]
    log_q = batch.log_density
    if path_only:
        held = tf.stop_gradient(batch.density_gradient)
        log_q = tf.stop_gradient(log_q) + tf.reduce_sum(held * (x - tf.stop_gradient(x)), -1)
    return data_terms + log_prior(x) - log_q


@check_shapes("idx: [batch]", "Y: [batch, D]", "return: [batch]")
def importance_weighted_rows(
    model, idx: tf.Tensor, Y: tf.Tensor, training: bool = False
) -> tf.Tensor:
    r"""Each row's part of the bound [B], unscaled: :math:`\frac1S \sum_s \log \frac1K \sum_k
    w_{nsk}` over ``model.num_samples`` S times ``model.num_importance`` K draws of q(x_n) (one
    batch of S K draws: vectorised, no loop), with DReG gradients for q(x)'s parameters when
    ``model.doubly_reparameterised``."""
    S, K = model.num_samples, model.num_importance
    batch = model.latent_batch(idx, Y, S * K, training=training)
    weighted = WeightedDraws() if model.doubly_reparameterised else None
    if weighted is not None:
        batch = batch._replace(samples=weighted(batch.samples))
    data_terms = model.draw_data_terms(batch.samples, Y)  # [S K, B]
    logs = log_weights(batch, data_terms, model.latent_dim, path_only=weighted is not None)
    logs = tf.reshape(logs, tf.stack([S, K, -1]))
    if weighted is not None:
        normalised = tf.stop_gradient(tf.nn.softmax(logs, axis=1))
        weighted.weights = tf.reshape(normalised, tf.shape(data_terms))
    bounds = tf.reduce_logsumexp(logs, axis=1) - np.log(K)  # [S, B]
    return tf.reduce_mean(bounds, axis=0)
