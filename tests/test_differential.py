"""Differential expression's math without a fitted model: the genes' shared prior against
numerical integration and simulation, the decision's realised FDR on simulated genes, the
counts term against its closed-form Gamma posterior and on simulated counts whose truth is
known, the threshold chosen from the data, and the comparisons' checks (bad input, confounded
designs). The estimators read off a fitted model are tested in tests/test_expression.py."""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

import numpy as np
import pytest
from scipy.stats import norm

pd = pytest.importorskip("pandas")

from gpflow_svi_gplvm.singlecell.genes.comparisons import (  # noqa: E402
    batch_references,
    comparisons,
)
from gpflow_svi_gplvm.singlecell.genes.decision import (  # noqa: E402
    AdaptivePrior,
    estimate_delta,
    expected_fdr,
    posterior_fdr_selection,
)
from gpflow_svi_gplvm.singlecell.genes.group_expression import GroupSums  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes.observed_counts import (  # noqa: E402
    expression_draws,
    pooled_dispersion,
)


def _sums(Y: np.ndarray, expected: np.ndarray, normalised: np.ndarray, rng, samples=400):
    """The GroupSums of cells' counts, expected counts and normalised expression [n, G],
    summed by hand (the bootstrap: Exp(1) weights of each cell)."""
    boot = rng.exponential(size=(samples, len(Y)))
    return GroupSums(
        len(Y),
        Y.sum(0),
        (Y**2).sum(0),
        (Y * expected).sum(0),
        expected.sum(0),
        (expected**2).sum(0),
        normalised.sum(0),
        boot @ normalised,
        boot.sum(1),
    )


def test_the_shared_prior_gives_the_posterior_of_numerical_integration():
    prior = AdaptivePrior(np.zeros(3), np.ones(3))  # fitted, then set by hand
    prior.widths, prior.weights = np.array([0.0, 0.5, 2.0]), np.array([0.6, 0.3, 0.1])
    means, sds, delta = np.array([0.1, 1.2, -2.5]), np.array([0.4, 0.5, 0.8]), 0.3
    up, down, mean = prior.posterior(means, sds, delta)
    beta = np.linspace(-12, 12, 200001)
    step = beta[1] - beta[0]
    for d in range(3):
        likelihood = norm.pdf(means[d], loc=beta, scale=sds[d])
        slab = sum(w * norm.pdf(beta, scale=s) for w, s in zip(prior.weights[1:], prior.widths[1:]))
        spike = prior.weights[0] * norm.pdf(means[d], scale=sds[d])  # the point mass at 0
        evidence = spike + np.sum(slab * likelihood) * step
        assert up[d] == pytest.approx(
            np.sum((slab * likelihood)[beta >= delta]) * step / evidence, abs=1e-4
        )
        assert down[d] == pytest.approx(
            np.sum((slab * likelihood)[beta < -delta]) * step / evidence, abs=1e-4
        )
        assert mean[d] == pytest.approx(
            np.sum(beta * slab * likelihood) * step / evidence, abs=1e-4
        )


def _mass_near_no_change(prior: AdaptivePrior, width: float = 0.1) -> float:
    """The prior's probability of |LFC| < ``width`` (to the data, a point mass at no change and
    a narrow normal are alike)."""
    widths = np.maximum(prior.widths, 1e-12)
    inside = np.where(prior.widths > 0, 2 * norm.cdf(width / widths) - 1, 1.0)
    return float(np.sum(prior.weights * inside))


def test_the_shared_prior_learns_how_many_genes_change():
    rng = np.random.default_rng(0)
    changed = rng.random(4000) < 0.2
    beta = np.where(changed, rng.normal(0, 2.0, 4000), 0.0)
    sds = rng.uniform(0.2, 0.6, 4000)
    prior = AdaptivePrior(beta + sds * rng.standard_normal(4000), sds)
    truth = 0.8 + 0.2 * (2 * norm.cdf(0.1 / 2.0) - 1)
    assert _mass_near_no_change(prior) == pytest.approx(truth, abs=0.04)
    assert prior.widths[0] == 0.0 and np.all(np.diff(prior.widths) > 0)
    null = AdaptivePrior(sds * rng.standard_normal(4000), sds)
    assert _mass_near_no_change(null) > 0.97  # nothing changes


@pytest.mark.parametrize("alpha", [0.05, 0.1, 0.2])
def test_declared_genes_keep_the_fdr_they_promise_when_the_prior_is_learnt(alpha):
    """Genes drawn from a prior the rule does not know: the realised FDR of those declared is
    near the target (the property a flat prior per gene lacks: it declares noise)."""
    rng = np.random.default_rng(1)
    G, delta = 4000, 0.25
    changed = rng.random(G) < 0.15
    beta = np.where(changed, rng.choice([-1, 1], G) * rng.uniform(0.1, 3.0, G), 0.0)
    sds = rng.uniform(0.15, 0.8, G)
    means = beta + sds * rng.standard_normal(G)
    up, down, _ = AdaptivePrior(means, sds).posterior(means, sds, delta)
    declared = posterior_fdr_selection(np.maximum(up, down), alpha)
    false = np.mean(np.abs(beta[declared]) < delta)
    assert 0.5 * alpha <= false <= 1.5 * alpha and declared.sum() > 100
    flat = np.maximum(norm.sf((delta - means) / sds), norm.cdf((-delta - means) / sds))
    assert np.mean(np.abs(beta[posterior_fdr_selection(flat, alpha)]) < delta) > 1.5 * alpha


