"""The latent families' contract for new rows, the row chunker of inference, and the amortised
encoder on data with gaps: NaN-safe, it sees the observation mask and hides inputs only when
training."""

import warnings

import numpy as np
import pytest
import tensorflow as tf
from builders import (
    JUNK,
    D,
    N,
    assert_same,
    complete_data,
    dense,
    eager_loss_and_gradients,
    explicit_mask,
    make_model,
)
from gpflow.config import default_float

from gpflow_svi_gplvm import AmortisedBayesianGPLVM
from gpflow_svi_gplvm.latents import (
    EncoderLatent,
    GaussianLatent,
    LatentBatch,
    LatentVariables,
    MAPLatent,
    NewRowFit,
    PointLatent,
)
from gpflow_svi_gplvm.prediction.predictive import in_row_chunks
from gpflow_svi_gplvm.validation import check_observations

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


def test_a_row_family_batch_is_its_rows_batch_whatever_the_data():
    latent = GaussianLatent(np.arange(10 * Q, dtype=float).reshape(10, Q), initial_variance=0.5)
    idx, noise = tf.constant([3, 0, 7], tf.int64), _noise()
    expected = latent.batch_of(latent.rows(idx), 4, noise)
    for batch in (
        latent.batch_at(idx, 4, noise),
        latent(idx, tf.zeros([3, 2], tf.float64), 4, noise),
        latent(idx, None, 4, noise, training=True),
    ):
        for value, reference in zip(batch, expected):
            if reference is not None:
                np.testing.assert_allclose(value.numpy(), reference.numpy())


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


# --------------------------------------------------------------------------------------------
# The amortised encoder on data with gaps
# --------------------------------------------------------------------------------------------


def encoder_batch(num_rows: int = 500, seed: int = 8):
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((num_rows, D))
    missing = rng.random(Y.shape) < 0.3
    missing[0] = True  # a fully missing row
    missing[1, :2] = True
    return np.where(missing, np.nan, Y), missing


def fixed_noise(num_rows: int, num_samples: int = 3) -> tf.Tensor:
    return tf.random.stateless_normal(
        [num_samples, num_rows, Q], seed=[1, 2], dtype=default_float()
    )


def test_encoder_is_nan_safe():
    Y_nan, missing = encoder_batch(num_rows=40)
    Y_t = tf.constant(Y_nan)
    idx = tf.range(40, dtype=tf.int64)
    for options in (
        dict(),
        dict(missing_aware=True, hide_fraction=0.2),
        dict(covariance="dense", missing_aware=True),
        dict(set_size=6, hide_fraction=0.2),
    ):
        encoder = EncoderLatent(D, Q, **options)
        mean, variance = encoder.moments(idx, Y_t)
        assert np.all(np.isfinite(mean.numpy())) and np.all(variance.numpy() > 0), options
        for training in (False, True):
            with tf.GradientTape() as tape:
                batch = encoder(idx, Y_t, 3, training=training)
                objective = tf.reduce_sum(batch.row_term) + tf.reduce_sum(batch.samples)
            for part in batch:
                assert np.all(np.isfinite(part.numpy())), (options, training)
            gradients = tape.gradient(objective, encoder.trainable_variables)
            assert len(gradients) == len(encoder.trainable_variables) > 0
            for g in gradients:
                assert np.all(np.isfinite(dense(g))), (options, training)


def test_missing_aware_encoder_input_is_values_and_observation_pattern():
    Y_nan, missing = encoder_batch()
    Y_t = tf.constant(Y_nan)
    encoder = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.2)
    inputs = encoder.encoder_input(Y_t, training=False).numpy()
    assert inputs.shape == (len(Y_nan), 2 * D)
    np.testing.assert_array_equal(inputs[:, D:], (~missing).astype(float))
    np.testing.assert_array_equal(inputs[:, :D], np.where(missing, 0.0, Y_nan))

    # training=True hides a random ~20% of the *observed* inputs, differently on each call.
    encoder.generator.reset_from_seed(0)
    first = encoder.encoder_input(Y_t, training=True).numpy()
    second = encoder.encoder_input(Y_t, training=True).numpy()
    for hidden_inputs in (first, second):
        shown = hidden_inputs[:, D:] == 1.0
        assert not np.any(shown & missing)  # a gap is never shown as observed
        np.testing.assert_array_equal(hidden_inputs[:, :D], np.where(shown, Y_nan, 0.0))
        hidden_share = 1.0 - shown[~missing].mean()
        assert abs(hidden_share - 0.2) < 0.04, hidden_share
    assert not np.array_equal(first, second)

    # Without hiding, training changes nothing; without the mask, input is [B, D].
    no_hiding = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.0)
    np.testing.assert_array_equal(no_hiding.encoder_input(Y_t, training=True).numpy(), inputs)
    plain = EncoderLatent(D, Q, missing_aware=False)
    np.testing.assert_array_equal(plain.encoder_input(Y_t, training=True).numpy(), inputs[:, :D])


