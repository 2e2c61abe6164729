"""Latents and reconstructions for new rows; metrics against hand-computed values."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import MISSING_NOTICE, complete_data, expect_user_warnings
from scipy.special import gammaln, logsumexp

from gpflow_svi_gplvm import (
    MAPGPLVM,
    SVIGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    LatentBatch,
    LatentInference,
    LatentVariables,
    fit,
)
from gpflow_svi_gplvm.components.psi_statistics import closed_form_predictive
from gpflow_svi_gplvm.latents import diagonal_gaussian_batch
from gpflow_svi_gplvm.metrics import nlpd, rmse
from gpflow_svi_gplvm.prediction.functions import log_predictive_density
from gpflow_svi_gplvm.prediction.latent_inference import TOLERANCE
from gpflow_svi_gplvm.prediction.predictive import exact_predictive_applies, predictive_noise

N_TRAIN, N_TEST, D, Q = 200, 60, 8, 2


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((N_TRAIN + N_TEST, Q))
    W = rng.standard_normal((Q, D))
    Y = np.tanh(X @ W) + 0.1 * rng.standard_normal((N_TRAIN + N_TEST, D))
    hidden = rng.random((N_TEST, D)) < 0.3
    return Y[:N_TRAIN], Y[N_TRAIN:], hidden


@pytest.fixture(scope="module")
def bsvi(data):
    Y_train = data[0]
    model = BayesianSVIGPLVM(Y_train, Q, num_inducing=20)
    fit(model, Y_train, iterations=1500, batch_size=50, learning_rate=0.02, progress=False)
    return model


def _values(model):
    return [v.numpy().copy() for v in model.trainable_variables]


def test_inferring_training_rows_recovers_their_trained_latents(bsvi, data):
    Y_train = data[0]
    rows = np.arange(0, N_TRAIN, 5)
    mean, variance = bsvi.infer_latents(Y_train[rows], iterations=300)
    trained_mean = bsvi.latent_mean().numpy()[rows]
    trained_var = bsvi.latent_variance().numpy()[rows]
    z = np.abs(mean.numpy() - trained_mean) / np.sqrt(trained_var + variance.numpy())
    ratio = variance.numpy() / trained_var
    # Same data, same frozen globals: q(x*) must sit on the trained q(x) up to its own spread,
    # and the trained q(x) carries the noise of stochastic training. Measured over three training
    # seeds: median z 0.40-0.47, all z < 2; median variance ratio 0.87-0.95, at most 0.50 off 1.
    assert np.median(z) < 0.6
    assert np.mean(z < 2.0) > 0.9
    assert 0.75 < np.median(ratio) < 1.33
    assert np.mean(np.abs(np.log(ratio)) < np.log(2.0)) > 0.95


def test_inference_leaves_the_model_unchanged(bsvi, data):
    before = _values(bsvi)
    bsvi.infer_latents(data[1][:5], iterations=20)
    bsvi.reconstruct(np.where(data[2], np.nan, data[1])[:5], iterations=20)
    for old, new in zip(before, _values(bsvi)):
        np.testing.assert_array_equal(old, new)


def test_q_of_new_rows_averages_the_final_iterates(bsvi, data):
    """averaging=0.5 of 6 steps: the mean of the iterates after steps 4, 5 and 6, each of which
    is the last iterate of a run that stops there (same start, same draws)."""
    Y = data[1][:10]
    options = dict(averaging=0.0, tolerance=None)
    mean, variance = LatentInference(bsvi, 6, averaging=0.5, tolerance=None).infer(Y)
    last = [LatentInference(bsvi, iterations=j, **options).infer(Y) for j in (4, 5, 6)]
    # The mean is unconstrained: averaged as it is.
    np.testing.assert_allclose(mean, np.mean([m for m, _ in last], axis=0), rtol=1e-12)
    # The variance is averaged in its unconstrained form, so it lies within the iterates' range.
    variances = np.array([v for _, v in last])
    assert np.all(variances.min(0) - 1e-15 <= variance) and np.all(variance <= variances.max(0))
    assert not np.allclose(variance, variances[-1])


@pytest.mark.parametrize("model_class", [BayesianSVIGPLVM, MAPGPLVM])
def test_batched_inference_equals_row_by_row(model_class, data):
    Y_train, Y_test, hidden = data
    model = model_class(Y_train, Q, num_inducing=10)
    fit(model, Y_train, iterations=200, batch_size=50, progress=False)
    rows = np.where(hidden, np.nan, Y_test)[:3]
    mean, variance = model.infer_latents(rows, iterations=60, seed=3)
    for n in range(len(rows)):
        mean_n, variance_n = model.infer_latents(rows[n : n + 1], iterations=60, seed=3)
        np.testing.assert_allclose(mean_n.numpy()[0], mean.numpy()[n], rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(variance_n.numpy()[0], variance.numpy()[n], rtol=1e-8)


def test_chunked_inference_and_reconstruction_equal_one_pass(bsvi, data):
    # Chunks bound memory for wide data (the GP forms [D, M, rows x draws] tensors); the noise is
    # shared by all rows, so chunk boundaries change nothing but the rounding of batched
    # products, which Adam's steps (gradient over its root mean square) carry to ~1e-9.
    Y_train, Y_test, hidden = data
    Y_gaps = np.where(hidden, np.nan, Y_test)[:11]
    options = dict(iterations=30, num_samples=16, seed=2)
    for rows, Y in ((None, Y_gaps), (np.arange(11), Y_train[:11])):
        whole = bsvi.reconstruct(Y, rows=rows, chunk_size=100, **options)
        chunked = bsvi.reconstruct(Y, rows=rows, chunk_size=4, **options)
        for a, b in zip(whole, chunked):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-8, atol=1e-11)
    whole = bsvi.infer_latents(Y_gaps, iterations=30, chunk_size=100)
    chunked = bsvi.infer_latents(Y_gaps, iterations=30, chunk_size=3)
    for a, b in zip(whole, chunked):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-8, atol=1e-11)
    # The object behind the scikit-learn wrapper: its chunked methods equal one compiled call.
    inference = LatentInference(bsvi, iterations=30, num_samples=16, seed=2, chunk_size=4)
    pairs = ((inference.infer, inference.latents), (inference.reconstruct, inference.predict))
    for chunked, compiled in pairs:
        for a, b in zip(compiled(tf.constant(Y_gaps)), chunked(Y_gaps)):
            np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-8, atol=1e-11)
    with pytest.raises(ValueError, match="chunk_size"):
        bsvi.infer_latents(Y_gaps, chunk_size=-1)


def test_one_trace_of_the_fit_serves_q_x_the_predictive_the_densities_and_the_draws(bsvi, data):
    """The fit of new rows does not depend on the draws taken from it: q(x*), the predictive,
    the log densities and the draws of q(x*) call one compiled fit, traced once, and the draws
    are of the q(x*) that infer returns."""
    Y = np.where(data[2], np.nan, data[1])[:6]
    inference = LatentInference(bsvi, iterations=20, num_samples=8, seed=1)
    mean, variance = inference.infer(Y)
    inference.reconstruct(Y)
    inference.log_density(Y, data[1][:6])
    draws = inference.draws(Y, 4000).numpy()  # [4000, 6, Q]
    assert inference.fitted.experimental_get_tracing_count() == 1
    error = np.abs(draws.mean(axis=0) - mean.numpy()) / np.sqrt(variance.numpy() / 4000)
    assert np.all(error < 4.5), error
    np.testing.assert_allclose(draws.var(axis=0), variance.numpy(), rtol=0.15)


def test_reconstruction_beats_column_means_and_is_calibrated(bsvi, data):
    Y_train, Y_test, hidden = data
    mean, variance = bsvi.reconstruct(np.where(hidden, np.nan, Y_test), num_samples=128)
    mean, variance = mean.numpy(), variance.numpy()
    column_means = np.broadcast_to(Y_train.mean(0), Y_test.shape)
    model_rmse = rmse(Y_test, mean, mask=hidden)
    assert model_rmse < 0.5 * rmse(Y_test, column_means, mask=hidden)
    inside = np.abs(Y_test - mean) <= 1.96 * np.sqrt(variance)
    coverage = inside[hidden].mean()
    # 95% nominal; about 140 held-out entries give a binomial sd of ~2%, so allow 0.88-0.995.
    assert 0.88 <= coverage <= 0.995, coverage
    assert np.all(variance > 0)


def test_reconstruction_of_training_rows_uses_their_trained_latents(bsvi, data):
    Y_train = data[0]
    rows = np.arange(10)
    mean, _ = bsvi.reconstruct(Y_train[rows], rows=rows, num_samples=256)
    at_means, _ = bsvi.predict_y(bsvi.latent_mean()[:10])
    # Averaging over q(x) moves the mean a little from the decoder at the latent mean, not far.
    assert rmse(at_means.numpy(), mean.numpy()) < 0.1


def test_reconstructs_missing_entries_of_training_rows():
    num_data, num_columns = 300, 12
    Y = complete_data("gaussian", seed=3, num_data=num_data, num_columns=num_columns)
    rng = np.random.default_rng(3)
    missing = rng.random(Y.shape) < 0.6
    missing[~(~missing).any(axis=1), 0] = False  # every row keeps at least one entry
    assert 0.58 < missing.mean() < 0.62
    Y_missing = np.where(missing, np.nan, Y)

    with expect_user_warnings(r"(59|60)\.\d% " + MISSING_NOTICE):
        model = BayesianSVIGPLVM(Y_missing, Q, num_inducing=15)
    history = fit(
        model, Y_missing, iterations=1000, batch_size=100, learning_rate=0.03, progress=False
    )
    assert np.all(np.isfinite(history.elbo))
    assert history.elbo[-100:].mean() > history.elbo[:100].mean() + 100.0

    mean, variance = model.reconstruct(Y_missing, rows=np.arange(num_data))
    mean = mean.numpy()
    assert mean.shape == Y.shape and np.all(np.isfinite(mean))
    assert np.all(variance.numpy() > 0)
    column_means = np.broadcast_to(np.nanmean(Y_missing, axis=0), Y.shape)
    model_rmse = rmse(Y, mean, mask=missing)
    baseline = rmse(Y, column_means, mask=missing)
    assert model_rmse < 0.6 * baseline, (model_rmse, baseline)


def test_amortised_inference_refines_the_encoders_q_x_by_the_row_bound(data):
    """tolerance=None: one encoder pass. The default (the closed form applies): Newton steps from
    the encoder's means and marginal variances, to a bound at least theirs."""
    Y_train, Y_test, hidden = data
    model = AmortisedBayesianGPLVM(Y_train, Q, num_inducing=10)
    fit(model, Y_train, iterations=200, batch_size=50, progress=False)
    rows = np.where(hidden, np.nan, Y_test)
    encoded = LatentInference(model, tolerance=None).infer(rows)
    expected = model.latent.moments(tf.range(N_TEST, dtype=tf.int64), rows)
    for got, want in zip(encoded + model.infer_latents(rows, tolerance=None), expected + expected):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    # The functions take the tolerance too: the encoder's q(x*) alone under the predictive.
    predicted = LatentInference(model, tolerance=None).reconstruct(rows)
    for got, want in zip(model.reconstruct(rows, tolerance=None), predicted):
        np.testing.assert_array_equal(got.numpy(), want.numpy())

    inference = LatentInference(model)
    assert inference.tolerance == TOLERANCE
    mean, variance = model.infer_latents(rows)
    zeros = tf.zeros([1, 1, Q], tf.float64)

    def bounds(mean, variance):
        batch = diagonal_gaussian_batch((mean, variance), 1, zeros)
        return inference._row_bounds(batch, tf.constant(rows)).numpy()

    refined, start = bounds(mean, variance), bounds(*expected)
    assert np.all(refined >= start - 1e-9)
    assert refined.sum() > start.sum() + 1.0
    np.testing.assert_allclose(refined, _fitted_bounds(inference, rows), rtol=1e-12)


