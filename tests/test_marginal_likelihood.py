"""The held-out likelihood estimator against brute-force quadrature over x on Q = 1 toys: a
Gaussian likelihood (B-SVI, new-row inference as the proposal) and Poisson counts with size
factors (AEB-SVI, the encoder as the proposal), both with missing entries; its chunks, and bad
input."""

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import move_q_u
from scipy import stats

from gpflow_svi_gplvm import (
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    NegativeBinomial,
    PointGPLVM,
    fit,
)
from gpflow_svi_gplvm.likelihoods import likelihood_facts
from gpflow_svi_gplvm.prediction.latent_inference import LatentInference
from gpflow_svi_gplvm.prediction.marginal_likelihood import (
    MarginalLikelihoodEstimator,
    marginal_log_likelihood,
)

GRID = np.linspace(-8.0, 8.0, 3201)  # x, for the brute force


def _toy(num_rows: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """f [num_rows, 3]: monotone in a Q = 1 latent (a unimodal posterior over x), and x."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((num_rows, 1))
    return np.tanh(x @ np.array([[1.0, -0.7, 1.5]]) + np.array([0.2, 0.1, -0.3])), x


def _brute_force(entry_log_densities) -> float:
    """log int N(x; 0, 1) prod_d p(y_d | x) dx over GRID, from the per-entry log densities
    [grid, D] (zero where missing)."""
    logs = entry_log_densities.sum(-1) - 0.5 * GRID**2 - 0.5 * np.log(2 * np.pi)
    top = logs.max()
    return top + np.log(np.trapz(np.exp(logs - top), GRID))


def _check(result, reference):
    estimate, error = result.log_likelihood.numpy(), result.standard_error.numpy()
    assert np.all(error > 0) and np.all(error < 0.05), error
    np.testing.assert_array_less(np.abs(estimate - reference), 4.0 * error + 2e-3)


def test_gaussian_rows_with_gaps_match_quadrature():
    f, _ = _toy(46, seed=0)
    Y = f + 0.15 * np.random.default_rng(1).standard_normal(f.shape)
    model = BayesianSVIGPLVM(Y[:40], 1, 6)
    fit(model, Y[:40], iterations=300, batch_size=20, progress=False)  # a unimodal posterior
    held_out = Y[40:].copy()
    held_out[0, 1] = held_out[3, [0, 2]] = np.nan
    result = marginal_log_likelihood(model, held_out, num_samples=2000)
    f_mean, f_var = (a.numpy() for a in model.predict_f(GRID[:, None]))
    total = f_var + model.likelihood.variance.numpy()
    reference = [
        _brute_force(np.where(np.isnan(y), 0.0, stats.norm.logpdf(y, f_mean, np.sqrt(total))))
        for y in held_out
    ]
    _check(result, reference)


def test_counts_with_size_factors_and_gaps_match_quadrature():
    f, _ = _toy(46, seed=3)
    rng = np.random.default_rng(4)
    sizes = rng.uniform(0.5, 2.0, 46)
    Y = rng.poisson(sizes[:, None] * np.exp(1.0 + f)).astype(float)
    model = AmortisedBayesianGPLVM(
        Y[:40], 1, 6, likelihood=gpflow.likelihoods.Poisson(), size_factors=sizes[:40]
    )
    move_q_u(model, np.random.default_rng(5), 0.7, 0.1, 0.3)
    held_out = Y[40:].copy()
    held_out[1, 0] = held_out[4, [1, 2]] = np.nan
    result = marginal_log_likelihood(model, held_out, num_samples=2000, size_factors=sizes[40:])
    counts = np.arange(0.0, held_out[~np.isnan(held_out)].max() + 1)
    f_nodes, f_weights = np.polynomial.hermite_e.hermegauss(200)  # E over N(0, 1)
    reference = []
    for y, size in zip(held_out, sizes[40:]):
        inputs = np.stack([GRID, np.full_like(GRID, np.log(size))], axis=1)
        f_mean, f_var = (a.numpy() for a in model.predict_f(inputs))
        f = f_mean[..., None] + np.sqrt(f_var)[..., None] * f_nodes  # [grid, D, nodes]
        log_p = stats.poisson.logpmf(np.nan_to_num(y)[None, :, None], np.exp(f))
        densities = np.log(np.exp(log_p) @ (f_weights / np.sqrt(2 * np.pi)))
        reference.append(_brute_force(np.where(np.isnan(y), 0.0, densities)))
    assert counts.size > 3
    _check(result, reference)


def test_rows_scored_in_chunks_or_blocks_agree(tmp_path):
    f, _ = _toy(30, seed=6)
    model = AmortisedBayesianGPLVM(f[:24], 1, 5)
    estimator = MarginalLikelihoodEstimator(LatentInference(model, chunk_size=2), num_samples=16)
    whole = estimator(f[24:]).log_likelihood.numpy()
    blocks = [estimator(f[24:27]), estimator(f[27:], first_row=3)]
    np.testing.assert_allclose(np.concatenate([b.log_likelihood for b in blocks]), whole)
    assert estimator.function.experimental_get_tracing_count() == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_samples": 0}, "num_samples must be a positive integer"),
        ({"widening": 0.5}, "widening must be a number >= 1"),
        ({"widening": "wide"}, "widening must be a number >= 1"),
    ],
)
def test_bad_options_are_value_errors(options, message):
    f, _ = _toy(12, seed=7)
    with pytest.raises(ValueError, match=message):
        marginal_log_likelihood(BayesianSVIGPLVM(f, 1, 3), f, **options)


def test_rows_scored_at_a_time_count_each_entrys_quadrature_nodes():
    # A count row's densities are [S, D, nodes]: its chunks are as many times smaller, so that
    # memory stays within the budget at thousands of outputs.
    Y = np.random.default_rng(0).poisson(2.0, (20, 300)).astype(float)
    rows = {}
    for name, likelihood in [
        ("gaussian", None),
        ("negative binomial", NegativeBinomial(num_outputs=300)),
        ("poisson", gpflow.likelihoods.Poisson()),
    ]:
        options = {} if likelihood is None else dict(likelihood=likelihood)
        model = BayesianSVIGPLVM(Y, 2, 5, **options)
        estimator = MarginalLikelihoodEstimator(LatentInference(model), num_samples=64)
        nodes = likelihood_facts(estimator.inference.likelihood).predictive_nodes
        rows[name] = (nodes, estimator.rows_per_chunk)
    assert [nodes for nodes, _ in rows.values()] == [1, 20, 20]
    assert rows["negative binomial"][1] == rows["poisson"][1] == rows["gaussian"][1] // 20


def test_point_estimates_have_no_held_out_likelihood():
    f, _ = _toy(12, seed=8)
    with pytest.raises(ValueError, match="point and MAP estimates"):
        marginal_log_likelihood(PointGPLVM(f, 1, 3), f)
    assert tf.executing_eagerly()