def test_only_the_missing_aware_encoder_tells_a_gap_from_a_zero():
    Y_nan, missing = encoder_batch(num_rows=20)
    Y_zero = np.where(missing, 0.0, Y_nan)
    idx = tf.range(20, dtype=tf.int64)
    plain = EncoderLatent(D, Q, missing_aware=False)
    aware = EncoderLatent(D, Q, missing_aware=True)
    for a, b in zip(
        plain.moments(idx, tf.constant(Y_nan)), plain.moments(idx, tf.constant(Y_zero))
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    mean_nan = aware.moments(idx, tf.constant(Y_nan))[0].numpy()
    mean_zero = aware.moments(idx, tf.constant(Y_zero))[0].numpy()
    rows_with_gaps = missing.any(axis=1)
    assert np.all(np.any(mean_nan[rows_with_gaps] != mean_zero[rows_with_gaps], axis=1))
    np.testing.assert_array_equal(mean_nan[~rows_with_gaps], mean_zero[~rows_with_gaps])


def test_set_encoder_pools_observed_pairs_as_a_brute_force_mean_does():
    Y_nan, missing = encoder_batch(num_rows=25)
    encoder = EncoderLatent(D, Q, set_size=5, activation="tanh")
    assert encoder.missing_aware  # by construction
    pooling = encoder.set_network
    w, c = pooling.value_weight.numpy(), pooling.column_embedding.numpy()
    expected = np.zeros((len(Y_nan), 6))
    for n, row in enumerate(Y_nan):
        observed = np.flatnonzero(~np.isnan(row))
        features = [np.tanh(row[d] * w + c[d]) for d in observed]
        expected[n, :5] = np.mean(features, axis=0) if len(observed) else 0.0
        expected[n, 5] = len(observed) / D
    inputs = encoder.encoder_input(tf.constant(Y_nan)).numpy()
    np.testing.assert_allclose(inputs, expected, rtol=1e-12, atol=1e-14)
    assert np.all(inputs[0] == 0.0)  # the fully missing row

    # A function of the set of (value, column) pairs: permuting the columns together with their
    # embeddings changes nothing, and neither does what lies behind a gap.
    permutation = np.random.default_rng(3).permutation(D)
    values = tf.constant(np.where(missing, 0.0, Y_nan)[:, permutation])
    observed = tf.constant(~missing[:, permutation])
    pooling.column_embedding.assign(c[permutation])
    np.testing.assert_allclose(pooling(values, observed).numpy(), expected, rtol=1e-12)
    junk = tf.where(observed, values, 1e6 * tf.ones_like(values))
    np.testing.assert_allclose(pooling(junk, observed).numpy(), expected, rtol=1e-12)


@pytest.mark.parametrize("kind", ["gaussian", "poisson"])
def test_amortised_model_with_a_set_encoder_ignores_hidden_values(kind):
    Y = complete_data(kind, seed=4)
    model = make_model(AmortisedBayesianGPLVM, kind, Y, seed=4, set_size=4)
    assert model.latent.set_network is not None
    mask = explicit_mask()
    rows = np.array([2, 7, 0, 5, 9, 3, 8])
    reference = eager_loss_and_gradients(model, rows, np.where(mask, Y, np.nan)[rows])
    for junk in JUNK:
        checked = check_observations(np.where(mask, Y, junk), mask=mask)
        assert_same(eager_loss_and_gradients(model, rows, checked[rows]), reference, what=junk)
    names = {v.name.split(":")[0] for v in model.trainable_variables}
    assert {"value_weight", "column_embedding"} <= names


@pytest.mark.parametrize("set_size", [None, 4])
def test_the_encoder_hides_inputs_by_default_only_when_the_data_has_gaps(set_size):
    Y_nan, _ = encoder_batch(num_rows=30)
    Y_complete = np.nan_to_num(Y_nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the notices about gaps and an empty row
        gappy = AmortisedBayesianGPLVM(Y_nan, Q, num_inducing=4, set_size=set_size)
    complete = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, set_size=set_size)
    assert gappy.latent.hide_fraction == 0.2 and complete.latent.hide_fraction == 0.0
    mask = np.ones(Y_complete.shape, bool)
    mask[3, 1] = False  # an explicit mask counts as gaps too
    masked = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, mask=mask, set_size=set_size)
    assert masked.latent.hide_fraction == 0.2
    paper = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, missing_aware=False)
    assert paper.latent.hide_fraction == 0.0
    asked = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, hide_fraction=0.1)
    assert asked.latent.hide_fraction == 0.1


@pytest.mark.parametrize("set_size", [0, -3, 2.5])
def test_set_size_is_checked(set_size):
    with pytest.raises(ValueError, match="set_size must be a positive integer"):
        EncoderLatent(D, Q, set_size=set_size)


