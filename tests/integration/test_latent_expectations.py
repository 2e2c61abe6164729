"""The data term's expectation over q(x) in closed form, against Monte Carlo with many draws (a
z-score per row from the draws' own standard error), against the plain data term as q(x)
shrinks to a point, the diagonal psi statistics against GPflow's ``expectation``, and the choice
that ``latent_expectation`` makes."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import move_q_u
from gpflow.expectations import expectation
from gpflow.probability_distributions import DiagonalGaussian, Gaussian

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.components.psi_statistics import (
    closed_form_data_term,
    closed_form_predictive,
    diagonal_psi_statistics,
    full_psi_2,
)
from gpflow_svi_gplvm.likelihoods import MaskedLikelihood, base_likelihood

N, D, Q, M = 20, 4, 2, 6
DRAWS = 20000


@pytest.fixture(scope="module")
def complete() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, D))


@pytest.fixture(scope="module")
def with_gaps(complete) -> np.ndarray:
    Y = complete.copy()
    Y[np.random.default_rng(1).random(Y.shape) < 0.3] = np.nan
    return Y


CASES = {
    "B-SVI, per-output, complete": (sg.BayesianSVIGPLVM, False, False, True),
    "B-SVI, shared, gaps": (sg.BayesianSVIGPLVM, True, True, True),
    "B-SVI, per-output, gaps, not whitened": (sg.BayesianSVIGPLVM, True, False, False),
    "AEB-SVI (full covariance), per-output, gaps": (sg.AmortisedBayesianGPLVM, True, False, True),
}


def build(case: str, complete: np.ndarray, with_gaps: np.ndarray) -> tuple[sg.SVIGPLVM, tf.Tensor]:
    model_class, gaps, shared, whiten = CASES[case]
    Y = with_gaps if gaps else complete
    model = model_class(
        Y, Q, M, shared_covariance=shared, whiten=whiten, latent_expectation="closed-form"
    )
    move_q_u(model, np.random.default_rng(2), mean=0.5, off_diagonal=0.2, diagonal=0.7)
    return model, tf.constant(Y)


@pytest.mark.parametrize("case", list(CASES))
def test_the_closed_form_is_the_monte_carlo_limit(case, complete, with_gaps):
    model, Y = build(case, complete, with_gaps)
    idx = tf.range(N, dtype=tf.int64)
    closed = model.expected_data_term(model.latent(idx, Y, 1), Y).numpy()

    samples = tf.reshape(model.latent(idx, Y, DRAWS).samples, [-1, Q])  # draw-major
    f_mean, f_var = model.predict_f(samples)
    per_draw = model.likelihood.variational_expectations(
        samples, f_mean, f_var, tf.tile(Y, [DRAWS, 1])
    )
    per_draw = per_draw.numpy().reshape(DRAWS, N)
    standard_error = per_draw.std(axis=0) / np.sqrt(DRAWS)
    z = (closed - per_draw.mean(axis=0)) / standard_error
    assert np.abs(z).max() < 4.5, z  # 20 rows: |z| of 4.5 has odds of about 1 in 7000


@pytest.mark.parametrize("case", list(CASES)[:3])
def test_as_q_x_shrinks_to_a_point_the_closed_form_is_the_data_term_there(
    case, complete, with_gaps
):
    model, Y = build(case, complete, with_gaps)
    idx = tf.range(N, dtype=tf.int64)
    batch = model.latent(idx, Y, 1)
    point = batch._replace(variance=tf.zeros_like(batch.variance) + 1e-14)
    closed = model.expected_data_term(point, Y).numpy()
    at_the_mean = model.data_term(batch.mean[None], Y).numpy()
    np.testing.assert_allclose(closed, at_the_mean, rtol=1e-9)


def test_auto_takes_the_closed_form_where_it_applies_and_pays(complete, with_gaps):
    assert sg.BayesianSVIGPLVM(complete, Q, M).closed_form
    assert sg.AmortisedBayesianGPLVM(with_gaps, Q, M, shared_covariance=False).closed_form
    # Gaps under a shared covariance: O(B M^2 D) against Monte Carlo's O(B M D).
    assert not sg.BayesianSVIGPLVM(with_gaps, Q, M, shared_covariance=True).closed_form
    assert not sg.PointGPLVM(complete, Q, M).closed_form  # nothing to integrate
    counts = np.abs(np.round(3 * complete))
    poisson = sg.BayesianSVIGPLVM(counts, Q, M, likelihood=gpflow.likelihoods.Poisson())
    assert not poisson.closed_form
    matern = sg.BayesianSVIGPLVM(complete, Q, M, kernel=gpflow.kernels.Matern32())
    assert not matern.closed_form
    forced = sg.BayesianSVIGPLVM(complete, Q, M, latent_expectation="monte-carlo")
    assert not forced.closed_form


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(latent_expectation="exact"), "latent_expectation must be one of"),
        (
            dict(latent_expectation="closed-form", likelihood=gpflow.likelihoods.Poisson()),
            "the likelihood is Poisson",
        ),
        (
            dict(latent_expectation="closed-form", kernel=gpflow.kernels.Matern52()),
            "the kernel is Matern52",
        ),
    ],
)
def test_an_unsupported_closed_form_is_a_value_error(options, message, complete):
    counts = np.abs(np.round(3 * complete))
    with pytest.raises(ValueError, match=message):
        sg.BayesianSVIGPLVM(counts, Q, M, **options)


def test_a_closed_form_model_trains_and_infers_new_rows(with_gaps):
    model = sg.BayesianSVIGPLVM(with_gaps, Q, M, shared_covariance=False)
    assert model.closed_form and isinstance(model.likelihood, MaskedLikelihood)
    history = sg.fit(model, with_gaps, 100, batch_size=10, progress=False)
    assert np.all(np.isfinite(history.elbo))
    assert history.elbo[-10:].mean() > history.elbo[:10].mean()
    mean, variance = model.infer_latents(with_gaps[:5], iterations=20)
    assert np.all(np.isfinite(mean.numpy())) and np.all(variance.numpy() > 0)


def test_diagonal_psi_statistics_are_gpflows_expectations():
    rng = np.random.default_rng(3)
    kernel = gpflow.kernels.SquaredExponential(variance=1.7, lengthscales=[0.6, 1.3, 2.1])
    Z = tf.constant(rng.standard_normal((M, 3)))
    mean = tf.constant(rng.standard_normal((N, 3)))
    variance = tf.constant(rng.uniform(0.01, 2.0, (N, 3)))
    ours = diagonal_psi_statistics(kernel, Z, mean, variance)

    distribution = DiagonalGaussian(mean, variance)
    inducing = gpflow.inducing_variables.InducingPoints(Z)
    reference = (
        expectation(distribution, kernel),
        expectation(distribution, (kernel, inducing)),
        expectation(distribution, (kernel, inducing), (kernel, inducing)),
    )
    for value, expected in zip(ours, reference):
        np.testing.assert_allclose(value.numpy(), expected.numpy(), rtol=1e-11, atol=1e-14)


def test_full_covariance_psi_2_is_gpflows_expectation():
    rng = np.random.default_rng(4)
    kernel = gpflow.kernels.SquaredExponential(variance=1.7, lengthscales=[0.6, 1.3, 2.1])
    Z = tf.constant(rng.standard_normal((M, 3)))
    mean = tf.constant(rng.standard_normal((N, 3)))
    factors = rng.standard_normal((N, 3, 3))
    covariance = tf.constant(factors @ factors.transpose(0, 2, 1) / 3 + 0.01 * np.eye(3))
    inducing = gpflow.inducing_variables.InducingPoints(Z)
    reference = expectation(Gaussian(mean, covariance), (kernel, inducing), (kernel, inducing))
    ours = full_psi_2(kernel, Z, mean, covariance)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-11, atol=1e-14)


def reference_data_term(model, likelihood, mean, variance, Y):
    """The closed form entry by entry (module docstring) from GPflow's own psi statistics, with
    K^-1 by matrix inversion: per row [B], and the predictive mean and variance [B, D]."""
    distribution = DiagonalGaussian(mean, variance)
    kernel, inducing = model.kernel, model.inducing_variable
    psi_0 = expectation(distribution, kernel)
    psi_1 = expectation(distribution, (kernel, inducing))
    psi_2 = expectation(distribution, (kernel, inducing), (kernel, inducing))
    Kmm = gpflow.covariances.Kuu(inducing, kernel, jitter=gpflow.config.default_jitter())
    K_inverse = tf.linalg.inv(Kmm)
    L = tf.linalg.band_part(tf.convert_to_tensor(model.q_sqrt), -1, 0)
    S = tf.broadcast_to(tf.linalg.matmul(L, L, transpose_b=True), [Y.shape[1], M, M])
    if model.whiten:
        root = tf.linalg.cholesky(Kmm)  # u = root v
        Eu, Cov = tf.linalg.matmul(root, model.q_mu), root @ S @ tf.linalg.matrix_transpose(root)
    else:
        Eu, Cov = tf.convert_to_tensor(model.q_mu), S
    a = K_inverse @ Eu  # [M, D]
    B = K_inverse @ Cov @ K_inverse  # [D, M, M]
    noise = base_likelihood(likelihood).variance
    observed = ~tf.math.is_nan(Y)
    r = tf.where(observed, Y - model.mean_function(mean), 0.0)
    projected = psi_1 @ a
    quadratic = tf.einsum("md,bmk,kd->bd", a, psi_2, a)
    prior_trace = tf.einsum("mk,bkm->b", K_inverse, psi_2)[:, None]
    posterior_trace = tf.einsum("dmk,bkm->bd", B, psi_2)
    square = r**2 - 2 * r * projected + quadratic + psi_0[:, None] - prior_trace + posterior_trace
    entries = -0.5 * tf.math.log(2 * np.pi * noise) - 0.5 * square / noise
    rows = tf.reduce_sum(tf.where(observed, entries, 0.0), axis=-1)
    predictive_variance = quadratic - projected**2 + psi_0[:, None] - prior_trace
    predictive_variance += posterior_trace + noise
    return rows, model.mean_function(mean) + projected, predictive_variance


GRADIENT_CASES = {
    "per-output, complete, whitened": (False, False, True),
    "per-output, gaps, whitened": (True, False, True),
    "shared, complete, not whitened": (False, True, False),
    "shared, gaps, whitened": (True, True, True),
    "per-output, gaps, not whitened": (True, False, False),
}


@pytest.mark.parametrize("case", list(GRADIENT_CASES))
def test_closed_form_values_and_gradients_are_the_entrywise_reference(case, complete, with_gaps):
    """The data term and the predictive moments, and the data term's gradients with respect to
    q(x), Z, the kernel, q(u), the noise and the mean function, against the entry-by-entry
    formula on GPflow's psi statistics."""
    gaps, shared, whiten = GRADIENT_CASES[case]
    Y = tf.constant(with_gaps if gaps else complete)
    model = sg.BayesianSVIGPLVM(
        Y.numpy(), Q, M, shared_covariance=shared, whiten=whiten, latent_expectation="closed-form"
    )
    rng = np.random.default_rng(4)
    model.q_mu.assign(0.5 * rng.standard_normal(model.q_mu.shape))
    model.q_sqrt.assign(
        0.2 * np.tril(rng.standard_normal(model.q_sqrt.shape), -1) + 0.7 * np.eye(M)
    )
    model.kernel.lengthscales.assign(rng.uniform(0.5, 2.0, Q))
    model.inducing_variable.Z.assign(rng.standard_normal((M, Q)))
    model.mean_function = gpflow.mean_functions.Constant(rng.standard_normal(D))
    mean = tf.Variable(rng.standard_normal((N, Q)))
    variance = tf.Variable(rng.uniform(0.01, 1.5, (N, Q)))
    variables = [mean, variance, *model.trainable_variables]
    with tf.GradientTape(persistent=True) as tape:
        ours = closed_form_data_term(model, model.likelihood, mean, variance, Y)
        reference, reference_mean, reference_variance = reference_data_term(
            model, model.likelihood, mean, variance, Y
        )
        total, reference_total = tf.reduce_sum(ours), tf.reduce_sum(reference)
    np.testing.assert_allclose(ours.numpy(), reference.numpy(), rtol=1e-10)
    gradients = tape.gradient(total, variables)
    for value, expected in zip(gradients, tape.gradient(reference_total, variables)):
        if expected is None:  # the latent tables: this q(x) is given directly
            assert value is None
            continue
        expected = tf.convert_to_tensor(expected).numpy()
        np.testing.assert_allclose(
            tf.convert_to_tensor(value).numpy(),
            expected,
            rtol=1e-8,
            atol=1e-10 * np.abs(expected).max(),
        )
    predictive_mean, predictive_variance = closed_form_predictive(model, mean, variance)
    np.testing.assert_allclose(predictive_mean.numpy(), reference_mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(predictive_variance.numpy(), reference_variance.numpy(), rtol=1e-9)
