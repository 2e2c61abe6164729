"""Graph functions trace without AutoGraph, and with it where code branches on a tensor in Python:
the package's own models, trainers and new-row inference never need it; a user's likelihood that
does still trains, to the same result as the same likelihood written with ``tf.cond``."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.compiled import GraphFunction

SPEC = [tf.TensorSpec([None], tf.float64)]


@pytest.fixture(scope="module")
def small_Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((40, 4))


def test_plain_code_traces_once_without_autograph():
    function = GraphFunction(lambda x: tf.reduce_sum(tf.square(x)), SPEC)
    assert float(function(tf.constant([1.0, 2.0], tf.float64))) == 5.0
    assert float(function(tf.constant([3.0], tf.float64))) == 9.0
    assert not function.autograph and function.experimental_get_tracing_count() == 1


def test_python_branches_on_tensors_trace_again_with_autograph():
    def clipped_sum(x):
        total = tf.reduce_sum(x)
        if total > 0:  # a Python branch on a tensor: AutoGraph turns it into tf.cond
            return total
        return -total

    function = GraphFunction(clipped_sum, SPEC)
    assert float(function(tf.constant([-1.0, -2.0], tf.float64))) == 3.0
    assert function.autograph and function.experimental_get_tracing_count() == 1
    assert float(function(tf.constant([1.0, 4.0], tf.float64))) == 5.0
    assert function.experimental_get_tracing_count() == 1


def test_an_error_autograph_cannot_fix_is_raised():
    def broken(x):
        for _ in range(tf.size(x)):  # Python's range of a tensor: an error with AutoGraph too
            pass
        return x

    function = GraphFunction(broken, SPEC)
    with pytest.raises(TypeError):
        function(tf.constant([1.0], tf.float64))


class BranchingGaussian(gpflow.likelihoods.Gaussian):
    """A user's Gaussian likelihood that checks its variance with a Python ``if``."""

    def _variational_expectations(self, X, Fmu, Fvar, Y):
        if tf.reduce_all(self.variance > 0.0):
            return super()._variational_expectations(X, Fmu, Fvar, Y)
        return tf.fill(tf.shape(Fmu)[:-1], tf.constant(np.nan, Fmu.dtype))


class ConditionalGaussian(gpflow.likelihoods.Gaussian):
    """The same likelihood with ``tf.cond``, which needs no AutoGraph."""

    def _variational_expectations(self, X, Fmu, Fvar, Y):
        return tf.cond(
            tf.reduce_all(self.variance > 0.0),
            lambda: super(ConditionalGaussian, self)._variational_expectations(X, Fmu, Fvar, Y),
            lambda: tf.fill(tf.shape(Fmu)[:-1], tf.constant(np.nan, Fmu.dtype)),
        )


def test_a_likelihood_that_branches_in_python_trains_like_its_tf_cond_twin(small_Y):
    histories, trainers = [], []
    for likelihood in (BranchingGaussian(0.1), ConditionalGaussian(0.1)):
        model = sg.BayesianSVIGPLVM(
            small_Y, 2, 8, likelihood=likelihood, latent_expectation="monte-carlo", seed=0
        )
        trainer = sg.Trainer(model, small_Y, batch_size=10, seed=0)
        histories.append(trainer.train(20, progress=False).elbo)
        trainers.append(trainer)
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-10)
    assert trainers[0].steps.step.autograph and not trainers[1].steps.step.autograph


def stepped_rate(t):
    """A user's learning-rate schedule with a Python branch on the step count t (a tensor)."""
    if t < 10.0:
        return 0.02
    return 0.005


def test_a_schedule_that_branches_in_python_trains_like_its_tf_where_twin(small_Y):
    histories, trainers = [], []
    for rate in (stepped_rate, lambda t: tf.where(t < 10.0, 0.02, 0.005)):
        model = sg.BayesianSVIGPLVM(small_Y, 2, 8, latent_expectation="monte-carlo", seed=0)
        trainer = sg.Trainer(model, small_Y, batch_size=10, learning_rate=rate, seed=0)
        histories.append(trainer.train(20, progress=False).elbo)
        trainers.append(trainer)
    np.testing.assert_allclose(histories[0], histories[1], rtol=1e-10)
    assert trainers[0].steps.step.autograph and not trainers[1].steps.step.autograph


MODELS = {
    "Point": lambda Y: sg.PointGPLVM(Y, 2, 8, seed=0),
    "MAP": lambda Y: sg.MAPGPLVM(Y, 2, 8, seed=0),
    "B-SVI": lambda Y: sg.BayesianSVIGPLVM(Y, 2, 8, seed=0),
    "AEB-SVI": lambda Y: sg.AmortisedBayesianGPLVM(Y, 2, 8, seed=0),
    "flow": lambda Y: sg.FlowBayesianGPLVM(Y, 2, 8, seed=0),
    "negative binomial": lambda Y: sg.BayesianSVIGPLVM(
        Y, 2, 8, likelihood=sg.NegativeBinomial(), seed=0
    ),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_the_packages_models_train_and_infer_new_rows_without_autograph(name, small_Y):
    Y = np.round(np.exp(small_Y)) if name == "negative binomial" else small_Y
    model = MODELS[name](Y)
    trainer = sg.Trainer(model, Y, batch_size=10, seed=0)
    trainer.train(5, progress=False)
    inference = sg.LatentInference(model, iterations=5)
    inference.reconstruct(Y[:3])
    inference.log_density(Y[:3], Y[:3])
    used = [trainer.steps.step, inference.predict, inference.log_densities]
    assert not any(function.autograph for function in used)
