"""The predictive distribution of new rows at their q(x*): its moments, the log densities of
draws, when it has a closed form, and the rows fed through it in chunks."""

from __future__ import annotations

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float
from gpflow.models import SVGP

from ..compiled import GraphFunction
from ..components.psi_statistics import closed_form_applies
from ..likelihoods import MaskedLikelihood
from ..validation import (
    check_chunk_size,
    check_seed,
)
from .new_row_model import NewRowModel

__all__ = [
    "draw_log_densities",
    "predictive_moments",
    "in_row_chunks",
    "exact_predictive_applies",
    "exact_predictive_model",
    "predictive_noise",
    "chunk_rows",
]


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


def exact_predictive_applies(model: NewRowModel) -> bool:
    """Whether the predictive of Y integrates over q(x) exactly
    (:func:`~gpflow_svi_gplvm.components.psi_statistics.closed_form_predictive`): a Gaussian q(x), a
    squared-exponential kernel, a Gaussian likelihood and a constant mean function. Elsewhere
    it is estimated from draws of q(x)."""
    return exact_predictive_model(model) is not None


def exact_predictive_model(model: NewRowModel) -> SVGP | None:
    """``model`` when :func:`exact_predictive_applies`, else None."""
    if isinstance(model, SVGP) and model.latent.gaussian and closed_form_applies(model) is None:
        return model
    return None


def predictive_noise(num_samples: int, latent_dim: int, seed: int) -> tf.Tensor:
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
