"""Posterior checks: the HMC targets against closed forms, HMC draws against a known posterior,
and the discrepancies between draws on Gaussians with known answers."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy.stats import multivariate_normal

from gpflow_svi_gplvm import MAPGPLVM, BayesianSVIGPLVM, GaussianLatent, PointGPLVM
from gpflow_svi_gplvm.distances import median_bandwidth, mmd, sliced_wasserstein
from gpflow_svi_gplvm.posterior_check import (
    fit_to_posterior,
    latent_draws,
    log_posterior,
    posterior_draws,
)

B, D, Q, M = 2, 3, 2, 3
NOISE = 0.2
VARIANCES = np.array([0.7, 1.3])


@pytest.fixture(scope="module")
def linear():
    """A linear-kernel model with a random q(u): under ``target="model"`` each row's posterior
    is Gaussian (the data term is quadratic in x), with the precision and mean of
    :func:`_known_posterior`."""
    rng = np.random.default_rng(0)
    Y = rng.standard_normal((2 * M, D))  # the model is built on a few rows; B are checked
    model = BayesianSVIGPLVM(
        Y,
        Q,
        M,
        kernel=gpflow.kernels.Linear(variance=VARIANCES),
        likelihood=gpflow.likelihoods.Gaussian(variance=NOISE),
        mean_function=gpflow.mean_functions.Zero(),
    )
    model.inducing_variable.Z.assign(rng.standard_normal((M, Q)))
    model.q_mu.assign(rng.standard_normal((M, D)))
    model.q_sqrt.assign(np.tril(rng.standard_normal((D, M, M))) * 0.3 + 0.5 * np.eye(M))
    return model, Y[:B]


def _known_posterior(model, y):
    """Precision [Q, Q] and mean [Q] of p(x | y) under q(u), in numpy: f_d(x) has mean
    c_d^T x and variance x^T V_d x with G = L^-1 Z Lambda (whitened q(u), Kzz = L L^T)."""
    Z, Lam = model.inducing_variable.Z.numpy(), np.diag(VARIANCES)
    Kzz = Z @ Lam @ Z.T + gpflow.config.default_jitter() * np.eye(M)
    G = np.linalg.solve(np.linalg.cholesky(Kzz), Z @ Lam)
    precision, shift = np.eye(Q), np.zeros(Q)
    for d in range(D):
        c = G.T @ model.q_mu.numpy()[:, d]
        S = model.q_sqrt.numpy()[d] @ model.q_sqrt.numpy()[d].T
        V = Lam - G.T @ G + G.T @ S @ G
        precision += (np.outer(c, c) + V) / NOISE
        shift += y[d] * c / NOISE
    return precision, np.linalg.solve(precision, shift)


def test_model_target_is_the_prior_times_the_data_term_under_q_u(linear):
    model, Y = linear
    x = np.random.default_rng(1).standard_normal((5, B, Q))
    values = log_posterior(model, Y)(tf.constant(x)).numpy()
    for n in range(B):
        precision, mean = _known_posterior(model, Y[n])
        # The quadratic's normalising constant differs; compare differences between points.
        quadratic = -0.5 * np.einsum("si,ij,sj->s", x[:, n] - mean, precision, x[:, n] - mean)
        np.testing.assert_allclose(values[:, n] - values[0, n], quadratic - quadratic[0], rtol=1e-9)


def test_exact_target_is_the_gp_marginal_likelihood_of_the_rows_jointly():
    rng = np.random.default_rng(2)
    Y = rng.standard_normal((3, D))
    model = BayesianSVIGPLVM(Y, Q, 3, mean_function=gpflow.mean_functions.Zero())
    X = rng.standard_normal((4, 3, Q))
    values = log_posterior(model, Y, target="exact")(tf.constant(X)).numpy()
    noise = model.likelihood.variance.numpy()
    for c in range(4):
        K = model.kernel.K(X[c]).numpy() + noise * np.eye(3)
        expected = multivariate_normal(np.zeros(Q)).logpdf(X[c]).sum()
        expected += sum(multivariate_normal(np.zeros(3), K).logpdf(Y[:, d]) for d in range(D))
        np.testing.assert_allclose(values[c], expected, rtol=1e-10)


def test_hmc_draws_agree_with_a_known_gaussian_posterior(linear):
    model, Y = linear
    result = posterior_draws(model, Y, num_draws=500, num_burnin=500, num_chains=4, seed=3)
    assert result.draws.shape == (2000, B, Q)
    assert result.r_hat.shape == result.effective_sample_size.shape == (B, Q)
    assert np.all(result.r_hat < 1.01) and np.all(result.effective_sample_size > 400)
    assert np.all((result.acceptance > 0.6) & (result.acceptance < 0.95))
    for n in range(B):
        precision, mean = _known_posterior(model, Y[n])
        covariance = np.linalg.inv(precision)
        standard_error = np.sqrt(np.diag(covariance) / result.effective_sample_size[n])
        np.testing.assert_array_less(np.abs(result.draws[:, n].mean(0) - mean), 4 * standard_error)
        np.testing.assert_allclose(np.cov(result.draws[:, n].T), covariance, rtol=0.15, atol=0.01)


def test_a_gaussian_family_fitted_to_a_gaussian_posterior_finds_its_mean_and_precision(linear):
    model, Y = linear
    latent = GaussianLatent(np.zeros((B, Q)))
    bounds = fit_to_posterior(latent, model, Y, target="model", iterations=1500, num_samples=32)
    assert bounds.shape == (1500,) and bounds[-100:].mean() > bounds[:100].mean()
    for n in range(B):
        precision, mean = _known_posterior(model, Y[n])
        # The best diagonal Gaussian (in KL(q || p)) has p's mean and variances 1 / P_qq.
        np.testing.assert_allclose(latent.mean.numpy()[n], mean, atol=0.03)
        np.testing.assert_allclose(latent.variance.numpy()[n], 1 / np.diag(precision), rtol=0.1)


def test_latent_draws_of_training_and_new_rows(linear):
    model, Y = linear
    draws = latent_draws(model, 4000, rows=[1, 0])
    np.testing.assert_allclose(draws.mean(0), model.latent_mean().numpy()[[1, 0]], atol=0.05)
    np.testing.assert_allclose(draws.var(0), model.latent_variance().numpy()[[1, 0]], rtol=0.1)
    new = latent_draws(model, 7, Y=Y[:1], iterations=5)
    assert new.shape == (7, 1, Q) and np.all(np.isfinite(new))


def _gaussian_mmd(mean_x, cov_x, mean_y, cov_y, ell):
    """MMD^2 of two Gaussians under the RBF kernel of bandwidth ell, in closed form:
    E k(a, b) = det(I + S / ell^2)^(-1/2) exp(-delta^T (S + ell^2 I)^(-1) delta / 2)."""

    def expected_kernel(m1, c1, m2, c2):
        S, delta = c1 + c2, m1 - m2
        scale = np.linalg.det(np.eye(len(m1)) + S / ell**2) ** -0.5
        return scale * np.exp(-0.5 * delta @ np.linalg.solve(S + ell**2 * np.eye(len(m1)), delta))

    return (
        expected_kernel(mean_x, cov_x, mean_x, cov_x)
        + expected_kernel(mean_y, cov_y, mean_y, cov_y)
        - 2 * expected_kernel(mean_x, cov_x, mean_y, cov_y)
    )


def test_mmd_of_gaussians_matches_the_closed_form_and_its_interval_covers_it():
    rng = np.random.default_rng(4)
    cov_y = np.array([[1.0, 0.5], [0.5, 2.0]])
    x = rng.standard_normal((800, 2))
    y = rng.multivariate_normal([0.5, 0.0], cov_y, size=600)
    expected = _gaussian_mmd(np.zeros(2), np.eye(2), np.array([0.5, 0.0]), cov_y, ell=1.5)
    result = mmd(x, y, bandwidth=1.5, seed=1)
    assert result.low < expected < result.high and result.high - result.low < expected
    same = mmd(x, rng.standard_normal((600, 2)), bandwidth=1.5)
    assert abs(same.value) < 0.01 and same.low < 0 < same.high


def test_median_bandwidth_of_standard_normals():
    # |a - b|^2 of two independent N(0, I_2) draws is exponential with mean 4: its median
    # distance is 2 sqrt(ln 2).
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((2, 1500, 2))
    assert median_bandwidth(a, b) == pytest.approx(2 * np.sqrt(np.log(2)), rel=0.03)


def test_sliced_wasserstein_of_shifted_gaussians_is_the_shift_over_root_d():
    # Each projection of N(m, I) is N(theta^T m, 1): W_2^2 = (theta^T delta)^2, whose mean over
    # unit directions in R^d is |delta|^2 / d.
    rng = np.random.default_rng(6)
    delta = np.array([1.0, -2.0, 0.5])
    x, y = rng.standard_normal((2, 4000, 3))
    result = sliced_wasserstein(x, y + delta, num_projections=400, num_bootstrap=50)
    expected = np.linalg.norm(delta) / np.sqrt(3)
    assert result.value == pytest.approx(expected, rel=0.1)
    assert result.low < result.value < result.high


@pytest.mark.parametrize(
    "case, message",
    [
        ("target", "target must be one of 'model', 'exact'"),
        ("point", "no prior on x"),
        ("exact-poisson", "needs a Gaussian likelihood"),
        ("exact-gaps", "needs complete rows"),
        ("monte-carlo", "itself a Monte Carlo estimate"),
    ],
)
def test_targets_that_hmc_cannot_use_are_value_errors(case, message):
    rng = np.random.default_rng(7)
    Y = rng.random((4, D)) + 0.5
    model = {"point": PointGPLVM}.get(case, MAPGPLVM)(Y, Q, 3)
    rows, target = Y[:2].copy(), "exact" if case.startswith("exact") else "model"
    if case == "target":
        target = "true"
    if case == "exact-poisson":
        model = MAPGPLVM(np.round(3 * Y), Q, 3, likelihood=gpflow.likelihoods.Poisson())
    if case == "exact-gaps":
        rows[0, 1] = np.nan
    if case == "monte-carlo":
        model = MAPGPLVM(Y, Q, 3, likelihood=gpflow.likelihoods.Gaussian())
        model.likelihood = _MonteCarloGaussian()
    with pytest.raises(ValueError, match=message):
        posterior_draws(model, rows, target=target, num_draws=2, num_burnin=0)


class _MonteCarloGaussian(gpflow.likelihoods.MonteCarloLikelihood):
    def __init__(self):
        super().__init__(input_dim=None, latent_dim=1, observation_dim=1)

    def _log_prob(self, X, F, Y):
        return -0.5 * tf.reduce_sum(tf.square(Y - F), -1)


def test_draws_of_other_widths_are_value_errors():
    with pytest.raises(ValueError, match="one width"):
        mmd(np.zeros((5, 2)), np.zeros((5, 3)))
    with pytest.raises(ValueError, match="at least two draws"):
        sliced_wasserstein(np.zeros((1, 2)), np.zeros((5, 2)))


@pytest.mark.parametrize("bandwidth", [0, -1.0, np.nan, np.inf, "1", True])
def test_a_bandwidth_that_is_not_a_positive_finite_length_is_a_value_error(bandwidth):
    draws = np.random.default_rng(0).standard_normal((5, 2))
    with pytest.raises(ValueError, match="bandwidth must be a positive, finite length"):
        mmd(draws, draws + 1, bandwidth=bandwidth)


def test_a_bandwidth_far_below_every_distance_is_refused_not_read_as_no_discrepancy():
    draws = np.random.default_rng(0).standard_normal((30, 2))
    close = np.vstack([draws, draws[:1] + 1e-2])  # one pair 0.014 apart: a kernel value of 1e-44
    for x in (draws, close):
        with pytest.raises(ValueError, match=r"bandwidth=0.001 is so far below .* here \d"):
            mmd(x, draws + 100, bandwidth=1e-3)  # about 0 whatever the draws
    assert mmd(draws, draws + 100, num_bootstrap=5).value > 0.5


def test_identical_draws_are_zero_apart_under_the_median_heuristic():
    same = np.ones((6, 2))
    assert median_bandwidth(same, same) == 1.0
    assert mmd(same, same, num_bootstrap=5).value == 0.0


def test_a_family_over_other_rows_than_y_is_a_value_error_naming_both(linear):
    model, Y = linear
    for rows in (B + 1, B - 1):
        with pytest.raises(ValueError, match=f"family has {rows} rows .* Y has {B} rows"):
            fit_to_posterior(GaussianLatent(np.zeros((rows, Q))), model, Y, iterations=2)


def test_a_family_of_another_q_or_no_family_is_a_value_error_naming_it(linear):
    model, Y = linear
    with pytest.raises(ValueError, match=f"family has Q={Q + 1} .* the model has Q={Q}"):
        fit_to_posterior(GaussianLatent(np.zeros((B, Q + 1))), model, Y, iterations=2)
    with pytest.raises(ValueError, match="latent must be a family of q\\(X\\).* got a ndarray"):
        fit_to_posterior(np.zeros((B, Q)), model, Y, iterations=2)
    with pytest.raises(ValueError, match="model must be a GPLVM of this package"):
        fit_to_posterior(GaussianLatent(np.zeros((B, Q))), "bsvi", Y, iterations=2)


def test_a_seed_that_is_not_an_integer_is_a_value_error(linear):
    model, Y = linear
    with pytest.raises(ValueError, match="seed must be an integer .* got 1.5"):
        posterior_draws(model, Y, num_draws=2, num_burnin=2, seed=1.5)
    with pytest.raises(ValueError, match="seed must be an integer"):
        mmd(np.zeros((3, 1)), np.ones((3, 1)), seed=-1)
