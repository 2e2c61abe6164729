r"""Fitting the q(x*) of new rows with the model frozen: every row's parameters maximise its own
part of the bound (:func:`fit_rows`). A stochastic bound takes Adam steps whose iterates are
averaged (Polyak-Ruppert, see
:meth:`~gpflow_svi_gplvm.latents.RowLatentVariables.fitted_rows`); a deterministic one takes
damped Newton steps, row by row (:func:`newton_rows`), as follows.

Each new row's part of the bound depends on that row's parameters alone (P numbers: Q means and
Q variances for a Gaussian q(x*)), so the Hessian of the summed loss is block diagonal, one
P x P block :math:`H_n` per row, computed for all rows at once by differentiating the gradient
(vectorised over the P directions). A step moves row n by

.. math::

    \delta_n = -V_n \left(|\Lambda_n| + \lambda_n \max|\Lambda_n|\, I\right)^{-1} V_n^\top g_n,
    \qquad H_n = V_n \Lambda_n V_n^\top,

with the absolute eigenvalues (a descent direction where the loss is not convex) and a per-row
damping :math:`\lambda_n` relative to the block's scale, and is kept only where it lowers that
row's loss: :math:`\lambda_n` falls 3-fold after a kept step and grows 4-fold after a refused one
(Levenberg-Marquardt), and a refused step is tried again at half its length (backtracking). A
row stops once its Newton decrement :math:`-g_n^\top \delta_n` (about the loss the next step
would remove) falls below ``tolerance`` :math:`(1 + |\ell_n|)`, or when its damping passes
:data:`MAX_DAMPING` (no step of any length lowers its loss); a step computes only the rows still
moving. Near the optimum the steps converge quadratically, so most rows stop
within a handful of steps, where first-order steps take tens.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp

from ..training.optimizers import adam_moments_and_step
from .batch import LatentBatch, NewRowFit

__all__ = [
    "fit_rows",
    "newton_rows",
    "newton_minimum",
    "newton_decrement",
    "NewtonResult",
    "MAX_DAMPING",
]

MAX_DAMPING = 1e6
"""Relative damping beyond which a row stops: its steps are then at most about a millionth of the
Newton step along the block's steepest curvature."""

INITIAL_DAMPING = 1e-3
"""Relative damping a row starts with."""

Derivatives = tuple[tf.Tensor, tf.Tensor, tf.Tensor]
"""A loss [A], its gradient [A, P] and Hessian blocks [A, P, P]."""


def fit_rows(
    batch_of: Callable[[tuple[tf.Tensor, ...], int, tf.Tensor], LatentBatch],
    transforms: Sequence[tfp.bijectors.Bijector | None],
    start: Sequence[tf.Tensor],
    Y: tf.Tensor,
    fit: NewRowFit,
) -> tuple[tf.Tensor, ...]:
    """Parameter rows (one tensor [B, ...] per table, from ``start``) of new rows Y [B, D] that
    maximise ``fit.objective`` of ``batch_of(rows, draws, noise)``, in the unconstrained space of
    ``transforms`` (one GPflow transform or None per table), as
    :meth:`RowLatentVariables.fitted_rows` describes."""
    raw = [r if t is None else t.inverse(r) for t, r in zip(transforms, start)]

    def constrain(raw: Sequence[tf.Tensor]) -> tuple[tf.Tensor, ...]:
        return tuple(r if t is None else t.forward(r) for t, r in zip(transforms, raw))

    def loss(step: tf.Tensor, raw: list[tf.Tensor], rows: tf.Tensor) -> tf.Tensor:
        seed = tf.stack([tf.constant(fit.seed, tf.int64), step])
        shape = [fit.num_samples, 1, start[0].shape[-1]]
        noise = tf.random.stateless_normal(shape, seed=seed, dtype=Y.dtype)
        batch = batch_of(constrain(raw), fit.num_samples, noise)
        return -fit.objective(batch, tf.gather(Y, rows), rows)  # [A]

    if fit.tolerance is None:
        every_row = tf.range(tf.shape(Y, out_type=tf.int64)[0])
        return constrain(_polyak_adam(lambda step, raw: loss(step, raw, every_row), raw, fit))
    # One set of draws for the whole fit (those of step 0): the objective stays fixed.
    step = tf.constant(0, tf.int64)
    return constrain(
        newton_rows(lambda raw, rows: loss(step, raw, rows), raw, fit.tolerance, fit.iterations)
    )


