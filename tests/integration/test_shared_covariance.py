"""One q(u) covariance shared by the D outputs, against the per-output layout and GPflow.

A shared factor L is the per-output layout with every q_sqrt[d] = L, so each quantity of the
shared model is checked against a per-output model holding L repeated D times (GPflow's own
conditional and ``gauss_kl`` then compute the reference), on every latent treatment and on
Gaussian, Poisson and Bernoulli data with missing entries.
"""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import likelihood_of, observations
from gpflow.kullback_leiblers import gauss_kl

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    PointGPLVM,
    fit,
)
from gpflow_svi_gplvm.models import SHARED_COVARIANCE_MIN_OUTPUTS

N, D, Q, M = 24, 5, 2, 6
RTOL = 1e-10
MODELS = [PointGPLVM, MAPGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM]


def make_data(kind: str = "gaussian", missing: float = 0.3, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    f = np.tanh(rng.standard_normal((N, Q)) @ rng.standard_normal((Q, D)))
    Y = observations(kind, f, rng, noise=0.2)
    Y[rng.random(Y.shape) < missing] = np.nan
    Y[np.arange(N), np.arange(N) % D] = np.nan_to_num(Y[np.arange(N), np.arange(N) % D])
    return Y


def shared_factor(rng: np.random.Generator) -> np.ndarray:
    """[M, M] lower triangular, positive diagonal, far from the identity."""
    return np.tril(0.4 * rng.standard_normal((M, M)), -1) + np.diag(rng.uniform(0.3, 1.2, M))


def twin_models(
    model_class, Y, kind="gaussian", whiten=True, seed=1, latent_expectation="monte-carlo"
):
    """A per-output and a shared model with equal parameters: every q_sqrt[d] = the shared L.

    Both take the same expectation over q(x) (``"auto"`` would give the shared model with
    missing entries Monte Carlo and the per-output one the closed form)."""
    rng = np.random.default_rng(seed)
    L, q_mu = shared_factor(rng), rng.standard_normal((M, D))
    Z = rng.standard_normal((M, Q))
    models = []
    for shared in (False, True):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            model = model_class(
                Y,
                Q,
                M,
                likelihood=likelihood_of(kind, variance=0.2),
                whiten=whiten,
                shared_covariance=shared,
                latent_expectation=latent_expectation,
            )
        model.q_mu.assign(q_mu)
        model.q_sqrt.assign(L[None] if shared else np.repeat(L[None], D, axis=0))
        model.inducing_variable.Z.assign(Z)
        model.kernel.lengthscales.assign([0.8, 1.3])
        models.append(model)
    return models


def bound(model, Y) -> float:
    model.latent.generator.reset_from_seed(7)  # common random numbers for both layouts
    return float(model.elbo((tf.range(N, dtype=tf.int64), tf.constant(Y))).numpy())


@pytest.mark.parametrize("model_class", MODELS)
@pytest.mark.parametrize("whiten", [True, False])
def test_bound_equals_the_per_output_bound_with_every_factor_equal(model_class, whiten):
    Y = make_data()
    per_output, shared = twin_models(model_class, Y, whiten=whiten)
    assert shared.q_sqrt.shape == (1, M, M) and per_output.q_sqrt.shape == (D, M, M)
    np.testing.assert_allclose(bound(shared, Y), bound(per_output, Y), rtol=RTOL)


@pytest.mark.parametrize("model_class", [BayesianSVIGPLVM, AmortisedBayesianGPLVM])
@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_closed_form_bound_equals_the_per_output_bound(model_class, missing):
    Y = make_data(missing=missing)
    per_output, shared = twin_models(model_class, Y, latent_expectation="closed-form")
    assert shared.closed_form and per_output.closed_form
    np.testing.assert_allclose(bound(shared, Y), bound(per_output, Y), rtol=RTOL)


@pytest.mark.parametrize("kind", ["poisson", "bernoulli"])
def test_bound_equals_the_per_output_bound_for_other_likelihoods(kind):
    Y = make_data(kind)
    per_output, shared = twin_models(BayesianSVIGPLVM, Y, kind=kind)
    np.testing.assert_allclose(bound(shared, Y), bound(per_output, Y), rtol=RTOL)


def test_gradient_of_the_shared_factor_is_the_sum_of_the_per_output_gradients():
    Y = make_data()
    per_output, shared = twin_models(BayesianSVIGPLVM, Y)
    gradients = []
    for model in (per_output, shared):
        model.latent.generator.reset_from_seed(7)
        with tf.GradientTape() as tape:
            objective = model.elbo((tf.range(N, dtype=tf.int64), tf.constant(Y)))
        # fill_triangular is linear, so the sum rule holds for the stored (packed) factor too.
        gradients.append(tape.gradient(objective, model.q_sqrt.unconstrained_variable).numpy())
    np.testing.assert_allclose(gradients[1][0], gradients[0].sum(axis=0), rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("whiten", [True, False])
def test_kl_is_d_times_one_outputs_kl(whiten):
    per_output, shared = twin_models(BayesianSVIGPLVM, make_data(), whiten=whiten)
    K = (
        None
        if whiten
        else gpflow.covariances.Kuu(
            shared.inducing_variable, shared.kernel, jitter=gpflow.config.default_jitter()
        )
    )
    L, q_mu = shared.q_sqrt.numpy(), shared.q_mu.numpy()
    by_output = [float(gauss_kl(q_mu[:, d : d + 1], L, K)) for d in range(D)]
    np.testing.assert_allclose(float(shared.prior_kl()), sum(by_output), rtol=RTOL)
    np.testing.assert_allclose(float(shared.prior_kl()), float(per_output.prior_kl()), rtol=RTOL)
    # With one mean for every output, the KL is exactly D times one output's.
    shared.q_mu.assign(np.repeat(q_mu[:, :1], D, axis=1))
    np.testing.assert_allclose(float(shared.prior_kl()), D * by_output[0], rtol=RTOL)


@pytest.mark.parametrize("whiten", [True, False])
def test_predictions_match_gpflows_conditional(whiten):
    per_output, shared = twin_models(PointGPLVM, make_data(), whiten=whiten)
    X = tf.constant(np.random.default_rng(3).standard_normal((7, Q)))
    mean, variance = shared.predict_f(X)
    expected_mean, expected_variance = per_output.predict_f(X)
    np.testing.assert_allclose(mean, expected_mean, rtol=RTOL, atol=1e-12)
    np.testing.assert_allclose(variance, expected_variance, rtol=1e-9)
    for full_cov, full_output_cov in [(True, False), (False, True)]:
        options = dict(full_cov=full_cov, full_output_cov=full_output_cov)
        np.testing.assert_allclose(
            shared.predict_f(X, **options)[1], per_output.predict_f(X, **options)[1], rtol=1e-9
        )
    np.testing.assert_allclose(
        shared.posterior().predict_f(X)[1], expected_variance, rtol=1e-9, atol=1e-12
    )
    np.testing.assert_allclose(shared.predict_y(X)[1], per_output.predict_y(X)[1], rtol=1e-9)


def test_the_default_shares_the_covariance_from_the_documented_width():
    rng = np.random.default_rng(0)
    narrow = PointGPLVM(rng.standard_normal((30, SHARED_COVARIANCE_MIN_OUTPUTS - 1)), 2, 4)
    wide = PointGPLVM(rng.standard_normal((30, SHARED_COVARIANCE_MIN_OUTPUTS)), 2, 4)
    assert not narrow.shared_covariance and narrow.q_sqrt.shape[0] == narrow.data_dim
    assert wide.shared_covariance and wide.q_sqrt.shape == (1, 4, 4)
    # q(u) has M D + M (M + 1) / 2 numbers, not D M (M + 1) / 2.
    assert int(tf.size(wide.q_sqrt.unconstrained_variable)) == 4 * 5 // 2


@pytest.mark.parametrize("value", ["yes", 1, 0.0])
def test_a_shared_covariance_that_is_not_a_bool_is_a_clear_error(value):
    with pytest.raises(ValueError, match="shared_covariance must be True .* False .* None"):
        PointGPLVM(make_data(missing=0.0), Q, M, shared_covariance=value)


def test_resuming_a_checkpoint_of_the_other_layout_names_both(tmp_path):
    Y = make_data(missing=0.0)
    settings = dict(batch_size=8, progress=False, checkpoint_dir=tmp_path)
    fit(BayesianSVIGPLVM(Y, Q, M, shared_covariance=True), Y, iterations=2, **settings)
    other = BayesianSVIGPLVM(Y, Q, M, shared_covariance=False)
    with pytest.raises(ValueError, match="shared_covariance=True.*shared_covariance=False"):
        fit(other, Y, iterations=4, resume=True, **settings)


@pytest.mark.parametrize(
    "q_u_optimizer, bound_rtol, factor_atol", [("adam", 1e-6, 3e-4), ("natgrad", 1e-10, 1e-9)]
)
def test_trained_bound_on_complete_gaussian_data_matches_the_per_output_model(
    q_u_optimizer, bound_rtol, factor_atol
):
    """Complete data, one Gaussian likelihood: every S_d gets the same gradient, so per-output
    factors that start equal stay equal. Adam, blind to the gradient's scale, moves the shared
    factor (gradient: the sum of D equal ones) like each of them, and the natural gradient of
    the shared factor is each output's. The trained bounds (mean of 20 evaluations, common
    random numbers) then agree far inside the Monte Carlo noise (standard error about 1 nat).

    Monte Carlo keeps the gradients large: with the closed form they vanish at the optimum,
    where Adam's normalised steps follow round-off, which differs between the layouts
    (measured: 1e-3 relative after 2500 steps)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, Q))
    Y = np.tanh(x @ rng.standard_normal((Q, D))) + 0.1 * rng.standard_normal((N, D))
    settings = dict(
        iterations=2500,
        batch_size=N,
        learning_rate=0.02,
        progress=False,
        q_u_optimizer=q_u_optimizer,
    )
    bounds, factors = {}, {}
    for shared in (False, True):
        model = BayesianSVIGPLVM(
            Y, Q, M, shared_covariance=shared, latent_expectation="monte-carlo"
        )
        fit(model, Y, **settings)
        model.latent.generator.reset_from_seed(7)
        everything = (tf.range(N, dtype=tf.int64), tf.constant(Y))
        bounds[shared] = np.mean([float(model.elbo(everything)) for _ in range(20)])
        factors[shared] = model.q_sqrt.numpy()
    np.testing.assert_allclose(bounds[True], bounds[False], rtol=bound_rtol)
    # Adam's epsilon (1e-7) is the one part that sees the gradient's scale: its factors agree
    # to about 3e-5 after 2500 steps; the natural-gradient ones to about 3e-11.
    np.testing.assert_allclose(
        factors[False], np.repeat(factors[True], D, axis=0), atol=factor_atol
    )
