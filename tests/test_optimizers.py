"""RowSparseAdam: Adam on dense variables, and on only the batch's rows of tables (bias-corrected
with the step count, or with each row's own update count)."""

import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras

from gpflow_svi_gplvm.training.optimizers import RowSparseAdam, adam_moments_and_step

WEIGHTS = np.array([1.0, 2.0, 3.0])


def _gradient(table, rows, target):
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(tf.gather(table, rows) - target) * WEIGHTS)
    return tape.gradient(loss, [table])


def _numpy_adam(start, rows, target, steps, lr, b1=0.9, b2=0.999, eps=1e-7):
    """Adam written out in numpy (tf_keras' form: eps added to sqrt(v), bias terms in alpha)."""
    x, m, v = start.copy(), np.zeros_like(start), np.zeros_like(start)
    for t in range(1, steps + 1):
        g = np.zeros_like(x)
        np.add.at(g, rows, 2.0 * (x[rows] - target) * WEIGHTS)
        m, v = b1 * m + (1 - b1) * g, b2 * v + (1 - b2) * g**2
        x = x - lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return x


def test_with_every_row_in_every_batch_it_is_adam():
    rng = np.random.default_rng(0)
    start, target = rng.standard_normal((5, 3)), rng.standard_normal((5, 3))
    rows = np.array([3, 0, 4, 1, 2])
    table = tf.Variable(start)
    optimizer = RowSparseAdam([table], 0.05)
    keras_table = tf.Variable(start)
    keras = tf_keras.optimizers.Adam(0.05)
    for _ in range(30):
        gradients = _gradient(table, rows, target[rows])
        assert isinstance(gradients[0], tf.IndexedSlices)
        optimizer.apply_gradients(gradients)
        dense = tf.convert_to_tensor(_gradient(keras_table, rows, target[rows])[0])
        keras.apply_gradients([(dense, keras_table)])
    expected = _numpy_adam(start, rows, target[rows], 30, 0.05)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-12)
    # tf_keras keeps its hyperparameters in float32, hence the looser match.
    np.testing.assert_allclose(table.numpy(), keras_table.numpy(), atol=1e-5)


def test_rows_outside_the_batch_keep_their_values_and_moments():
    start = np.arange(18.0).reshape(6, 3)
    table = tf.Variable(start)
    optimizer = RowSparseAdam([table], 0.1)
    for rows in ([1, 4], [4, 1], [1]):
        optimizer.apply_gradients(_gradient(table, np.array(rows), 0.0))
    untouched = [0, 2, 3, 5]
    np.testing.assert_array_equal(table.numpy()[untouched], start[untouched])
    np.testing.assert_array_equal(optimizer.first_moments[0].numpy()[untouched], 0.0)
    np.testing.assert_array_equal(optimizer.second_moments[0].numpy()[untouched], 0.0)
    assert np.all(table.numpy()[[1, 4]] != start[[1, 4]])


def test_repeated_rows_are_summed_like_a_dense_gradient():
    start = np.random.default_rng(1).standard_normal((3, 3))
    rows = np.array([2, 2, 0])
    table = tf.Variable(start)
    RowSparseAdam([table], 0.1).apply_gradients(_gradient(table, rows, 0.5))
    expected = _numpy_adam(start, rows, 0.5, 1, 0.1)
    np.testing.assert_allclose(table.numpy(), expected, rtol=1e-12)
    np.testing.assert_array_equal(table.numpy()[1], start[1])


