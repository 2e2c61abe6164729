"""Count likelihoods: the negative binomial against SciPy, dense quadrature and Monte Carlo (values
and gradients); the Poisson rate s_n exp(f) of a size factor taken as an offset of f."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import special, stats

from gpflow_svi_gplvm.likelihoods import (
    MaskedLikelihood,
    NegativeBinomial,
    check_likelihood_support,
    expected_softplus,
    log_link,
)

RNG = np.random.default_rng(0)
D = 3
DISPERSION = np.array([0.05, 0.5, 2.0])  # near Poisson, moderate, strong overdispersion
Fmu = RNG.normal(1.0, 1.0, (4, D))
Fvar = RNG.uniform(0.05, 1.5, (4, D))
Y = RNG.poisson(np.exp(Fmu)).astype(float)
X = np.zeros((4, 2))  # the inputs, which these likelihoods do not read


def _likelihood(points: int | None = None) -> NegativeBinomial:
    rule = {} if points is None else dict(num_gauss_hermite_points=points)
    likelihood = NegativeBinomial(num_outputs=D, **rule)
    likelihood.dispersion.assign(DISPERSION)
    return likelihood


def _scipy_log_pmf(y, f, dispersion):
    """log NB(y | mean e^f, variance mu + phi mu^2) by SciPy: n = 1 / phi, p = n / (n + mu)."""
    n = 1.0 / dispersion
    return stats.nbinom.logpmf(y, n, n / (n + np.exp(f)))


def _dense_quadrature(function, mean, variance, points=200):
    """E_{N(mean, variance)}[function(f)] elementwise by a 200-point Gauss-Hermite rule."""
    nodes, weights = np.polynomial.hermite.hermgauss(points)
    f = mean[None] + np.sqrt(2.0 * variance)[None] * nodes[:, None, None]
    return np.einsum("k,k...->...", weights / np.sqrt(np.pi), function(f))


def test_negative_binomial_density_is_scipys():
    log_prob = _likelihood().log_prob(None, tf.constant(Fmu), tf.constant(Y))
    np.testing.assert_allclose(log_prob, _scipy_log_pmf(Y, Fmu, DISPERSION).sum(-1), rtol=1e-10)


# The default rule (4 points) against 20: q(f) variances up to 1.5 (beyond the prior's 1 at
# initialisation) and a dispersion of 2 are where the rule is least exact.
@pytest.mark.parametrize("points, tolerance", [(None, 1e-3), (20, 1e-7)])
def test_negative_binomial_variational_expectations_match_quadrature_and_monte_carlo(
    points, tolerance
):
    expected = _likelihood(points).variational_expectations(None, Fmu, Fvar, Y).numpy()
    dense = _dense_quadrature(lambda f: _scipy_log_pmf(Y, f, DISPERSION), Fmu, Fvar).sum(-1)
    np.testing.assert_allclose(expected, dense, rtol=tolerance)
    draws = Fmu + np.sqrt(Fvar) * RNG.standard_normal((200_000, *Fmu.shape))
    monte_carlo = _scipy_log_pmf(Y, draws, DISPERSION).mean(0).sum(-1)
    np.testing.assert_allclose(expected, monte_carlo, rtol=5e-3)


def test_negative_binomial_predictive_density_and_moments():
    likelihood = _likelihood()
    log_density = likelihood.predict_log_density(None, Fmu, Fvar, Y).numpy()
    pmf = _dense_quadrature(lambda f: np.exp(_scipy_log_pmf(Y, f, DISPERSION)), Fmu, Fvar)
    # 20 points integrate a peaked pmf less well than the smooth softplus: within 0.2% here.
    np.testing.assert_allclose(log_density, np.log(pmf).sum(-1), rtol=2e-3)
    mean, variance = (m.numpy() for m in likelihood.predict_mean_and_var(None, Fmu, Fvar))
    rate = np.exp(Fmu + np.sqrt(Fvar) * RNG.standard_normal((400_000, *Fmu.shape)))
    draws = RNG.negative_binomial(1.0 / DISPERSION, 1.0 / (1.0 + DISPERSION * rate))
    np.testing.assert_allclose(mean, draws.mean(0), rtol=0.03)
    np.testing.assert_allclose(variance, draws.var(0), rtol=0.1)


def test_masked_negative_binomial_counts_observed_entries_with_each_genes_dispersion():
    gaps = Y.copy()
    gaps[0, 1] = gaps[2, 0] = np.nan
    masked = MaskedLikelihood(_likelihood(20)).variational_expectations(X, Fmu, Fvar, gaps)
    dense = _dense_quadrature(lambda f: _scipy_log_pmf(Y, f, DISPERSION), Fmu, Fvar)
    np.testing.assert_allclose(masked, np.where(np.isnan(gaps), 0.0, dense).sum(-1), rtol=1e-7)


def test_poisson_rate_with_a_size_factor_is_an_offset_of_f():
    """rate s exp(f): GPflow's closed form at Fmu + log s is quadrature of Poisson(y | s e^f)."""
    size = np.array([[0.5], [1.0], [2.0], [4.0]])
    poisson = gpflow.likelihoods.Poisson()
    closed = poisson.variational_expectations(None, Fmu + np.log(size), Fvar, Y).numpy()
    dense = _dense_quadrature(lambda f: stats.poisson.logpmf(Y, size * np.exp(f)), Fmu, Fvar)
    np.testing.assert_allclose(closed, dense.sum(-1), rtol=1e-8)
    assert log_link(poisson) and log_link(MaskedLikelihood(_likelihood()))
    assert not log_link(gpflow.likelihoods.Gaussian())


