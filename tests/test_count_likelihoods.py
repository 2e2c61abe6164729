"""Count likelihoods: the negative binomial against SciPy, dense quadrature and Monte Carlo; the
Poisson rate s_n exp(f) of a size factor taken as an offset of f."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from scipy import stats

from gpflow_svi_gplvm.likelihoods import (
    MaskedLikelihood,
    NegativeBinomial,
    check_likelihood_support,
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


# The default rule (10 points) against 20: q(f) variances up to 1.5 and a dispersion of 2 are
# where the rule is least exact.
@pytest.mark.parametrize("points, tolerance", [(None, 1e-6), (20, 1e-7)])
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
