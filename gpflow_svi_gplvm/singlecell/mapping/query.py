r"""New cells as a fitted model reads them (a query): the fitted genes found by name, the
``obs`` columns of the GP input encoded a block of cells at a time, each cell's batch, and the
batches to learn.

**Genes the query lacks.** By default a query must hold every fitted gene (a ``ValueError``
names those it lacks). With ``missing_genes="marginalise"`` a lacking gene is left out of each
cell's likelihood (its entries missing, NaN, in the rows the model reads: the masked likelihood
sums the observed genes alone), so a cell is placed by the genes measured, not by zeros that
claim a gene is silent. A library size factor then counts the genes measured, scaled to the
whole panel by their share of the fitted cells' typical expression,
:math:`s_n = \sum_{d \in O} y_{nd} / (\pi_O\, \bar l)` with
:math:`\pi_O = \sum_{d \in O} \bar\mu_d / \sum_d \bar\mu_d` (:math:`\bar\mu` the typical rate,
:meth:`~gpflow_svi_gplvm.prediction.laplace.LaplaceLatents.typical_rate`; the share of genes
without one). A query sharing fewer than :data:`MIN_SHARED_GENES` of the fitted genes is
refused, with the count.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from ...components.covariates import new_row_inputs
from ...models import SVIGPLVM
from ...rows.sparse import RowReader
from ..cells.encoding import obs_column
from ..cells.reading import genes_of, read_cells, unique_genes
from ..cells.registration import check_cells_have_counts
from .offsets import BatchOffsets

__all__ = [
    "MISSING_GENES",
    "MIN_SHARED_GENES",
    "Query",
    "batch_categories",
    "offset_fitting_cells",
    "read_query",
    "warn_of_few_batches",
]

MISSING_GENES = (None, "marginalise")
"""The choices of ``missing_genes``: refuse a query lacking fitted genes, or leave those genes
out of its cells' likelihood."""

MIN_SHARED_GENES = 0.2
"""The least share of the fitted genes a query must hold to be mapped with
``missing_genes="marginalise"``."""


@dataclass
class Query:
    """New cells as the model reads them: their ``rows`` of the fitted genes (NaN for genes the
    query lacks), observed GP ``inputs`` (sliced by rows into [b, R], or None), batch category
    of each (``batches`` [n], in ``obs[key]``), the batch categories to learn (``new``) and the
    fitted genes it lacks (``missing``)."""

    rows: RowReader
    inputs: QueryInputs | None
    batches: np.ndarray | None
    key: str | None
    new: list = field(default_factory=list)
    missing: list = field(default_factory=list)

    def offsets(self, learnt: BatchOffsets) -> _RowOffsets | None:
        """Each cell's offsets on f (sliced by rows), or None when no cell has any."""
        if self.batches is None or not learnt.categories:
            return None
        index = {c: k for k, c in enumerate(learnt.categories)}
        codes = np.array([index.get(b, len(index)) for b in self.batches])
        if (codes == len(index)).all():
            return None
        table = np.concatenate([learnt.offsets, np.zeros((1, learnt.offsets.shape[1]))])
        return _RowOffsets(table, codes)


class QueryInputs:
    """The observed GP inputs of n cells (their encoded ``obs`` columns and log size factors),
    made for the cells asked (a slice or row numbers) when asked: [b, R], no [n, R] table."""

    def __init__(self, model: SVIGPLVM, obs, encoding, mapped: list, sizes: np.ndarray | None):
        self.model, self.obs, self.encoding, self.mapped = model, obs, encoding, mapped
        self.sizes = sizes
        columns = [obs_column(obs, column).name for column in encoding.columns]  # each named
        if columns:  # every cell's values checked now, on their distinct combinations
            encoding.transform(obs[columns].drop_duplicates(), mapped=mapped)

    def __len__(self) -> int:
        return len(self.obs)

    def __getitem__(self, cells) -> np.ndarray:
        obs = self.obs.iloc[cells]
        covariates = self.encoding.transform(obs, mapped=self.mapped)
        sizes = None if self.sizes is None else self.sizes[cells]
        # The rows' values are not read: their size factors are given (or not used).
        return cast(
            np.ndarray, new_row_inputs(self.model, np.empty((len(obs), 0)), covariates, sizes)
        )