@pytest.mark.parametrize(
    "bad, message",
    [
        (np.zeros((3, D + 1)), r"\[N, 8\]"),
        (np.full((2, D), np.inf), "infinite"),
        (np.zeros((0, D)), "at least one row"),
        (np.zeros(D), "2-D"),
    ],
)
def test_bad_new_rows_are_rejected(bsvi, bad, message):
    with pytest.raises(ValueError, match=message):
        bsvi.infer_latents(bad)
    with pytest.raises(ValueError, match=message):
        bsvi.reconstruct(bad)


def test_log_density_of_point_estimates_is_the_gaussian_of_the_reconstruction(data):
    """With q(x*) a point every draw is the same, so the predictive of each entry is the Gaussian
    with reconstruct's moments (an untrained model serves: the identity holds for any)."""
    Y_train, Y_test, hidden = data
    model = MAPGPLVM(Y_train, Q, num_inducing=10)
    Y, targets = np.where(hidden, np.nan, Y_test)[:12], Y_test[:12]
    inference = LatentInference(model, iterations=40, num_samples=4, seed=1)
    mean, variance = (a.numpy() for a in inference.reconstruct(Y))
    per_entry, per_row = (a.numpy() for a in inference.log_density(Y, targets))
    gaussian = -0.5 * np.log(2 * np.pi * variance) - (targets - mean) ** 2 / (2 * variance)
    np.testing.assert_allclose(per_entry, gaussian, rtol=1e-9)
    np.testing.assert_allclose(per_row, gaussian.sum(axis=1), rtol=1e-9)
    # The public function; without targets Y scores itself: NaN where Y is missing.
    own = log_predictive_density(model, Y, iterations=40, num_samples=4, seed=1).numpy()
    assert np.array_equal(np.isnan(own), np.isnan(Y))
    np.testing.assert_allclose(own[~np.isnan(Y)], gaussian[~np.isnan(Y)], rtol=1e-9)


