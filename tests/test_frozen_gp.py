"""The frozen GP that Laplace inference of new rows steps on: its q(f | x) against GPflow's own
predict_f, and its derivatives in x, written out for a squared exponential kernel, against the
general forward- and reverse-mode ones (and those against finite differences)."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from gpflow_svi_gplvm import BayesianSVIGPLVM
from gpflow_svi_gplvm.prediction.frozen_gp import FrozenGP, SquaredExponentialGP, frozen_gp

N, D, Q, M, A = 20, 5, 2, 6, 4


def _model(kernel=None, whiten: bool = True) -> BayesianSVIGPLVM:
    """A B-SVI Poisson model (default kernel: squared exponential with ARD), q(u) moved off its
    prior."""
    kernel = kernel or gpflow.kernels.SquaredExponential(lengthscales=[0.8, 1.3], variance=1.5)
    rng = np.random.default_rng(0)
    Y = rng.poisson(3.0, (N, D)).astype(np.float64)
    model = BayesianSVIGPLVM(
        Y,
        Q,
        M,
        kernel=kernel,
        likelihood=gpflow.likelihoods.Poisson(),
        shared_covariance=True,
        whiten=whiten,
        seed=1,
    )
    model.q_mu.assign(rng.normal(size=(M, D)))
    model.q_sqrt.assign(np.tril(0.2 * rng.normal(size=(M, M)) + 0.4 * np.eye(M))[None])
    return model


def _inputs() -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    rng = np.random.default_rng(3)
    x = tf.constant(rng.normal(size=(A, Q)))
    return x, tf.zeros([A, 0], tf.float64), tf.zeros([1, 1], tf.float32)


@pytest.mark.parametrize("whiten", [True, False], ids=["whitened", "unwhitened"])
def test_its_q_f_is_gpflows_predict_f(whiten):
    model = _model(whiten=whiten)
    x, inputs, offsets = _inputs()
    mean, variance = frozen_gp(model).at(x, inputs, offsets)
    expected_mean, expected_var = model.predict_f(x)
    # The means are in single precision (frozen_gp.LOW).
    np.testing.assert_allclose(mean.numpy(), expected_mean.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(variance.numpy()[:, 0], expected_var.numpy()[:, 0], rtol=1e-5)


def test_the_squared_exponential_derivatives_match_the_general_ones_and_finite_differences():
    model = _model()
    written, general = frozen_gp(model), FrozenGP(model)
    assert isinstance(written, SquaredExponentialGP)
    x, inputs, offsets = _inputs()
    (_, _), fast = written.with_jacobians(x, inputs, offsets)
    (_, _), slow = general.with_jacobians(x, inputs, offsets)
    np.testing.assert_allclose(fast.kernel.numpy(), slow.kernel.numpy(), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(fast.variance.numpy(), slow.variance.numpy(), rtol=1e-6, atol=1e-9)
    jacobian = written.mean_jacobian(fast).numpy()  # [A, Q, D]
    h = 1e-4
    for q in range(Q):
        step = tf.one_hot([q] * A, Q, dtype=tf.float64) * h
        ahead = model.predict_f(x + step)[0].numpy()
        behind = model.predict_f(x - step)[0].numpy()
        np.testing.assert_allclose(jacobian[:, q], (ahead - behind) / (2 * h), atol=2e-3)
    rng = np.random.default_rng(4)
    weights = tf.constant(rng.normal(size=(A, D)), tf.float32)
    variance_weight = tf.constant(rng.normal(size=A))
    reduced = written.reduced(weights)
    found = written.curvature(x, inputs, weights, reduced, variance_weight).numpy()
    expected = general.curvature(x, inputs, weights, reduced, variance_weight).numpy()
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-7)


def test_other_kernels_take_the_general_derivatives():
    assert type(frozen_gp(_model(gpflow.kernels.Matern52()))) is FrozenGP
