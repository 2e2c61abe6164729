"""Step-size schedules: checked once, evaluated in the compiled step, resumed with the run."""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf
from gpflow.keras import tf_keras

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.training.natural_gradients import InducingNaturalGradient
from gpflow_svi_gplvm.training.schedules import PROBE_STEPS, StepSize, WarmUp
from gpflow_svi_gplvm.training.trainer import Trainer

N, D, Q, M, BATCH = 24, 3, 2, 4, 6


@pytest.fixture(scope="module")
def Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, D))


def test_warm_up_grows_log_linearly_then_stays():
    warm_up = WarmUp(1e-4, 0.1, 100)
    steps = np.array([0.0, 25.0, 50.0, 100.0, 1000.0])
    expected = 1e-4 * (0.1 / 1e-4) ** np.minimum(steps / 100, 1.0)
    got = [float(warm_up(tf.constant(s, tf.float64))) for s in steps]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_keras_schedule_and_a_lambda_are_step_sizes():
    decay = tf_keras.optimizers.schedules.InverseTimeDecay(0.01, decay_steps=10, decay_rate=1.0)
    for schedule in (decay, lambda t: 0.01 / (1.0 + t / 10)):
        rate = StepSize(schedule)
        np.testing.assert_allclose(rate.values, [0.01 / (1 + s / 10) for s in PROBE_STEPS], 1e-6)
        assert rate(tf.constant(20, tf.int64)).dtype == tf.float64


@pytest.mark.parametrize(
    "schedule, expected",
    [
        (lambda t: -0.01 + 0.0 * t, "at step 0 it returned -0.01"),
        (lambda t: tf.zeros(3, tf.float64) + t, "returned a tensor of shape"),
        (lambda t: math.exp(t), "failed"),  # Python math on a tensor
        (lambda t: 0.01 / (1.0 + float(t)), "failed: .*TensorFlow operations on t"),
        (lambda t: 0.01 * np.exp(-t), "failed: .*not float\\(t\\), numpy"),
    ],
)
def test_a_schedule_that_is_not_a_finite_rate_of_tensorflow_operations_is_a_value_error(
    schedule, expected
):
    with pytest.raises(ValueError, match=f"learning_rate must be .*{expected}"):
        StepSize(schedule)


def test_standard_schedules_of_short_runs_that_reach_zero_or_underflow_are_step_sizes():
    schedules = tf_keras.optimizers.schedules
    cosine = schedules.CosineDecay(0.01, decay_steps=5)  # 0 from step 5 on
    exponential = schedules.ExponentialDecay(0.01, decay_steps=1, decay_rate=0.5)  # 0 in float32
    for schedule in (cosine, exponential, lambda t: tf.where(t < 1000.0, 0.01, 0.0)):
        assert StepSize(schedule).valid_steps(0, 10) == 10
    assert StepSize(cosine).values[2:] == (0.0,) * 6


def test_a_natural_gradient_step_size_above_one_is_a_value_error():
    with pytest.raises(ValueError, match="natgrad_gamma.*at most 1"):
        StepSize(WarmUp(0.01, 2.0, 10), "natgrad_gamma", maximum=1.0)


def test_the_warm_up_step_is_the_constant_step_of_the_same_size(Y):
    model = sg.BayesianSVIGPLVM(Y, Q, M, latent_expectation="closed-form")
    model.q_mu.assign(np.random.default_rng(1).standard_normal(model.q_mu.shape))
    start = (model.q_mu.numpy().copy(), model.q_sqrt.numpy().copy())
    warm_up = InducingNaturalGradient(model.q_mu, model.q_sqrt, WarmUp(1e-3, 0.5, 10))
    data = (tf.range(N, dtype=tf.int64), tf.constant(Y))
    with tf.GradientTape() as tape:
        loss = model.training_loss(data)
    gradients = tape.gradient(loss, warm_up.variables_to_train)
    warm_up.apply_gradients(gradients, step=5)
    after_warm_up = (model.q_mu.numpy(), model.q_sqrt.numpy())
    model.q_mu.assign(start[0])
    model.q_sqrt.assign(start[1])
    gamma = 1e-3 * 500**0.5
    InducingNaturalGradient(model.q_mu, model.q_sqrt, gamma).apply_gradients(gradients)
    np.testing.assert_allclose(after_warm_up[0], model.q_mu.numpy(), rtol=1e-10)
    np.testing.assert_allclose(after_warm_up[1], model.q_sqrt.numpy(), rtol=1e-10)