def test_the_expected_fdr_is_the_running_mean_of_the_error_probabilities():
    proba = np.array([0.99, 0.2, 0.97, 0.9, 0.5, 0.96])
    # sorted 0.99 .97 .96 .9 .5 .2: running means of 1 - p .010 .020 .0267 .045 .136 .247
    expected = np.array([0.010, 0.2467, 0.020, 0.045, 0.136, 0.02667])
    np.testing.assert_allclose(expected_fdr(proba), expected, atol=1e-3)
    assert expected_fdr(np.ones(3)).min() >= 0.0


def test_delta_from_the_data_is_scvi_tools_rule():
    rng = np.random.default_rng(2)
    lfc = np.concatenate(
        [rng.normal(-3, 0.3, 300), rng.normal(0, 0.3, 1500), rng.normal(3, 0.3, 300)]
    )
    assert estimate_delta(lfc) == pytest.approx(0.6 * 3, abs=0.1)
    assert estimate_delta(np.zeros(50)) == 0.1  # no spread: the floor


def test_the_counts_term_draws_its_gamma_posterior():
    rng = np.random.default_rng(3)
    n, G, prior_counts, level = 25, 4, 2.0, 0.01
    expected = rng.uniform(0.5, 2.0, (2 * n, G))
    Y = rng.poisson(expected * np.array([1.0, 2.0, 0.5, 1.0])).astype(float)
    Y[:, 3] = 0  # no count in either group
    h = np.full((2 * n, G), level)  # the GP's normalised expression, alike for every cell
    halves = (slice(0, n), slice(n, None))
    groups = [_sums(Y[k], expected[k], h[k], rng, 20000) for k in halves]
    theta = expression_draws(*groups, True, prior_counts, np.random.default_rng(4))
    squares = sum(
        ((Y[k] - Y[k].sum(0) / expected[k].sum(0) * expected[k]) ** 2).sum(0) for k in halves
    )
    phi = np.maximum(squares / Y.sum(0).clip(1e-300), 1.0)[:3]
    np.testing.assert_allclose(pooled_dispersion(*groups)[:3], phi)
    pooled = Y.sum(0)[:3] / (expected.sum(0)[:3] / level)
    for group, draws in zip(groups, theta):
        shape = prior_counts + group.counts[:3] / phi
        rate = prior_counts * level / pooled + group.expected[:3] / phi
        np.testing.assert_allclose(draws[:, :3].mean(0), level * shape / rate, rtol=0.02)
        np.testing.assert_allclose(draws[:, :3].var(0), level**2 * shape / rate**2, rtol=0.06)
    np.testing.assert_array_equal(np.log2(theta[0][:, 3]) - np.log2(theta[1][:, 3]), 0.0)


def _simulated_groups(rng, changed: np.ndarray, lfc: float = 1.0, n=300, G=600):
    """Negative binomial counts of two groups of n cells whose expected counts the model
    knows exactly; ``changed`` genes [G] are 2^lfc times higher in the first."""
    rate = np.exp(rng.uniform(-4.0, 1.5, G))
    size = rng.lognormal(0.0, 0.4, (2 * n, 1))
    fold = np.where(changed, 2.0**lfc, 1.0)
    mean = size * rate * np.concatenate([np.tile(fold, (n, 1)), np.ones((n, G))])
    Y = rng.negative_binomial(5.0, 5.0 / (5.0 + mean))
    expected = size * rate * np.ones((2 * n, G))  # the GP's, blind to the change
    return [
        _sums(Y[k], expected[k], np.tile(rate, (n, 1)), rng) for k in (slice(0, n), slice(n, None))
    ]


@pytest.mark.parametrize("alpha", [0.05, 0.1])
def test_the_counts_term_finds_a_change_the_model_does_not_carry_at_the_promised_fdr(alpha):
    rng = np.random.default_rng(5)
    changed = rng.random(600) < 0.15
    first, second = _simulated_groups(rng, changed)
    theta1, theta2 = expression_draws(first, second, True, 2.0, rng)
    lfc = np.log2(theta1) - np.log2(theta2)
    means, sds = lfc.mean(0), lfc.std(0)
    up, down, _ = AdaptivePrior(means, sds).posterior(means, sds, 0.25)
    declared = posterior_fdr_selection(np.maximum(up, down), alpha)
    assert np.mean(~changed[declared]) <= 1.5 * alpha and np.mean(declared[changed]) > 0.5
    blind = expression_draws(first, second, False, 2.0, rng)  # the GP alone: no change seen
    assert np.abs(np.log2(blind[0]) - np.log2(blind[1])).mean(0)[changed].max() < 0.2