def _polyak_adam(
    loss: Callable[[tf.Tensor, list[tf.Tensor]], tf.Tensor],
    start: list[tf.Tensor],
    fit: NewRowFit,
) -> list[tf.Tensor]:
    """``fit.iterations`` Adam steps on ``loss(step, parameters)`` (each row's part [B], rows
    independent) from ``start`` [B, ...], inside one explicit ``tf.while_loop``, and the average
    of the iterates from ``fit.averaging_start`` on (the last one when that is the last step)."""

    def adam_step(step, raw, first, second, average):
        with tf.GradientTape() as tape:
            tape.watch(raw)
            total = tf.reduce_sum(loss(step, raw))
        gradients = tape.gradient(total, raw)
        updates = [
            adam_moments_and_step(m, v, g, step + 1, fit.learning_rate)
            for m, v, g in zip(first, second, gradients)
        ]
        raw = [r - u[2] for r, u in zip(raw, updates)]
        # The running mean of the iterates from averaging_start on (weight 1 at that step).
        dtype = raw[0].dtype
        weight = 1.0 / tf.cast(tf.maximum(step - fit.averaging_start + 1, 1), dtype)
        weight *= tf.cast(step >= fit.averaging_start, dtype)
        average = [a + weight * (r - a) for a, r in zip(average, raw)]
        return step + 1, raw, [u[0] for u in updates], [u[1] for u in updates], average

    def more(step: tf.Tensor, *_) -> tf.Tensor:
        return step < fit.iterations

    # An explicit while loop: the compiled graph does not depend on AutoGraph converting the
    # caller (a notebook kernel once ran it unconverted).
    zeros = [tf.zeros_like(r) for r in start]
    state = (tf.constant(0, tf.int64), start, zeros, list(zeros), list(start))
    return tf.while_loop(more, adam_step, state, parallel_iterations=1)[4]


def newton_rows(
    loss: Callable[[list[tf.Tensor], tf.Tensor], tf.Tensor],
    start: list[tf.Tensor],
    tolerance: float,
    iterations: int,
) -> list[tf.Tensor]:
    """Parameters (one tensor [B, ...] per table, like ``start``) that minimise
    ``loss(parameters of some rows, their positions [A])`` -> each of those rows' loss [A] (rows
    independent), by at most ``iterations`` damped Newton steps per row, in one explicit
    ``tf.while_loop`` (see the module's docstring), its derivatives by automatic
    differentiation. Every parameter returned is the lowest-loss point its row reached."""
    flat, tables = _flattened(start)

    def derivatives(theta: tf.Tensor, rows: tf.Tensor) -> Derivatives:
        return _derivatives(loss, tables, theta, rows)

    return tables(newton_minimum(derivatives, flat, tolerance, iterations).point)


class NewtonResult(NamedTuple):
    """Where :func:`newton_minimum` left each row: its lowest-loss point [B, P], the loss [B]
    and Hessian [B, P, P] there, whether it stopped [B] (else its steps ran out), and the point
    its next step would take it to [B, P] (not evaluated)."""

    point: tf.Tensor
    value: tf.Tensor
    hessian: tf.Tensor
    stopped: tf.Tensor
    next_point: tf.Tensor


def newton_minimum(
    derivatives: Callable[[tf.Tensor, tf.Tensor], Derivatives],
    start: tf.Tensor,
    tolerance: float,
    iterations: int,
) -> NewtonResult:
    """Each row's lowest-loss point reached from ``start`` [B, P] by the steps of
    :func:`newton_rows` (:class:`NewtonResult`); ``derivatives(theta [A, P], rows [A])`` gives
    the loss of those rows [A], its gradient [A, P] and Hessian [A, P, P]."""
    flat = start

    def step(count, theta, proposal, value, gradient, hessian, damping, done):
        moving = tf.where(tf.logical_not(done))[:, 0]  # [A]
        tried = tf.gather(proposal, moving)
        new = derivatives(tried, moving)
        old = [tf.gather(t, moving) for t in (theta, value, gradient, hessian)]
        kept = new[0] < old[1]  # NaN is never kept
        theta_a, value_a, gradient_a, hessian_a = (
            tf.where(tf.reshape(kept, [-1] + [1] * (o.shape.rank - 1)), n, o)
            for n, o in zip((tried, *new), old)
        )
        damping_a = tf.gather(damping, moving)
        damping_a = tf.where(kept, damping_a / 3.0, damping_a * 4.0)
        delta = _damped_step(gradient_a, hessian_a, damping_a)
        decrement = -tf.reduce_sum(gradient_a * delta, axis=1)
        converged = kept & (decrement < tolerance * (1.0 + tf.abs(value_a)))
        stopped = converged | (damping_a > MAX_DAMPING)
        # A refused step is halved (backtracking along it): a fresh step with the damping
        # grown 4-fold points almost the same way, and took several refusals to shorten.
        delta = tf.where(kept[:, None], delta, 0.5 * (tried - theta_a))
        updates = (theta_a, theta_a + delta, value_a, gradient_a, hessian_a, damping_a, stopped)
        state = (theta, proposal, value, gradient, hessian, damping, done)
        at = moving[:, None]
        return (count + 1, *(tf.tensor_scatter_nd_update(s, at, u) for s, u in zip(state, updates)))

    def more(count, *state) -> tf.Tensor:
        done = state[-1]
        return tf.logical_and(count < iterations, tf.reduce_any(tf.logical_not(done)))

    # The first step evaluates every row at its start: with the loss "infinite" there, that
    # evaluation is always kept.
    rows, size = tf.shape(flat)[0], flat.shape[1]
    state = (
        tf.constant(0),
        flat,
        flat,
        tf.fill([rows], tf.constant(np.inf, flat.dtype)),
        tf.zeros_like(flat),
        tf.eye(size, batch_shape=[rows], dtype=flat.dtype),
        tf.fill([rows], tf.constant(INITIAL_DAMPING, flat.dtype)),
        tf.zeros([rows], tf.bool),
    )
    final = tf.while_loop(more, step, state, parallel_iterations=1)
    return NewtonResult(final[1], final[3], final[5], final[7], final[2])


