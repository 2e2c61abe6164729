r"""Which genes to declare differentially expressed, from samples of each gene's log-fold change
(LFC): the probability of a change beyond :math:`\delta`, a prior shared by the genes, the
threshold :math:`\delta` chosen from the data, and the posterior expected false discovery rate.

**The change probability.** With samples :math:`\beta^{(s)}` of a gene's LFC, scVI's three-way
test (Boyeau et al. 2019) reads :math:`P(\beta \ge \delta)` and :math:`P(\beta < -\delta)`, and a
gene's ``proba_de`` is the larger. Under a flat prior these are the samples' fractions
(:func:`change_probabilities`).

**A prior shared by the genes** (:class:`AdaptivePrior`, Stephens 2017's adaptive shrinkage).
A posterior with a flat prior for each gene on its own is not what an expected FDR needs: of
thousands of genes, most do not change, and noise alone gives some of them probabilities near
one (on random halves of one cell type, tests/test_differential.py measures it). The prior

.. math::

    g(\beta) = \pi_0\, \delta_0(\beta) + \sum_{k \ge 1} \pi_k\, N(\beta; 0, \sigma_k^2)

(a point mass at no change and normals of a grid of widths, :math:`\sigma_{k+1} = \sqrt2
\sigma_k` from a tenth of the smallest standard error to twice the largest change the estimates
show) is fitted to all the genes at once by maximising :math:`\sum_d \log \sum_k \pi_k
N(\hat\beta_d; 0, \sigma_k^2 + s_d^2)` with :math:`\hat\beta_d, s_d` the mean and standard
deviation of the gene's samples, by EM, with a Dirichlet penalty of 10 on :math:`\pi_0` (ashr's
"null-biased" default: among weights that fit the data alike, the one with more genes unchanged
is kept). Each gene's posterior is then a mixture of normals (and the point mass), and its
probabilities beyond :math:`\pm\delta` are closed form. Where most genes do not change,
:math:`\pi_0` is near one and a gene needs strong evidence; where many change, little is shrunk.

**The threshold from the data** (:func:`estimate_delta`, scvi-tools' ``delta=None`` rule): a
Gaussian mixture of three components fitted to the genes' LFC means,
:math:`\delta = \max(0.1,\ 0.6 \cdot \tfrac12 (|\mu_{\min}| + |\mu_{\max}|))` with
:math:`\mu_{\min}, \mu_{\max}` its lowest and highest component means.

**The decision** (:func:`posterior_fdr_selection`): genes sorted by ``proba_de`` are declared
while the posterior expected FDR of those declared, :math:`\frac1k \sum_{i \le k} (1 -
p_{(i)})`, stays at or below the target (:func:`expected_fdr` gives it down the ranking).
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm

__all__ = [
    "AdaptivePrior",
    "change_probabilities",
    "estimate_delta",
    "expected_fdr",
    "posterior_fdr_selection",
]

NULL_PENALTY = 10.0
"""The Dirichlet penalty on the weight of no change (ashr's ``nullweight``)."""

GRID_STEP = np.sqrt(2.0)
"""The ratio of neighbouring widths of the prior's normals (ashr's ``mixsd`` multiplier)."""


def change_probabilities(lfc: np.ndarray, delta: float) -> tuple[np.ndarray, np.ndarray]:
    """:math:`P(\\beta \\ge \\delta)` and :math:`P(\\beta < -\\delta)` [G] as the fractions of
    the samples ``lfc`` [S, G] beyond each threshold (a flat prior)."""
    return np.mean(lfc >= delta, axis=0), np.mean(lfc < -delta, axis=0)


class AdaptivePrior:
    r"""The genes' shared prior of their LFC, :math:`\pi_0 \delta_0 + \sum_k \pi_k N(0,
    \sigma_k^2)`, fitted to estimates ``means`` [G] with standard errors ``sds`` [G] (see the
    module). ``weights`` [K + 1] and ``widths`` [K + 1] (the first, 0, is the point mass) once
    fitted."""

    def __init__(self, means: np.ndarray, sds: np.ndarray, iterations: int = 1000):
        means, sds = np.asarray(means, float), np.asarray(sds, float)
        informed = sds > 0  # a gene whose samples are all alike (no counts) tells nothing
        self.widths = _grid(means[informed], sds[informed])
        log_likelihood = self._log_likelihood(means[informed], sds[informed])  # [G, K + 1]
        likelihood = np.exp(log_likelihood - log_likelihood.max(axis=1, keepdims=True))
        penalty = np.zeros(len(self.widths))
        penalty[0] = NULL_PENALTY - 1.0
        weights = np.full(len(self.widths), 1.0 / len(self.widths))
        for _ in range(iterations):  # EM: responsibilities w_k L_dk / sum_j w_j L_dj
            evidence = likelihood @ weights  # [G]
            updated = weights * (likelihood.T @ (1.0 / evidence)) + penalty
            updated /= updated.sum()
            converged = np.max(np.abs(updated - weights)) < 1e-7
            weights = updated
            if converged:
                break
        self.weights = weights

    def _log_likelihood(self, means: np.ndarray, sds: np.ndarray) -> np.ndarray:
        """:math:`\\log N(\\hat\\beta_d; 0, \\sigma_k^2 + s_d^2)` [G, K + 1]."""
        return norm.logpdf(means[:, None], scale=np.sqrt(self.widths**2 + sds[:, None] ** 2))

    def posterior(
        self, means: np.ndarray, sds: np.ndarray, delta: float
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Each gene's posterior :math:`P(\\beta \\ge \\delta)`, :math:`P(\\beta < -\\delta)`
        and mean of :math:`\\beta` [G] under the fitted prior, given ``means`` and ``sds`` [G]
        (a gene with ``sds`` 0 has :math:`\\beta` = its mean, known)."""
        means, sds = np.asarray(means, float), np.asarray(sds, float)
        known = sds <= 0
        sds = np.where(known, 1.0, sds)
        log_weights = self._log_likelihood(means, sds) + np.log(np.maximum(self.weights, 1e-300))
        weights = np.exp(log_weights - logsumexp(log_weights, 1, keepdims=True))  # [G, K + 1]
        widths = self.widths[None, :]
        shrink = widths**2 / (widths**2 + sds[:, None] ** 2)  # 0 for the point mass
        centre = shrink * means[:, None]
        spread = np.sqrt(shrink) * sds[:, None]
        safe = np.where(spread > 0, spread, 1.0)
        up = np.where(spread > 0, norm.sf((delta - centre) / safe), centre >= delta)
        down = np.where(spread > 0, norm.cdf((-delta - centre) / safe), centre < -delta)
        up, down, mean = ((weights * v).sum(axis=1) for v in (up, down, centre))
        up = np.where(known, means >= delta, up)
        down = np.where(known, means < -delta, down)
        return up.astype(float), down.astype(float), np.where(known, means, mean)


def _grid(means: np.ndarray, sds: np.ndarray) -> np.ndarray:
    """The prior's widths [K + 1]: 0, then :data:`GRID_STEP` apart from a tenth of the smallest
    standard error to twice the largest change the estimates show beyond their noise."""
    if len(means) == 0:
        return np.array([0.0, 1.0])
    smallest = max(float(np.min(sds)) / 10.0, 1e-3)
    largest = 2.0 * np.sqrt(max(float(np.max(means**2 - sds**2)), 0.0))
    largest = max(largest, 8.0 * smallest)
    count = int(np.ceil(np.log(largest / smallest) / np.log(GRID_STEP))) + 1
    return np.concatenate([[0.0], smallest * GRID_STEP ** np.arange(count)])


def estimate_delta(lfc_means: np.ndarray, seed: int = 0) -> float:
    """The LFC threshold chosen from the genes' LFC means [G] (scvi-tools' rule, see the
    module)."""
    from sklearn.mixture import GaussianMixture

    values = np.asarray(lfc_means, float)[:, None]
    if len(values) < 3 or np.ptp(values) == 0:
        return 0.1
    mixture = GaussianMixture(n_components=3, random_state=seed).fit(values)
    centres = np.sort(mixture.means_.ravel())
    return float(max(0.1, 0.6 * np.mean(np.abs(centres[[0, -1]]))))


def expected_fdr(proba_de: np.ndarray) -> np.ndarray:
    """Each gene's posterior expected FDR [G] were it and every gene more probable declared:
    :math:`\\frac1k \\sum_{i \\le k} (1 - p_{(i)})` at its rank k (ties in input order)."""
    proba_de = np.asarray(proba_de, dtype=float)
    order = np.argsort(-proba_de, kind="stable")
    running = np.cumsum(1.0 - proba_de[order]) / np.arange(1, len(order) + 1)
    out = np.empty(len(order))
    out[order] = np.maximum(running, 0.0)  # 1 - p of p = 1 may round below 0
    return out


def posterior_fdr_selection(proba_de: np.ndarray, fdr_target: float) -> np.ndarray:
    r"""Which genes [G] to declare differentially expressed: the k most probable, with k the
    largest number whose posterior expected FDR,
    :math:`\frac1k \sum_{i \le k} (1 - p_{(i)})` over the probabilities sorted from the
    largest, is at most ``fdr_target`` (that mean grows with k, so the genes kept are those
    where it holds)."""
    return expected_fdr(proba_de) <= fdr_target