def test_dense_gradients_get_the_ordinary_update_in_float64():
    rng = np.random.default_rng(2)
    start, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    rows = np.arange(4)
    matrix, scalar = tf.Variable(start), tf.Variable(1.5, dtype=tf.float64)
    optimizer = RowSparseAdam([matrix, scalar], 0.05)
    x = 1.5
    m = v = 0.0
    for t in range(1, 31):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(matrix - target) * WEIGHTS) + (scalar - 0.5) ** 4
        gradients = tape.gradient(loss, [matrix, scalar])
        assert not isinstance(gradients[0], tf.IndexedSlices)
        optimizer.apply_gradients(gradients)
        g = 4 * (x - 0.5) ** 3
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        x = x - 0.05 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
    expected = _numpy_adam(start, rows, target, 30, 0.05)
    np.testing.assert_allclose(matrix.numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(scalar.numpy(), x, rtol=1e-12)


def test_row_bias_correction_uses_each_rows_own_update_count():
    """bias_correction="row", rows visited on different schedules: each follows Adam over its
    own visits (a row visited k times at step t takes the k-th Adam step, not the t-th)."""
    rng = np.random.default_rng(3)
    start, target = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    batches = [rng.choice(6, size=rng.integers(1, 4), replace=True) for _ in range(40)]
    table = tf.Variable(start)
    optimizer = RowSparseAdam([table], 0.05, bias_correction="row")
    for rows in batches:
        optimizer.apply_gradients(_gradient(table, rows, target[rows]))

    x, m, v, k = start.copy(), np.zeros_like(start), np.zeros_like(start), np.zeros(6)
    for rows in batches:
        g = np.zeros_like(x)
        np.add.at(g, rows, 2.0 * (x[rows] - target[rows]) * WEIGHTS)
        for row in np.unique(rows):
            k[row] += 1
            m[row] = 0.9 * m[row] + 0.1 * g[row]
            v[row] = 0.999 * v[row] + 0.001 * g[row] ** 2
            size = 0.05 * np.sqrt(1 - 0.999 ** k[row]) / (1 - 0.9 ** k[row])
            x[row] -= size * m[row] / (np.sqrt(v[row]) + 1e-7)
    np.testing.assert_allclose(table.numpy(), x, rtol=1e-12)
    np.testing.assert_array_equal(optimizer.row_updates[0].numpy(), k)
    assert optimizer.iterations.numpy() == len(batches)


def test_an_unknown_bias_correction_is_a_value_error():
    with pytest.raises(ValueError, match="bias_correction must be 'global' .* or 'row'"):
        RowSparseAdam([tf.Variable(np.zeros(3))], bias_correction="per-row")


def test_one_adam_update_is_tf_keras_formula_with_scalar_or_per_row_counts():
    rng = np.random.default_rng(3)
    first, second = rng.standard_normal((4, 3)), rng.random((4, 3))
    gradient, counts = rng.standard_normal((4, 3)), np.array([1, 2, 5, 40])
    b1, b2, eps, lr = 0.8, 0.99, 1e-3, 0.1
    tensors = (tf.constant(a) for a in (first, second, gradient, counts))
    m, v, step = adam_moments_and_step(*tensors, lr, b1, b2, eps)
    expected_m = b1 * first + (1 - b1) * gradient
    expected_v = b2 * second + (1 - b2) * gradient**2
    c = counts[:, None]
    expected_step = lr * np.sqrt(1 - b2**c) / (1 - b1**c) * expected_m / (np.sqrt(expected_v) + eps)
    np.testing.assert_allclose(m.numpy(), expected_m, rtol=1e-14)
    np.testing.assert_allclose(v.numpy(), expected_v, rtol=1e-14)
    np.testing.assert_allclose(step.numpy(), expected_step, rtol=1e-13)
    # A scalar count corrects every row alike.
    tensors = (tf.constant(a) for a in (first, second, gradient, 5))
    _, _, step = adam_moments_and_step(*tensors, lr, b1, b2, eps)
    scalar = lr * np.sqrt(1 - b2**5) / (1 - b1**5) * expected_m / (np.sqrt(expected_v) + eps)
    np.testing.assert_allclose(step.numpy(), scalar, rtol=1e-13)


def test_a_table_within_dense_entries_moves_every_row_as_tf_keras_adam_does():
    rng = np.random.default_rng(2)
    start, target = rng.standard_normal((6, 3)), rng.standard_normal((6, 3))
    batches = [np.array(rows) for rows in ([1, 4], [4, 1, 1], [0, 5], [2])]
    table, big = tf.Variable(start), tf.Variable(start)
    dense = RowSparseAdam([table], 0.05, dense_entries=18)
    sparse = RowSparseAdam([big], 0.05, dense_entries=17)  # one entry too many: row-sparse
    x, m, v = start.copy(), np.zeros_like(start), np.zeros_like(start)
    for t, rows in enumerate(batches, start=1):
        dense.apply_gradients(_gradient(table, rows, target[rows]))
        sparse.apply_gradients(_gradient(big, rows, target[rows]))
        g = np.zeros_like(x)
        np.add.at(g, rows, 2.0 * (x[rows] - target[rows]) * WEIGHTS)
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        x = x - 0.05 * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(table.numpy(), x, rtol=1e-12)
    # Row 3 was never in a batch: the dense update left it alone too (its moments are zero),
    # rows 1 and 4 kept moving after their last batch in the dense update only.
    np.testing.assert_array_equal(table.numpy()[3], start[3])
    assert not np.allclose(big.numpy()[[1, 4]], x[[1, 4]])


def test_a_learning_rate_schedule_sets_each_steps_rate():
    rng = np.random.default_rng(3)
    start, target = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    rows = np.arange(4)
    table = tf.Variable(start)
    optimizer = RowSparseAdam([table], lambda t: 0.1 / (1.0 + t))
    x, m, v = start.copy(), np.zeros_like(start), np.zeros_like(start)
    for t in range(1, 6):
        optimizer.apply_gradients(_gradient(table, rows, target))
        g = 2.0 * (x - target) * WEIGHTS
        m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g**2
        rate = 0.1 / t  # the schedule sees t - 1: 0 at the first step
        x = x - rate * np.sqrt(1 - 0.999**t) / (1 - 0.9**t) * m / (np.sqrt(v) + 1e-7)
    np.testing.assert_allclose(table.numpy(), x, rtol=1e-12)
