r"""Latents and reconstructions for new rows of Y, with every trained global parameter frozen.

For a new row :math:`y_*` (NaN = missing), :math:`q(x_*)` maximises that row's part of the bound,

.. math::

    \mathbb{E}_{q(x_*)}\Big[\sum_{d \in \mathcal{O}} \mathbb{E}_{q(f_d(x_*))}
    \log p(y_{*d} \mid f_d)\Big] + r(x_*),

over the observed outputs :math:`\mathcal{O}`, with the kernel, likelihood, Z and q(u) fixed.
How :math:`q(x_*)` is found belongs to the latent family
(:meth:`~gpflow_svi_gplvm.latents.LatentVariables.new_rows`): per-row tables are optimised by
Newton or Adam steps written out in tensors inside one compiled loop (no variables are created,
so the same graph serves from a SavedModel); the amortised model starts from one encoder pass.
This module compiles the graphs, chooses where optimised rows start, and feeds rows in chunks.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float

from ..compiled import GraphFunction
from ..components.covariates import with_row_inputs
from ..components.psi_statistics import closed_form_predictive
from ..latents import LatentBatch, NewRowFit, PointLatent
from ..likelihoods import masked
from ..validation import (
    check_chunk_size,
    check_fraction,
    check_integer,
    check_learning_rate,
    check_seed,
)
from .new_row_model import MAX_CANDIDATES, NewRowModel, candidate_rows, check_new_row_model
from .predictive import (
    chunk_rows,
    draw_log_densities,
    exact_predictive_applies,
    exact_predictive_model,
    in_row_chunks,
    predictive_moments,
    predictive_noise,
)

__all__ = [
    "LatentInference",
]


class LatentInference(tf.Module):
    """Compiled inference of q(x*) and of the predictive of Y for new rows of a trained model.

    ``latents`` and ``predict`` are the compiled graphs (each traces once for any number of rows;
    keep one object to reuse them); :meth:`infer` and :meth:`reconstruct` feed them rows in
    chunks of ``chunk_size`` (default: a size that keeps the GP's intermediates, [D, M, rows x
    draws] or, with a shared q(u) covariance, [rows x draws, D], near 50M numbers), so memory
    stays bounded however many rows there are.
    Non-amortised models: of the candidate latents (inducing inputs and up to
    ``max_candidates`` training latents), the :data:`START_CANDIDATES` whose decoded means best
    fit a row's observed entries are tried, and the row starts at the one with the highest bound
    (amortised models start at their encoder's q(x*)).
    Where a row's bound has no Monte Carlo noise (a point x*, or a Gaussian q(x*) where
    :func:`exact_predictive_applies`: its bound is then taken in closed form, whatever the
    training used; ``tolerance="auto"``), or wherever a number is given as ``tolerance`` (a
    bound with draws then keeps one set of draws for the whole fit), each row then takes damped
    Newton steps of its own (:mod:`~gpflow_svi_gplvm.latents.new_rows`) until the bound a step would
    still add is below ``tolerance`` (relative), at most ``iterations`` steps; a step computes
    only the rows still moving, and most rows stop within a handful of steps. Otherwise (or
    with ``tolerance=None``) every row takes ``iterations`` Adam steps with ``learning_rate`` and
    q(x*) is the average of the iterates of the final ``averaging`` fraction of them
    (Polyak-Ruppert averaging: each step's gradient comes from the model's few draws of x*, so the
    last iterate alone jitters around the optimum; 0 returns the last iterate). The draws of the
    standard noise behind x* are common to all rows (stateless, from ``seed``), in the
    optimisation and in the predictive, so processing rows together, one by one or in chunks
    agrees. The predictive of a Gaussian q(x*) under a squared-exponential kernel and a Gaussian
    likelihood is exact (:func:`exact_predictive_applies`), without draws.
    """

    def __init__(
        self,
        model: NewRowModel,
        iterations: int = 300,
        learning_rate: float = 0.05,
        num_samples: int = 64,
        seed: int = 0,
        max_candidates: int = MAX_CANDIDATES,
        chunk_size: int | None = None,
        averaging: float = 0.5,
        tolerance: float | str | None = "auto",
    ):
        super().__init__()
        check_new_row_model(model)
        self.model = model
        self.iterations = check_integer(iterations, "iterations", minimum=0)
        self.tolerance = _check_tolerance(tolerance, model)
        averaging = check_fraction(
            averaging, "averaging", "a fraction of the steps", "0: the last iterate"
        )
        # Steps from this one on are averaged; at least the last one.
        self.averaging_start = min(int(self.iterations * (1.0 - averaging)), self.iterations - 1)
        self.learning_rate = check_learning_rate(learning_rate)
        self.num_samples = check_integer(num_samples, "num_samples")
        self.seed = check_seed(seed)
        self.chunk_size = check_chunk_size(chunk_size)
        self.likelihood = masked(model.likelihood)
        model.latent.check_new_rows()
        rows = candidate_rows(model.num_table_rows, seed, max_candidates)
        self._candidate_rows = tf.constant(rows, dtype=tf.int64)
        self._fit = NewRowFit(
            objective=lambda batch, Y, rows: self._row_bounds(batch, Y),
            initial_mean=self._initial_means,
            num_samples=model.num_samples,
            iterations=self.iterations,
            learning_rate=self.learning_rate,
            averaging_start=self.averaging_start,
            seed=self.seed,
            tolerance=self.tolerance,
        )
        self.exact_model = exact_predictive_model(model)
        spec = [tf.TensorSpec([None, model.data_dim], default_float())]
        # Rows' observed inputs [B, R] (covariates, log size factor) come last, where the model
        # has them.
        inputs = [] if model.row_inputs is None else [tf.TensorSpec([None, None], default_float())]
        # The fit of new rows, traced once and called by each function below (it does not depend
        # on the draws they take).
        self.fitted = GraphFunction(self._fitted_parameters, spec + inputs)
        self.latents = GraphFunction(self._latents, spec + inputs)
        self.predict = GraphFunction(self._predict, spec + inputs)
        self.log_densities = GraphFunction(self._log_densities, spec * 2 + inputs)

    def infer(self, Y: np.ndarray, inputs: np.ndarray | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [N*, Q] of q(x*) for checked rows Y [N*, D] (and their
        observed ``inputs`` [N*, R] where the model has them), in chunks."""
        return self.in_chunks(self.latents, self.model.num_samples, Y, inputs)

    def reconstruct(
        self, Y: np.ndarray, inputs: np.ndarray | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [N*, D] of every entry of checked rows Y, in chunks."""
        return self.in_chunks(self.predict, self.num_samples, Y, inputs)

    def log_density(
        self, Y: np.ndarray, targets: np.ndarray, inputs: np.ndarray | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """log p(targets | q(x*) inferred from Y), per entry [N*, D] (NaN where a target is
        missing) and per row [N*], for checked rows Y and targets [N*, D], in chunks."""
        return self.in_chunks(self.log_densities, self.num_samples, Y, targets, inputs, exact=False)

    def draws(self, Y: np.ndarray, num_draws: int) -> tf.Tensor:
        """Draws [num_draws, N*, Q] of q(x*) for checked rows Y [N*, D], fitted as in
        :meth:`infer`, each row with standard draws of its own (stateless, from the seed)."""
        shape = [num_draws, len(Y), self.model.latent_dim]
        noise = tf.random.stateless_normal(shape, seed=[self.seed, 2], dtype=default_float())
        draw = tf.function(lambda Y: self.fitted_batch(Y, None, num_draws, noise).samples)
        return draw(tf.convert_to_tensor(Y))

    def in_chunks(
        self,
        function: GraphFunction,
        num_draws: int,
        *arrays: np.ndarray | None,
        exact: bool | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """The pair of outputs of the compiled ``function`` over ``arrays`` [N*, ...] (None left
        out), in chunks of :meth:`rows_per_chunk` rows."""
        size = self.rows_per_chunk(num_draws, exact)
        tensors = (tf.convert_to_tensor(a) for a in arrays if a is not None)
        first, second = in_row_chunks(function, size, *tensors)
        return first, second

    def rows_per_chunk(self, num_draws: int, exact: bool | None = None) -> int:
        """Rows at a time (:func:`chunk_rows`) for work with ``num_draws`` draws a row in the
        graph that fits the rows (``exact``: without draws, the exact predictive)."""
        # Newton steps fit a Gaussian q(x*)'s 2Q parameters a row (a point's Q: fewer).
        parameters = 2 * self.model.latent_dim if self.tolerance is not None else 1
        return chunk_rows(self.model, self.chunk_size, num_draws, parameters, exact)

    @check_shapes("Y: [batch, D]", "return: [batch, Q]")
    def _initial_means(self, Y: tf.Tensor, inputs: tf.Tensor | None = None) -> tf.Tensor:
        r"""Per row, of the :data:`START_CANDIDATES` candidate latents :math:`c` whose decoded
        means :math:`\mu_c` are closest on the observed entries :math:`o_{nd}` (least
        :math:`\sum_d o_{nd} (y_{nd} / s_n - \mu_{cd})^2`), the one where the row's bound is
        highest (zero for a row with nothing observed): the squares choose cheaply among all
        candidates, the bound among a few (a row's bound can have several optima, and the start
        decides which one its fit finds). Candidates are decoded with their own covariates and a
        size factor :math:`s = 1`; a row's own size factor :math:`s_n` (1 without) rescales it."""
        model = self.model
        trained = model.latent.moments(self._candidate_rows)[0]
        candidates = tf.concat([model.inducing_variable.Z[:, : model.latent_dim], trained], 0)
        decoded = model.predict_y(self._candidate_inputs(candidates))[0]  # [C, D]
        observed = tf.logical_not(tf.math.is_nan(Y))
        scaled = Y if inputs is None else Y / tf.exp(self._log_size_factors(inputs))
        values = tf.where(observed, scaled, tf.zeros_like(Y))
        # The squares expanded, so that no [B, C, D] tensor is formed.
        errors = (
            tf.reduce_sum(tf.square(values), axis=1, keepdims=True)
            - 2.0 * tf.matmul(values, decoded, transpose_b=True)
            + tf.matmul(tf.cast(observed, Y.dtype), tf.square(decoded), transpose_b=True)
        )
        count = min(START_CANDIDATES, int(candidates.shape[0]))
        starts = tf.gather(candidates, tf.math.top_k(-errors, count).indices)  # [B, K, Q]
        flat = tf.reshape(starts, [-1, model.latent_dim])  # row-major: row n's K starts together
        noise = tf.zeros([1, 1, model.latent_dim], Y.dtype)
        batch = model.latent.batch_of(model.latent.initial_rows(flat), 1, noise)
        if inputs is not None:
            batch = with_row_inputs(batch, tf.repeat(inputs, count, axis=0))
        bounds = tf.reshape(self._row_bounds(batch, tf.repeat(Y, count, axis=0)), [-1, count])
        initial = tf.gather(starts, tf.argmax(bounds, axis=1), batch_dims=1)
        anything_observed = tf.reduce_any(observed, axis=1, keepdims=True)
        return tf.where(anything_observed, initial, tf.zeros_like(initial))

    def _candidate_inputs(self, latents: tf.Tensor) -> tf.Tensor:
        """The GP inputs [C, Q + R] of the candidate ``latents`` [C, Q] (the inducing inputs',
        then the candidate training rows'): their covariates beside them, a log size factor 0."""
        model = self.model
        if model.row_inputs is None:
            return latents
        own = tf.concat(
            [
                model.inducing_variable.Z[:, model.latent_dim :],
                tf.gather(model.row_inputs, self._candidate_rows),
            ],
            axis=0,
        )
        if model.size_factor_reference is not None:
            own = tf.pad(own[:, :-1], [[0, 0], [0, 1]])
        return tf.concat([latents, own], axis=1)

    def _log_size_factors(self, inputs: tf.Tensor) -> tf.Tensor:
        """The log size factor [B, 1] of rows with observed ``inputs`` [B, R] (0 without)."""
        if self.model.size_factor_reference is None:
            return tf.zeros_like(inputs[:, :1])
        return inputs[:, -1:]

    @check_shapes("Y: [batch, D]", "return: [batch]")
    def _row_bounds(self, batch: LatentBatch, Y: tf.Tensor) -> tf.Tensor:
        # The closed form wherever it applies, whatever the training used: new rows' bounds
        # then have no Monte Carlo noise, so each row can stop when it converges.
        closed_form = self.exact_model is not None
        return (
            self.model.expected_data_term(batch, Y, self.likelihood, closed_form) + batch.row_term
        )

    def fitted_batch(
        self, Y: tf.Tensor, inputs: tf.Tensor | None, num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        """q(x*) of rows Y [B, D] drawn with ``noise`` [S, B or 1, Q], in-graph: fitted (or
        encoded) by the compiled :attr:`fitted` and drawn with the rows' observed ``inputs``
        [B, R] appended (where the model has them)."""
        rows = self.fitted(Y) if inputs is None else self.fitted(Y, inputs)
        batch = self.model.latent.new_row_batch(tuple(rows), num_samples, noise, self._fit)
        return batch if inputs is None else with_row_inputs(batch, inputs)

    def _fitted_parameters(
        self, Y: tf.Tensor, inputs: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, ...]:
        """What q(x*) of rows Y [B, D] is drawn from (the latent's
        :meth:`~gpflow_svi_gplvm.latents.base.LatentVariables.new_row_parameters`), fitted with
        the rows' observed ``inputs`` [B, R] where the model has them."""
        if inputs is None:
            return self.model.latent.new_row_parameters(Y, self._fit)
        fit = self._fit._replace(
            objective=lambda batch, Y, rows: self._row_bounds(
                with_row_inputs(batch, tf.gather(inputs, rows)), Y
            ),
            initial_mean=lambda Y: self._initial_means(Y, inputs),
        )
        return self.model.latent.new_row_parameters(Y, fit)

    @check_shapes("Y: [batch, D]", "return[0]: [batch, Q]", "return[1]: [batch, Q]")
    def _latents(
        self, Y: tf.Tensor, inputs: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [B, Q] of q(x*)."""
        noise = tf.zeros([1, 1, self.model.latent_dim], dtype=Y.dtype)
        batch = self.fitted_batch(Y, inputs, 1, noise)
        q = self.model.latent_dim
        return batch.mean[:, :q], batch.variance[:, :q]

    @check_shapes("Y: [batch, D]", "return[0]: [batch, D]", "return[1]: [batch, D]")
    def _predict(
        self, Y: tf.Tensor, inputs: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [B, D] of every entry, integrating over q(x*): exactly
        where :func:`exact_predictive_applies`, else by ``num_samples`` draws."""
        if self.exact_model is not None:
            batch = self.fitted_batch(
                Y, inputs, 1, tf.zeros([1, 1, self.model.latent_dim], Y.dtype)
            )
            return closed_form_predictive(self.exact_model, batch.mean, batch.covariance)
        noise = predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
        samples = self.fitted_batch(Y, inputs, self.num_samples, noise).samples
        return predictive_moments(self.model, samples)

    @check_shapes(
        "Y: [batch, D]", "targets: [batch, D]", "return[0]: [batch, D]", "return[1]: [batch]"
    )
    def _log_densities(
        self, Y: tf.Tensor, targets: tf.Tensor, inputs: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        r"""Log densities of ``targets`` under the predictive of rows Y, per entry [B, D] and per
        row [B]: mixtures over the draws :math:`x^{(s)}` of q(x*) of the likelihood's predictive,

        .. math::

            \log p(t_{nd}) = \log \frac{1}{S} \sum_s p(t_{nd} \mid x^{(s)}), \qquad
            \log p(t_n) = \log \frac{1}{S} \sum_s \prod_d p(t_{nd} \mid x^{(s)}).
        """
        noise = predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
        samples = self.fitted_batch(Y, inputs, self.num_samples, noise).samples
        terms = draw_log_densities(self.model, self.likelihood, samples, targets)  # [S, B, D]
        log_draws = tf.math.log(tf.cast(tf.shape(samples)[0], terms.dtype))
        per_entry = tf.reduce_logsumexp(terms, axis=0) - log_draws
        per_row = tf.reduce_logsumexp(tf.reduce_sum(terms, axis=-1), axis=0) - log_draws
        missing = tf.math.is_nan(targets)
        return tf.where(missing, tf.constant(np.nan, terms.dtype), per_entry), per_row


START_CANDIDATES = 8
"""Candidate latents per new row, the closest on its observed entries, among which its fit
starts at the one with the highest bound."""

TOLERANCE = 1e-4
"""``tolerance="auto"``'s relative Newton decrement below which a new row's fit stops."""


def _check_tolerance(tolerance: float | str | None, model: NewRowModel) -> float | None:
    """``tolerance`` as the fit's stopping rule: "auto" stops rows at :data:`TOLERANCE` where the
    row bound has no Monte Carlo noise (a point x*, or a Gaussian q(x*) where
    :func:`exact_predictive_applies`), else runs the fixed ``iterations``; None always runs
    them; a positive number stops at it."""
    if tolerance == "auto":
        deterministic = exact_predictive_applies(model) or isinstance(model.latent, PointLatent)
        return TOLERANCE if deterministic else None
    if tolerance is None:
        return None
    return check_learning_rate(tolerance, "tolerance", "1e-4 is typical; or 'auto', or None")
