r"""Differential expression in change mode, with a posterior expected false discovery rate.

scVI's ``differential_expression(mode="change")`` (Boyeau et al. 2019), read off the GP: a sample of
the log-fold change between groups A and B draws a cell a of A and a cell b of B at random,
:math:`x_a \sim q(x_a)` and :math:`x_b \sim q(x_b)`, both at the same reference covariates (with
``batch_correction``: each batch category in turn, the samples split evenly over them; without: each
cell's own), and :math:`(f_d(a), f_d(b))` jointly from :math:`q(f \mid x)` (their covariance
:func:`~gpflow_svi_gplvm.prediction.rates.paired_covariance` kept: what the two share, such as the
batch effect's uncertainty, cancels in the difference), so that

.. math::

    \mathrm{LFC}_d = \log_2 e^{f_d(a)} - \log_2 e^{f_d(b)} = \big(f_d(a) - f_d(b)\big) / \ln 2.

Over the samples, :math:`P(\mathrm{LFC} \ge \delta)` and :math:`P(\mathrm{LFC} < -\delta)`; a
gene's ``proba_de`` is the larger (scVI's three-way test), its ``bayes_factor``
:math:`\pm \log \frac{p}{1 - p}`, signed by the direction. Genes sorted by ``proba_de`` are
declared differentially expressed while the posterior expected FDR of those declared,
:math:`\frac1k \sum_{i \le k} (1 - p_{(i)})`, stays at or below ``fdr_target``
(:func:`posterior_fdr_selection`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
import tensorflow as tf

from ...prediction.rates import inverse_link, paired_covariance
from ...validation import check_integer, check_seed
from ..cells.encoding import obs_column
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import latent_moments
from .expression import check_genes, reference_inputs

__all__ = ["differential_expression", "posterior_fdr_selection"]

PAIRS_PER_CALL = 1024
"""Sampled pairs of cells whose f one call takes ([pairs, D] tensors)."""


def posterior_fdr_selection(proba_de: np.ndarray, fdr_target: float) -> np.ndarray:
    r"""Which genes [G] to declare differentially expressed: the k most probable, with k the
    largest number whose posterior expected FDR,
    :math:`\frac1k \sum_{i \le k} (1 - p_{(i)})` over the probabilities sorted from the
    largest, is at most ``fdr_target`` (that mean grows with k, so the genes kept are those
    where it holds)."""
    proba_de = np.asarray(proba_de, dtype=float)
    order = np.argsort(-proba_de, kind="stable")
    expected_fdr = np.cumsum(1.0 - proba_de[order]) / np.arange(1, len(order) + 1)
    kept = np.zeros(len(order), bool)
    kept[order[: int(np.sum(expected_fdr <= fdr_target))]] = True
    return kept


def differential_expression(
    fitted: FittedCells,
    adata,
    groupby: str,
    group1: Any = None,
    group2: Any = None,
    *,
    delta: float = 0.25,
    fdr_target: float = 0.05,
    batch_correction: bool = True,
    n_samples: int = 5000,
    genes: Sequence[str] | None = None,
    seed: int = 0,
) -> pd.DataFrame:
    """Change-mode DE of ``adata``'s cells (an AnnData, or the path of an ``.h5ad`` file)
    grouped by ``obs[groupby]``: ``group1`` (a category, a list of them, each compared in turn,
    or None: every category) against ``group2`` (a category, or None: all other cells). One
    row a gene and comparison, sorted by ``proba_de`` within a comparison: ``proba_de``,
    ``proba_not_de``, ``bayes_factor``, ``lfc_mean``, ``lfc_median``, ``lfc_std``, ``lfc_min``,
    ``lfc_max`` (log2), ``scale1`` and ``scale2`` (the groups' mean normalised expression at a
    size factor of one over the model's reference library, as ``normalized_expression`` with
    ``library_size=1``), ``raw_mean1``/``2``, ``non_zeros_proportion1``/``2`` and
    ``raw_normalized_mean1``/``2`` (of the counts, normalised to 10^4 a cell),
    ``is_de_fdr_<fdr_target>``, ``delta``, ``comparison``, ``group1``, ``group2``.
    ``n_samples`` pairs of cells per comparison; ``seed`` seeds their draws."""
    delta, fdr_target = _check_thresholds(delta, fdr_target)
    n_samples = check_integer(n_samples, "n_samples", hint="sampled pairs of cells, e.g. 5000")
    _check_count_model(fitted)
    adata = opened(adata)
    labels = obs_column(adata.obs, groupby, "groupby")
    comparisons = _comparisons(labels, group1, group2, groupby)
    names = check_genes(fitted, genes)
    columns = np.array([fitted.registration.gene_names.index(g) for g in names])
    states = latent_moments(fitted, adata)
    counts = _GroupCounts.of(fitted, adata, labels, columns)
    rng = np.random.default_rng(check_seed(seed))
    batches = [None]
    if batch_correction and fitted.batch_key is not None:
        batches = list(fitted.registration.encoding.categories[fitted.batch_key])
    tables = []
    for first, second, cells1, cells2 in comparisons:
        draws = _Draws(fitted, adata.obs, states, columns, rng)
        lfc, scale1, scale2 = draws.compare(cells1, cells2, batches, n_samples)
        table = _table(lfc, delta, names)
        table["scale1"], table["scale2"] = scale1, scale2
        table = table.assign(**counts.statistics(cells1, cells2))
        tables.append(_decided(table, fdr_target, delta, first, second))
    return pd.concat(tables, axis=0)


def _decided(table: pd.DataFrame, fdr_target: float, delta: float, first, second) -> pd.DataFrame:
    """One comparison's table sorted by ``proba_de``, with the genes declared at the FDR target
    and the comparison's names."""
    table = table.sort_values("proba_de", ascending=False, kind="stable")
    table[f"is_de_fdr_{fdr_target}"] = posterior_fdr_selection(
        table["proba_de"].to_numpy(), fdr_target
    )
    table["delta"] = delta
    second_name = "Rest" if second is None else second
    table["comparison"] = f"{first} vs {second_name}"
    table["group1"], table["group2"] = first, second_name
    return table


