"""Latents and reconstructions for new rows of Y, with every trained global parameter frozen.

For a new row y* (NaN = missing), q(x*) maximises that row's part of the bound,

    E_q(x*)[sum_{d observed} E_q(f_d(x*)) log p(y*_d | f_d)] + r(x*),

with the kernel, likelihood, Z and q(u) fixed. Rows are independent, so many are optimised at
once, by Adam written out in tensors inside one compiled loop (no variables are created, so the
same graph serves from a SavedModel). The amortised model needs no optimisation: one encoder pass.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from .latents import LatentBatch, RowLatentVariables
from .likelihoods import MaskedLikelihood, check_likelihood_support
from .validation import check_integer, check_learning_rate, check_observations

if TYPE_CHECKING:
    from .models import SVIGPLVM

__all__ = ["LatentInference", "infer_latents", "log_predictive_density", "reconstruct"]

_BETA_1, _BETA_2, _EPSILON = 0.9, 0.999, 1e-7


class LatentInference(tf.Module):
    """Compiled inference of q(x*) and of the predictive of Y for new rows of a trained model.

    ``latents`` and ``predict`` are the compiled graphs (each traces once for any number of rows;
    keep one object to reuse them); :meth:`infer` and :meth:`reconstruct` feed them rows in
    chunks of ``chunk_size`` (default: a size that keeps the GP's intermediates, [D, M, rows x
    draws] or, with a shared q(u) covariance, [rows x draws, D], near 50M numbers), so memory
    stays bounded however many rows there are.
    Non-amortised models: rows start at the candidate latent (inducing inputs and up to
    ``max_candidates`` training latents) whose decoded mean best fits their observed entries,
    then take ``iterations`` Adam steps with ``learning_rate``; q(x*) is the average of the
    iterates of the final ``averaging`` fraction of the steps (Polyak-Ruppert averaging: each
    step's gradient comes from the model's few draws of x*, so the last iterate alone jitters
    around the optimum; 0 returns the last iterate). The draws of the standard noise
    behind x* are common to all rows (stateless, from ``seed``), in the optimisation and in the
    predictive, so processing rows together, one by one or in chunks agrees.
    """

    def __init__(
        self,
        model: SVIGPLVM,
        iterations: int = 300,
        learning_rate: float = 0.05,
        num_samples: int = 64,
        seed: int = 0,
        max_candidates: int = 2000,
        chunk_size: int | None = None,
        averaging: float = 0.5,
    ):
        super().__init__()
        self.model = model
        self.iterations = check_integer(iterations, "iterations", minimum=0)
        if not (isinstance(averaging, (int, float)) and 0.0 <= averaging <= 1.0):
            raise ValueError(
                f"averaging must be a fraction of the steps in [0, 1] (0: the last iterate), got "
                f"{averaging!r}."
            )
        # Steps from this one on are averaged; at least the last one.
        self.averaging_start = min(int(self.iterations * (1.0 - averaging)), self.iterations - 1)
        self.learning_rate = check_learning_rate(learning_rate)
        self.num_samples = check_integer(num_samples, "num_samples")
        self.seed = check_integer(seed, "seed", minimum=0)
        self.chunk_size = chunk_size
        likelihood = model.likelihood
        self.likelihood = (
            likelihood if isinstance(likelihood, MaskedLikelihood) else MaskedLikelihood(likelihood)
        )
        if not (model.latent.amortised or isinstance(model.latent, RowLatentVariables)):
            raise ValueError(
                f"Cannot infer latents of new rows with {type(model.latent).__name__}: new-row "
                "inference needs either per-row tables (subclass RowLatentVariables, which "
                "also gives the optimisation of q(x*)) or an amortised q(x_n | y_n) (set "
                "amortised = True and compute q(x) from Y alone, ignoring idx)."
            )
        self._candidate_rows = None
        if isinstance(model.latent, RowLatentVariables):
            rows = np.random.default_rng(seed).permutation(model.num_data)[:max_candidates]
            self._candidate_rows = tf.constant(rows, dtype=tf.int64)
        spec = [tf.TensorSpec([None, model.data_dim], default_float())]
        self.latents = tf.function(self._latents, input_signature=spec)
        self.predict = tf.function(self._predict, input_signature=spec)
        self.log_densities = tf.function(self._log_densities, input_signature=spec * 2)

    def infer(self, Y: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [N*, Q] of q(x*) for checked rows Y [N*, D], in chunks."""
        return self._in_chunks(self.latents, Y, self.model.num_samples)

    def reconstruct(self, Y: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [N*, D] of every entry of checked rows Y, in chunks."""
        return self._in_chunks(self.predict, Y, self.num_samples)

    def log_density(self, Y: np.ndarray, targets: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
        """log p(targets | q(x*) inferred from Y), per entry [N*, D] (NaN where a target is
        missing) and per row [N*], for checked rows Y and targets [N*, D], in chunks."""
        return self._in_chunks(self.log_densities, Y, self.num_samples, targets)

    def _in_chunks(
        self, function, Y: np.ndarray, num_draws: int, *more: np.ndarray
    ) -> tuple[tf.Tensor, ...]:
        """``function`` over chunks of the rows of Y (and of the arrays ``more`` beside it)."""
        size = chunk_rows(self.model, self.chunk_size, num_draws)
        chunks = [
            function(*(tf.constant(array[i : i + size]) for array in (Y, *more)))
            for i in range(0, len(Y), size)
        ]
        return tuple(tf.concat(parts, axis=0) for parts in zip(*chunks))

    def _initial_means(self, Y: tf.Tensor) -> tf.Tensor:
        """[B, Q]: per row, the candidate latent whose decoded mean is closest on observed d."""
        latent = self.model.latent
        candidates = tf.concat(
            [
                self.model.inducing_variable.Z,
                latent.moments_of(latent.rows(self._candidate_rows))[0],
            ],
            axis=0,
        )
        decoded = self.model.predict_y(candidates)[0]  # [C, D]
        observed = tf.logical_not(tf.math.is_nan(Y))
        values = tf.where(observed, Y, tf.zeros_like(Y))
        # sum_d o_nd (y_nd - mu_cd)^2, expanded so that no [B, C, D] tensor is formed.
        errors = (
            tf.reduce_sum(tf.square(values), axis=1, keepdims=True)
            - 2.0 * tf.matmul(values, decoded, transpose_b=True)
            + tf.matmul(tf.cast(observed, Y.dtype), tf.square(decoded), transpose_b=True)
        )
        initial = tf.gather(candidates, tf.argmin(errors, axis=1))
        anything_observed = tf.reduce_any(observed, axis=1, keepdims=True)
        return tf.where(anything_observed, initial, tf.zeros_like(initial))

    def optimised_rows(self, Y: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """The latent family's parameter rows for Y [B, D], after the Adam steps (in-graph)."""
        model, latent = self.model, self.model.latent
        transforms = [parameter.transform for parameter in latent.row_parameters]

        def constrain(raw):
            return tuple(r if t is None else t.forward(r) for t, r in zip(transforms, raw))

        initial = latent.initial_rows(self._initial_means(Y))
        raw = [r if t is None else t.inverse(r) for t, r in zip(transforms, initial)]
        noise_shape = [model.num_samples, 1, model.latent_dim]

        def adam_step(step, raw, first, second, average):
            seed = tf.stack([tf.constant(self.seed, tf.int64), step])
            noise = tf.random.stateless_normal(noise_shape, seed=seed, dtype=Y.dtype)
            with tf.GradientTape() as tape:
                tape.watch(raw)
                batch = latent.batch_of(constrain(raw), model.num_samples, noise)
                loss = -tf.reduce_sum(self._row_bounds(batch, Y))
            gradients = tape.gradient(loss, raw)
            t = tf.cast(step + 1, Y.dtype)
            first = [_BETA_1 * m + (1 - _BETA_1) * g for m, g in zip(first, gradients)]
            second = [_BETA_2 * v + (1 - _BETA_2) * g * g for v, g in zip(second, gradients)]
            raw = [
                r
                - self.learning_rate
                * (m / (1 - _BETA_1**t))
                / (tf.sqrt(v / (1 - _BETA_2**t)) + _EPSILON)
                for r, m, v in zip(raw, first, second)
            ]
            # The running mean of the iterates from averaging_start on (weight 1 at that step).
            weight = 1.0 / tf.cast(tf.maximum(step - self.averaging_start + 1, 1), Y.dtype)
            weight *= tf.cast(step >= self.averaging_start, Y.dtype)
            average = [a + weight * (r - a) for a, r in zip(average, raw)]
            return step + 1, raw, first, second, average

        # An explicit while loop: the compiled graph does not depend on AutoGraph converting
        # this method (a notebook kernel once ran it unconverted).
        zeros = [tf.zeros_like(r) for r in raw]
        state = (tf.constant(0, tf.int64), raw, zeros, list(zeros), list(raw))
        *_, average = tf.while_loop(
            lambda step, *_: step < self.iterations, adam_step, state, parallel_iterations=1
        )
        return constrain(average)

    def _row_bounds(self, batch: LatentBatch, Y: tf.Tensor) -> tf.Tensor:
        return self.model.expected_data_term(batch, Y, self.likelihood) + batch.row_term

    def _batch(self, Y: tf.Tensor, num_samples: int, noise: tf.Tensor) -> LatentBatch:
        latent = self.model.latent
        if isinstance(latent, RowLatentVariables):
            return latent.batch_of(self.optimised_rows(Y), num_samples, noise)
        idx = tf.range(tf.shape(Y)[0], dtype=tf.int64)
        return latent(idx, Y, num_samples, noise)

    def _latents(self, Y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [B, Q] of q(x*)."""
        noise = tf.zeros([1, 1, self.model.latent_dim], dtype=Y.dtype)
        batch = self._batch(Y, 1, noise)
        return batch.mean, batch.variance

    def _predict(self, Y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [B, D] of every entry, integrating over q(x*)."""
        noise = _predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
        return predictive_moments(self.model, self._batch(Y, self.num_samples, noise).samples)

    def _log_densities(self, Y: tf.Tensor, targets: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """log p(t_nd) [B, D] and log p(t_n) [B] of ``targets`` under the predictive of rows Y:
        mixtures over the draws x^(s) of q(x*) of the likelihood's predictive given x^(s)."""
        noise = _predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
        samples = self._batch(Y, self.num_samples, noise).samples  # [S, B, Q]
        X = tf.reshape(samples, [-1, self.model.latent_dim])  # draw-major
        f_mean, f_var = self.model.predict_f(X)
        num_draws = tf.shape(samples)[0]
        terms = self.likelihood.entry_log_densities(
            X, f_mean, f_var, tf.tile(targets, [num_draws, 1])
        )
        terms = tf.reshape(terms, tf.concat([tf.shape(samples)[:2], [-1]], axis=0))  # [S, B, D]
        log_draws = tf.math.log(tf.cast(num_draws, terms.dtype))
        per_entry = tf.reduce_logsumexp(terms, axis=0) - log_draws
        per_row = tf.reduce_logsumexp(tf.reduce_sum(terms, axis=-1), axis=0) - log_draws
        missing = tf.math.is_nan(targets)
        return tf.where(missing, tf.constant(np.nan, terms.dtype), per_entry), per_row


def predictive_moments(model: SVIGPLVM, samples: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Moments [B, D] of p(y_nd) = E_q(x_n)[p(y_nd | x_n)] from draws ``samples`` [S, B, Q].

    Mean: the average of the likelihood's predictive means. Variance: the average of
    (variance + mean^2) minus mean^2, so it holds the latent, GP and noise uncertainty.
    """
    mean, variance = model.predict_y(tf.reshape(samples, [-1, model.latent_dim]))
    shape = tf.concat([tf.shape(samples)[:2], [model.data_dim]], axis=0)
    mean, variance = tf.reshape(mean, shape), tf.reshape(variance, shape)
    predictive_mean = tf.reduce_mean(mean, axis=0)
    second_moment = tf.reduce_mean(variance + tf.square(mean), axis=0)
    return predictive_mean, tf.maximum(second_moment - tf.square(predictive_mean), 0.0)


def infer_latents(
    model: SVIGPLVM,
    Y_new,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
    mask=None,
    chunk_size: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Mean and marginal variance [N*, Q] of q(x*) for new rows Y_new [N*, D] (NaN allowed).

    Amortised models: one encoder pass. Others: ``iterations`` Adam steps on q(x*) alone.
    Point and MAP estimates have zero variance. The model itself is not modified. Rows are
    processed ``chunk_size`` at a time (default: intermediates near 50M numbers, see
    :class:`LatentInference`); the result does not depend on it.
    """
    Y = check_observations(Y_new, "Y_new", model.data_dim, mask)
    inference = LatentInference(model, iterations, learning_rate, seed=seed, chunk_size=chunk_size)
    return inference.infer(Y)


def reconstruct(
    model: SVIGPLVM,
    Y,
    rows: np.ndarray | None = None,
    num_samples: int = 64,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
    mask=None,
    chunk_size: int | None = None,
) -> tuple[tf.Tensor, tf.Tensor]:
    """Predictive mean and variance [N, D] of every entry of Y (observed and missing).

    ``rows`` (training row indices, one per row of Y) uses the trained q(x) of those rows;
    otherwise latents are inferred first, as in :func:`infer_latents`. See
    :func:`predictive_moments` for how q(x) is integrated out (``num_samples`` draws, common to
    all rows). ``chunk_size`` as in :func:`infer_latents`.
    """
    Y = check_observations(Y, "Y_new", model.data_dim, mask)
    if rows is None or model.latent.amortised:
        inference = LatentInference(
            model, iterations, learning_rate, num_samples, seed, chunk_size=chunk_size
        )
        return inference.reconstruct(Y)
    chunk_size = chunk_rows(model, chunk_size, num_samples)
    rows = _checked_training_rows(model, rows, len(Y))
    noise = _predictive_noise(num_samples, model.latent_dim, seed)

    @tf.function(
        input_signature=[
            tf.TensorSpec([None], tf.int64),
            tf.TensorSpec([None, model.data_dim], default_float()),
        ]
    )
    def predict(idx: tf.Tensor, Y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        return predictive_moments(model, model.latent(idx, Y, num_samples, noise).samples)

    chunks = [
        predict(tf.constant(rows[start : start + chunk_size]), Y[start : start + chunk_size])
        for start in range(0, len(Y), chunk_size)
    ]
    return tuple(tf.concat(parts, axis=0) for parts in zip(*chunks))


def log_predictive_density(
    model: SVIGPLVM,
    Y,
    targets=None,
    joint: bool = False,
    num_samples: int = 64,
    iterations: int = 300,
    learning_rate: float = 0.05,
    seed: int = 0,
    mask=None,
    chunk_size: int | None = None,
) -> tf.Tensor:
    """log p(t* | Y) of ``targets`` [N, D] (default: Y itself) under the predictive of new rows Y.

    q(x*) is inferred from Y as in :func:`infer_latents`; the predictive of an entry is the
    mixture over ``num_samples`` draws x^(s) of q(x*) (common to all rows) of the likelihood's
    predictive given x^(s), p(t_nd) = 1/S sum_s int p(t_nd | f) q(f_d(x^(s))) df. The integral
    over f is the likelihood's ``predict_log_density``: closed form for a Gaussian, otherwise its
    Gauss-Hermite quadrature (GPflow's default, 20 points, can be off by a fraction of a percent
    where q(f) is wide against the likelihood; build the likelihood with
    ``quadrature=gpflow.quadrature.NDiagGHQuadrature(1, 100)`` for more).
    Returns per-entry log densities [N, D] (NaN where a target is NaN), or with ``joint=True``
    the log density of each row's observed targets [N], 1/S sum_s prod_d (...): given x the
    outputs are independent, so this is the row's joint predictive. Negate and average for an
    NLPD. ``targets`` may hold entries that Y hides (score a reconstruction on them).
    """
    Y = check_observations(Y, "Y_new", model.data_dim, mask)
    targets = Y if targets is None else check_observations(targets, "targets", model.data_dim)
    if targets.shape != Y.shape:
        raise ValueError(
            f"targets {targets.shape} must have the shape of Y {Y.shape}: one row of targets "
            "per row of Y."
        )
    check_likelihood_support(model.likelihood, targets)
    inference = LatentInference(
        model, iterations, learning_rate, num_samples, seed, chunk_size=chunk_size
    )
    per_entry, per_row = inference.log_density(Y, targets)
    return per_row if joint else per_entry


def _predictive_noise(num_samples: int, latent_dim: int, seed: int) -> tf.Tensor:
    """Standard normal draws [S, 1, Q], shared by all rows."""
    shape = [num_samples, 1, latent_dim]
    return tf.random.stateless_normal(shape, seed=[seed, 1], dtype=default_float())


def chunk_rows(model: SVIGPLVM, chunk_size: int | None, num_samples: int) -> int:
    """``chunk_size``, checked; by default rows such that the GP's intermediates, D x M x (rows
    x draws) numbers with a covariance per output or (D + M) x (rows x draws) with a shared one,
    stay near 5e7 numbers."""
    if chunk_size is None:
        D, M = model.data_dim, int(model.inducing_variable.num_inducing)
        per_draw = D + M if model.shared_covariance else D * M
        return max(1, int(5e7 // (per_draw * max(num_samples, 1))))
    return check_integer(chunk_size, "chunk_size", hint="or None for a memory-bounded default")


def _checked_training_rows(model: SVIGPLVM, rows, num_rows: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.shape != (num_rows,) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows must be {num_rows} integer training-row indices, one per row of Y.")
    if rows.min() < 0 or rows.max() >= model.num_data:
        raise ValueError(f"rows must lie in [0, {model.num_data}), the model's training rows.")
    return rows.astype(np.int64)
