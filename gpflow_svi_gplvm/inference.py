"""Latents and reconstructions for new rows of Y, with every trained global parameter frozen.

For a new row y* (NaN = missing), q(x*) maximises that row's part of the bound,

    E_q(x*)[sum_{d observed} E_q(f_d(x*)) log p(y*_d | f_d)] + r(x*),

with the kernel, likelihood, Z and q(u) fixed. Rows are independent, so many are optimised at
once; the amortised model needs no optimisation (one encoder pass).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from gpflow.keras import tf_keras

from .latents import LatentVariables
from .likelihoods import MaskedLikelihood
from .validation import check_observations

if TYPE_CHECKING:
    from .models import SVIGPLVM

__all__ = ["initial_latents_for", "fit_new_latents", "infer_latents", "reconstruct"]


def initial_latents_for(model: SVIGPLVM, Y: np.ndarray, max_candidates: int = 2000) -> np.ndarray:
    """Starting latents [N*, Q]: per row, the candidate latent whose decoded mean is closest to
    the row on its observed entries (squared error). Candidates are the inducing inputs and up to
    ``max_candidates`` training latent means; rows with nothing observed start at 0 (the prior).
    """
    candidates = [model.inducing_variable.Z.numpy()]
    if not model.latent.amortised:
        means = model.latent_mean().numpy()
        rows = np.random.default_rng(0).permutation(len(means))[:max_candidates]
        candidates.append(means[rows])
    candidates = np.concatenate(candidates)
    decoded = model.predict_y(candidates)[0].numpy()  # [C, D]
    observed = ~np.isnan(Y)
    values = np.where(observed, Y, 0.0)
    # sum_d o_nd (y_nd - mu_cd)^2, expanded so no [N*, C, D] array is formed.
    errors = (values**2).sum(1)[:, None] - 2.0 * values @ decoded.T + observed @ (decoded**2).T
    initial = candidates[np.argmin(errors, axis=1)]
    initial[~observed.any(axis=1)] = 0.0
    return initial


def fit_new_latents(
    model: SVIGPLVM,
    Y: np.ndarray,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
) -> LatentVariables:
    """A latent module of the model's family for the rows Y [N*, D], optimised with Adam.

    The draws of x* are common to all rows at each step (stateless, seeded), so inferring rows
    together or one by one gives the same result.
    """
    latent = model.latent.for_new_rows(initial_latents_for(model, Y))
    idx = tf.range(Y.shape[0], dtype=tf.int64)
    Y = tf.convert_to_tensor(Y, dtype=default_float())
    variables = latent.trainable_variables
    optimizer = tf_keras.optimizers.Adam(learning_rate)
    optimizer.build(variables)
    noise_shape = [model.num_samples, 1, model.latent_dim]
    likelihood = model.likelihood
    if not isinstance(likelihood, MaskedLikelihood):
        likelihood = MaskedLikelihood(likelihood)

    @tf.function
    def optimise() -> None:
        for step in tf.range(iterations, dtype=tf.int64):
            noise = tf.random.stateless_normal(
                noise_shape, seed=tf.stack([tf.constant(seed, tf.int64), step]), dtype=Y.dtype
            )
            with tf.GradientTape(watch_accessed_variables=False) as tape:
                tape.watch(variables)
                loss = -tf.reduce_sum(model.row_bounds(idx, Y, latent, noise, likelihood))
            optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))

    if iterations > 0:
        optimise()
    return latent


def _checked_rows(model: SVIGPLVM, Y, mask) -> np.ndarray:
    return check_observations(Y, "Y_new", model.data_dim, mask)


def infer_latents(
    model: SVIGPLVM,
    Y_new,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
    mask=None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Mean and marginal variance [N*, Q] of q(x*) for new rows Y_new [N*, D] (NaN allowed).

    Amortised models: one encoder pass. Others: ``iterations`` Adam steps on q(x*) alone.
    Point and MAP estimates have zero variance. The model itself is not modified.
    """
    Y = _checked_rows(model, Y_new, mask)
    idx = tf.range(Y.shape[0], dtype=tf.int64)
    if model.latent.amortised:
        return model.latent.moments(idx, tf.convert_to_tensor(Y))
    latent = fit_new_latents(model, Y, iterations, learning_rate, seed)
    return latent.moments(idx, tf.convert_to_tensor(Y))


def reconstruct(
    model: SVIGPLVM,
    Y,
    rows: np.ndarray | None = None,
    num_samples: int = 64,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
    mask=None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Predictive mean and variance [N, D] of every entry of Y (observed and missing).

    p(y_nd) = E_q(x_n)[p(y_nd | x_n)], estimated with ``num_samples`` draws of x_n: the mean of
    the likelihood's predictive means, and the mean of (variance + mean^2) minus mean^2, so the
    variance holds the latent, GP and noise uncertainty. ``rows`` (training row indices, one per
    row of Y) uses the trained q(x); otherwise latents are inferred first (see ``infer_latents``).
    """
    Y = _checked_rows(model, Y, mask)
    if model.latent.amortised or rows is not None:
        latent = model.latent
        idx = tf.range(Y.shape[0], dtype=tf.int64)
        if rows is not None and not model.latent.amortised:
            idx = tf.convert_to_tensor(_checked_training_rows(model, rows, len(Y)))
    else:
        latent = fit_new_latents(model, Y, iterations, learning_rate, seed)
        idx = tf.range(Y.shape[0], dtype=tf.int64)
    noise = tf.random.stateless_normal(
        [num_samples, Y.shape[0], model.latent_dim], seed=[seed, 1], dtype=default_float()
    )
    samples = latent(idx, tf.convert_to_tensor(Y), num_samples, noise).samples  # [S, N, Q]
    mean, variance = model.predict_y(tf.reshape(samples, [-1, model.latent_dim]))
    shape = tf.concat([tf.shape(samples)[:2], [model.data_dim]], axis=0)
    mean, variance = tf.reshape(mean, shape), tf.reshape(variance, shape)
    predictive_mean = tf.reduce_mean(mean, axis=0)
    second_moment = tf.reduce_mean(variance + tf.square(mean), axis=0)
    return predictive_mean, tf.maximum(second_moment - tf.square(predictive_mean), 0.0)


def _checked_training_rows(model: SVIGPLVM, rows, num_rows: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.shape != (num_rows,) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows must be {num_rows} integer training-row indices, one per row of Y.")
    if rows.min() < 0 or rows.max() >= model.num_data:
        raise ValueError(f"rows must lie in [0, {model.num_data}), the model's training rows.")
    return rows.astype(np.int64)