def test_no_gene_of_two_groups_alike_is_declared():
    rng = np.random.default_rng(6)
    first, second = _simulated_groups(rng, np.zeros(600, bool))
    theta1, theta2 = expression_draws(first, second, True, 2.0, rng)
    lfc = np.log2(theta1) - np.log2(theta2)
    means, sds = lfc.mean(0), lfc.std(0)
    up, down, _ = AdaptivePrior(means, sds).posterior(means, sds, 0.25)
    assert posterior_fdr_selection(np.maximum(up, down), 0.05).sum() == 0


def test_a_gene_of_a_few_counts_is_not_confidently_changed():
    """3 counts against none, the groups alike otherwise: the prior counts at the pooled
    expression keep the change uncertain (a flat posterior would call it certain)."""
    rng = np.random.default_rng(7)
    n = 200
    expected = np.full((n, 1), 0.01)
    Y = np.zeros((n, 1))
    Y[:3] = 1
    h = np.full((n, 1), 0.001)
    first, second = _sums(Y, expected, h, rng), _sums(np.zeros((n, 1)), expected, h, rng)
    theta1, theta2 = expression_draws(first, second, True, 2.0, rng)
    lfc = np.log2(theta1) - np.log2(theta2)
    assert np.mean(lfc >= 0.25) < 0.9
    assert np.median(lfc) < np.log2(3 / 0.5)  # shrunk: far below the raw ratio


def test_group_sums_add_as_their_cells():
    rng = np.random.default_rng(8)
    parts = [
        _sums(rng.poisson(1.0, (k, 3)), np.ones((k, 3)), np.ones((k, 3)), rng, 5) for k in (2, 3)
    ]
    whole = parts[0] + parts[1]
    assert whole.cells == 5
    for f in fields(GroupSums)[1:]:
        np.testing.assert_allclose(
            getattr(whole, f.name), getattr(parts[0], f.name) + getattr(parts[1], f.name)
        )


def _labels(values) -> pd.Series:
    return pd.Series(values, index=[f"c{i}" for i in range(len(values))])


@pytest.mark.parametrize(
    "values, group1, group2, message",
    [
        (["a"] * 5 + ["b"], "a", "b", "Group 'b' .* holds 1 cell"),
        (list(np.linspace(0, 1, 40)), None, None, "looks continuous"),
        (["a"] * 4 + [None] * 2 + ["b"] * 4, "a", None, r"2 cell\(s\) without a label"),
        (["a"] * 4 + ["b"] * 4, np.nan, "b", "name a label"),
        (["a"] * 4 + ["b"] * 4, "c", "b", "no cell in group 'c'"),
        (["a"] * 4, None, None, "one against the rest needs at least two"),
    ],
)
def test_bad_groups_are_named_with_what_to_do(values, group1, group2, message):
    with pytest.raises(ValueError, match=message):
        comparisons(_labels(values), group1, group2, "g")


def test_named_groups_ignore_unlabelled_cells_and_the_rest_sums_the_others():
    labels = _labels(["a"] * 3 + [None] + ["b"] * 2 + ["c"] * 2)
    (named,) = comparisons(labels, "a", "b", "g")
    np.testing.assert_array_equal(named.cells2, [4, 5])
    labels = _labels(["a"] * 3 + ["b"] * 2 + ["c"] * 2)
    first, *_ = comparisons(labels, None, None, "g")
    assert first.codes2 == (1, 2) and list(first.cells2) == [3, 4, 5, 6]


def _fitted(batches: list, learnt: list = ()):
    encoding = SimpleNamespace(categories={"batch": batches})
    return SimpleNamespace(
        batch_key="batch",
        registration=SimpleNamespace(encoding=encoding),
        offsets=SimpleNamespace(categories=list(learnt)),
    )


def test_confounded_designs_are_named_and_compared_at_each_cells_own_batch():
    obs = pd.DataFrame({"batch": ["a"] * 4 + ["b"] * 4})
    (confounded,) = comparisons(_labels(["x"] * 4 + ["y"] * 4), "x", "y", "g")
    with pytest.warns(UserWarning, match="share almost no batch.*each cell's own batch"):
        assert batch_references(_fitted(["a", "b"]), obs, confounded, None) == [None]
    with pytest.warns(UserWarning, match="removes the contrast"):
        assert batch_references(_fitted(["a", "b"]), obs, confounded, True) == ["a", "b"]
    assert batch_references(_fitted(["a", "b"]), obs, confounded, False) == [None]
    (mixed,) = comparisons(_labels(["x", "y"] * 4), "x", "y", "g")
    assert batch_references(_fitted(["a", "b"]), obs, mixed, None) == ["a", "b"]  # no warning
    mapped = pd.DataFrame({"batch": ["a"] * 4 + ["stim"] * 4})
    with pytest.warns(UserWarning, match="map_query learnt"):
        assert batch_references(_fitted(["a"], ["stim"]), mapped, confounded, None) == [None]
    with pytest.warns(UserWarning, match="without a batch"):
        assert batch_references(SimpleNamespace(batch_key=None), obs, mixed, True) == [None]
