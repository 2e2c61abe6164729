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

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float
from gpflow.inducing_variables import InducingVariables
from gpflow.likelihoods import Likelihood
from gpflow.models import SVGP
from numpy.typing import ArrayLike

from ..compiled import GraphFunction
from ..components.covariates import new_row_inputs, with_row_inputs
from ..components.psi_statistics import closed_form_applies, closed_form_predictive
from ..latents import LatentBatch, LatentVariables, NewRowFit, PointLatent
from ..likelihoods import MaskedLikelihood, check_likelihood_support
from ..options import takes_options_of
from ..validation import (
    check_chunk_size,
    check_fraction,
    check_integer,
    check_learning_rate,
    check_observations,
    check_seed,
)

__all__ = [
    "LatentInference",
    "MAX_CANDIDATES",
    "candidate_rows",
    "NewRowModel",
    "NewRowOptions",
    "check_new_row_model",
    "chunk_rows",
    "draw_log_densities",
    "exact_predictive_applies",
    "in_row_chunks",
    "infer_latents",
    "log_predictive_density",
    "predictive_moments",
    "reconstruct",
]


MAX_CANDIDATES = 2000
"""Training rows whose latents :class:`LatentInference` considers as starts, at most
(:func:`candidate_rows`)."""


def candidate_rows(num_rows: int, seed: int, count: int = MAX_CANDIDATES) -> np.ndarray:
    """The training rows whose latents new rows may start from: ``count`` of the ``num_rows``
    drawn from ``seed``, in increasing order (all of them, in order, when there are fewer)."""
    return np.sort(np.random.default_rng(seed).permutation(num_rows)[:count])