def test_poisson_log_density_is_the_mixture_over_q_x_of_the_integral_over_f():
    """Reference: the draws of x* rebuilt from q(x*) and the documented common noise, and
    log int Poisson(y | e^f) N(f | m, v) df on a dense grid in numpy, then log-mean-exp over
    the draws (per entry) or of the summed entries (per row)."""
    rng = np.random.default_rng(4)
    Y_train = rng.poisson(3.0 * np.exp(0.5 * rng.standard_normal((40, 1))), (40, 5)).astype(float)
    # The integral over f is the likelihood's quadrature: 20 Gauss-Hermite points by default, off
    # the grid by up to 0.5% at this untrained model's wide q(f); with 100 points they agree to
    # 1e-8 (the grid's own error).
    quadrature = gpflow.quadrature.NDiagGHQuadrature(1, 100)
    likelihood = gpflow.likelihoods.Poisson(quadrature=quadrature)
    model = BayesianSVIGPLVM(Y_train, 2, num_inducing=8, likelihood=likelihood)
    Y, targets = Y_train[:6].copy(), Y_train[:6]
    Y[0, 1] = Y[3, 4] = np.nan  # hidden from inference, scored as targets
    inference = LatentInference(model, iterations=20, num_samples=5, seed=3)
    per_entry, per_row = (a.numpy() for a in inference.log_density(Y, targets))

    mean, variance = (a.numpy() for a in inference.infer(Y))
    draws = mean + np.sqrt(variance) * predictive_noise(5, 2, 3).numpy()  # [S, B, Q]
    f_mean, f_var = (a.numpy().reshape(5, 6, 5) for a in model.predict_f(draws.reshape(-1, 2)))
    grid = np.linspace(-12.0, 12.0, 24001)[:, None, None, None] * np.sqrt(f_var) + f_mean
    log_poisson = targets * grid - np.exp(grid) - gammaln(targets + 1)
    normal = np.exp(-0.5 * (grid - f_mean) ** 2 / f_var) / np.sqrt(2 * np.pi * f_var)
    terms = np.log(np.trapz(np.exp(log_poisson) * normal, grid, axis=0))  # [S, B, D]
    np.testing.assert_allclose(per_entry, logsumexp(terms, axis=0) - np.log(5), rtol=1e-7)
    np.testing.assert_allclose(per_row, logsumexp(terms.sum(-1), axis=0) - np.log(5), rtol=1e-7)

    with pytest.raises(ValueError, match="shape of Y"):
        log_predictive_density(model, Y, targets[:3])
    with pytest.raises(ValueError, match="non-negative integer counts"):
        log_predictive_density(model, Y, targets - 0.5)


