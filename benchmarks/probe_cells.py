"""The probe's cases of new cells: ``transform``, ``map_query`` and ``normalized_expression`` of
queries a user might give (genes reordered or missing, values that are not counts, batches and
covariates of other kinds), and the gene-reading methods' arguments (benchmarks/probe.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from probe_kit import Case, check_close, check_finite, check_kept, snapshot

COUNT = ("count", "integer")
UNKNOWN_BATCH = ("categor", "batch")


@dataclass
class Query:
    """A query a user might give: ``make`` turns the clean query (10 cells) into it; ``rows``,
    the clean query's rows it should embed to (None: any finite result will do, e.g. other
    covariate values); ``names``: words of which a refusal names one (None: must succeed)."""

    name: str
    make: Callable[[Any], Any]
    names: tuple[str, ...] | None = None
    rows: Any = field(default_factory=lambda: slice(None))
    prior: list[int] = field(default_factory=list)
    """Cells without counts: the gene-reading methods read them at the prior (documented),
    their other rows are the clean query's ``rows``."""


def _with(values_of: Callable[[np.ndarray], np.ndarray], dense: bool = False):
    """A query whose counts layer is ``values_of`` the clean counts (a copy)."""

    def make(query):
        query = query.copy()
        values = values_of(query.layers["counts"].toarray().astype(np.float64))
        query.layers["counts"] = values if dense else sp.csr_matrix(values)
        return query

    return make


def _entry(value: float, row: int = 3, column: int = 2):
    def change(values: np.ndarray) -> np.ndarray:
        values[row, column] = value
        return values

    return _with(change, dense=True)


def _genes(names_of: Callable[[list[str]], list[str]]):
    def make(query):
        query = query.copy()
        query.var_names = names_of(list(query.var_names))
        return query

    return make


def _columns(order: Callable[[int], list[int]]):
    def make(query):
        return query[:, order(query.n_vars)].copy()

    return make


def _extra_genes(names: list[str]):
    def make(query):
        import anndata

        extra = anndata.AnnData(
            X=sp.csr_matrix((query.n_obs, len(names))),
            obs=query.obs[[]],
            var=pd.DataFrame(index=names),
        )
        extra.layers["counts"] = sp.csr_matrix((query.n_obs, len(names)))
        joined = anndata.concat([extra, query], axis=1, merge="first")
        joined.obs = query.obs.copy()
        return joined

    return make


def _obs(column: str, values_of: Callable[[pd.Series], Any]):
    def make(query):
        query = query.copy()
        query.obs[column] = values_of(query.obs[column])
        return query

    return make


def _drop(column: str):
    def make(query):
        query = query.copy()
        del query.obs[column]
        return query

    return make


def _cells(rows):
    def make(query):
        return query[rows].copy()

    return make


def _nan_at_first(series: pd.Series) -> pd.Series:
    values = series.astype(object).to_numpy()
    values[0] = np.nan
    return pd.Series(values, index=series.index)