class NewRowModel(Protocol):
    """What inference for new rows (and serving) reads from a trained model, such as
    :class:`~gpflow_svi_gplvm.SVIGPLVM`."""

    latent: LatentVariables
    likelihood: Likelihood
    inducing_variable: InducingVariables
    num_data: int | tf.Tensor | None
    num_table_rows: int
    """The rows of the latent tables (N, or this worker's rows on several workers)."""
    data_dim: int
    latent_dim: int
    num_samples: int
    shared_covariance: bool
    row_inputs: tf.Variable | None
    """[N, R] the training rows' observed inputs (covariates, log size factor), or None."""
    num_covariates: int
    size_factor_reference: tf.Variable | None

    def predict_f(self, Xnew: tf.Tensor, /) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [B, D] of q(f(Xnew)) for Xnew [B, Q]."""
        ...

    def predict_y(self, Xnew: tf.Tensor, /) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [B, D] of the likelihood's predictive at Xnew [B, Q]."""
        ...

    def expected_data_term(
        self,
        batch: LatentBatch,
        Y: tf.Tensor,
        likelihood: Likelihood | None = None,
        closed_form: bool | None = None,
        /,
    ) -> tf.Tensor:
        """Each row's expected log likelihood [B] of Y [B, D] under a latent ``batch`` (in closed
        form over q(x) when ``closed_form``; None: as the model trains)."""
        ...

    def latent_batch(
        self, idx: tf.Tensor, Y: tf.Tensor, num_samples: int, noise: tf.Tensor | None = None, /
    ) -> LatentBatch:
        """The batch of training rows ``idx`` [B], their observed inputs appended."""
        ...


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
        likelihood = model.likelihood
        self.likelihood = (
            likelihood if isinstance(likelihood, MaskedLikelihood) else MaskedLikelihood(likelihood)
        )
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
        self.exact_model = _exact_predictive_model(model)
        spec = [tf.TensorSpec([None, model.data_dim], default_float())]
        # Rows' observed inputs [B, R] (covariates, log size factor) come last, where the model
        # has them.
        inputs = [] if model.row_inputs is None else [tf.TensorSpec([None, None], default_float())]
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
        encoded) and drawn with the rows' observed ``inputs`` [B, R] appended (where the model
        has them)."""
        if inputs is None:
            return self.model.latent.new_rows(Y, num_samples, noise, self._fit)
        fit = self._fit._replace(
            objective=lambda batch, Y, rows: self._row_bounds(
                with_row_inputs(batch, tf.gather(inputs, rows)), Y
            ),
            initial_mean=lambda Y: self._initial_means(Y, inputs),
        )
        return with_row_inputs(self.model.latent.new_rows(Y, num_samples, noise, fit), inputs)

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
        noise = _predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
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
        noise = _predictive_noise(self.num_samples, self.model.latent_dim, self.seed)
        samples = self.fitted_batch(Y, inputs, self.num_samples, noise).samples
        terms = draw_log_densities(self.model, self.likelihood, samples, targets)  # [S, B, D]
        log_draws = tf.math.log(tf.cast(tf.shape(samples)[0], terms.dtype))
        per_entry = tf.reduce_logsumexp(terms, axis=0) - log_draws
        per_row = tf.reduce_logsumexp(tf.reduce_sum(terms, axis=-1), axis=0) - log_draws
        missing = tf.math.is_nan(targets)
        return tf.where(missing, tf.constant(np.nan, terms.dtype), per_entry), per_row


@check_shapes("samples: [S, batch, Q]", "targets: [batch, D]", "return: [S, batch, D]")
def draw_log_densities(
    model: NewRowModel, likelihood: MaskedLikelihood, samples: tf.Tensor, targets: tf.Tensor
) -> tf.Tensor:
    r""":math:`\log p(t_{nd} \mid x^{(s)}) = \log \int p(t_{nd} \mid f)\, q(f_d(x^{(s)}))\, df`
    [S, B, D] of ``targets`` [B, D] at draws ``samples`` [S, B, Q (+ R)] of the rows' GP inputs,
    zero where a target is missing: the masked ``likelihood``'s per-entry predictive densities
    (closed form for a Gaussian, Gauss-Hermite quadrature in log space otherwise)."""
    X = tf.reshape(samples, [-1, tf.shape(samples)[-1]])  # draw-major
    f_mean, f_var = model.predict_f(X)
    num_draws = tf.shape(samples)[0]
    terms = likelihood.entry_log_densities(X, f_mean, f_var, tf.tile(targets, [num_draws, 1]))
    return tf.reshape(terms, tf.concat([tf.shape(samples)[:2], [-1]], axis=0))


@check_shapes("samples: [S, batch, Q]", "return[0]: [batch, D]", "return[1]: [batch, D]")
def predictive_moments(model: NewRowModel, samples: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    r"""Moments [B, D] of :math:`p(y_{nd}) = \mathbb{E}_{q(x_n)}[p(y_{nd} \mid x_n)]` from draws
    ``samples`` [S, B, Q] of :math:`q(x_n)`, with :math:`m_s, v_s` the likelihood's predictive
    mean and variance given :math:`x^{(s)}_n`:

    .. math::

        \mathbb{E}[y_{nd}] = \frac{1}{S} \sum_s m_s, \qquad
        \mathbb{V}[y_{nd}] = \frac{1}{S} \sum_s (v_s + m_s^2) - \mathbb{E}[y_{nd}]^2,

    so the variance holds the latent, GP and noise uncertainty.
    """
    mean, variance = model.predict_y(tf.reshape(samples, [-1, tf.shape(samples)[-1]]))
    shape = tf.concat([tf.shape(samples)[:2], [model.data_dim]], axis=0)
    mean, variance = tf.reshape(mean, shape), tf.reshape(variance, shape)
    predictive_mean = tf.reduce_mean(mean, axis=0)
    second_moment = tf.reduce_mean(variance + tf.square(mean), axis=0)
    return predictive_mean, tf.maximum(second_moment - tf.square(predictive_mean), 0.0)


def in_row_chunks(function: GraphFunction, size: int, *tensors: tf.Tensor) -> tuple[tf.Tensor, ...]:
    """``function`` over consecutive chunks of ``size`` rows of ``tensors`` (each [N, ...]),
    one chunk after another, its outputs (each [rows, ...]) concatenated along the rows.

    ``function`` is a :class:`~gpflow_svi_gplvm.compiled.GraphFunction`, whose input signature
    gives the outputs' dtypes and shapes. The loop is an explicit ``tf.while_loop``: eagerly it
    calls the compiled ``function`` once per chunk; inside a graph (a served signature) it is one
    loop, so that a request's peak memory does not grow with its number of rows. Rows are
    independent, so the result equals one pass over all rows.
    """
    outputs = function.get_concrete_function().structured_outputs
    count = (tf.shape(tensors[0])[0] + size - 1) // size
    parts = tuple(
        tf.TensorArray(o.dtype, size=count, infer_shape=False, element_shape=o.shape)
        for o in outputs
    )

    def chunk(i: tf.Tensor, parts: tuple[tf.TensorArray, ...]):
        results = function(*(t[i * size : (i + 1) * size] for t in tensors))
        return i + 1, tuple(part.write(i, r) for part, r in zip(parts, results))

    state = (tf.constant(0), parts)
    _, parts = tf.while_loop(lambda i, _: i < count, chunk, state, parallel_iterations=1)
    return tuple(part.concat() for part in parts)


@dataclass(frozen=True)
class NewRowOptions:
    """How :func:`infer_latents`, :func:`reconstruct` and :func:`log_predictive_density` find
    the q(x*) of new rows: the one list of their options, with its defaults."""

    iterations: int = 300
    """At most this many steps of each row's fit (``tolerance`` may stop a row sooner)."""
    learning_rate: float = 0.05
    """Adam's step size where rows are fitted by Adam (see :class:`LatentInference`)."""
    seed: int = 0
    """Seeds the fit's draws of q(x*) and the predictive's."""
    mask: ArrayLike | None = None
    """[N*, D], True where an entry of the new rows is observed (besides their NaN)."""
    chunk_size: int | None = None
    """Rows at a time (default: intermediates near 50M numbers); results do not depend on it."""
    covariates: ArrayLike | None = None
    """[N*, P], the new rows' covariates; needed by a model fitted with covariates."""
    size_factors: ArrayLike | None = None
    """[N*], the new rows' size factors, for a model fitted with them; by default each row's
    library size over the training rows' reference
    (:func:`~gpflow_svi_gplvm.components.covariates.new_row_inputs`)."""
    tolerance: float | str | None = "auto"
    """Relative Newton decrement that stops a row ("auto": :data:`TOLERANCE` where the row bound
    has no Monte Carlo noise; ``None``: fixed Adam steps, an amortised model's one encoder pass)."""

    def observations(self, model: NewRowModel, Y) -> np.ndarray:
        """Y [N*, D] checked against the model, with ``mask``'s hidden entries NaN."""
        return check_observations(Y, "Y_new", model.data_dim, self.mask)

    def inputs(self, model: NewRowModel, Y: np.ndarray) -> np.ndarray | None:
        """The new rows' observed inputs (covariates, log size factors) [N*, P] or None."""
        return new_row_inputs(model, Y, self.covariates, self.size_factors)

    def inference(self, model: NewRowModel, num_samples: int = 64) -> LatentInference:
        """The compiled inference of new rows' q(x*) these options describe."""
        return LatentInference(
            model,
            self.iterations,
            self.learning_rate,
            num_samples,
            self.seed,
            chunk_size=self.chunk_size,
            tolerance=self.tolerance,
        )