def test_count_likelihoods_refuse_what_is_not_a_count():
    with pytest.raises(ValueError, match="NegativeBinomial likelihood needs non-negative integer"):
        check_likelihood_support(_likelihood(), np.array([[1.0, 2.5, 0.0]]))
    with pytest.raises(ValueError, match="dispersion must be a positive number"):
        NegativeBinomial(dispersion=0.0)


def _softplus_reference(mean, variance):
    """E[softplus(f)] for f ~ N(mean, variance) by numpy's 200-point Gauss-Hermite rule."""
    return _dense_quadrature(lambda f: np.logaddexp(0.0, f), mean, variance)


def _central_difference(function, x, step=1e-5):
    return (function(x + step) - function(x - step)) / (2.0 * step)


# The gradients' integrands (sigmoid and its slope) are less smooth than softplus: a rule is
# less exact for them; 100 points are exact up to the finite differences' own error.
@pytest.mark.parametrize(
    "points, tolerance, gradient_tolerance", [(4, 1e-3, 1e-2), (10, 1e-6, 1e-4), (100, 1e-12, 1e-8)]
)
def test_expected_softplus_and_its_gradients_match_dense_quadrature(
    points, tolerance, gradient_tolerance
):
    """Values and d/dmean, d/dvariance (finite differences of the reference)."""
    mean, variance = tf.constant(Fmu - 1.0), tf.constant(Fvar)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([mean, variance])
        value = expected_softplus(mean, variance, points)
    d_mean, d_variance = tape.gradient(value, [mean, variance])
    reference = _softplus_reference(Fmu - 1.0, Fvar)
    np.testing.assert_allclose(value, reference, rtol=tolerance)
    by_mean = _central_difference(lambda m: _softplus_reference(m, Fvar), Fmu - 1.0)
    by_variance = _central_difference(lambda v: _softplus_reference(Fmu - 1.0, v), Fvar)
    np.testing.assert_allclose(d_mean, by_mean, rtol=gradient_tolerance)
    np.testing.assert_allclose(d_variance, by_variance, rtol=gradient_tolerance)


def test_expected_softplus_second_derivative_is_the_rule_of_sigmoids_slope():
    """Newton steps differentiate the gradient again: d2/dmean2 = E[sigmoid'(f)], finite at
    variance 0 (softplus' second derivative there)."""
    mean = tf.constant([[-2.0, 0.3, 4.0]], tf.float64)
    variance = tf.constant([[0.5, 0.0, 1.2]], tf.float64)
    with tf.GradientTape() as outer:
        outer.watch(mean)
        with tf.GradientTape() as inner:
            inner.watch(mean)
            value = expected_softplus(mean, variance, 20)
        d_mean = inner.gradient(value, mean)
    second = outer.gradient(d_mean, mean)
    slope = _dense_quadrature(
        lambda f: special.expit(f) * special.expit(-f), mean.numpy(), variance.numpy()
    )
    np.testing.assert_allclose(second, slope, rtol=1e-8)


