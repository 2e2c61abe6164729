"""Laplace inference of new rows: the mode and curvature of each row's posterior against a
general-purpose optimiser and finite differences on GPflow's own predictive, and the
likelihoods' derivatives in (m, v) against automatic differentiation."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import scipy.optimize
import tensorflow as tf

from gpflow_svi_gplvm import MAPGPLVM, BayesianSVIGPLVM, PointGPLVM
from gpflow_svi_gplvm.likelihoods import (
    MaskedLikelihood,
    NegativeBinomial,
    expectation_derivatives,
)
from gpflow_svi_gplvm.prediction.laplace import LaplaceLatents, laplace_applies

N, D, Q, M = 30, 6, 2, 8


def _counts(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(N, Q))
    rate = np.exp(0.5 + x @ rng.normal(size=(Q, D)))
    return rng.poisson(rate).astype(np.float64)


@pytest.fixture(scope="module")
def model():
    """A B-SVI Poisson model with one q(u) covariance, q(u) moved off its prior."""
    Y = _counts(0)
    built = BayesianSVIGPLVM(
        Y, Q, M, likelihood=gpflow.likelihoods.Poisson(), shared_covariance=True, seed=1
    )
    rng = np.random.default_rng(2)
    built.q_mu.assign(rng.normal(size=(M, D)))
    built.q_sqrt.assign(0.3 * np.eye(M)[None])
    return built


def _phi(model, y: np.ndarray, x: np.ndarray) -> float:
    """-sum_d E log p(y_d | f_d) - log N(x; 0, I) (up to a constant) from GPflow's predict_f."""
    mean, var = model.predict_f(tf.constant(x[None]))
    terms = model.likelihood.variational_expectations(
        tf.constant(x[None]), mean, var, tf.constant(y[None])
    )
    return float(-tf.reduce_sum(terms)) + 0.5 * float(x @ x)


def test_the_mode_and_its_curvature_match_an_optimiser_and_finite_differences(model):
    rows = _counts(5)[:4]
    rows[1, 2] = np.nan  # a missing entry is left out of the row's posterior
    mean, variance = LaplaceLatents(model, tolerance=1e-10).infer(rows)
    masked = model.likelihood
    model.likelihood = MaskedLikelihood(masked)
    try:
        for y, found, spread in zip(rows, mean, variance):

            def phi(x: np.ndarray, y: np.ndarray = y) -> float:
                return _phi(model, y, x)

            best = scipy.optimize.minimize(phi, found + 0.3, method="BFGS", tol=1e-12)
            # To the precision of phi's terms (single precision: laplace.LOW): phi is resolved
            # to about D roundings of its size, and rises by half the squared distance from the
            # mode in posterior standard deviations, so the mode is fixed to within
            # sqrt(2 D eps |phi|) of them (a few thousandths here; the rounding differs by CPU).
            resolution = np.sqrt(2 * D * np.finfo(np.float32).eps * abs(phi(best.x)))
            np.testing.assert_array_less(np.abs(found - best.x), resolution * np.sqrt(spread))
            h = 1e-3  # the Hessian's diagonal by central differences of phi at the mode
            diagonal = [
                (phi(found + h * e) - 2 * phi(found) + phi(found - h * e)) / h**2 for e in np.eye(Q)
            ]
            np.testing.assert_allclose(spread, 1.0 / np.array(diagonal), rtol=2e-3)
    finally:
        model.likelihood = masked