def test_encoder_hides_inputs_only_when_training():
    Y_nan, _ = encoder_batch(num_rows=30)
    Y_t = tf.constant(Y_nan)
    idx = tf.range(30, dtype=tf.int64)
    noise = fixed_noise(30)
    encoder = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.3)

    moments = [encoder.moments(idx, Y_t) for _ in range(3)]
    for mean, variance in moments[1:]:
        np.testing.assert_array_equal(mean.numpy(), moments[0][0].numpy())
        np.testing.assert_array_equal(variance.numpy(), moments[0][1].numpy())

    evaluation = [encoder(idx, Y_t, 3, noise, training=False) for _ in range(2)]
    for a, b in zip(*evaluation):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(evaluation[0].mean.numpy(), moments[0][0].numpy())
    np.testing.assert_array_equal(evaluation[0].variance.numpy(), moments[0][1].numpy())

    training = [encoder(idx, Y_t, 3, noise, training=True) for _ in range(2)]
    assert not np.array_equal(training[0].mean.numpy(), training[1].mean.numpy())
    assert not np.array_equal(training[0].samples.numpy(), training[1].samples.numpy())
    assert not np.array_equal(training[0].mean.numpy(), evaluation[0].mean.numpy())

    # The same through a model: training=False makes the bound deterministic given the noise.
    Y_model = complete_data("gaussian", seed=9)
    model = make_model(AmortisedBayesianGPLVM, "gaussian", Y_model, hide_fraction=0.3)
    assert model.latent.missing_aware and model.latent.hide_fraction > 0
    model.latent.noise = lambda idx, num_samples: fixed_noise(N, num_samples)
    data = (tf.range(N, dtype=tf.int64), tf.constant(np.where(Y_model > 1.0, np.nan, Y_model)))
    assert model.elbo(data, training=False).numpy() == model.elbo(data, training=False).numpy()
    assert model.elbo(data, training=True).numpy() != model.elbo(data, training=True).numpy()


def test_amortised_encoder_reads_standardised_columns():
    # Column means and scales come from the observed training entries, so the encoder's inputs
    # are ~N(0, 1) per column whatever the data's units: an affine change of units leaves the
    # initial q(x) of every row unchanged (raw counts in the thousands would saturate tanh).
    Y_nan, missing = encoder_batch(num_rows=40)
    shift, scale = np.linspace(-3e3, 4e3, D), np.linspace(10.0, 900.0, D)
    datasets = [Y_nan, shift + scale * Y_nan]
    models = [AmortisedBayesianGPLVM(Y, Q, num_inducing=5, hide_fraction=0.0) for Y in datasets]
    inputs = models[1].latent.encoder_input(tf.constant(datasets[1])).numpy()[:, :D]
    observed_inputs = np.where(missing, np.nan, inputs)
    np.testing.assert_allclose(np.nanmean(observed_inputs, axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.nanstd(observed_inputs, axis=0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(inputs[missing], 0.0)
    moments = (
        [m.latent_mean(Y) for m, Y in zip(models, datasets)],
        [m.latent_variance(Y) for m, Y in zip(models, datasets)],
    )
    for original, rescaled in moments:
        np.testing.assert_allclose(rescaled, original, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "location, scale", [(np.zeros(D - 1), np.ones(D)), (np.zeros(D), np.zeros(D))]
)
def test_encoder_input_standardisation_is_checked(location, scale):
    with pytest.raises(ValueError, match="input_"):
        EncoderLatent(D, Q, input_location=location, input_scale=scale)


def test_a_map_prior_that_is_not_a_distribution_is_refused_by_name():
    with pytest.raises(ValueError, match="prior must be a TFP distribution .* got 'normal'"):
        MAPLatent(np.zeros((4, 2)), prior="normal")


AMORTISED_FIT = """
import numpy as np
import gpflow_svi_gplvm as package
Y = np.random.default_rng(0).standard_normal((60, 4))
Y[:5, 0] = np.nan
model = package.AmortisedBayesianGPLVM(Y, 2, num_inducing=6)
package.fit(model, Y, 20, batch_size=20, progress=False)
model.reconstruct(Y[:10], iterations=3)
"""


@pytest.mark.processes
def test_an_amortised_fit_prints_no_line_per_trace_at_tensorflow_s_default_log_level():
    """TensorFlow's oneDNN graph rewrite logs "Not handling type DT_DOUBLE" at every trace of a
    float64 matmul it would fuse with a bias and activation (or additions): the encoder and the
    full-covariance psi statistics are written so that it has nothing to try."""
    import os
    import subprocess
    import sys

    environment = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    command = [sys.executable, "-c", AMORTISED_FIT]
    result = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Not handling type" not in result.stderr, result.stderr[-3000:]