def queries() -> list[Query]:
    """Every query of the probe (see :class:`Query`)."""
    reverse = _columns(lambda g: list(range(g))[::-1])
    return [
        Query("genes in reverse order", reverse),
        Query("genes shuffled", _columns(lambda g: list(np.random.default_rng(0).permutation(g)))),
        Query("extra genes besides the fitted ones", _extra_genes(["extra0", "extra1"])),
        Query("one fitted gene missing", _columns(lambda g: list(range(g - 1))), ("lack", "gene")),
        Query("only one fitted gene", _columns(lambda g: [0]), ("lack", "gene")),
        Query(
            "no fitted gene (other names)",
            _genes(lambda n: [f"other{i}" for i in range(len(n))]),
            ("lack", "gene"),
        ),
        Query(
            "gene names in upper case",
            _genes(lambda n: [name.upper() for name in n]),
            ("lack", "gene"),
        ),
        Query(
            "a fitted gene named twice",
            _genes(lambda n: [n[0], n[0], *n[2:]]),
            ("repeat", "duplicate", "unique"),
        ),
        Query(
            "an extra gene named twice",
            _extra_genes(["extra", "extra"]),
            ("repeat", "duplicate", "unique"),
        ),
        Query("a count of 0.5", _entry(0.5), COUNT),
        Query("a negative count", _entry(-1.0), COUNT + ("negative",)),
        Query("a NaN count", _entry(np.nan), COUNT + ("nan", "finite")),
        Query("an infinite count", _entry(np.inf), COUNT + ("inf", "finite")),
        Query("a count above 2^24", _entry(2.0**24 + 1), COUNT + ("2^24", "float32")),
        Query("counts of 1e12", _entry(1e12), COUNT + ("2^24", "large")),
        Query("counts as int64", _with(lambda v: v.astype(np.int64), dense=True)),
        Query("counts as int32 CSR", _with(lambda v: v.astype(np.int32))),
        Query("counts as float64 dense", _with(lambda v: v, dense=True)),
        Query("counts as float32 CSC", _counts_csc),
        Query(
            "counts as a bool matrix", _with(lambda v: v > 2, dense=True), COUNT + ("bool",), None
        ),
        Query("no 'counts' layer (counts in X)", _no_layer, ("layer", "counts")),
        Query("log-normalised values in the counts layer", _with(np.log1p), COUNT),
        Query("cells in reverse order", _cells(slice(None, None, -1)), rows=slice(None, None, -1)),
        Query("a view, not a copy", lambda q: q[2:7], rows=slice(2, 7)),
        Query("obs names repeated", _repeated_obs),
        Query("a single cell", _cells(slice(4, 5)), rows=slice(4, 5)),
        Query("no cells", _cells(slice(0, 0)), ("no cells", "cell")),
        Query(
            "a cell without counts",
            _with(_zero_row, dense=True),
            ("no counts", "counts"),
            [0, 1, 2, 4, 5, 6, 7, 8, 9],
            prior=[3],
        ),
        Query(
            "every cell without counts",
            _with(lambda v: 0 * v, dense=True),
            ("no counts", "counts"),
            [],
            prior=list(range(10)),
        ),
        Query("batch key missing from obs", _drop("batch"), ("batch",)),
        Query("batch as plain text", _obs("batch", lambda s: s.astype(str))),
        Query(
            "batch categorical with an unused category",
            _obs("batch", lambda s: s.cat.add_categories(["zz"])),
        ),
        Query(
            "batch missing (NaN) in one cell", _obs("batch", _nan_at_first), ("batch", "missing")
        ),
        Query("batch coded 0/1", _obs("batch", lambda s: s.cat.codes), UNKNOWN_BATCH, None),
        Query(
            "batch with a trailing space",
            _obs("batch", lambda s: s.astype(str) + " "),
            UNKNOWN_BATCH,
            None,
        ),
        Query("an unknown batch 'c'", _obs("batch", lambda s: ["c"] * len(s)), UNKNOWN_BATCH, None),
        Query("covariate 'depth' missing", _drop("depth"), ("depth",)),
        Query(
            "covariate 'depth' as text", _obs("depth", lambda s: s.astype(str)), ("depth",), None
        ),
        Query("covariate 'depth' NaN in one cell", _obs("depth", _nan_at_first), ("depth",)),
        Query("covariate 'depth' infinite", _obs("depth", lambda s: s * np.inf), ("depth",)),
        Query("covariate 'depth' 1e300", _obs("depth", lambda s: s * 1e300), ("depth",), None),
        Query(
            "covariate 'depth' integers", _obs("depth", lambda s: s.round().astype(int)), rows=None
        ),
        Query(
            "covariate 'depth' categorical",
            _obs("depth", lambda s: pd.Categorical(s.round(1))),
            ("depth",),
            None,
        ),
        Query(
            "a NumPy array, not an AnnData", lambda q: q.layers["counts"].toarray(), ("anndata",)
        ),
        Query("a DataFrame, not an AnnData", lambda q: q.to_df("counts"), ("anndata",)),
        Query("None", lambda q: None, ("anndata",)),
    ]


def _counts_csc(query):
    query = query.copy()
    query.layers["counts"] = sp.csc_matrix(query.layers["counts"])
    return query


def _no_layer(query):
    query = query.copy()
    query.X = query.layers["counts"].copy()
    del query.layers["counts"]
    return query


def _zero_row(values: np.ndarray) -> np.ndarray:
    values[3] = 0
    return values


def _repeated_obs(query):
    query = query.copy()
    query.obs_names = ["same"] * query.n_obs
    return query


