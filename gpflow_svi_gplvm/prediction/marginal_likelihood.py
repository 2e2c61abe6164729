r"""The held-out likelihood of new rows: an importance-sampled estimate of log p(y*) under a trained
model, with its Monte Carlo standard error.

For a row :math:`y_*` (NaN = missing; :math:`O` its observed entries) and the model's q(u),

.. math::

    p(y_*) = \int p(x) \prod_{d \in O} \int p(y_{*d} \mid f)\, q(f_d(x))\, df\, dx
    \approx \frac1S \sum_s w_s, \qquad
    w_s = \frac{p(x_s) \prod_{d \in O} p(y_{*d} \mid x_s)}{r(x_s)}, \quad x_s \sim r,

with p(x) = N(0, I) and each entry's integral over f in closed form for a Gaussian likelihood, by
Gauss-Hermite quadrature in log space otherwise
(:func:`~gpflow_svi_gplvm.prediction.predictive.draw_log_densities`). Given x the outputs are
independent under q(u) (it factorises over outputs), so this is the model's predictive density of
the row, not a bound. The estimate is :math:`\log \frac1S \sum_s w_s` (its expectation lies below
log p(y*) by about half its variance); its standard error, by the delta method, is
:math:`\mathrm{sd}(w) / (\sqrt S\, \bar w) = \sqrt{(S \sum_s \tilde w_s^2 - 1) / (S - 1)}` with
:math:`\tilde w_s = w_s / \sum_j w_j`.

The proposal r is built from the row's own q(x*), from new-row inference (fitted with the model
frozen) or the encoder (:class:`~gpflow_svi_gplvm.prediction.latent_inference.LatentInference`):
half of the draws come from q(x*), half from q(x*) with its base variance multiplied by ``widening``
c (4 by default), and r is their mixture (a defensive mixture; each draw weighed by the mixture's
density, the balance heuristic of multiple importance sampling). A variational q(x*) is narrower
than the posterior it approximates, and importance weights under too narrow a proposal have heavy
tails, which bias the estimate down and its standard error with it; the widened half keeps the
weights bounded where the posterior is up to c times wider. Every family widens alike: its draws are
:math:`x = T(\mu + \sigma \epsilon)` (T the identity or a flow), and drawing :math:`\sqrt c\,
\epsilon` instead widens the base, with :math:`\log q_c(x) = \log q(x) + \frac12 (1 - 1/c) \lVert
\sqrt c\, \epsilon \rVert^2
- \frac Q2 \log c`. ``widening=1`` uses q(x*) alone. Each row draws its own standard noise
(stateless, from the seed and the row's number), so rows scored together, one by one or in
chunks agree.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float

from ..compiled import GraphFunction
from ..latents.flows import log_prior
from ..likelihoods import check_likelihood_support, likelihood_facts
from ..options import takes_options_of
from ..validation import check_integer, check_seed
from .functions import NewRowOptions
from .latent_inference import LatentInference
from .new_row_model import NewRowModel
from .predictive import chunk_rows, draw_log_densities, in_row_chunks

__all__ = ["MarginalLogLikelihood", "MarginalLikelihoodEstimator", "marginal_log_likelihood"]


class MarginalLogLikelihood(NamedTuple):
    """Per-row estimates of the held-out log likelihood and their Monte Carlo standard errors."""

    log_likelihood: tf.Tensor
    """[N*] the estimate of log p(y*) of each row (of its observed entries)."""
    standard_error: tf.Tensor
    """[N*] the Monte Carlo standard error of each estimate."""


class MarginalLikelihoodEstimator:
    """The compiled estimator of log p(y*) (module docstring) for rows of ``inference``'s model,
    with ``num_samples`` S draws of each row's q(x*): call it on checked rows Y [N*, D] (and their
    observed inputs [N*, R] where the model has them: :meth:`NewRowOptions.inputs`,
    :func:`~gpflow_svi_gplvm.components.covariates.new_row_inputs`) as often as wanted; it traces
    once."""

    def __init__(
        self,
        inference: LatentInference,
        num_samples: int = 256,
        seed: int = 0,
        widening: float = 4.0,
    ):
        model = inference.model
        if not model.latent.has_density:
            raise ValueError(
                f"The held-out likelihood weighs draws of q(x*) by their density, and "
                f"{type(model.latent).__name__} has none (point and MAP estimates): train a "
                "BayesianSVIGPLVM, AmortisedBayesianGPLVM or FlowBayesianGPLVM."
            )
        self.inference = inference
        self.num_samples = check_integer(num_samples, "num_samples", hint="e.g. 256")
        self.seed = check_seed(seed)
        self.widening = check_widening(widening)
        specs = [
            tf.TensorSpec([None, model.data_dim], default_float()),
            tf.TensorSpec([None], tf.int64),
        ]
        if model.row_inputs is not None:
            specs.append(tf.TensorSpec([None, None], default_float()))
        self.function = GraphFunction(self._log_marginals, specs)

    def __call__(
        self, Y: np.ndarray, inputs: np.ndarray | None = None, first_row: int = 0
    ) -> MarginalLogLikelihood:
        """Estimates and standard errors [N*] for checked rows Y [N*, D] (and ``inputs``), in
        chunks of rows whose fit and draws stay within
        :func:`~gpflow_svi_gplvm.prediction.predictive.chunk_rows`' budget. The rows are
        numbered from ``first_row`` on (their noise follows from the numbers): give each block of a
        data set
        scored a block at a time its first row's number there."""
        inference, model = self.inference, self.inference.model
        size = min(inference.rows_per_chunk(model.num_samples), self.rows_per_chunk)
        first_row = check_integer(first_row, "first_row", minimum=0)
        rows = np.arange(first_row, first_row + len(Y), dtype=np.int64)
        tensors = [tf.convert_to_tensor(a) for a in (Y, rows, inputs) if a is not None]
        estimates, errors = in_row_chunks(self.function, size, *tensors)
        return MarginalLogLikelihood(estimates, errors)

    @check_shapes("Y: [batch, D]", "rows: [batch]", "return[0]: [batch]", "return[1]: [batch]")
    def _log_marginals(
        self, Y: tf.Tensor, rows: tf.Tensor, inputs: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """log p(y*) and its standard error [B] for rows Y [B, D], numbered ``rows`` [B]."""
        inference, model = self.inference, self.inference.model
        noise = self._noise(rows, model.latent_dim, Y.dtype)  # [S, B, Q], half of it widened
        batch = inference.fitted_batch(Y, inputs, self.num_samples, noise)
        likelihood = draw_log_densities(model, inference.likelihood, batch.samples, Y)
        x = batch.samples[..., : model.latent_dim]
        log_proposal = self._log_mixture(batch.log_density, noise)
        logs = tf.reduce_sum(likelihood, axis=-1) + log_prior(x) - log_proposal  # [S, B]
        estimate = tf.reduce_logsumexp(logs, axis=0) - np.log(self.num_samples)
        return estimate, relative_error(logs)

    @property
    def rows_per_chunk(self) -> int:
        """Rows scored at a time (:func:`~gpflow_svi_gplvm.prediction.predictive.chunk_rows`),
        counting each entry's predictive nodes (1 in closed form, else its quadrature rule's:
        :class:`~gpflow_svi_gplvm.likelihoods.LikelihoodFacts`) as draws: a row's densities are
        [S, D, nodes]."""
        nodes = likelihood_facts(self.inference.likelihood).predictive_nodes
        model = self.inference.model
        return chunk_rows(model, self.inference.chunk_size, self.num_samples * nodes, exact=False)

    @property
    def _narrow_draws(self) -> int:
        """The draws from q(x*) itself: the first half, rounded up (all without widening)."""
        return self.num_samples if self.widening == 1.0 else (self.num_samples + 1) // 2

    def _noise(self, rows: tf.Tensor, latent_dim: int, dtype: tf.DType) -> tf.Tensor:
        """The base noise [S, B, Q]: standard normal draws, each row's from the seed and its
        number ``rows``, the draws after :attr:`_narrow_draws` scaled by sqrt(widening)."""

        def row_noise(row: tf.Tensor) -> tf.Tensor:
            seed = tf.stack([tf.constant(self.seed, tf.int64), row])
            return tf.random.stateless_normal([self.num_samples, latent_dim], seed, dtype=dtype)

        noise = tf.map_fn(row_noise, rows, fn_output_signature=dtype)  # [B, S, Q]
        scales = np.where(np.arange(self.num_samples) < self._narrow_draws, 1.0, self.widening)
        return tf.transpose(noise, [1, 0, 2]) * np.sqrt(scales)[:, None, None]

    @check_shapes("log_q: [S, batch]", "noise: [S, batch, Q]", "return: [S, batch]")
    def _log_mixture(self, log_q: tf.Tensor, noise: tf.Tensor) -> tf.Tensor:
        r"""The proposal's log density [S, B] at each draw, from :math:`\log q(x)` and the base
        noise the draw came from: :math:`\log (\frac{n}{S} q(x) + \frac{S - n}{S} q_c(x))`, n
        = :attr:`_narrow_draws`."""
        S, c, narrow = self.num_samples, self.widening, self._narrow_draws
        if narrow == S:
            return log_q
        Q = tf.cast(tf.shape(noise)[-1], log_q.dtype)
        squares = tf.reduce_sum(tf.square(noise), axis=-1)
        log_wide = log_q + 0.5 * (1.0 - 1.0 / c) * squares - 0.5 * Q * np.log(c)
        parts = [np.log(narrow / S) + log_q, np.log((S - narrow) / S) + log_wide]
        return tf.reduce_logsumexp(tf.stack(parts), axis=0)


def check_widening(widening: object) -> float:
    """``widening`` as a float of at least 1, or a ``ValueError``."""
    try:
        value = float(widening)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = np.nan
    if isinstance(widening, bool) or not (np.isfinite(value) and value >= 1.0):
        raise ValueError(
            f"widening must be a number >= 1 (the factor on q(x*)'s variance of half the "
            f"proposal's draws; 1 draws from q(x*) alone), got {widening!r}."
        )
    return value


@check_shapes("logs: [S, batch]", "return: [batch]")
def relative_error(logs: tf.Tensor) -> tf.Tensor:
    r"""The delta-method standard error [B] of :math:`\log \frac1S \sum_s w_s` from the log weights
    [S, B]: :math:`\sqrt{(S \sum_s \tilde w_s^2 - 1) / (S - 1)}`, the normalised weights'
    :math:`\tilde w` (0 for one draw)."""
    count = tf.cast(tf.shape(logs)[0], logs.dtype)
    normalised = tf.nn.softmax(logs, axis=0)
    spread = count * tf.reduce_sum(tf.square(normalised), axis=0) - 1.0
    return tf.sqrt(tf.math.divide_no_nan(tf.maximum(spread, 0.0), count - 1.0))


@takes_options_of(NewRowOptions)
def marginal_log_likelihood(
    model: NewRowModel, Y, num_samples: int = 256, widening: float = 4.0, **options: Any
) -> MarginalLogLikelihood:
    r"""The held-out log likelihood :math:`\log p(y_*)` of each new row Y [N*, D] (NaN where
    missing; its observed entries only) and its Monte Carlo standard error, both [N*]: an
    importance-sampled estimate from ``num_samples`` draws of a proposal made of the row's q(x*),
    half of them widened by ``widening`` (module docstring). q(x*) is inferred from the row as in
    :func:`~gpflow_svi_gplvm.prediction.functions.infer_latents`, whose options these are
    (:class:`~gpflow_svi_gplvm.prediction.functions.NewRowOptions`: ``iterations``,
    ``tolerance``, ``seed``, ``mask``, ``chunk_size``, and for a model fitted with them the rows'
    ``covariates`` and ``size_factors``). Sum over rows for the held-out likelihood of a data set; a
    mean per row compares models on the same rows. Point and MAP estimates have no q(x*) to weigh
    draws by: a ``ValueError``.

    To score many blocks of rows with one compiled graph, build a
    :class:`MarginalLikelihoodEstimator` once and call it on each block.
    """
    given = NewRowOptions(**options)
    Y = given.observations(model, Y)
    check_likelihood_support(model.likelihood, Y)
    inference = given.inference(model)
    estimator = MarginalLikelihoodEstimator(inference, num_samples, given.seed, widening)
    return estimator(Y, given.inputs(model, Y))