class FixedLatent(LatentVariables):
    """A latent family with neither per-row tables nor an encoder: new rows have no q(x*)."""

    def __init__(self, initial):
        super().__init__(initial.shape[1])
        self.table = tf.constant(initial)

    def moments(self, idx, Y):
        mean = tf.gather(self.table, idx)
        return mean, tf.zeros_like(mean)

    def __call__(self, idx, Y, num_samples, noise=None, training=False):
        mean, variance = self.moments(idx, Y)
        samples = tf.repeat(mean[None], num_samples, axis=0)
        return LatentBatch(samples, tf.zeros_like(mean[:, 0]), mean, variance)


def test_new_rows_need_row_tables_or_an_encoder(data):
    Y_train, Y_test, _ = data
    model = SVIGPLVM(Y_train, Q, num_inducing=5, latent=FixedLatent)
    assert np.isfinite(model.training_loss((tf.range(4, dtype=tf.int64), Y_train[:4])).numpy())
    with pytest.raises(ValueError, match="subclass RowLatentVariables"):
        model.infer_latents(Y_test)
    with pytest.raises(ValueError, match="amortised"):
        model.reconstruct(Y_test)


def test_rmse_and_nlpd_match_hand_computed_values():
    Y = np.array([[1.0, np.nan, 3.0], [0.0, 2.0, -1.0]])
    mean = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 1.0]])
    variance = np.array([[1.0, 1.0, 4.0], [0.5, 2.0, 1.0]])
    # Scored: (0,0) err 1, (0,2) err 0, (1,0) err 0, (1,1) err 2, (1,2) err -2.
    assert rmse(Y, mean) == pytest.approx(np.sqrt((1 + 0 + 0 + 4 + 4) / 5))
    mask = np.array([[True, True, False], [False, True, True]])
    assert rmse(Y, mean, mask) == pytest.approx(np.sqrt((1 + 4 + 4) / 3))
    terms = {
        (0, 0): 0.5 * np.log(2 * np.pi) + 0.5,
        (0, 2): 0.5 * np.log(8 * np.pi),
        (1, 0): 0.5 * np.log(np.pi),
        (1, 1): 0.5 * np.log(4 * np.pi) + 1.0,
        (1, 2): 0.5 * np.log(2 * np.pi) + 2.0,
    }
    assert nlpd(Y, mean, variance) == pytest.approx(np.mean(list(terms.values())))
    row0 = terms[(0, 0)] + terms[(0, 2)]
    row1 = terms[(1, 0)] + terms[(1, 1)] + terms[(1, 2)]
    assert nlpd(Y, mean, variance, joint=True) == pytest.approx((row0 + row1) / 2)
    with pytest.raises(ValueError, match="shape"):
        rmse(Y, mean[:, :2])
    with pytest.raises(ValueError, match="positive"):
        nlpd(Y, mean, np.zeros_like(variance))