@takes_options_of(NewRowOptions)
def infer_latents(model: NewRowModel, Y_new, **options: Any) -> tuple[tf.Tensor, ...]:
    """Mean and marginal variance [N*, Q] of q(x*) for new rows Y_new [N*, D] (NaN allowed).

    q(x*) alone optimised, in at most ``iterations`` steps, as :class:`LatentInference` does
    (amortised models: from their encoder's q(x*)), which ``tolerance`` stops. Point and MAP
    estimates have zero variance. The model itself is not modified. The options are
    :class:`NewRowOptions`'; a model fitted with covariates needs the new rows' ``covariates``.
    """
    given = NewRowOptions(**options)
    Y = given.observations(model, Y_new)
    return given.inference(model).infer(Y, given.inputs(model, Y))


@takes_options_of(NewRowOptions)
def reconstruct(
    model: NewRowModel, Y, rows: np.ndarray | None = None, num_samples: int = 64, **options: Any
) -> tuple[tf.Tensor, ...]:
    """Predictive mean and variance [N, D] of every entry of Y (observed and missing).

    ``rows`` (training row indices, one per row of Y) uses the trained q(x) of those rows (and
    their covariates and size factors); otherwise latents are inferred first, as in
    :func:`infer_latents` (the options are :class:`NewRowOptions`'). See
    :func:`predictive_moments` for how q(x) is integrated out (``num_samples`` draws, common to
    all rows).
    """
    given = NewRowOptions(**options)
    Y = given.observations(model, Y)
    if rows is not None:
        rows = _checked_training_rows(model, rows, len(Y))
    if rows is None or model.latent.amortised:
        inference = given.inference(model, num_samples)
        if rows is not None and model.row_inputs is not None:
            return inference.reconstruct(Y, model.row_inputs.numpy()[rows])
        return inference.reconstruct(Y, given.inputs(model, Y))
    chunk_size = chunk_rows(model, given.chunk_size, num_samples)
    noise = _predictive_noise(num_samples, model.latent_dim, given.seed)
    exact_model = _exact_predictive_model(model)

    def predict(idx: tf.Tensor, Y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        if exact_model is not None:
            batch = model.latent_batch(idx, Y, 1, tf.zeros([1, 1, model.latent_dim], Y.dtype))
            return closed_form_predictive(exact_model, batch.mean, batch.covariance)
        return predictive_moments(model, model.latent_batch(idx, Y, num_samples, noise).samples)

    signature = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, model.data_dim], Y.dtype)]
    compiled = GraphFunction(predict, signature)
    mean, variance = in_row_chunks(compiled, chunk_size, tf.constant(rows), tf.constant(Y))
    return mean, variance