class _RowOffsets:
    """The offsets [n, D] of n cells, sliced by rows: row ``codes[i]`` of ``table`` [K + 1, D]
    (its last row zero, for cells of the fitted batches)."""

    def __init__(self, table: np.ndarray, codes: np.ndarray):
        self.table, self.codes = table, codes

    def __getitem__(self, rows) -> np.ndarray:
        return self.table[self.codes[rows]]


class _WithGaps:
    """Rows of some of the D fitted genes, read as rows of all D with NaN for the others:
    ``rows`` [n, D'] whose columns are the fitted genes at ``positions`` [D']."""

    def __init__(self, rows: RowReader, positions: np.ndarray, width: int):
        self.rows, self.positions, self.width = rows, positions, width

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape[0], self.width

    def _widened(self, block: np.ndarray) -> np.ndarray:
        wide = np.full((len(block), self.width), np.nan)
        wide[:, self.positions] = block
        return wide

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self._widened(self.rows[rows])

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self._widened(self.rows.take(rows))

    def view(self, transform: Any) -> _WithGaps:
        return _WithGaps(self.rows.view(transform), self.positions, self.width)

    def row_sums(self) -> np.ndarray:
        return self.rows.row_sums()


def read_query(
    model: SVIGPLVM,
    registration,
    learnt: BatchOffsets,
    adata,
    learn: bool,
    missing_genes: str | None = None,
    typical: np.ndarray | None = None,
) -> Query:
    """The cells of ``adata`` as a fitted ``model`` with its cells' ``registration`` and the
    batches it has ``learnt`` reads new cells; with ``learn``, the batch categories unseen in
    training (and not learnt before) are to be learnt, else they are a ``ValueError``;
    ``missing_genes`` and ``typical`` (the fitted cells' typical rate [D]): see the module."""
    if missing_genes not in MISSING_GENES:
        raise ValueError(
            f"missing_genes must be one of {MISSING_GENES}, got {missing_genes!r}: None refuses "
            "a query lacking fitted genes, 'marginalise' leaves them out of its cells' likelihood."
        )
    rows, library, missing = _fitted_genes(registration, adata, missing_genes)
    key, batches, new = registration.batch_key, None, []
    if key is not None:
        batches, unseen = batch_categories(registration, learnt, adata.obs)
        new = unseen if learn else []
    sizes = registration.new_size_factors(adata.obs, library)
    reference = model.size_factor_reference
    if sizes is None and reference is not None:
        share = _measured_share(registration.gene_names, missing, typical)
        sizes = _library_size_factors(adata.obs, library / share, float(reference.numpy()))
    inputs = None
    if model.row_inputs is not None:
        mapped = learnt.categories + new
        inputs = QueryInputs(model, adata.obs, registration.encoding, mapped, sizes)
    return Query(rows, inputs, batches, key, new, missing)


def batch_categories(registration, learnt: BatchOffsets, obs) -> tuple[np.ndarray, list]:
    """Each cell's batch category [n] (``obs``' column of the fitted ``registration``'s batch
    key, as objects) and the categories among them that the model was neither fitted with nor
    has ``learnt`` (sorted by name): the new batches ``map_query`` learns."""
    values = obs_column(obs, registration.batch_key)
    known = set(registration.encoding.categories[registration.batch_key]) | set(learnt.categories)
    unseen = sorted({v for v in values.dropna().unique() if v not in known}, key=str)
    return values.to_numpy(dtype=object), unseen


