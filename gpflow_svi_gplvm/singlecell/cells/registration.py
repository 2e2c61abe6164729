"""What an AnnData means to a single-cell model, apart from the model (scvi-tools'
``setup_anndata``): the matrix to read, the genes in order, the ``obs`` columns that join the GP
input and their encoding, and how size factors are made. Made once when a model is fitted, then
used to read new cells, and saved and loaded with the model."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ...distributed.workers import Workers
from ...rows.facts import RowScan
from ...rows.sparse import RowReader, SparseRows
from .encoding import CovariateEncoding, obs_column
from .reading import gene_names as chosen_genes
from .reading import genes_of, read_cells, scan_cells, unique_genes

if TYPE_CHECKING:
    from ...rows.h5ad import DiskRows

__all__ = [
    "CellRegistration",
    "size_factors_of",
    "names_hash",
    "plain_category",
    "check_cells_have_counts",
]


@dataclass
class CellRegistration:
    """How cells are read: ``layer`` (None: ``X``; "raw": ``adata.raw``), ``genes`` as chosen
    (names, a boolean ``var`` column or None for all) and, once registered, :attr:`gene_names`,
    the genes fitted in their order (the model's D outputs); ``batch_key`` and
    ``covariate_keys``, the ``obs`` columns of the GP input, encoded by :attr:`encoding`
    (categories one-hot, numbers standardised); ``size_factors`` ("library", an ``obs`` column
    or None); ``counts``: whether the values must be non-negative integers; once registered, the
    ``cells`` (how many, and a hash of their names: :attr:`cell_names`), which tell the cells a
    model was fitted to from others."""

    layer: str | None = None
    genes: Sequence[str] | str | None = None
    batch_key: str | None = None
    covariate_keys: Sequence[str] = ()
    size_factors: str | None = "library"
    counts: bool = True
    gene_names: list[str] = field(default_factory=list)
    cells: int = 0
    cell_names: str | None = None
    encoding: CovariateEncoding = field(init=False)

    def __post_init__(self) -> None:
        if isinstance(self.covariate_keys, str):  # one column's name, not its letters
            self.covariate_keys = [self.covariate_keys]
        self.covariate_keys = list(self.covariate_keys)
        columns = self.columns
        repeated = sorted({column for column in columns if columns.count(column) > 1})
        if repeated:  # a column twice in the GP input is two identical covariates
            raise ValueError(
                f"obs column(s) {repeated} given more than once (batch_key and covariate_keys "
                "together): name each column once; the batch_key is already a covariate."
            )
        batch = [self.batch_key] if self.batch_key else []
        self.encoding = CovariateEncoding(columns, batch)

    @property
    def columns(self) -> list[str]:
        """The ``obs`` columns of the GP input: the batch key first, then the covariates."""
        return ([self.batch_key] if self.batch_key else []) + list(self.covariate_keys)

    def register_genes(self, adata) -> list[str]:
        """Choose :attr:`gene_names` among ``adata``'s genes (of :attr:`layer`) and return them.
        A ``var`` column that marks the genes (e.g. "highly_variable") is read from
        ``adata.var`` when ``adata.raw.var`` lacks it, as scanpy leaves them."""
        holder, genes = genes_of(adata, self.layer), self.genes
        if isinstance(genes, str) and holder is not adata:
            if genes not in holder.var.columns and genes in adata.var.columns:
                genes = chosen_genes(adata, genes)  # names, found among the raw genes below
        self.gene_names = chosen_genes(holder, genes)
        return self.gene_names

    def register_cells(self, adata) -> None:
        """Record ``adata``'s cells: how many, and a hash of their names (:func:`names_hash`)."""
        self.cells, self.cell_names = adata.n_obs, names_hash(adata.obs_names)

    def read(self, adata, cells: slice = slice(None)) -> tuple[RowReader, np.ndarray]:
        """The fitted genes' values of the ``cells`` (a range) of the registered AnnData (or
        ``.h5ad`` cells), checked, and their library sizes [n]."""
        return read_cells(adata, self.layer, self.gene_names, self.counts, cells=cells)

    def scan(
        self, adata, cells: slice = slice(None), digest: bool = False
    ) -> tuple[SparseRows | DiskRows, RowScan]:
        """:meth:`read`'s rows, checked in the one pass that learns their facts (their library
        sizes are its totals; with ``digest``, the hash a checkpoint records)."""
        return scan_cells(adata, self.layer, self.gene_names, self.counts, cells, digest)

    def read_new(self, adata) -> tuple[RowReader, np.ndarray]:
        """The fitted genes of new cells, found by name (in any order, among other genes), and
        their library sizes; a ``ValueError`` names the fitted genes they lack."""
        names = unique_genes(genes_of(adata, self.layer).var_names)
        known = set(names)
        missing = [g for g in self.gene_names if g not in known]
        if missing:
            raise ValueError(
                f"The new cells lack {len(missing)} of the fitted genes (e.g. {missing[:5]}): "
                "give them every gene the model was fitted with (zeros where not measured)."
            )
        position = {g: i for i, g in enumerate(names)}
        columns = np.array([position[g] for g in self.gene_names])
        return read_cells(adata, self.layer, self.gene_names, self.counts, columns)

    def fit_covariates(self, obs, workers: Workers | None = None) -> np.ndarray | None:
        """Learn the encoding of ``obs`` (of every worker's cells) and return its covariates."""
        return self.encoding.fit(obs, workers).transform(obs)

    def training_size_factors(
        self, obs, library: np.ndarray, workers: Workers | None = None
    ) -> np.ndarray | None:
        """The size factors [n] of training cells (``library`` over all workers' mean)."""
        return size_factors_of(self.size_factors, obs, library, workers)

    def new_size_factors(self, obs, library: np.ndarray) -> np.ndarray | None:
        """New cells' size factors from an ``obs`` column; None where the model makes them
        from their library sizes and its reference (``size_factors="library"``) or has none."""
        if self.size_factors in (None, "library"):
            return None
        return size_factors_of(self.size_factors, obs, library)

    def to_dict(self) -> dict:
        """The registration as JSON values (:meth:`from_dict` reads them back)."""
        encoding = self.encoding
        return {
            "layer": self.layer,
            "genes": self.genes if isinstance(self.genes, (str, type(None))) else list(self.genes),
            "gene_names": list(self.gene_names),
            "batch_key": self.batch_key,
            "covariate_keys": list(self.covariate_keys),
            "size_factors": self.size_factors,
            "counts": self.counts,
            "cells": self.cells,
            "cell_names": self.cell_names,
            "categories": {
                column: list(map(plain_category, values))
                for column, values in encoding.categories.items()
            },
            "location": dict(encoding.location),
            "scale": dict(encoding.scale),
        }

    @classmethod
    def from_dict(cls, record: dict) -> CellRegistration:
        """The registration :meth:`to_dict` wrote."""
        registration = cls(
            record["layer"],
            record["genes"],
            record["batch_key"],
            record["covariate_keys"],
            record["size_factors"],
            record["counts"],
            list(record["gene_names"]),
            record.get("cells", 0),  # a folder saved before cells were registered: unknown
            record.get("cell_names"),
        )
        encoding = registration.encoding
        encoding.categories = {k: list(v) for k, v in record["categories"].items()}
        encoding.location = {k: float(v) for k, v in record["location"].items()}
        encoding.scale = {k: float(v) for k, v in record["scale"].items()}
        return registration


def size_factors_of(
    choice: str | None, obs, library: np.ndarray, workers: Workers | None = None
) -> np.ndarray | None:
    """Each cell's size factor [N] (of ``obs``'s cells) as ``choice`` says: "library", its
    ``library`` size [N] over their mean over all ``workers``' cells; an ``obs`` column's name;
    None, none."""
    if choice is None:
        return None
    workers = workers or Workers()
    if choice == "library":
        with workers.agreeing():
            check_cells_have_counts(
                obs, library, "the chosen genes", "its size factor would be 0. Filter"
            )
        total, count = workers.sum([np.sum(library), len(library)])
        return library / (total / count)
    column = obs_column(obs, choice, "size_factors (or 'library', or None)")
    try:
        values = column.to_numpy(dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"obs column {choice!r} is not numbers ({error}): size factors must "
            "be positive numbers, one a cell."
        ) from error
    bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
    if len(bad):
        raise ValueError(
            f"obs column {choice!r} gives cell {obs.index[bad[0]]!r} the "
            f"size factor {values[bad[0]]} ({len(bad)} cells in all): size factors must be "
            "positive."
        )
    return values


def names_hash(names) -> str:
    """A hash of cells' names (an AnnData's ``obs_names``, in order)."""
    joined = "\0".join(map(str, names))
    return hashlib.blake2b(joined.encode(), digest_size=16).hexdigest()


def plain_category(value):
    """A category as a JSON value (NumPy's scalars as Python's); a ``ValueError`` for a kind
    JSON cannot hold."""
    if isinstance(value, np.generic):
        value = value.item()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise ValueError(
        f"The category {value!r} ({type(value).__name__}) cannot be saved: save categories that "
        "are text or numbers (e.g. adata.obs[key] = adata.obs[key].astype(str))."
    )


def check_cells_have_counts(obs, library: np.ndarray, genes: str, consequence: str) -> None:
    """A ``ValueError`` naming the first cell of ``obs`` whose ``library`` size [n] (its total
    over ``genes``) is 0, what that means (``consequence``, ending in the verb of the remedy),
    and how to drop such cells."""
    empty = np.flatnonzero(library <= 0)
    if len(empty):
        raise ValueError(
            f"cell {obs.index[empty[0]]!r} has no counts in {genes} ({len(empty)} cells in "
            f"all): {consequence} such cells first, e.g. "
            "scanpy.pp.filter_cells(adata, min_counts=1)."
        )