def _flattened(
    start: list[tf.Tensor],
) -> tuple[tf.Tensor, Callable[[tf.Tensor], list[tf.Tensor]]]:
    """The tables [B, ...] side by side as one [B, P] tensor, and the map back."""
    shapes = [table.shape[1:] for table in start]
    widths = [int(np.prod(shape)) for shape in shapes]
    flat = tf.concat([tf.reshape(t, [tf.shape(t)[0], w]) for t, w in zip(start, widths)], 1)

    def tables(theta: tf.Tensor) -> list[tf.Tensor]:
        parts = tf.split(theta, widths, axis=1)
        return [tf.reshape(p, tf.concat([[-1], s], 0)) for p, s in zip(parts, shapes)]

    return flat, tables


def _derivatives(
    loss: Callable[[list[tf.Tensor], tf.Tensor], tf.Tensor],
    tables: Callable[[tf.Tensor], list[tf.Tensor]],
    theta: tf.Tensor,
    rows: tf.Tensor,
) -> Derivatives:
    """Loss [A], gradient [A, P] and Hessian blocks [A, P, P] of ``rows`` [A] at theta [A, P]."""
    with tf.GradientTape() as outer:
        outer.watch(theta)
        with tf.GradientTape() as inner:
            inner.watch(theta)
            values = loss(tables(theta), rows)
            total = tf.reduce_sum(values)
        gradient = inner.gradient(total, theta)
    return values, gradient, outer.batch_jacobian(gradient, theta)


def newton_decrement(gradient: tf.Tensor, hessian: tf.Tensor) -> tf.Tensor:
    """Each row's Newton decrement [A], :math:`g^\\top |H|^{-1} g`, of its gradient [A, P] and
    Hessian [A, P, P] (absolute eigenvalues, undamped): the test :func:`newton_minimum`'s rows
    stop at; infinite where either is not finite."""
    finite = tf.reduce_all(tf.math.is_finite(hessian), axis=[1, 2])
    finite &= tf.reduce_all(tf.math.is_finite(gradient), axis=1)
    eye = tf.eye(tf.shape(hessian)[1], batch_shape=tf.shape(hessian)[:1], dtype=hessian.dtype)
    safe = tf.where(finite[:, None, None], hessian, eye)
    zero = tf.zeros_like(safe[:, 0, 0])
    step = _damped_step(tf.where(finite[:, None], gradient, 0.0), safe, zero)
    decrement = -tf.reduce_sum(gradient * step, axis=1)
    return tf.where(finite, decrement, tf.constant(np.inf, decrement.dtype))


def _damped_step(gradient: tf.Tensor, hessian: tf.Tensor, damping: tf.Tensor) -> tf.Tensor:
    """The step delta [A, P] from the absolute eigenvalues of each Hessian block [A, P, P] and
    the relative ``damping`` [A]."""
    eigenvalues, vectors = tf.linalg.eigh(0.5 * (hessian + tf.linalg.matrix_transpose(hessian)))
    size = tf.abs(eigenvalues)
    shift = damping[:, None] * tf.reduce_max(size, axis=1, keepdims=True)
    coordinates = tf.linalg.matvec(vectors, gradient, transpose_a=True) / (size + shift)
    return -tf.linalg.matvec(vectors, coordinates)