def query_cases(lab) -> list[Case]:
    """Each query through ``transform``, ``map_query`` and ``normalized_expression``."""
    cases = []
    for query in queries():
        for surface, call, expected in (
            ("transform", lab.face.transform, lab.baseline),
            ("map_query", lambda a: lab.map_query(a), lab.baseline),
            ("normalized_expression", _expression(lab), lab.expression),
        ):
            names = query.names
            if surface == "map_query" and names == UNKNOWN_BATCH:
                names = None  # a new batch is what map_query learns
            run = _embedding_check(lab, query, call, expected, surface)
            cases.append(Case(surface, query.name, run, names))
    return cases


def _expression(lab):
    def call(adata):
        return lab.face.normalized_expression(adata, n_samples=3).to_numpy()

    return call


def _embedding_check(lab, query: Query, call, expected: np.ndarray, surface: str):
    """The call on ``query`` checked: its rows of the clean query's result, or finite."""

    def run():
        result = call(query.make(lab.query.copy()))
        wanted = np.asarray(expected)
        if query.prior:
            kept = [row for row in range(lab.query.n_obs) if row not in query.prior]
            at_prior = np.asarray(result)[query.prior]
            if surface == "normalized_expression":
                prior = np.asarray(lab.prior_expression)[query.prior]
                check_close(at_prior, prior, "cells at the prior", rtol=1e-4, atol=1e-6)
            check_finite(at_prior, surface)
            result, wanted = np.asarray(result)[kept], wanted[kept]
        if query.rows is None or (surface == "map_query" and query.names == UNKNOWN_BATCH):
            check_finite(result, surface)
        elif len(wanted):
            rtol = 1e-4 if surface == "normalized_expression" else 1e-6
            rows = slice(None) if query.prior else query.rows
            check_close(result, wanted[rows], surface, rtol=rtol, atol=1e-6)
        return result

    return run


def argument_cases(lab) -> list[Case]:
    """Arguments of ``transform``, ``map_query`` and the gene-reading methods."""
    face, query = lab.face, lab.query
    cases = []

    def add(surface: str, name: str, call, names, check=check_finite) -> None:
        def run():
            result = call()
            check(
                np.asarray(result, float)
                if not hasattr(result, "to_numpy")
                else result.select_dtypes("number").to_numpy(),
                name,
            )
            return result

        cases.append(Case(surface, name, run, names))

    for value in (0, -3, 2.5, "10", True, None, np.nan):
        add(
            "transform",
            f"iterations={value!r}",
            lambda v=value: face.transform(query.copy(), iterations=v),
            ("iterations",),
        )
        add(
            "map_query",
            f"iterations={value!r}",
            lambda v=value: lab.map_query(query.copy(), iterations=v),
            ("iterations",),
        )
    for value in (0, -1, 1.5, "5", None):
        add(
            "map_query",
            f"fit_cells={value!r}",
            lambda v=value: lab.map_query(lab.new_batch(), fit_cells=v),
            ("fit_cells",),
        )
    add("transform", "iterations=1", lambda: face.transform(query.copy(), iterations=1), None)
    add(
        "map_query",
        "fit_cells=1 with a new batch",
        lambda: lab.map_query(lab.new_batch(), fit_cells=1),
        None,
    )
    add(
        "map_query",
        "a new batch of one cell",
        lambda: lab.map_query(lab.new_batch()[:1].copy()),
        None,
    )
    add("transform", "unfitted model", lambda: type(face)(2).transform(query.copy()), ("fit",))
    cases += _expression_arguments(lab, add)
    cases += _de_arguments(lab, add)
    cases += _label_arguments(lab, add)
    return cases