@settings(max_examples=25, deadline=None)
@given(
    mean=st.floats(-30.0, 30.0),
    variance=st.floats(0.0, 2.0),
    shape=st.sampled_from([(), (3,), (2, 1, 4)]),
    points=st.integers(1, 7),
    dtype=st.sampled_from([tf.float32, tf.float64]),
)
def test_expected_softplus_is_finite_and_bounded_by_jensen(mean, variance, shape, points, dtype):
    """softplus(m) <= E[softplus(f)] <= softplus(m) + v / 8 (convex, curvature at most 1/4),
    gradients in [0, 1] and [0, 1/8], whatever the shape, rule and precision, at variance 0
    too."""
    m, v = tf.fill(shape, tf.constant(mean, dtype)), tf.fill(shape, tf.constant(variance, dtype))
    with tf.GradientTape() as tape:
        tape.watch([m, v])
        value = expected_softplus(m, v, points)
    d_mean, d_variance = tape.gradient(value, [m, v])
    assert value.dtype == d_mean.dtype == d_variance.dtype == dtype
    low, rounding = np.logaddexp(0.0, mean), 1e-5 if dtype == tf.float32 else 1e-12
    assert np.all(value.numpy() >= low - rounding * (1 + low))
    assert np.all(value.numpy() <= low + variance / 8 + rounding * (1 + low))
    assert np.all((d_mean.numpy() >= 0) & (d_mean.numpy() <= 1))
    assert np.all((d_variance.numpy() >= 0) & (d_variance.numpy() <= 1 / 8 + rounding))


def _reference_log_lik(y, mean, variance, dispersion):
    """E_{N(f | mean, variance)} log NB(y | e^f, dispersion) by dense quadrature of SciPy's pmf."""
    return _dense_quadrature(lambda f: _scipy_log_pmf(y, f, dispersion), mean, variance)


@pytest.mark.parametrize("masked", [False, True])
def test_negative_binomial_variational_gradients_match_the_reference(masked):
    """d/dFmu, d/dFvar per entry and d/d(dispersion) per gene against finite differences of dense
    quadrature of SciPy's pmf; with missing entries (NaN) under MaskedLikelihood, which get no
    gradient. 100 points: the rule's error is below the differences' own."""
    counts = Y.copy()
    counts[1, 2] = 0.0
    if masked:
        counts[0, 1] = counts[3, 0] = np.nan
    likelihood = _likelihood(100)
    wrapped = MaskedLikelihood(likelihood) if masked else likelihood
    mean, variance = tf.constant(Fmu), tf.constant(Fvar)
    with tf.GradientTape() as tape:
        tape.watch([mean, variance])
        value = tf.reduce_sum(wrapped.variational_expectations(X, mean, variance, counts))
    d_mean, d_variance, d_raw = tape.gradient(
        value, [mean, variance, likelihood.dispersion.unconstrained_variable]
    )
    observed = ~np.isnan(counts)
    filled = np.where(observed, counts, 0.0)

    def total(mean=Fmu, variance=Fvar, dispersion=DISPERSION):
        terms = _reference_log_lik(filled, mean, variance, dispersion)
        return np.where(observed, terms, 0.0)

    np.testing.assert_allclose(value, total().sum(), rtol=1e-10)
    np.testing.assert_allclose(d_mean, _central_difference(lambda m: total(mean=m), Fmu), atol=1e-7)
    np.testing.assert_allclose(
        d_variance, _central_difference(lambda v: total(variance=v), Fvar), atol=1e-7
    )

    def by_dispersion(d: int) -> float:
        """d/dphi_d of the total by a central difference in gene d's dispersion alone."""
        others = np.arange(D) != d
        return _central_difference(
            lambda p: total(dispersion=np.where(others, DISPERSION, p)), DISPERSION[d]
        ).sum()

    # the dispersion is stored through a softplus: d/draw = d/dphi * sigmoid(raw)
    raw = likelihood.dispersion.unconstrained_variable.numpy()
    np.testing.assert_allclose(
        d_raw, np.array([by_dispersion(d) for d in range(D)]) * special.expit(raw), rtol=1e-6
    )


@pytest.mark.parametrize("num_outputs, dispersion", [(None, 0.3), (1, 0.3), (D, DISPERSION)])
def test_negative_binomial_log_gamma_terms_at_the_non_zero_counts(num_outputs, dispersion):
    """One dispersion for all genes, one as a [1] vector, one per gene: the log-gamma terms
    taken at the non-zero counts only give SciPy's density at every count, zeros included."""
    likelihood = NegativeBinomial(num_outputs=num_outputs)
    likelihood.dispersion.assign(np.broadcast_to(dispersion, likelihood.dispersion.shape))
    counts = np.array([[0.0, 3.0, 0.0], [12.0, 0.0, 1.0], [0.0, 0.0, 0.0], [5.0, 40.0, 2.0]])
    tiny = np.full_like(Fmu, 1e-300)  # q(f) a point: the expectation is the density at Fmu
    value = likelihood.variational_expectations(None, Fmu, tiny, counts).numpy()
    expected = _scipy_log_pmf(counts, Fmu, np.broadcast_to(dispersion, (D,))).sum(-1)
    np.testing.assert_allclose(value, expected, rtol=1e-10)
