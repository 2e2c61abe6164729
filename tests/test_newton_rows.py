"""Damped Newton steps row by row: closed-form minima, step counts, rows left alone."""

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st

from gpflow_svi_gplvm.latents.new_rows import INITIAL_DAMPING, newton_minimum, newton_rows


def _run(loss, start, tolerance=1e-10, iterations=100):
    """The fitted tables and the number of row evaluations the fit made."""
    evaluated = tf.Variable(0, dtype=tf.int32)

    def counted(tables, rows):
        evaluated.assign_add(tf.size(rows))
        return loss(tables, rows)

    start = [tf.constant(s, tf.float64) for s in start]
    fitted = tf.function(lambda: newton_rows(counted, start, tolerance, iterations))()
    return [t.numpy() for t in fitted], int(evaluated.numpy())


def test_rows_reach_the_closed_form_minimum_of_a_convex_loss():
    """sum_p exp(theta_p) - c_p theta_p is least at theta = log c, over two tables of different
    widths, from starts near and far. A row stops once the loss a step would still remove is
    below the tolerance, so its loss is that close to the minimum and theta about its square
    root."""
    rng = np.random.default_rng(0)
    c = tf.constant(np.exp(rng.uniform(-2.0, 2.0, (6, 3))))

    def loss(tables, rows):
        theta = tf.concat(tables, axis=1)
        return tf.reduce_sum(tf.exp(theta) - tf.gather(c, rows) * theta, axis=1)

    start = rng.uniform(-3.0, 3.0, (6, 3))
    (first, second), evaluated = _run(loss, [start[:, :2], start[:, 2:]], tolerance=1e-12)
    fitted = np.concatenate([first, second], 1)
    minimum = np.log(c.numpy())
    gap = loss([tf.constant(fitted)], tf.range(6)) - loss([tf.constant(minimum)], tf.range(6))
    assert np.all(gap.numpy() <= 1e-12 * (1.0 + np.abs(loss([tf.constant(minimum)], tf.range(6)))))
    np.testing.assert_allclose(fitted, minimum, atol=1e-5)
    assert evaluated < 6 * 15  # quadratic convergence: a handful of steps per row, not tens


def test_a_quadratic_row_takes_few_steps_and_a_row_at_its_optimum_none():
    """On a badly scaled quadratic each (slightly damped) Newton step cuts the error a
    thousandfold; a row whose gradient is zero at the start stops after its first evaluation
    and is not computed again."""
    target = tf.constant([[3.0, -1.0], [0.0, 0.0]], tf.float64)
    scale = tf.constant([[1.0, 10.0], [1.0, 1.0]], tf.float64)

    def loss(tables, rows):
        error = tables[0] - tf.gather(target, rows)
        return tf.reduce_sum(tf.gather(scale, rows) * tf.square(error), axis=1)

    (fitted,), evaluated = _run(loss, [np.zeros((2, 2))])
    np.testing.assert_allclose(fitted, target.numpy(), rtol=1e-8)
    assert evaluated <= 4 + 1


def test_where_the_loss_is_concave_the_step_still_goes_downhill():
    """x^4 / 4 - x^2 / 2 has a maximum at 0 and minima at -1 and 1: from just beside the maximum,
    plain Newton would climb to it; absolute eigenvalues descend to the minimum on that side."""

    def loss(tables, rows):
        x = tables[0][:, 0]
        return x**4 / 4.0 - x**2 / 2.0

    (fitted,), _ = _run(loss, [np.array([[0.05], [-0.2], [3.0]])])
    np.testing.assert_allclose(fitted[:, 0], [1.0, -1.0, 1.0], atol=1e-4)


def test_a_refused_step_is_tried_again_at_half_its_length():
    """sqrt(1 + x^2) from x = 2: Newton's step, -x (1 + x^2) = -10, overshoots to -8 (a higher
    loss) and so does its half, to -3; a quarter of it, to -0.5, lowers the loss. The points
    evaluated are those, the step shortened by the row's damping (its start kept: a third of
    the initial damping)."""
    tried = []

    def derivatives(theta, rows):
        tried.append(float(theta[0, 0]))
        x = theta[:, 0]
        value = tf.sqrt(1.0 + x**2)
        return value, (x / value)[:, None], (1.0 / value**3)[:, None, None]

    start = tf.constant([[2.0]], tf.float64)
    found = newton_minimum(derivatives, start, tolerance=1e-12, iterations=4)
    step = -10.0 / (1.0 + INITIAL_DAMPING / 3.0)
    np.testing.assert_allclose(tried, [2.0, 2.0 + step, 2.0 + step / 2, 2.0 + step / 4])
    np.testing.assert_allclose(found.point.numpy(), [[2.0 + step / 4]])


def test_a_row_whose_loss_is_not_finite_keeps_its_start_and_the_others_converge():
    def loss(tables, rows):
        x = tables[0][:, 0]
        return tf.where(rows == 0, tf.constant(np.nan, tf.float64), tf.square(x - 2.0))

    (fitted,), evaluated = _run(loss, [np.array([[5.0], [5.0]])], iterations=1000)
    np.testing.assert_array_equal(fitted[0], [5.0])
    np.testing.assert_allclose(fitted[1], [2.0], atol=1e-6)
    assert evaluated < 2 * 100  # the stuck row stops once its damping passes the limit


@settings(max_examples=10, deadline=None)
@given(st.integers(1, 5), st.integers(1, 3), st.integers(0, 2**31 - 1))
def test_each_row_is_fitted_as_if_alone(rows, width, seed):
    """Rows fitted together equal each row fitted by itself (a row's steps never read another's
    loss), for any number of rows and table widths."""
    rng = np.random.default_rng(seed)
    c = tf.constant(np.exp(rng.uniform(-1.0, 1.0, (rows, width))))

    def loss(tables, positions):
        return tf.reduce_sum(tf.cosh(tables[0] - tf.gather(c, positions)), axis=1)

    start = rng.uniform(-2.0, 2.0, (rows, width))
    (together,), _ = _run(loss, [start], tolerance=1e-6)
    for n in range(rows):

        def alone(tables, positions, n=n):
            return loss(tables, positions + n)

        (one,), _ = _run(alone, [start[n : n + 1]], tolerance=1e-6)
        np.testing.assert_allclose(together[n], one[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("iterations", [0, 1])
def test_the_step_limit_holds(iterations):
    def loss(tables, rows):
        return tf.reduce_sum(tf.exp(tables[0]) - 2.0 * tables[0], axis=1)

    (fitted,), evaluated = _run(loss, [np.zeros((3, 1))], iterations=iterations)
    assert evaluated == 3 * iterations
    np.testing.assert_array_equal(fitted, np.zeros((3, 1)))  # the first step only evaluates