def _expression_arguments(lab, add) -> list[Case]:
    face, query = lab.face, lab.query

    def expression(**options):
        return lambda: face.normalized_expression(query.copy(), **{"n_samples": 3, **options})

    bad = [
        ("genes=['nope']", dict(genes=["nope"]), ("genes", "nope")),
        ("genes=[]", dict(genes=[]), ("genes", "empty")),
        ("genes='gene1' (one name)", dict(genes="gene1"), ("genes",)),
        ("genes=['gene1', 'gene1']", dict(genes=["gene1", "gene1"]), ("genes", "twice", "repeat")),
        ("transform_batch='zz'", dict(transform_batch="zz"), ("transform_batch", "zz")),
        ("transform_batch=['a', 'zz']", dict(transform_batch=["a", "zz"]), ("transform_batch",)),
        ("transform_batch=[]", dict(transform_batch=[]), ("transform_batch",)),
        ("library_size=0", dict(library_size=0), ("library_size",)),
        ("library_size=-1", dict(library_size=-1), ("library_size",)),
        ("library_size=nan", dict(library_size=np.nan), ("library_size",)),
        ("library_size='big'", dict(library_size="big"), ("library_size",)),
        ("library_size=True", dict(library_size=True), ("library_size",)),
        ("n_samples=0", dict(n_samples=0), ("n_samples",)),
        ("n_samples=-2", dict(n_samples=-2), ("n_samples",)),
        ("n_samples=2.5", dict(n_samples=2.5), ("n_samples",)),
        ("seed=-1", dict(seed=-1), ("seed",)),
        ("seed='x'", dict(seed="x"), ("seed",)),
        ("block_size=0", dict(block_size=0), ("block_size",)),
        ("transform_covariates={'nope': 1}", dict(transform_covariates={"nope": 1}), ("nope",)),
        (
            "transform_covariates={'depth': 'x'}",
            dict(transform_covariates={"depth": "x"}),
            ("depth",),
        ),
        (
            "transform_covariates={'depth': nan}",
            dict(transform_covariates={"depth": np.nan}),
            ("depth",),
        ),
        (
            "transform_covariates={'batch': 'a'}",
            dict(transform_covariates={"batch": "a"}),
            ("batch", "transform_batch"),
        ),
        ("an unknown keyword", dict(colour="red"), ("colour", "argument", "keyword")),
    ]
    for name, options, names in bad:
        add(
            "normalized_expression",
            name,
            lambda o=options: face.normalized_expression(query.copy(), **{"n_samples": 3, **o}),
            names,
        )
    good = [
        ("transform_batch='b'", dict(transform_batch="b")),
        ("transform_batch=['a', 'b']", dict(transform_batch=["a", "b"])),
        ("library_size='latent'", dict(library_size="latent")),
        ("library_size=1e4", dict(library_size=1e4)),
        ("block_size=3", dict(block_size=3)),
        ("transform_covariates={'depth': 1.5}", dict(transform_covariates={"depth": 1.5})),
    ]
    for name, options in good:
        add("normalized_expression", name, expression(**options), None)
    add(
        "normalized_expression",
        "return_variance=True",
        lambda: np.concatenate(
            [
                f.to_numpy()
                for f in face.normalized_expression(query.copy(), n_samples=3, return_variance=True)
            ]
        ),
        None,
    )
    add(
        "normalized_expression",
        "output= a file",
        lambda: face.normalized_expression(query.copy(), n_samples=3, output=lab.a_file()),
        ("output", "file", "folder"),
    )
    for overwrite in (False, True):
        add(
            "normalized_expression",
            f"output holding an earlier run's arrays, overwrite={overwrite}",
            _expression_over_earlier(lab, overwrite),
            ("overwrite", "earlier") if not overwrite else None,
        )
    add(
        "normalized_expression",
        "a path that does not exist",
        lambda: face.normalized_expression(str(lab.root / "nope.h5ad")),
        ("nope.h5ad", "file"),
    )
    return []


def _expression_over_earlier(lab, overwrite: bool):
    """``output=`` a folder holding an earlier call's arrays: kept unless ``overwrite``."""

    def run():
        folder = lab.folder("expression")
        earlier = folder / "normalized_expression.npy"
        np.save(earlier, np.arange(3.0))
        before = snapshot(folder)
        options = {"overwrite": True} if overwrite else {}
        written = lab.face.normalized_expression(
            lab.query.copy(), n_samples=3, output=folder, **options
        )
        if not overwrite:
            check_kept(before, folder)
        check_close(written, lab.expression, "the written expression", rtol=1e-4, atol=1e-6)
        return written

    return run


