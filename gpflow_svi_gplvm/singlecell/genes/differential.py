r"""Differential expression between groups of cells, with a posterior expected false discovery
rate that is what it says: on a hard simulated atlas whose truth is known, and on real counts
with known changes and with none (benchmarks/results/differential_expression.md).

A comparison draws S samples of each gene's log-fold change (LFC, log2) between groups A and B
from one of two estimators:

- ``estimator="groups"`` (the default): **group-level posterior expression**
  (:mod:`.group_expression`, lvm-DE's estimator read off the GP): each group's mean normalised
  expression over its cells, its uncertainty that of the group's population (a Bayesian
  bootstrap over the cells), and with ``counts=True`` (the default) the **counts term**
  (:mod:`.observed_counts`): the groups' observed counts enter the posterior of their
  expression, the GP as the baseline (batch correction, each cell's expected count), so that a
  change the embedding does not carry is seen, with a prior worth ``prior_counts`` counts at the
  groups' pooled expression (the low-expression rule: a gene of a few counts is pulled towards
  no change). :math:`\mathrm{LFC} = \log_2 \theta_A - \log_2 \theta_B`.
- ``estimator="pairs"``: scVI's change mode, pairs of single cells (:mod:`.cell_pairs`); its
  spread holds the cells' variation within each group.

``weights="importance"`` weighs each cell's draws of q(x) by how well they explain its counts
(:mod:`.latent_weights`). The decision (:mod:`.decision`): a gene's ``proba_de`` is the larger
of :math:`P(\mathrm{LFC} \ge \delta)` and :math:`P(\mathrm{LFC} < -\delta)`, under a prior of the
LFC shared by the genes and fitted to them (``prior="adaptive"``, the default of the groups
estimator; "flat": each gene's samples alone, the pairs estimator's default, as scVI);
``delta=None`` chooses :math:`\delta` from the data (scvi-tools' rule, on the LFCs' posterior
means under the shared prior, or on the samples' means under a flat one). Genes detected (a
non-zero count) in fewer than ``min_detection`` of both groups' cells are never declared
(Seurat's ``min.pct``; their ``low_expression`` is True). The others, sorted by ``proba_de``,
are declared while their posterior expected FDR stays at or below ``fdr_target``. ``genes``
chooses the genes reported and declared among; every fitted gene is read all the same, so a
gene's probabilities do not depend on which others are asked for.

Why the defaults (each measured, benchmarks/results/differential_expression.md and
tests/test_differential.py): q(u) has one covariance shared by the genes, so the GP's own
uncertainty of f is the same for a gene of three counts as for one of thirty thousand, and its
group-level differences are about half the true ones on the hard atlas; the counts term takes
the size of a change and its uncertainty from the counts, and the shared prior keeps the noise
of thousands of unchanged genes from being declared.

Batches: ``batch_correction=None`` reads both groups at every fitted batch where the design
lets the batch effect be told apart from the contrast, and each cell at its own batch where it
does not (a warning names why: :mod:`.comparisons`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from ...prediction.rates import inverse_link
from ...validation import check_bool, check_integer, check_seed
from ..cells.encoding import obs_column
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_pairs import CellPairs
from .comparisons import Comparison, batch_references, comparisons, label_codes
from .decision import (
    AdaptivePrior,
    change_probabilities,
    estimate_delta,
    expected_fdr,
    posterior_fdr_selection,
)
from .expression import check_genes
from .group_expression import WEIGHTS, GroupSums, group_sums
from .observed_counts import PRIOR_COUNTS, expression_draws

__all__ = [
    "differential_expression",
    "de_summary",
    "posterior_fdr_selection",
    "ESTIMATORS",
    "MIN_DETECTION",
]

ESTIMATORS = ("groups", "pairs")
PRIORS = ("adaptive", "flat")
MIN_DETECTION = 0.01
"""Genes detected in fewer than this share of both groups' cells are not declared (Seurat's
``min.pct`` default)."""
SAMPLES = {"groups": 500, "pairs": 5000}
"""``n_samples`` unless given: bootstrap draws of each group, or sampled pairs of cells."""


def differential_expression(
    fitted: FittedCells,
    adata,
    groupby: str,
    group1: Any = None,
    group2: Any = None,
    *,
    estimator: str = "groups",
    counts: bool = True,
    weights: str = "uniform",
    delta: float | None = 0.25,
    fdr_target: float = 0.05,
    batch_correction: bool | None = None,
    prior: str | None = None,
    prior_counts: float = PRIOR_COUNTS,
    min_detection: float = MIN_DETECTION,
    n_samples: int | None = None,
    genes: Sequence[str] | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    r"""DE of ``adata``'s cells (an AnnData, or an ``.h5ad`` path) grouped by ``obs[groupby]``.

    Each gene's S samples of :math:`\mathrm{LFC} = \log_2 \theta_A - \log_2 \theta_B` (a
    group's mean normalised expression) give ``proba_de`` :math:`= \max(P(\mathrm{LFC} \ge
    \delta), P(\mathrm{LFC} < -\delta))`; the genes sorted by it are declared while the mean of
    ``1 - proba_de`` over those declared (their posterior expected FDR) is at most
    ``fdr_target``.

    ``group1``: a category, a list of them compared in turn, or None (each); ``group2``: a
    category, or None (the other labelled cells). ``estimator``: "groups" (group-level
    posterior expression: many cells' f averaged in each draw, a Bayesian bootstrap over each
    group's cells) or "pairs" (scVI's change mode: pairs of single cells). ``counts`` (groups):
    the observed counts enter the posterior of :math:`\theta` (a Gamma with the GP as its
    baseline), so that a change the embedding does not carry is seen. ``weights``: "uniform" or
    "importance" (each cell's draws of q(x) weighed by the likelihood of its counts).
    ``delta``: the smallest abs(LFC) that counts, or None (chosen from the data, scvi-tools'
    rule). ``fdr_target`` in (0, 1). ``batch_correction``: True (both groups read at every
    fitted batch), False (each cell at its own batch), or None (True, unless the two groups
    share almost no batch, e.g. a condition ``map_query`` mapped as its own batch: then False,
    with a warning that says why). ``prior``: "adaptive" (a prior of the LFC shared by
    the genes, fitted to them; the groups' default) or "flat" (each gene's samples alone; the
    pairs' default, as scVI). ``prior_counts``: the counts the prior of :math:`\theta` is worth
    at the groups' pooled expression. ``min_detection``: genes detected in fewer than this
    share of both groups' cells are never declared (0: no such rule). ``n_samples``: S (None:
    500 bootstrap draws, or 5,000 pairs). ``genes``: those reported (None: all; every fitted
    gene is read all the same). ``seed``: of the draws.

    Returns a DataFrame of G rows per comparison, each comparison's sorted by ``proba_de``:
    ``proba_de``, ``proba_not_de``, ``bayes_factor``; ``lfc_mean``, ``_median``, ``_std``,
    ``_min``, ``_max`` (of the samples, log2) and ``lfc_shrunk`` (its posterior mean under the
    prior); ``scale1``, ``scale2`` (the groups' mean normalised expression, as
    ``normalized_expression`` with ``library_size=1``); ``raw_mean1``/``2``,
    ``non_zeros_proportion1``/``2`` (detection) and ``raw_normalized_mean1``/``2`` (counts
    normalised to 10^4 a cell); ``low_expression``; ``expected_fdr`` (were this gene and all
    above it declared); ``is_de_fdr_<fdr_target>``; ``delta``, ``estimator``,
    ``batch_correction`` (as chosen), ``comparison``, ``group1``, ``group2``.
    :func:`de_summary`: each comparison's count declared and expected FDR."""
    options = _Options.checked(
        estimator, counts, weights, delta, fdr_target, prior, prior_counts, min_detection
    )
    n_samples = check_integer(
        SAMPLES[estimator] if n_samples is None else n_samples,
        "n_samples",
        hint="bootstrap draws (e.g. 500) or sampled pairs of cells (e.g. 5000)",
    )
    _check_count_model(fitted)
    adata = opened(adata)
    labels = obs_column(adata.obs, groupby, "groupby")
    asked = comparisons(labels, group1, group2, groupby)
    names = check_genes(fitted, genes)
    if batch_correction is not None:
        batch_correction = check_bool(
            batch_correction,
            "batch_correction",
            "both groups read at every fitted batch; None lets the design decide",
        )
    references = [batch_references(fitted, adata.obs, c, batch_correction) for c in asked]
    rng = np.random.default_rng(check_seed(seed))
    draws = _LfcDraws(fitted, adata, labels, names, options, n_samples, rng)
    return pd.concat([draws.table(c, r) for c, r in zip(asked, references)], axis=0)


def de_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Each comparison of a :func:`differential_expression` table [comparisons]: its genes, the
    genes declared, their posterior expected FDR (the mean of ``proba_not_de`` over them),
    ``delta``, the estimator and the batch correction chosen."""
    declared = [c for c in table.columns if c.startswith("is_de_fdr_")][0]
    rows = {}
    for name, part in table.groupby("comparison", sort=False):
        chosen = part[declared].to_numpy(bool)
        rows[name] = {
            "genes": len(part),
            "declared": int(chosen.sum()),
            "expected_fdr": float(part["proba_not_de"][chosen].mean()) if chosen.any() else 0.0,
            "delta": float(part["delta"].iloc[0]),
            "estimator": part["estimator"].iloc[0],
            "batch_correction": bool(part["batch_correction"].iloc[0]),
        }
    return pd.DataFrame.from_dict(rows, orient="index")


@dataclass(frozen=True)
class _Options:
    """The decision's options, checked."""

    estimator: str
    counts: bool
    weights: str
    delta: float | None
    fdr_target: float
    prior: str
    prior_counts: float
    min_detection: float

    @classmethod
    def checked(
        cls, estimator, counts, weights, delta, fdr_target, prior, prior_counts, min_detection
    ) -> _Options:
        for name, value, allowed in (
            ("estimator", estimator, ESTIMATORS),
            ("weights", weights, WEIGHTS),
            ("prior", prior, PRIORS + (None,)),
        ):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}.")
        if prior is None:
            prior = "adaptive" if estimator == "groups" else "flat"
        for name, value in (("fdr_target", fdr_target), ("prior_counts", prior_counts)):
            _check_number(value, name)
        _check_number(min_detection, "min_detection")
        if delta is not None:
            _check_number(delta, "delta")
            if not (np.isfinite(delta) and 0 < delta <= 20):
                raise ValueError(
                    f"delta must be a positive log2 fold change (the smallest change that "
                    f"counts), at most 20, got {delta!r}; e.g. 0.25, or None to choose it from "
                    "the data."
                )
        if not 0 < fdr_target < 1:
            raise ValueError(f"fdr_target must lie in (0, 1), got {fdr_target!r}; e.g. 0.05.")
        if not (np.isfinite(prior_counts) and prior_counts >= 0):
            raise ValueError(
                f"prior_counts must be a count of at least 0, got {prior_counts!r}; e.g. 2."
            )
        if not 0 <= min_detection < 1:
            raise ValueError(
                f"min_detection must be a share of cells in [0, 1), got {min_detection!r}; "
                "e.g. 0.01 (0 declares genes however few cells detect them)."
            )
        return cls(
            estimator,
            check_bool(counts, "counts", "the groups' observed counts enter their posterior"),
            weights,
            None if delta is None else float(delta),
            float(fdr_target),
            prior,
            float(prior_counts),
            float(min_detection),
        )


def _check_number(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise ValueError(f"{name} must be a number, got {value!r}.")


class _LfcDraws:
    """Samples of the LFC of each comparison from the chosen estimator; the groups' sums are
    computed once for each set of reference batches."""

    def __init__(self, fitted, adata, labels, names, options: _Options, n_samples: int, rng):
        # every fitted gene is read: the prior the genes share is learnt from all of them, so a
        # gene's answer does not depend on which others genes= names
        columns = np.arange(fitted.model.data_dim)
        self.fitted, self.adata, self.columns, self.names = fitted, adata, columns, names
        self.raw = _GroupCounts.of(fitted, adata, labels, columns)
        self.options, self.n_samples, self.rng = options, n_samples, rng
        self.codes, categories = label_codes(labels, "groupby")
        self.categories = len(categories)
        self.sums: dict[tuple, list[GroupSums]] = {}
        self.pairs = None
        if options.estimator == "pairs":
            self.pairs = CellPairs(fitted, adata, columns, options.weights, rng)

    def table(self, comparison: Comparison, references: list) -> pd.DataFrame:
        """The comparison's table (see :func:`differential_expression`)."""
        lfc, scale1, scale2 = self.of(comparison, references)
        raw = self.raw.statistics(comparison.cells1, comparison.cells2)
        table = _table(lfc, self.fitted.registration.gene_names, self.options, raw)
        table["scale1"], table["scale2"] = scale1, scale2
        table["batch_correction"] = references != [None]
        return _decided(table.loc[self.names], self.options, comparison)

    def of(
        self, comparison: Comparison, references: list
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """LFC samples [S, G] and the two groups' mean normalised expression [G]."""
        if self.pairs is not None:
            return self.pairs.compare(
                comparison.cells1, comparison.cells2, references, self.n_samples
            )
        key = tuple(references)
        if key not in self.sums:
            self.sums[key] = group_sums(
                self.fitted,
                self.adata,
                self.codes,
                self.categories,
                self.columns,
                references,
                self.n_samples,
                self.options.weights,
                self.rng,
            )
        parts = self.sums[key]
        first = sum((parts[c] for c in comparison.codes1[1:]), parts[comparison.codes1[0]])
        second = sum((parts[c] for c in comparison.codes2[1:]), parts[comparison.codes2[0]])
        theta1, theta2 = expression_draws(
            first, second, self.options.counts, self.options.prior_counts, self.rng
        )
        lfc = np.log2(theta1) - np.log2(theta2)
        return lfc, first.mean_normalised, second.mean_normalised


def _table(
    lfc: np.ndarray, names: list[str], options: _Options, raw: dict[str, np.ndarray]
) -> pd.DataFrame:
    """The statistics of LFC samples [S, G] per gene, the decision's probabilities, and the
    groups' raw statistics."""
    means, sds = lfc.mean(axis=0), lfc.std(axis=0)
    prior = AdaptivePrior(means, sds) if options.prior == "adaptive" else None
    shrunk = means if prior is None else prior.posterior(means, sds, 1.0)[2]
    delta = estimate_delta(shrunk) if options.delta is None else options.delta
    if prior is None:
        up, down = change_probabilities(lfc, delta)
    else:
        up, down, _ = prior.posterior(means, sds, delta)
    proba_de = np.maximum(up, down)
    sign = np.sign(up - down)
    eps = 1e-8  # as scVI: a probability of 0 or 1 has a finite Bayes factor
    detected = np.maximum(raw["non_zeros_proportion1"], raw["non_zeros_proportion2"])
    table = pd.DataFrame(
        {
            "proba_de": proba_de,
            "proba_not_de": 1.0 - proba_de,
            "bayes_factor": sign * (np.log(proba_de + eps) - np.log(1.0 - proba_de + eps)),
            "lfc_mean": means,
            "lfc_median": np.median(lfc, axis=0),
            "lfc_std": sds,
            "lfc_min": lfc.min(axis=0),
            "lfc_max": lfc.max(axis=0),
            "lfc_shrunk": shrunk,
            **raw,
            "low_expression": detected < options.min_detection,
        },
        index=pd.Index(names, name="gene"),
    )
    table["delta"] = delta
    return table


def _decided(table: pd.DataFrame, options: _Options, comparison: Comparison) -> pd.DataFrame:
    """One comparison's table sorted by ``proba_de``, with the genes declared at the FDR target
    (never one of low expression), the running expected FDR and the comparison's names."""
    table = table.sort_values("proba_de", ascending=False, kind="stable")
    testable = ~table["low_expression"].to_numpy()
    proba = np.where(testable, table["proba_de"].to_numpy(), 0.0)
    table["expected_fdr"] = np.where(testable, expected_fdr(proba), np.nan)
    table[f"is_de_fdr_{options.fdr_target}"] = (
        posterior_fdr_selection(proba, options.fdr_target) & testable
    )
    table["estimator"] = options.estimator
    table["comparison"] = f"{comparison.first} vs {comparison.second_name}"
    table["group1"], table["group2"] = comparison.first, comparison.second_name
    return table


def _check_count_model(fitted: FittedCells) -> None:
    """A ``ValueError`` unless the model's rates are counts' (log fold changes need them)."""
    if inverse_link(fitted.model.likelihood) != "exp":
        raise ValueError(
            "DE compares rates of counts (log fold changes): fit the model with a count "
            "likelihood (negative_binomial or poisson)."
        )


@dataclass
class _GroupCounts:
    """Per ``groupby`` category [T] (and in all): the cells, and per gene [G] the sum of the
    counts, of the cells with a count, and of the counts normalised to 10^4 a cell."""

    codes: np.ndarray
    cells: np.ndarray
    sums: np.ndarray
    non_zero: np.ndarray
    normalised: np.ndarray

    @classmethod
    def of(cls, fitted: FittedCells, adata, labels: pd.Series, columns: np.ndarray):
        codes = labels.astype("category").cat.codes.to_numpy().astype(np.int64)
        codes = np.where(codes < 0, codes.max() + 1, codes)  # unlabelled cells: a group apart
        groups = int(codes.max()) + 1
        rows, library = fitted.registration.read_new(adata)
        sums, non_zero, normalised = (np.zeros((groups, len(columns))) for _ in range(3))
        for start in range(0, adata.n_obs, 4096):
            block = rows[start : start + 4096][:, columns]
            part = codes[start : start + len(block)]
            onehot = sp.csr_matrix(
                (np.ones(len(part)), (part, np.arange(len(part)))), shape=(groups, len(part))
            )
            sums += onehot @ block
            non_zero += onehot @ (block > 0)
            total = library[start : start + len(block), None]
            normalised += onehot @ (1e4 * block / np.where(total > 0, total, 1.0))
        return cls(codes, np.bincount(codes, minlength=groups), sums, non_zero, normalised)

    def statistics(self, cells1: np.ndarray, cells2: np.ndarray) -> dict[str, np.ndarray]:
        """The two groups' means per gene [G] of the counts, of the cells with a count and of
        the normalised counts (each group one category, or all cells outside one)."""
        out = {}
        for suffix, cells in (("1", cells1), ("2", cells2)):
            groups = np.bincount(self.codes[cells], minlength=len(self.cells)) > 0
            for name, table in (
                ("raw_mean", self.sums),
                ("non_zeros_proportion", self.non_zero),
                ("raw_normalized_mean", self.normalised),
            ):
                out[name + suffix] = groups.astype(float) @ table / len(cells)
        return out