def _quadrature_predictive(model, mean, scale, points=40):
    """Moments of y under E_{q(x)} of GPflow's predict_y, by a tensor-product Gauss-Hermite rule
    over x = mean + scale z (Q = 2): mixture mean and law-of-total-variance variance."""
    nodes, weights = np.polynomial.hermite_e.hermegauss(points)
    z = np.stack(np.meshgrid(nodes, nodes, indexing="ij"), -1).reshape(-1, 2)  # [P, 2]
    w = np.outer(weights, weights).reshape(-1) / (2 * np.pi)  # [P]
    x = mean[:, None, :] + np.einsum("bqk,pk->bpq", scale, z)  # [B, P, Q]
    f_mean, f_var = model.predict_y(x.reshape(-1, 2))
    f_mean = f_mean.numpy().reshape(len(mean), len(w), -1)
    second = f_var.numpy().reshape(f_mean.shape) + f_mean**2
    mixture_mean = np.einsum("p,bpd->bd", w, f_mean)
    return mixture_mean, np.einsum("p,bpd->bd", w, second) - mixture_mean**2


@pytest.mark.parametrize("full", [False, True], ids=["diagonal", "full covariance"])
def test_the_exact_predictive_is_gauss_hermite_quadrature_over_q_x(bsvi, full):
    assert exact_predictive_applies(bsvi)
    rng = np.random.default_rng(0)
    mean = bsvi.latent_mean().numpy()[:6]
    scale = np.sqrt(bsvi.latent_variance().numpy()[:6])[:, :, None] * np.eye(Q)  # [B, Q, Q]
    if full:
        scale = scale + np.tril(0.2 * rng.standard_normal((6, Q, Q)), -1)
    covariance = scale @ np.swapaxes(scale, 1, 2) if full else np.diagonal(scale, 0, 1, 2) ** 2
    exact = closed_form_predictive(bsvi, tf.constant(mean), tf.constant(covariance))
    reference = _quadrature_predictive(bsvi, mean, scale)
    # The variance subtracts (psi_1^T a_d)^2 from a_d^T Psi_2 a_d: ~1e-9 of rounding.
    for got, want in zip(exact, reference):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-8)