def _de_arguments(lab, add) -> list[Case]:
    face, cells = lab.face, lab.cells

    def de(*args, **options):
        return lambda: face.differential_expression(
            cells.copy(), *args, **{"n_samples": 50, **options}
        )

    bad = [
        ("groupby='nope'", ("nope",), {}, ("nope",)),
        ("group1='zz'", ("kind", "zz"), {}, ("zz",)),
        ("group1 = group2", ("kind", "t0", "t0"), {}, ("t0", "same", "itself")),
        ("group2='zz'", ("kind", "t0", "zz"), {}, ("zz",)),
        ("delta=-1", ("kind",), dict(delta=-1), ("delta",)),
        ("delta=nan", ("kind",), dict(delta=np.nan), ("delta",)),
        ("fdr_target=0", ("kind",), dict(fdr_target=0), ("fdr_target",)),
        ("fdr_target=1.5", ("kind",), dict(fdr_target=1.5), ("fdr_target",)),
        ("n_samples=0", ("kind",), dict(n_samples=0), ("n_samples",)),
        ("genes=['nope']", ("kind",), dict(genes=["nope"]), ("nope", "genes")),
        ("seed=-5", ("kind",), dict(seed=-5), ("seed",)),
    ]
    for name, args, options, names in bad:
        add("differential_expression", name, de(*args, **options), names)
    add(
        "differential_expression",
        "groupby with one category only",
        _one_group_de(lab),
        ("one", "categor", "group"),
    )
    add(
        "differential_expression",
        "groupby with a missing label, one against the rest",
        _nan_group_de(lab),
        ("without a label", "group1"),  # the rest would silently leave the unlabelled out
    )
    add("differential_expression", "groupby='kind'", de("kind"), None)
    add(
        "differential_expression",
        "groupby='batch', batch_correction=False",
        de("batch", batch_correction=False),
        None,
    )
    return []


def _one_group_de(lab):
    def call():
        cells = lab.cells.copy()
        cells.obs["one"] = "x"
        return lab.face.differential_expression(cells, "one", n_samples=50)

    return call


def _nan_group_de(lab):
    def call():
        cells = lab.cells.copy()
        cells.obs["kind2"] = _nan_at_first(cells.obs["kind"].astype(str))
        return lab.face.differential_expression(cells, "kind2", n_samples=50)

    return call


def _label_arguments(lab, add) -> list[Case]:
    face, cells, query = lab.face, lab.cells, lab.query

    def transfer(reference=None, labels_key="kind", target=None, **options):
        return lambda: face.transfer_labels(
            (reference or cells).copy(),
            (target if target is not None else query).copy(),
            labels_key,
            **options,
        )

    bad = [
        ("labels_key='nope'", dict(labels_key="nope"), ("nope",)),
        ("groups_key='nope'", dict(groups_key="nope"), ("nope",)),
        ("num_neighbours=0", dict(num_neighbours=0), ("num_neighbours",)),
        ("num_neighbours=-1", dict(num_neighbours=-1), ("num_neighbours",)),
        ("n_samples=0", dict(n_samples=0), ("n_samples",)),
        ("seed='x'", dict(seed="x"), ("seed",)),
        ("key_added='a/b'", dict(key_added="a/b"), ("key_added",)),
    ]
    for name, options, names in bad:
        add("transfer_labels", name, transfer(**options), names)
    add(
        "transfer_labels",
        "every label missing",
        _labels_with(lab, lambda s: [np.nan] * len(s)),
        ("label", "missing", "nan"),
    )
    add(
        "transfer_labels",
        "one label only",
        _labels_with(lab, lambda s: ["x"] * len(s)),
        ("one", "label", "class"),
    )
    add("transfer_labels", "some labels missing", _labels_with(lab, _nan_at_first), None)
    add(
        "transfer_labels",
        "num_neighbours above the reference's cells",
        transfer(num_neighbours=500),
        ("num_neighbours",),
    )
    add(
        "transfer_labels",
        "query missing a fitted gene",
        transfer(target=query[:, :-1]),
        ("lack", "gene"),
    )
    add(
        "transfer_labels",
        "query with a NaN count",
        lambda: face.transfer_labels(cells.copy(), _entry(np.nan)(query.copy()), "kind"),
        COUNT + ("nan",),
    )
    add("transfer_labels", "reference as query", transfer(target=cells), None)
    return []


def _labels_with(lab, values_of):
    def call():
        cells = lab.cells.copy()
        cells.obs["labels"] = values_of(cells.obs["kind"].astype(str))
        return lab.face.transfer_labels(cells, lab.query.copy(), "labels")

    return call