@takes_options_of(NewRowOptions)
def log_predictive_density(
    model: NewRowModel,
    Y,
    targets=None,
    joint: bool = False,
    num_samples: int = 64,
    **options: Any,
) -> tf.Tensor:
    r"""log p(t* | Y) of ``targets`` [N, D] (default: Y itself) under the predictive of new rows Y.

    q(x*) is inferred from Y as in :func:`infer_latents`; the predictive of an entry is the
    mixture over ``num_samples`` draws :math:`x^{(s)}` of q(x*) (common to all rows) of the
    likelihood's predictive given :math:`x^{(s)}`,

    .. math::

        p(t_{nd}) = \frac{1}{S} \sum_s \int p(t_{nd} \mid f)\, q(f_d(x^{(s)}))\, df.

    The integral over f is the likelihood's ``predict_log_density``: closed form for a Gaussian,
    otherwise its Gauss-Hermite quadrature (GPflow's default, 20 points, can be off by a fraction
    of a percent where q(f) is wide against the likelihood; build the likelihood with
    ``quadrature=gpflow.quadrature.NDiagGHQuadrature(1, 100)`` for more).
    Returns per-entry log densities [N, D] (NaN where a target is NaN), or with ``joint=True``
    the log density of each row's observed targets [N],
    :math:`\frac{1}{S} \sum_s \prod_d (\dots)`: given x the outputs are independent, so this is
    the row's joint predictive. Negate and average for an NLPD. ``targets`` may hold entries that
    Y hides (score a reconstruction on them). ``covariates`` and ``size_factors`` as in
    :func:`infer_latents`; the options are :class:`NewRowOptions`'.
    """
    given = NewRowOptions(**options)
    Y = given.observations(model, Y)
    targets = Y if targets is None else check_observations(targets, "targets", model.data_dim)
    if targets.shape != Y.shape:
        raise ValueError(
            f"targets {targets.shape} must have the shape of Y {Y.shape}: one row of targets "
            "per row of Y."
        )
    check_likelihood_support(model.likelihood, targets)
    inference = given.inference(model, num_samples)
    per_entry, per_row = inference.log_density(Y, targets, given.inputs(model, Y))
    return per_row if joint else per_entry