def offset_fitting_cells(
    batches: np.ndarray, categories: list, fit_cells: int, seed: int
) -> np.ndarray:
    """The cells (sorted row numbers) whose q(x*) the offsets of the new batch ``categories``
    are fitted with: up to ``fit_cells`` of each, drawn at random with ``seed`` from the cells
    whose category in ``batches`` [n] it is."""
    rng = np.random.default_rng(seed)
    chosen = [rng.permutation(np.flatnonzero(batches == c))[:fit_cells] for c in categories]
    return np.sort(np.concatenate(chosen))


def warn_of_few_batches(registration, query: Query) -> None:
    """A ``UserWarning`` when a query is mapped onto a reference fitted with no batch (nothing
    is learnt of the query's batch) or with one batch category and the query brings new ones
    (their effects' prior learnt from no difference between batches): what it means and what to
    do."""
    key = registration.batch_key
    if key is None:
        warnings.warn(
            "The reference was fitted without a batch (batch_key=None), so map_query learns no "
            "batch effect: the query's cells are embedded as transform does, and whatever sets "
            "them apart from the reference's (their batch, their protocol) is read as biology. "
            "To map a new batch, fit the reference with batch_key= naming the obs column of its "
            "batches (two or more).",
            UserWarning,
            stacklevel=4,
        )
        return
    fitted = list(registration.encoding.categories[key])
    if len(fitted) == 1 and query.new:
        warnings.warn(
            f"The reference was fitted with one batch category ({fitted[0]!r}), so nothing in it "
            f"says how batches differ: each new batch ({query.new[:5]}) gets an offset per gene "
            "on f (a shift of each gene's level shared by all its cells) whose prior spread was "
            "learnt from no difference between batches. Mapped cells may keep a batch effect or "
            "lose biology; check them against known cell types, or fit the reference with two "
            "or more batches.",
            UserWarning,
            stacklevel=4,
        )


def _fitted_genes(registration, adata, missing_genes: str | None):
    """The rows of the fitted genes (NaN for those lacking, where allowed), each cell's sum of
    those it has [n], and the fitted genes it lacks."""
    names = unique_genes(genes_of(adata, registration.layer).var_names)
    fitted = registration.gene_names
    held = set(names)
    missing = [g for g in fitted if g not in held]
    if not missing:
        return (*registration.read_new(adata), missing)
    if missing_genes is None:
        raise ValueError(
            f"The new cells lack {len(missing)} of the fitted genes (e.g. {missing[:5]}, of "
            f"{len(fitted)}): give them every fitted gene, or pass missing_genes='marginalise' "
            "to leave those genes out of each cell's likelihood (filling them with zeros would "
            "tell the model they are silent)."
        )
    shared = len(fitted) - len(missing)
    if shared < MIN_SHARED_GENES * len(fitted):
        raise ValueError(
            f"The new cells share {shared} of the {len(fitted)} fitted genes "
            f"({shared / len(fitted):.0%}), fewer than {MIN_SHARED_GENES:.0%}: too few to place "
            "them. Map them with a reference fitted to genes they have."
        )
    position = {g: i for i, g in enumerate(names)}
    present = [d for d, g in enumerate(fitted) if g in held]
    kept = [fitted[d] for d in present]
    columns = np.array([position[g] for g in kept])
    rows, library = read_cells(adata, registration.layer, kept, registration.counts, columns)
    return _WithGaps(rows, np.array(present), len(fitted)), library, missing


def _measured_share(genes: list, missing: list, typical: np.ndarray | None) -> float:
    """The measured genes' share of the typical expression (of the genes without a typical
    rate)."""
    if not missing:
        return 1.0
    lacking = set(missing)
    measured = np.array([g not in lacking for g in genes])
    if typical is None:
        return float(measured.mean())
    return float(typical[measured].sum() / typical.sum())


def _library_size_factors(obs, library: np.ndarray, reference: float) -> np.ndarray:
    """Size factors [n] of cells from their ``library`` sizes and the fitted ``reference``; a
    ``ValueError`` names a cell without counts in the genes read."""
    check_cells_have_counts(
        obs, library, "the fitted genes the query holds", "nothing places it. Drop"
    )
    return library / reference