def _check_thresholds(delta: float, fdr_target: float) -> tuple[float, float]:
    for name, value in (("delta", delta), ("fdr_target", fdr_target)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
            raise ValueError(f"{name} must be a number, got {value!r}.")
    if not (np.isfinite(delta) and delta > 0):
        raise ValueError(
            f"delta must be a positive log2 fold change (the smallest change that counts), got "
            f"{delta!r}; e.g. 0.25."
        )
    if not 0 < fdr_target < 1:
        raise ValueError(f"fdr_target must lie in (0, 1), got {fdr_target!r}; e.g. 0.05.")
    return float(delta), float(fdr_target)


def _check_count_model(fitted: FittedCells) -> None:
    """A ``ValueError`` unless the model's rates are counts' (log fold changes need them)."""
    if inverse_link(fitted.model.likelihood) != "exp":
        raise ValueError(
            "Change-mode DE compares rates of counts (log fold changes): fit the model with a "
            "count likelihood (negative_binomial or poisson)."
        )


def _comparisons(labels: pd.Series, group1: Any, group2: Any, groupby: str) -> list:
    """(group1, group2 or None, cells of group1 [n1], cells of group2 [n2]) for each
    comparison; a ``ValueError`` naming a group that does not exist or holds no cells."""
    present = pd.unique(labels.dropna())
    if group1 is None:
        if len(present) < 2:
            raise ValueError(
                f"obs[{groupby!r}] holds {len(present)} group(s): one against the rest needs "
                "at least two."
            )
        group1 = list(labels.astype("category").cat.categories)
    firsts = list(group1) if isinstance(group1, (list, tuple, np.ndarray)) else [group1]
    values = labels.to_numpy()
    out = []
    for first in firsts:
        cells1 = _group_cells(values, first, groupby, present)
        if group2 is None:
            cells2 = np.flatnonzero(~np.isin(np.arange(len(values)), cells1))
            if len(cells2) == 0:
                raise ValueError(f"No cell lies outside group {first!r}: there is no rest.")
        else:
            if group2 == first:
                raise ValueError(f"group1 and group2 are both {first!r}: compare two groups.")
            cells2 = _group_cells(values, group2, groupby, present)
        out.append((first, group2, cells1, cells2))
    return out


def _group_cells(values: np.ndarray, group: Any, groupby: str, present) -> np.ndarray:
    cells = np.flatnonzero(values == group)
    if len(cells) == 0:
        raise ValueError(
            f"obs[{groupby!r}] has no cell in group {group!r}: its groups are "
            f"{sorted(map(str, present))[:20]}."
        )
    return cells


class _Draws:
    """Samples of the LFC between two groups of cells, from their q(x) and q(f | x)."""

    def __init__(self, fitted: FittedCells, obs, latents: tuple[np.ndarray, ...], columns, rng):
        self.fitted, self.obs, self.latents = fitted, obs, latents
        self.columns, self.rng = columns, rng
        reference = fitted.model.size_factor_reference
        self.level = 1.0 if reference is None else float(reference.numpy())

    def compare(
        self, cells1: np.ndarray, cells2: np.ndarray, batches: list, n_samples: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """LFC samples [n, G] (log2) of ``n_samples`` pairs split evenly over ``batches``, and
        the two groups' mean normalised expression [G]."""
        per_batch = max(1, n_samples // len(batches))
        lfcs, scales1, scales2 = [], [], []
        for batch in batches:
            a = self.rng.choice(cells1, per_batch)
            b = self.rng.choice(cells2, per_batch)
            for start in range(0, per_batch, PAIRS_PER_CALL):
                part = slice(start, start + PAIRS_PER_CALL)
                lfc, scale1, scale2 = self._pairs(a[part], b[part], batch)
                lfcs.append(lfc)
                scales1.append(scale1)
                scales2.append(scale2)
        return (
            np.concatenate(lfcs),
            np.concatenate(scales1).mean(axis=0),
            np.concatenate(scales2).mean(axis=0),
        )

    def _inputs(self, cells: np.ndarray, batch) -> tuple[tf.Tensor, np.ndarray | float]:
        """GP inputs [n, Q + R]: a draw of each cell's q(x), its covariates (the batch set to
        ``batch``, or its own), a log size factor of 0; and the cells' offsets on f [n, G] (of
        a batch a query mapping learnt; zeros otherwise)."""
        mean, variance = (moment[cells] for moment in self.latents)
        draws = mean + np.sqrt(variance) * self.rng.standard_normal(mean.shape)
        observed, offsets = reference_inputs(self.fitted, self.obs.iloc[cells], [batch], {})
        shift = 0.0 if offsets is None else offsets[0][:, self.columns]
        return tf.constant(np.concatenate([draws, observed[0]], axis=1)), shift

    def _pairs(self, a: np.ndarray, b: np.ndarray, batch) -> tuple[np.ndarray, ...]:
        model = self.fitted.model
        (Xa, shift_a), (Xb, shift_b) = self._inputs(a, batch), self._inputs(b, batch)
        mean_a, var_a = (m.numpy()[:, self.columns] for m in model.predict_f(Xa))
        mean_b, var_b = (m.numpy()[:, self.columns] for m in model.predict_f(Xb))
        mean_a, mean_b = mean_a + shift_a, mean_b + shift_b
        covariance = paired_covariance(model, Xa, Xb).numpy()[:, self.columns]
        spread = np.sqrt(np.maximum(var_a + var_b - 2.0 * covariance, 0.0))
        noise = self.rng.standard_normal(mean_a.shape)
        lfc = ((mean_a - mean_b + spread * noise) / np.log(2.0)).astype(np.float32)
        scale_a = np.exp(mean_a + var_a / 2.0) / self.level
        scale_b = np.exp(mean_b + var_b / 2.0) / self.level
        return lfc, scale_a, scale_b


def _table(lfc: np.ndarray, delta: float, names: list[str]) -> pd.DataFrame:
    """The change-mode statistics of LFC samples [n, G] per gene."""
    up, down = np.mean(lfc >= delta, axis=0), np.mean(lfc < -delta, axis=0)
    proba_de = np.maximum(up, down)
    sign = np.sign(up - down)
    eps = 1e-8  # as scVI: a probability of 0 or 1 has a finite Bayes factor
    return pd.DataFrame(
        {
            "proba_de": proba_de,
            "proba_not_de": 1.0 - proba_de,
            "bayes_factor": sign * (np.log(proba_de + eps) - np.log(1.0 - proba_de + eps)),
            "lfc_mean": lfc.mean(axis=0),
            "lfc_median": np.median(lfc, axis=0),
            "lfc_std": lfc.std(axis=0),
            "lfc_min": lfc.min(axis=0),
            "lfc_max": lfc.max(axis=0),
        },
        index=pd.Index(names, name="gene"),
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
