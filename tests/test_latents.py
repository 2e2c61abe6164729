"""The latent families' contract for new rows, and the row chunker of inference."""

import numpy as np
import pytest
import tensorflow as tf

from gpflow_svi_gplvm.inference import in_row_chunks
from gpflow_svi_gplvm.latents import (
    EncoderLatent,
    GaussianLatent,
    LatentBatch,
    LatentVariables,
    NewRowFit,
    PointLatent,
)

B, Q = 5, 2


def _fit(objective, initial_mean, iterations, averaging_start=None):
    start = iterations - 1 if averaging_start is None else averaging_start
    return NewRowFit(objective, initial_mean, 3, iterations, 0.1, start, 0)


def _noise(num_samples=4):
    return tf.random.stateless_normal([num_samples, 1, Q], seed=[0, 1], dtype=tf.float64)


def test_row_family_starts_new_rows_at_its_initial_rows():
    variances = np.linspace(0.1, 1.0, 10 * Q).reshape(10, Q)
    latent = GaussianLatent(np.zeros((10, Q)), initial_variance=variances)
    start = tf.constant(np.arange(B * Q, dtype=float).reshape(B, Q))
    fit = _fit(lambda batch, Y: tf.zeros([B], tf.float64), lambda Y: start, iterations=0)
    mean, variance = latent.fitted_rows(tf.zeros([B, 3], tf.float64), fit)
    expected_mean, expected_variance = latent.initial_rows(start)
    np.testing.assert_allclose(mean.numpy(), expected_mean.numpy())
    np.testing.assert_allclose(variance.numpy(), expected_variance.numpy())


def test_row_family_fits_new_rows_by_maximising_the_objective():
    """Each row's objective -|x - y|^2 is maximised at y: Adam gets there, rows independent."""
    latent = PointLatent(np.zeros((10, Q)))
    Y = tf.constant(np.random.default_rng(0).standard_normal((B, Q)))

    def objective(batch: LatentBatch, Y: tf.Tensor, rows: tf.Tensor) -> tf.Tensor:
        return -tf.reduce_sum(tf.square(batch.mean - Y), axis=-1)

    fit = _fit(objective, tf.zeros_like, iterations=400)
    batch = latent.new_rows(Y, 4, _noise(), fit)
    np.testing.assert_allclose(batch.mean.numpy(), Y.numpy(), atol=1e-3)
    np.testing.assert_array_equal(batch.samples.numpy()[0], batch.mean.numpy())
    # Averaging over the final half of the steps: still at the optimum, and no iterate is lost.
    averaged = latent.fitted_rows(Y, _fit(objective, tf.zeros_like, 400, averaging_start=200))
    np.testing.assert_allclose(averaged[0].numpy(), Y.numpy(), atol=1e-2)


def test_amortised_family_encodes_new_rows_without_fitting():
    latent = EncoderLatent(3, Q, hidden_sizes=(4,))
    Y = tf.constant(np.random.default_rng(1).standard_normal((B, 3)))
    fit = _fit(None, None, iterations=10)  # never read by an encoder
    batch = latent.new_rows(Y, 4, _noise(), fit)
    expected = latent(tf.range(B, dtype=tf.int64), Y, 4, _noise())
    for got, want in zip(batch, expected):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


class _TableOnly(LatentVariables):
    """Neither per-row tables of the RowLatentVariables kind nor an encoder."""

    def moments(self, idx, Y):
        return tf.zeros([tf.shape(idx)[0], Q], tf.float64), tf.zeros(
            [tf.shape(idx)[0], Q], tf.float64
        )

    def __call__(self, idx, Y, num_samples, noise=None, training=False):
        mean, variance = self.moments(idx, Y)
        return LatentBatch(mean[None], tf.zeros_like(mean[:, 0]), mean, variance)


def test_a_family_that_cannot_describe_new_rows_says_what_to_do():
    latent = _TableOnly(Q)
    with pytest.raises(ValueError, match="subclass RowLatentVariables.*amortised = True"):
        latent.check_new_rows()
    with pytest.raises(ValueError, match="Cannot infer latents of new rows with _TableOnly"):
        latent.new_rows(tf.zeros([B, 3], tf.float64), 1, _noise(1), _fit(None, None, 1))


def test_row_chunks_equal_one_pass_eagerly_and_in_a_graph():
    spec = [tf.TensorSpec([None, 3], tf.float64), tf.TensorSpec([None], tf.int64)]

    @tf.function(input_signature=spec)
    def function(values, index):
        return 2.0 * values, tf.reduce_sum(values, axis=1) + tf.cast(index, tf.float64)

    values = tf.constant(np.arange(30.0).reshape(10, 3))
    index = tf.range(10, dtype=tf.int64)
    whole = function(values, index)
    for size in (1, 3, 10, 25):
        for got, want in zip(in_row_chunks(function, size, values, index), whole):
            np.testing.assert_array_equal(got.numpy(), want.numpy())

    @tf.function(input_signature=spec)
    def served(values, index):
        return in_row_chunks(function, 4, values, index)

    outputs = served.get_concrete_function().structured_outputs
    assert [o.shape.as_list() for o in outputs] == [[None, 3], [None]]
    for got, want in zip(served(values, index), whole):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("variance", [0.0, -1.0, float("nan"), "big"])
def test_a_gaussian_latent_refuses_a_starting_variance_that_is_not_positive(variance):
    with pytest.raises(ValueError, match="initial_variance must be a positive, finite number"):
        GaussianLatent(np.zeros((4, 2)), variance)
