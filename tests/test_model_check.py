"""The posterior predictive check: its statistics against brute-force loops, its draws of counts
against the likelihoods' moments, an overdispersed truth told from a Poisson one, and the check
through a fitted model."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")

import gpflow  # noqa: E402
from scipy.stats import rankdata  # noqa: E402

from gpflow_svi_gplvm.likelihoods import NegativeBinomial  # noqa: E402
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes import model_check  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes.model_check import (  # noqa: E402
    INTERVAL_QUANTILES,
    PredictiveCheck,
    generated_counts,
    predictive_statistics,
)


def _brute_cv(counts: np.ndarray) -> float:
    mean = sum(counts) / len(counts)
    if mean == 0:
        return np.nan
    return np.sqrt(sum((c - mean) ** 2 for c in counts) / len(counts)) / mean


def _pearson(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a - a.mean(), b - b.mean()
    return float(a @ b / np.sqrt((a @ a) * (b @ b)))


def test_statistics_match_brute_force_loops():
    rng = np.random.default_rng(0)
    S, N, G = 7, 30, 6
    observed = rng.poisson(rng.uniform(0.2, 5.0, (N, G))).astype(float)
    observed[:, 2] = 0.0  # a gene without counts: its observed CV is taken as 0
    generated = rng.poisson(rng.uniform(0.2, 5.0, (S, N, G))).astype(float)
    check = predictive_statistics(observed, generated, pd.Index([f"g{j}" for j in range(G)]))

    for axis, name in ((0, "gene"), (1, "cell")):
        count = observed.shape[1 - axis]
        seen, made = np.zeros(count), np.zeros(count)
        for i in range(count):
            cv = _brute_cv(list(np.moveaxis(observed, axis, 1)[i]))
            seen[i] = 0.0 if np.isnan(cv) else cv
            draws = [_brute_cv(list(np.moveaxis(generated[s], axis, 1)[i])) for s in range(S)]
            kept = [d for d in draws if not np.isnan(d)]
            made[i] = sum(kept) / len(kept) if kept else np.nan
        both = np.isfinite(made)
        assert getattr(check, f"cv_{name}_pearson") == pytest.approx(
            _pearson(seen[both], made[both])
        )
        assert getattr(check, f"cv_{name}_spearman") == pytest.approx(
            _pearson(rankdata(seen[both]), rankdata(made[both]))
        )
        if axis == 0:
            np.testing.assert_allclose(check.genes["cv_observed"], seen)
            np.testing.assert_allclose(check.genes["cv_generated"], made)

    zeros_seen = [np.mean([observed[n, g] == 0 for n in range(N)]) for g in range(G)]
    zeros_made = [
        np.mean([generated[s, n, g] == 0 for s in range(S) for n in range(N)]) for g in range(G)
    ]
    assert check.zero_fraction_error == pytest.approx(
        np.mean(np.abs(np.subtract(zeros_seen, zeros_made)))
    )

    error = 0.0
    for low in INTERVAL_QUANTILES:
        inside = 0
        for n in range(N):
            for g in range(G):
                draws = np.sort(generated[:, n, g])
                # linear interpolation between order statistics, as numpy's default quantile
                ends = [np.interp(q * (S - 1), np.arange(S), draws) for q in (low, 1 - low)]
                inside += ends[0] <= observed[n, g] <= ends[1]
        coverage = inside / (N * G)
        assert check.coverage[round(1 - 2 * low, 3)] == pytest.approx(coverage)
        error += (coverage - (1 - 2 * low)) ** 2
    assert check.calibration_error == pytest.approx(error)
    assert list(check.summary().index) == [
        "cv_gene_pearson",
        "cv_gene_spearman",
        "cv_cell_pearson",
        "cv_cell_spearman",
        "zero_fraction_error",
        "calibration_error",
    ]


def test_draws_have_the_likelihoods_moments():
    rng = np.random.default_rng(1)
    F = np.tile([[0.5, 2.0]], (200000, 1))
    mu = np.exp(F[0])
    nb = NegativeBinomial(dispersion=0.3)
    draws = generated_counts(nb, F, rng)
    np.testing.assert_allclose(draws.mean(axis=0), mu, rtol=0.01)
    np.testing.assert_allclose(draws.var(axis=0), mu + 0.3 * mu**2, rtol=0.03)
    draws = generated_counts(gpflow.likelihoods.Poisson(), F, rng)
    np.testing.assert_allclose(draws.var(axis=0), mu, rtol=0.03)
    draws = generated_counts(gpflow.likelihoods.Gaussian(variance=0.25), F, rng)
    np.testing.assert_allclose(draws.std(axis=0), 0.5, rtol=0.01)
    with pytest.raises(ValueError, match="not Bernoulli.s"):
        generated_counts(gpflow.likelihoods.Bernoulli(), F, rng)


def test_an_overdispersed_truth_is_told_from_a_poisson_model():
    rng = np.random.default_rng(2)
    S, N, G, phi = 50, 400, 5, 1.0
    rates = rng.uniform(2.0, 20.0, (N, G))
    observed = rng.poisson(rates * rng.gamma(1 / phi, phi, (N, G)))
    right = rng.poisson(rates * rng.gamma(1 / phi, phi, (S, N, G)))
    poisson = rng.poisson(np.broadcast_to(rates, (S, N, G)))
    good, bad = predictive_statistics(observed, right), predictive_statistics(observed, poisson)
    assert abs(good.coverage[0.95] - 0.95) < 0.03 and good.calibration_error < 0.01
    assert bad.coverage[0.95] < 0.7 and bad.calibration_error > 0.3
    assert good.zero_fraction_error < bad.zero_fraction_error
    with pytest.raises(ValueError, match="at least 2 replicates"):
        predictive_statistics(observed, right[:1])


def _cells() -> anndata.AnnData:
    rng = np.random.default_rng(3)
    N, D = 60, 8
    kind, batch = np.arange(N) % 2, (np.arange(N) // 2) % 2
    log_rate = 1.5 + 1.5 * kind[:, None] * (np.arange(D) < 3) + batch[:, None] * (np.arange(D) >= 5)
    counts = rng.negative_binomial(10, 10 / (10 + np.exp(log_rate))).astype(np.float32)
    counts[:, 3] += 1
    obs = pd.DataFrame(
        {"batch": pd.Categorical(np.array(["a", "b"])[batch])}, index=[f"c{i}" for i in range(N)]
    )
    cells = anndata.AnnData(X=sp.csr_matrix(counts), obs=obs)
    cells.var_names = [f"gene{j}" for j in range(D)]
    return cells


def test_the_check_runs_through_a_fitted_model_and_warns_below_its_threshold(monkeypatch):
    cells = _cells()
    face = SingleCellGPLVM(2, batch_key="batch", num_inducing=10, seed=1)
    face.fit(cells, iterations=200, batch_size=30, progress=False)
    check = face.posterior_predictive_check(cells, n_samples=20, warn=False)
    assert isinstance(check, PredictiveCheck)
    assert list(check.genes.index) == list(cells.var_names)
    assert np.isfinite(check.summary().to_numpy()).all()
    assert check.cv_gene_pearson > 0.5  # genes 0-2 and 5-7 vary between kinds or batches
    assert (check.coverage > 0.5).all()
    monkeypatch.setattr(model_check, "CV_CORRELATION_WARNING", 1.01)
    with pytest.warns(UserWarning, match="-wise CV correlation is"):
        again = face.posterior_predictive_check(cells, n_samples=20)
    pd.testing.assert_series_equal(again.summary(), check.summary())  # one seed, one check
    with pytest.raises(ValueError, match="n_samples"):
        face.posterior_predictive_check(cells, n_samples=1)