def _fitted_bounds(inference, Y):
    """Each row's bound [N*] at q(x*) as ``inference`` fits it (compiled, like its graphs)."""
    zeros = tf.zeros([1, 1, Q], tf.float64)
    bounds = tf.function(
        lambda Y: inference._row_bounds(inference.fitted_batch(Y, None, 1, zeros), Y)
    )
    return bounds(tf.constant(Y)).numpy()


def test_new_rows_of_a_closed_form_model_converge_by_newton_steps(bsvi, data):
    """Newton steps run to convergence reach a bound at least 300 averaged Adam steps'; the
    default tolerance stops each row within it of there, in a handful of steps."""
    Y = np.where(data[2], np.nan, data[1])[:20]
    inference = LatentInference(bsvi)
    assert inference.tolerance == TOLERANCE
    stopped = _fitted_bounds(inference, Y)
    converged = _fitted_bounds(LatentInference(bsvi, tolerance=1e-12), Y)
    fixed = _fitted_bounds(LatentInference(bsvi, iterations=300, tolerance=None), Y)
    assert converged.sum() >= fixed.sum()
    assert np.all(converged - stopped <= TOLERANCE * (1.0 + np.abs(converged)))
    few = _fitted_bounds(LatentInference(bsvi, iterations=8), Y)
    np.testing.assert_allclose(few, stopped, rtol=0, atol=1e-12)
    # Trained by Monte Carlo, inferred in closed form; no closed form at all: fixed steps.
    mc_model = BayesianSVIGPLVM(data[0], Q, num_inducing=5, latent_expectation="monte-carlo")
    assert LatentInference(mc_model).tolerance == TOLERANCE
    matern = gpflow.kernels.Matern32(lengthscales=np.ones(Q))
    assert LatentInference(BayesianSVIGPLVM(data[0], Q, 5, matern)).tolerance is None
    assert LatentInference(MAPGPLVM(data[0], Q, num_inducing=5)).tolerance == TOLERANCE


def test_a_tolerance_given_where_the_bound_has_draws_fits_one_set_of_draws(data):
    """No closed form (a Matern kernel): with a tolerance, Newton steps fit the bound of the
    step-0 draws, which then is at least its value at the rows' start, and at a stationary
    point of it (each row's gradient near zero)."""
    matern = gpflow.kernels.Matern32(lengthscales=np.ones(Q))
    model = BayesianSVIGPLVM(data[0], Q, num_inducing=5, kernel=matern, num_samples=3)
    inference = LatentInference(model, tolerance=1e-10)
    fit = inference._fit
    Y = tf.constant(data[1][:6])
    noise = tf.random.stateless_normal([3, 1, Q], seed=[fit.seed, 0], dtype=tf.float64)

    def bounds(mean, variance):
        batch = model.latent.batch_of((mean, variance), 3, noise)
        return inference._row_bounds(batch, Y)

    mean, variance = model.latent.fitted_rows(Y, fit)
    start = model.latent.initial_rows(inference._initial_means(Y))
    assert np.all(bounds(mean, variance).numpy() >= bounds(*start).numpy() - 1e-9)
    with tf.GradientTape() as tape:
        tape.watch(mean)
        total = tf.reduce_sum(bounds(mean, variance))
    np.testing.assert_allclose(tape.gradient(total, mean).numpy(), 0.0, atol=1e-4)


@pytest.mark.parametrize("tolerance", [0, -1e-3, float("nan"), "fast", True])
def test_a_bad_tolerance_is_refused(bsvi, tolerance):
    with pytest.raises(ValueError, match="tolerance"):
        LatentInference(bsvi, tolerance=tolerance)


@pytest.mark.parametrize(
    "model", [None, "bsvi", gpflow.models.GPR((np.zeros((3, 1)), np.zeros((3, 1))), None)]
)
def test_inference_of_what_is_not_a_gplvm_is_refused_naming_it(model):
    with pytest.raises(ValueError, match=f"model must be a GPLVM .* got {type(model).__name__}"):
        LatentInference(model)