def _trained(Y, steps: list[int], folder=None, **options) -> np.ndarray:
    """B-SVI's parameters after ``steps`` steps, one Trainer (resumed from ``folder``) each."""
    model = sg.BayesianSVIGPLVM(Y, Q, M, seed=0)
    for i, count in enumerate(steps):
        trainer = Trainer(
            model, Y, batch_size=BATCH, checkpoint_dir=folder, overwrite=i == 0, **options
        )
        if i:
            assert trainer.restore()
        trainer.train(count, steps_per_call=count, progress=False)
        trainer.close()
    return np.concatenate([v.numpy().ravel() for v in model.trainable_variables])


SCHEDULED = dict(learning_rate=lambda t: 0.05 / (1.0 + t / 4), natgrad_gamma=WarmUp(1e-3, 0.3, 8))


@pytest.mark.slow
def test_a_resumed_run_continues_its_schedules_exactly(Y, tmp_path):
    whole = _trained(Y, [10], **SCHEDULED)
    resumed = _trained(Y, [4, 6], folder=tmp_path / "run", **SCHEDULED)
    np.testing.assert_allclose(resumed, whole, rtol=1e-9, atol=1e-12)
    constant = _trained(Y, [10], learning_rate=0.05, natgrad_gamma=0.3)
    assert np.max(np.abs(constant - whole)) > 1e-3  # the schedules changed the run


def test_bad_row_updates_and_schedules_reach_the_trainer_as_value_errors(Y):
    model = sg.BayesianSVIGPLVM(Y, Q, M)
    with pytest.raises(ValueError, match="row_updates must be 'auto'"):
        Trainer(model, Y, batch_size=BATCH, row_updates="lazy")
    with pytest.raises(ValueError, match="optimizer= given"):
        Trainer(
            model, Y, batch_size=BATCH, optimizer=tf_keras.optimizers.Adam(), row_updates="dense"
        )
    with pytest.raises(ValueError, match="learning_rate .* at step 0 it returned"):
        Trainer(model, Y, batch_size=BATCH, learning_rate=lambda t: -0.01 + 0.0 * t)
    with pytest.raises(ValueError, match="natgrad_gamma"):
        Trainer(model, Y, batch_size=BATCH, natgrad_gamma=lambda t: 1.5 + 0.0 * t)


def test_auto_row_updates_keep_moving_a_small_tables_rows_between_their_batches(Y):
    start, tables = None, {}
    for updates in ("auto", "sparse"):
        model = sg.PointGPLVM(Y, Q, M, seed=0)
        model.q_mu.assign(np.random.default_rng(1).standard_normal(model.q_mu.shape))
        start = model.latent.mean.numpy().copy()
        Trainer(model, Y, batch_size=BATCH, row_updates=updates).train(2, progress=False)
        tables[updates] = model.latent.mean.numpy()
    for table in tables.values():  # two disjoint batches had gradients; no other row moved
        assert np.sum(np.any(table != start, axis=1)) == 2 * BATCH
    # The first batch's rows took a second, dense step from their moments: only they differ.
    assert np.sum(np.any(tables["auto"] != tables["sparse"], axis=1)) == BATCH


@pytest.mark.parametrize(
    "options, expected",
    [
        (dict(learning_rate=lambda t: tf.where(t < 3.0, 0.01, -5.0)), "learning_rate .* step 3 "),
        (
            dict(natgrad_gamma=lambda t: tf.where(t < 3.0, 0.05, np.nan), q_u_optimizer="natgrad"),
            "natgrad_gamma .* step 3 ",
        ),
        (dict(learning_rate=lambda t: 0.01 / (1.0 - t / 3.0)), "learning_rate .* step 3 "),
    ],
)
def test_a_rate_that_goes_bad_at_a_later_step_stops_training_before_that_step(Y, options, expected):
    model = sg.PointGPLVM(Y, Q, M, seed=0)
    trainer = Trainer(model, Y, batch_size=BATCH, seed=0, **options)
    with pytest.raises(ValueError, match=f"{expected}it returned .*Training stopped before"):
        trainer.train(6, steps_per_call=6, progress=False)
    assert trainer.num_steps == 3 and sum(map(len, trainer.elbo)) == 3
    assert all(np.all(np.isfinite(v.numpy())) for v in model.trainable_variables)
