"""Property tests (hypothesis) for everything that handles masks and shapes, each against a
brute-force numpy reference: the masked likelihood, the metrics, the observation checks, the
missingness protocol and the minibatch pipeline."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy.special import gammaln

from gpflow_svi_gplvm import MaskedLikelihood, PointGPLVM
from gpflow_svi_gplvm.datasets import random_missing
from gpflow_svi_gplvm.metrics import nlpd, rmse
from gpflow_svi_gplvm.training.trainer import make_dataset
from gpflow_svi_gplvm.validation import check_observations

# TensorFlow's first calls are slow, and examples build graphs: no per-example deadline.
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

shapes = st.tuples(st.integers(1, 7), st.integers(1, 6))
fractions = st.floats(0.0, 0.9)
seeds = st.integers(0, 2**31 - 1)


def _with_gaps(shape, fraction, seed, values):
    """(Y with a random share ``fraction`` of NaNs, the observed mask); ``values(rng, shape)``."""
    rng = np.random.default_rng(seed)
    observed = rng.random(shape) >= fraction
    return np.where(observed, values(rng, shape), np.nan), observed


def _gaussian_expectation(y, mean, variance, noise):
    """E_N(f; mean, variance)[log N(y; f, noise)] per entry, in closed form."""
    return -0.5 * np.log(2 * np.pi * noise) - ((y - mean) ** 2 + variance) / (2 * noise)


def _poisson_expectation(y, mean, variance):
    """E_N(f; mean, variance)[log Poisson(y; exp f)] per entry, in closed form."""
    return y * mean - np.exp(mean + variance / 2) - gammaln(y + 1)


@SETTINGS
@given(shape=shapes, fraction=fractions, seed=seeds, kind=st.sampled_from(["gaussian", "poisson"]))
def test_masked_variational_expectations_sum_the_observed_entries(shape, fraction, seed, kind):
    if kind == "gaussian":
        base, noise = gpflow.likelihoods.Gaussian(variance=0.3), 0.3
        Y, observed = _with_gaps(shape, fraction, seed, lambda rng, s: rng.normal(size=s))
    else:
        base = gpflow.likelihoods.Poisson()
        Y, observed = _with_gaps(shape, fraction, seed, lambda rng, s: rng.poisson(3.0, size=s))
    rng = np.random.default_rng(seed + 1)
    mean, variance = rng.normal(size=shape), rng.uniform(0.1, 1.0, size=shape)
    X = np.zeros((shape[0], 1))

    Fmu = tf.constant(mean)
    with tf.GradientTape() as tape:
        tape.watch(Fmu)
        terms = MaskedLikelihood(base).variational_expectations(X, Fmu, variance, Y)
    gradient = tape.gradient(terms, Fmu).numpy()

    y = np.where(observed, Y, 0.0)
    if kind == "gaussian":
        entries = _gaussian_expectation(y, mean, variance, noise)
    else:
        entries = _poisson_expectation(y, mean, variance)
    expected = np.where(observed, entries, 0.0).sum(axis=1)
    np.testing.assert_allclose(terms.numpy(), expected, rtol=1e-10, atol=1e-10)
    # Missing entries neither contribute nor poison the gradient.
    assert np.all(np.isfinite(gradient)) and np.all(gradient[~observed] == 0.0)


@SETTINGS
@given(shape=shapes, fraction=fractions, seed=seeds, use_mask=st.booleans())
def test_metrics_score_exactly_the_observed_and_masked_entries(shape, fraction, seed, use_mask):
    Y, observed = _with_gaps(shape, fraction, seed, lambda rng, s: rng.normal(size=s))
    rng = np.random.default_rng(seed + 1)
    mean, variance = rng.normal(size=shape), rng.uniform(0.1, 2.0, size=shape)
    mask = rng.random(shape) < 0.7 if use_mask else None
    scored = observed & (mask if use_mask else True)
    if not scored.any():
        with pytest.raises(ValueError):
            rmse(Y, mean, mask=mask)
        return
    squared, terms = np.full(shape, np.nan), np.full(shape, np.nan)
    for n, d in zip(*np.nonzero(scored)):  # entry by entry
        squared[n, d] = (Y[n, d] - mean[n, d]) ** 2
        terms[n, d] = 0.5 * np.log(2 * np.pi * variance[n, d]) + squared[n, d] / (
            2 * variance[n, d]
        )
    assert rmse(Y, mean, mask=mask) == pytest.approx(np.sqrt(np.nanmean(squared)), rel=1e-12)
    assert nlpd(Y, mean, variance, mask=mask) == pytest.approx(np.nanmean(terms), rel=1e-12)
    per_row = [np.nansum(terms[n]) for n in range(shape[0]) if scored[n].any()]
    joint = nlpd(Y, mean, variance, mask=mask, joint=True)
    assert joint == pytest.approx(np.mean(per_row), rel=1e-12)


@SETTINGS
@given(shape=shapes, fraction=fractions, seed=seeds)
def test_check_observations_puts_nan_exactly_where_the_mask_hides(shape, fraction, seed):
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=shape)
    mask = rng.random(shape) >= fraction
    if not mask.any():
        with pytest.raises(ValueError, match="missing"):
            check_observations(raw, mask=mask)
        return
    Y = check_observations(raw, mask=mask)
    assert Y.shape == shape and Y.dtype == np.float64
    np.testing.assert_array_equal(np.isnan(Y), ~mask)
    np.testing.assert_array_equal(Y[mask], raw[mask])


@SETTINGS
@given(shape=shapes, already=st.floats(0.0, 0.6), fraction=st.floats(0.0, 0.95), seed=seeds)
def test_random_missing_hides_the_stated_share_of_observed_entries(shape, already, fraction, seed):
    Y, observed = _with_gaps(shape, already, seed, lambda rng, s: rng.normal(size=s))
    Y_missing, hidden = random_missing(Y, fraction, seed)
    assert hidden.shape == shape and not np.any(hidden & ~observed)
    assert hidden.sum() == round(fraction * observed.sum())
    np.testing.assert_array_equal(np.isnan(Y_missing), ~observed | hidden)
    np.testing.assert_array_equal(Y_missing[~np.isnan(Y_missing)], Y[observed & ~hidden])


@SETTINGS
@given(
    num_data=st.integers(1, 30),
    batch_size=st.integers(1, 40),
    fraction=st.floats(0.0, 0.5),
    seed=st.integers(0, 1000),
)
def test_minibatches_are_permutation_slices_of_the_rows(num_data, batch_size, fraction, seed):
    rng = np.random.default_rng(seed)
    raw = rng.normal(size=(num_data, 3))
    mask = rng.random(raw.shape) >= fraction
    mask[0, 0] = True  # something observed
    Y = np.where(mask, raw, np.nan)
    model = PointGPLVM(
        Y, 1, num_inducing=1, likelihood=MaskedLikelihood(gpflow.likelihoods.Gaussian())
    )
    size = min(batch_size, num_data)
    per_epoch = num_data // size

    def batches(dataset, count):
        return [(i.numpy(), y.numpy()) for i, y in dataset.take(count)]

    # ``mask`` hides what lies behind False: the raw values must never leak through.
    drawn = batches(make_dataset(model, raw, batch_size, seed, mask=mask), 2 * per_epoch)
    for idx, rows in drawn:
        assert idx.dtype == np.int64 and idx.shape == (size,) and rows.shape == (size, 3)
        np.testing.assert_array_equal(rows, Y[idx])  # NaN where hidden, equal elsewhere
    for epoch in (drawn[:per_epoch], drawn[per_epoch:]):
        seen = np.concatenate([idx for idx, _ in epoch])
        assert len(np.unique(seen)) == len(seen) == per_epoch * size  # no row twice in an epoch
        assert seen.min() >= 0 and seen.max() < num_data
    # The same seed gives the same batches.
    again = batches(make_dataset(model, Y, batch_size, seed), 2 * per_epoch)
    for (a, _), (b, _) in zip(drawn, again):
        np.testing.assert_array_equal(a, b)