def exact_predictive_applies(model: NewRowModel) -> bool:
    """Whether the predictive of Y integrates over q(x) exactly
    (:func:`~gpflow_svi_gplvm.components.psi_statistics.closed_form_predictive`): a Gaussian q(x), a
    squared-exponential kernel, a Gaussian likelihood and a constant mean function. Elsewhere
    it is estimated from draws of q(x)."""
    return _exact_predictive_model(model) is not None


def _exact_predictive_model(model: NewRowModel) -> SVGP | None:
    """``model`` when :func:`exact_predictive_applies`, else None."""
    if isinstance(model, SVGP) and model.latent.gaussian and closed_form_applies(model) is None:
        return model
    return None


START_CANDIDATES = 8
"""Candidate latents per new row, the closest on its observed entries, among which its fit
starts at the one with the highest bound."""

TOLERANCE = 1e-4
"""``tolerance="auto"``'s relative Newton decrement below which a new row's fit stops."""


def check_new_row_model(model: object) -> None:
    """A ``ValueError`` unless ``model`` is what new rows are inferred from (a trained GPLVM of
    this package, see :class:`NewRowModel`), e.g. not None, a name or another GPflow model."""
    if not isinstance(getattr(model, "latent", None), LatentVariables) or not all(
        hasattr(model, name) for name in ("likelihood", "inducing_variable", "data_dim")
    ):
        raise ValueError(
            f"model must be a GPLVM of this package (SVIGPLVM or a subclass, trained by fit), got "
            f"{type(model).__name__}: build one, e.g. BayesianSVIGPLVM(Y, latent_dim=2)."
        )


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


def _predictive_noise(num_samples: int, latent_dim: int, seed: int) -> tf.Tensor:
    """Standard normal draws [S, 1, Q], shared by all rows."""
    shape = [num_samples, 1, latent_dim]
    return tf.random.stateless_normal(shape, seed=[check_seed(seed), 1], dtype=default_float())


def chunk_rows(
    model: NewRowModel,
    chunk_size: int | None,
    num_samples: int,
    row_parameters: int = 1,
    exact: bool | None = None,
) -> int:
    """``chunk_size`` (checked as in :func:`~gpflow_svi_gplvm.validation.check_chunk_size`) or
    by default rows such that the GP's intermediates stay near 5e7 numbers: D x M x (rows x
    draws) with a covariance per output or (D + M) x (rows x draws) with a shared one; near 5e6
    when Newton steps differentiate them once per parameter of a row (``row_parameters``, P,
    vectorised) for the rows' Hessians, P times over; or, where the predictive is exact
    (:func:`exact_predictive_applies`, no draws), (M + D) x M x rows near 5e6 (larger chunks
    measured slower: a step's working set leaves the caches). ``exact``: whether the work is
    that exact predictive (default: wherever it applies); False for work with draws even there.
    """
    chunk_size = check_chunk_size(chunk_size)
    if chunk_size is not None:
        return chunk_size
    D, M = model.data_dim, int(model.inducing_variable.num_inducing)
    if exact_predictive_applies(model) if exact is None else exact:
        return max(1, int(5e6 // ((M + D) * M)))
    per_draw = D + M if model.shared_covariance else D * M
    budget = 5e7 if row_parameters == 1 else 5e6 / row_parameters
    return max(1, int(budget // (per_draw * max(num_samples, 1))))


def _checked_training_rows(model: NewRowModel, rows, num_rows: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.shape != (num_rows,) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows must be {num_rows} integer training-row indices, one per row of Y.")
    num_data = model.num_table_rows
    if rows.min() < 0 or rows.max() >= num_data:
        raise ValueError(f"rows must lie in [0, {num_data}), the model's training rows.")
    return rows.astype(np.int64)