def test_the_steps_shortcuts_reach_the_exact_steps_q_x(model):
    """The steps on a Hessian summing half of the outputs (scaled), the likelihood's terms in
    tiles compiled by XLA, find the q(x*) of exact Newton steps on every output."""
    rows = _counts(6)[:5]
    rows[2, 0] = np.nan
    exact = LaplaceLatents(model, tolerance=1e-10, hessian_outputs=D, tiled=False).infer(rows)
    found = LaplaceLatents(model, tolerance=1e-10, hessian_outputs=D // 2, tiled=True).infer(rows)
    # Both converged, by other paths: they agree to the precision of phi's single-precision
    # terms, sqrt(2 D eps |phi|) posterior standard deviations (as above; |phi| < 100 here).
    resolution = np.sqrt(2 * D * np.finfo(np.float32).eps * 100)
    np.testing.assert_array_less(np.abs(found[0] - exact[0]) / np.sqrt(exact[1]), resolution)
    np.testing.assert_allclose(found[1], exact[1], rtol=2e-3)  # the curvature at those points


def test_rows_with_offsets_start_where_their_values_without_them_would(model):
    """A row's start reads its values on the candidates' rates' scale: under the log link,
    counts y with offsets o on f start where y e^{-o} without offsets do (a new batch's cells
    where its effect taken out puts them), and not where y alone does."""
    laplace = LaplaceLatents(model)
    rows = _counts(8)[:20]
    offsets = np.random.default_rng(9).normal(0.0, 1.0, size=(1, D)) * np.ones((20, 1))
    inputs = np.zeros((20, 0))
    shifted = laplace.start(rows * np.exp(offsets), inputs, offsets).numpy()
    plain = laplace.start(rows, inputs, np.zeros_like(rows)).numpy()
    np.testing.assert_allclose(shifted, plain, rtol=1e-5, atol=1e-6)
    unshifted = laplace.start(rows * np.exp(offsets), inputs, np.zeros_like(rows)).numpy()
    assert np.abs(unshifted - plain).max() > 0.1


def test_q_x_at_the_default_tolerance_is_within_a_fraction_of_its_spread_of_the_mode(model):
    """The q(x*) ``transform`` finds (the default tolerance, from the mean of the nearest
    candidates' latents) against the one converged fully from the same start (tolerance 1e-10):
    the means within a fifth of each posterior standard deviation, the variances within 5%. (This
    small model's posteriors have several modes, so another start may end at another one; on
    simulated and real counts the start moved q(x*) by far less: benchmarks/results/mapping.md.)"""
    rows = _counts(7)[:20]
    rows[3, 1] = np.nan
    found = LaplaceLatents(model).infer(rows)
    mean, variance = LaplaceLatents(model, tolerance=1e-10).infer(rows)
    np.testing.assert_array_less(np.abs(found[0] - mean) / np.sqrt(variance), 0.2)
    np.testing.assert_allclose(found[1], variance, rtol=0.05)


def test_rows_from_their_own_start_or_a_given_one_share_one_trace_of_the_steps(model):
    """``infer`` without a start starts each row where the served graph would (the compiled
    ``start``) and steps from there in the same compiled steps as from a given start: one trace
    for both (mapping's first round and its later ones), and the same q(x*) as the served graph
    (``fit``, its start found inside)."""
    rows = _counts(5)[:12]
    laplace = LaplaceLatents(model)
    found = laplace.infer(rows)
    again = laplace.infer(rows, start=found[0])
    assert laplace.fit_from.experimental_get_tracing_count() == 1
    served = laplace.fit(rows, np.zeros((12, 0)), np.zeros_like(rows))
    for a, b in zip(found, served):
        np.testing.assert_allclose(a, b.numpy(), rtol=1e-6, atol=1e-9)
    # From its own mode a row is already converged: it stays there.
    np.testing.assert_allclose(again[0], found[0], atol=0.05 * np.sqrt(found[1]).max())


def test_no_rows_give_empty_moments(model):
    """An empty block (a served batch of no cells) gives q(x*) of shape [0, Q], from ``infer``
    and from the compiled steps themselves, tiled or not."""
    for tiled in (False, True):
        laplace = LaplaceLatents(model, tiled=tiled)
        for mean, variance in (
            laplace.infer(np.zeros((0, D))),
            laplace.fit(np.zeros((0, D)), np.zeros((0, 0)), np.zeros((0, D))),
        ):
            assert np.shape(mean) == np.shape(variance) == (0, Q)


def test_point_and_map_families_return_their_modes_without_spread():
    Y = _counts(0)
    for family in (PointGPLVM, MAPGPLVM):
        built = family(Y, Q, M, likelihood=gpflow.likelihoods.Poisson(), shared_covariance=True)
        mean, variance = LaplaceLatents(built).infer(_counts(3)[:3])
        assert np.all(variance == 0) and np.all(np.isfinite(mean))


def test_laplace_needs_a_shared_covariance():
    built = BayesianSVIGPLVM(_counts(0), Q, M, likelihood=gpflow.likelihoods.Poisson())
    assert "covariance per output" in laplace_applies(built)
    with pytest.raises(ValueError, match="use LatentInference"):
        LaplaceLatents(built)


@pytest.mark.parametrize(
    "likelihood",
    [
        # Its expectation's derivatives in v are Price's (E g'' / 2) by its Gauss-Hermite rule,
        # the rule's own derivatives by automatic differentiation: with many points they agree.
        NegativeBinomial(dispersion=0.4, num_outputs=D, num_gauss_hermite_points=40),
        gpflow.likelihoods.Poisson(),
        gpflow.likelihoods.Gaussian(variance=0.7),
        gpflow.likelihoods.StudentT(),
    ],
    ids=["negative binomial", "poisson", "gaussian", "student-t (automatic)"],
)
def test_expectation_derivatives_match_automatic_differentiation(likelihood):
    rng = np.random.default_rng(0)
    Y = rng.poisson(3.0, (5, D)).astype(np.float64)
    Y[0, 1] = np.nan
    mean = tf.constant(rng.normal(size=(5, D)))
    var = tf.constant(rng.uniform(0.1, 1.0, (5, D)))
    masked = MaskedLikelihood(likelihood)
    X = tf.zeros((5, 1), tf.float64)
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([mean, var])
        with tf.GradientTape() as inner:
            inner.watch([mean, var])
            value = masked.entry_expectations(X, mean, var, tf.constant(Y))
            total = tf.reduce_sum(value)
        zero = tf.UnconnectedGradients.ZERO
        d_m, d_v = inner.gradient(total, [mean, var], unconnected_gradients=zero)
        first, second = tf.reduce_sum(d_m), tf.reduce_sum(d_v)
    d_mm, d_mv = outer.gradient(first, [mean, var], unconnected_gradients=zero)
    expected = [d_m, d_v, d_mm, d_mv, outer.gradient(second, var, unconnected_gradients=zero)]
    found = expectation_derivatives(likelihood, tf.constant(Y), mean, var)
    for name, want, got in zip(found._fields[1:], expected, found[1:]):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-9, err_msg=name)
    # The value differs from the whole expectation by a term of y alone: from one (m, v) to
    # another both change alike.
    moved_mean, moved_var = mean + 0.3, var * 1.5
    whole = masked.entry_expectations(X, moved_mean, moved_var, tf.constant(Y)) - value
    part = expectation_derivatives(likelihood, tf.constant(Y), moved_mean, moved_var).value
    np.testing.assert_allclose(part - found.value, whole, rtol=1e-6, atol=1e-9)
    assert found.value.numpy()[0, 1] == 0 and found.mean.numpy()[0, 1] == 0
