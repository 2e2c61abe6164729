"""New rows in one call each, with the options of
:class:`~gpflow_svi_gplvm.prediction.latent_inference.LatentInference`: their latents, their
reconstructions, and their log predictive density."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from ..compiled import GraphFunction
from ..components.covariates import new_row_inputs
from ..components.psi_statistics import closed_form_predictive
from ..likelihoods import check_likelihood_support
from ..options import takes_options_of
from ..validation import (
    check_observations,
)
from .latent_inference import LatentInference
from .new_row_model import NewRowModel
from .predictive import (
    chunk_rows,
    exact_predictive_model,
    in_row_chunks,
    predictive_moments,
    predictive_noise,
)

__all__ = ["NewRowOptions", "infer_latents", "reconstruct", "log_predictive_density"]


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
    noise = predictive_noise(num_samples, model.latent_dim, given.seed)
    exact_model = exact_predictive_model(model)

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


def _checked_training_rows(model: NewRowModel, rows, num_rows: int) -> np.ndarray:
    rows = np.asarray(rows)
    if rows.shape != (num_rows,) or not np.issubdtype(rows.dtype, np.integer):
        raise ValueError(f"rows must be {num_rows} integer training-row indices, one per row of Y.")
    num_data = model.num_table_rows
    if rows.min() < 0 or rows.max() >= num_data:
        raise ValueError(f"rows must lie in [0, {num_data}), the model's training rows.")
    return rows.astype(np.int64)
