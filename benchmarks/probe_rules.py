"""The probe's cases of the decision rules and the queries the latest surfaces add: the DE rule's
options and groupings (``min_detection``, ``delta``, ``fdr_target``, ``batch_correction``,
groups with missing labels, continuous columns, one-cell groups), label transfer's calibration
inputs (``unassigned_below``, ``flagged_key``, ``unlabelled_category``, a reference of one
batch) and queries lacking fitted genes (``missing_genes="marginalise"``)
(benchmarks/probe.py).

Every valid call's result is checked against what its documentation promises: a DE table's
probabilities lie in [0, 1], the genes it declares have a posterior expected FDR at most
``fdr_target`` and are detected in at least ``min_detection`` of a group's cells, its raw
statistics are those of the groups' cells; transferred labels are the most probable, or
"unassigned" exactly where that probability is below ``unassigned_below`` or the cell is
flagged; an embedding with genes marginalised does not depend on the order of the genes or of
the cells, and equals ``transform``'s where no gene is missing."""

from __future__ import annotations

import numpy as np
import pandas as pd
from probe_kit import Case, Wrong, check_close, check_finite

NUMBER_BAD = (np.nan, np.inf, "0.1", True, [0.1])
"""Values of a numeric option that are not a usable number."""

BOOL_BAD = ("yes", "no", "True", 1, 0, 0.5, [True])
"""Values of a boolean option that are not booleans."""

UNASSIGNED = "unassigned"


def _not_refused(names, name: str) -> None:
    """A :class:`Wrong` for a call that answered where it should have been refused (``names``:
    the words its refusal names; None: an answer is expected)."""
    if names is not None:
        raise Wrong(f"{name}: answered, not refused")


def _shown(value) -> str:
    """``value`` as a case names it: NumPy's scalars by their type (``np.False_`` is not
    ``False``)."""
    return f"np.{type(value).__name__}({value!r})" if isinstance(value, np.generic) else repr(value)


def rule_cases(lab) -> list[Case]:
    """The DE rule's options and groupings, with each estimator."""
    cases: list[Case] = []
    for estimator in ("groups", "pairs"):
        cases += _de_option_cases(lab, estimator)
        cases += _de_grouping_cases(lab, estimator)
    return cases


def _de(lab, cells=None, *args, **options):
    """``differential_expression`` of the training cells (or ``cells``) with few draws."""
    samples = 20 if options.get("estimator") == "groups" else 200
    data = (cells if cells is not None else lab.cells).copy()
    return lab.face.differential_expression(data, *args, **{"n_samples": samples, **options})


def _de_case(lab, name, args, options, names, cells=None, check=None, *, estimator="groups"):
    """A DE case: refused naming one of ``names`` (a table is then silently wrong: e.g. the
    string "no" read as True), or (``names`` None) a table that keeps the rule's promises."""
    options = {"estimator": estimator, **options}

    def run():
        data = cells() if callable(cells) else cells
        table = _de(lab, data, *args, **options)
        _not_refused(names, name)
        _check_de_table(table, options, len(lab.face.gene_names))
        if check is not None:
            check(table, data if data is not None else lab.cells)
        return table

    return Case("de_rules", f"{name} [{estimator}]", run, names)


def _check_de_table(table: pd.DataFrame, options: dict, genes: int) -> None:
    """A :class:`Wrong` where a DE table breaks what the rule promises."""
    if len(table) == 0 or len(table) % genes:
        raise Wrong(f"{len(table)} rows, not a multiple of the {genes} genes")
    target = options.get("fdr_target", 0.05)
    declared_column = [c for c in table.columns if c.startswith("is_de_fdr_")]
    if len(declared_column) != 1:
        raise Wrong(f"declared columns {declared_column}")
    proba = table["proba_de"].to_numpy(float)
    check_finite(proba, "proba_de")
    if (proba < 0).any() or (proba > 1).any():
        raise Wrong("proba_de outside [0, 1]")
    check_close(table["proba_not_de"], 1 - proba, "proba_not_de = 1 - proba_de", 1e-9, 1e-9)
    check_finite(table["lfc_mean"], "lfc_mean")
    detection = options.get("min_detection", 0.0)
    for _, part in table.groupby("comparison", sort=False):
        declared = part[declared_column[0]].to_numpy(bool)
        if declared.any() and part["proba_not_de"][declared].mean() > target + 1e-9:
            raise Wrong(f"declared genes' expected FDR above fdr_target={target}")
        detected = np.maximum(part["non_zeros_proportion1"], part["non_zeros_proportion2"])
        if (declared & (detected.to_numpy() < detection)).any():
            raise Wrong(f"a gene detected in under min_detection={detection} of cells declared")
    if options.get("delta") is not None:
        check_close(table["delta"], np.full(len(table), float(options["delta"])), "delta")
    choice = options.get("batch_correction")
    if choice is not None and bool(table["batch_correction"].iloc[0]) != bool(choice):
        raise Wrong(f"batch_correction={_shown(choice)} but the table says otherwise")


DE_OPTIONS = {
    # option: (valid values, values to refuse naming it, an option of the groups' alone)
    "min_detection": ((0, 0.01, 0.5, 0.99), (-0.1, 1.0, 1.5, None) + NUMBER_BAD, False),
    "delta": ((None, 0.01, 0.25, 1.0, 20), (-1, 0, 21) + NUMBER_BAD, False),
    "fdr_target": ((1e-6, 0.05, 0.5, 0.999), (0, 1, -0.1, 1.5, None) + NUMBER_BAD, False),
    "batch_correction": ((True, False, None, np.True_, np.False_), BOOL_BAD, False),
    "counts": ((True, False), BOOL_BAD[:3] + (None,), True),
    "weights": (("uniform", "importance"), ("nope", None), False),
    "prior": ((None, "flat", "adaptive"), ("nope", "Flat"), False),
    "prior_counts": ((0, 2.0), (-1, np.nan, "2"), True),
}
"""The DE rule's options probed, with the values that are valid and those to be refused."""


def _de_option_cases(lab, estimator: str) -> list[Case]:
    cases = []
    for option, (good, bad, groups_only) in DE_OPTIONS.items():
        if groups_only and estimator == "pairs":
            continue
        for value, names in [(v, None) for v in good] + [(v, (option,)) for v in bad]:
            name, options = f"{option}={_shown(value)}", {option: value}
            cases.append(_de_case(lab, name, ("kind",), options, names, estimator=estimator))
    return cases


def _relabelled(lab, column: str, values_of):
    """The training cells with ``obs[column]`` = ``values_of(cells)``."""

    def make():
        cells = lab.cells.copy()
        cells.obs[column] = values_of(cells)
        return cells

    return make


def _kind_with(missing: list[int], as_none: bool = False):
    def values(cells):
        labels = cells.obs["kind"].astype(object).to_numpy().copy()
        for row in missing:
            labels[row] = None if as_none else np.nan
        return labels if as_none else pd.Categorical(labels)

    return values


def _raw_means_of_named_groups(table: pd.DataFrame, cells) -> None:
    """The raw means are those of the labelled cells of each named group (the unlabelled left
    out)."""
    counts = cells.layers["counts"].toarray()
    labels = cells.obs["g"].astype(object)
    for group, column in (("t0", "raw_mean1"), ("t1", "raw_mean2")):
        expected = pd.Series(counts[(labels == group).to_numpy()].mean(axis=0), cells.var_names)
        check_close(table[column], expected[table.index], f"{column} of group {group}", 1e-6)


def _de_grouping_cases(lab, estimator: str) -> list[Case]:
    missing = ("label", "nan", "group1")
    one_cell = ("cell(s)", "at least")
    continuous = ("continuous", "bin")
    rows = [
        # name, groupby column values, args after groupby, names, check
        ("one label missing (NaN), one against the rest", _kind_with([0]), (), missing, None),
        (
            "one label missing (None), one against the rest",
            _kind_with([0], True),
            (),
            missing,
            None,
        ),
        ("three labels missing, group1='t0' only", _kind_with([0, 1, 2]), ("t0",), missing, None),
        (
            "one label missing, both groups named",
            _kind_with([0]),
            ("t0", "t1"),
            None,
            _raw_means_of_named_groups,
        ),
        (
            "half the labels missing, both groups named",
            _kind_with(list(range(0, 40, 2))),
            ("t0", "t1"),
            None,
            _raw_means_of_named_groups,
        ),
        ("every label missing", _kind_with(list(range(40))), (), ("no label",), None),
        ("group1=NaN", _kind_with([0]), (np.nan, "t1"), ("nan", "group", "categor"), None),
        ("continuous: a float per cell", lambda c: c.obs["depth"].to_numpy(), (), continuous, None),
        (
            "continuous: the cells' names",
            lambda c: c.obs_names.to_numpy(),
            (),
            continuous + ("identifier",),
            None,
        ),
        (
            "continuous: rounded to 1 decimal (few values, one-cell groups)",
            lambda c: c.obs["depth"].round(1).to_numpy(),
            (),
            one_cell + continuous,
            None,
        ),
        ("integers 0/1", lambda c: (c.obs["kind"] == "t1").astype(int).to_numpy(), (), None, None),
        ("booleans", lambda c: (c.obs["kind"] == "t1").to_numpy(), (), None, None),
        ("one-cell group1", _solo(1), ("solo", "t0"), one_cell, None),
        ("one-cell group2", _solo(1), ("t0", "solo"), one_cell, None),
        ("a one-cell group among others, one against the rest", _solo(1), (), one_cell, None),
        ("a two-cell group1", _solo(2), ("solo", "t0"), None, None),
        (
            "a category without cells, one against the rest",
            lambda c: c.obs["kind"].cat.add_categories(["empty"]),
            (),
            ("0 cell", "empty"),
            None,
        ),
        (
            "a category without cells, the others named",
            lambda c: c.obs["kind"].cat.add_categories(["empty"]),
            ("t0", "t1"),
            None,
            None,
        ),
        ("one category only", lambda c: ["x"] * c.n_obs, (), ("group", "two"), None),
        ("group1 a list of both", lambda c: c.obs["kind"], (["t0", "t1"],), None, None),
        ("group1 a list with an unknown", lambda c: c.obs["kind"], (["t0", "zz"],), ("zz",), None),
    ]
    cases = []
    for name, values_of, args, names, check in rows:
        cases.append(
            _de_case(
                lab,
                f"groupby {name}",
                ("g", *args),
                {},
                names,
                _relabelled(lab, "g", values_of),
                check,
                estimator=estimator,
            )
        )
    for choice in (True, False, None):
        cases.append(
            _de_case(
                lab,
                f"groupby the batch key, batch_correction={choice}",
                ("batch",),
                {"batch_correction": choice},
                None,
                estimator=estimator,
            )
        )
    return cases


def _solo(size: int):
    def values(cells):
        labels = cells.obs["kind"].astype(str).to_numpy().copy()
        labels[:size] = "solo"
        return labels

    return values


def label_cases(lab) -> list[Case]:
    """Label transfer's calibration inputs, with and without groups held out in turn."""
    cases = []
    for groups_key in (None, "batch"):
        cases += _threshold_cases(lab, groups_key)
        cases += _flag_cases(lab, groups_key)
        cases += _unlabelled_cases(lab, groups_key)
    cases += _reference_cases(lab)
    return cases


def _transfer_case(lab, name, names, reference=None, query=None, **options):
    """A label transfer case: refused naming one of ``names``, or labels that keep the rule's
    promises (:func:`_check_transfer`)."""

    def run():
        ref = reference() if reference is not None else lab.cells.copy()
        target = query() if query is not None else lab.query.copy()
        probabilities = lab.face.transfer_labels(
            ref, target, "kind", **{"n_samples": 5, "num_neighbours": 10, **options}
        )
        _not_refused(names, name)
        _check_transfer(probabilities, target, ref, options)
        return probabilities

    groups = options.get("groups_key")
    return Case("label_calibration", f"{name} [groups_key={groups!r}]", run, names)


def _check_transfer(probabilities: pd.DataFrame, query, reference, options: dict) -> None:
    values = probabilities.to_numpy(float)
    check_finite(values, "probabilities")
    if values.shape[0] != query.n_obs or (values < -1e-12).any():
        raise Wrong(f"probabilities of shape {values.shape}, or negative")
    check_close(values.sum(axis=1), np.ones(len(values)), "the probabilities' sums", 1e-6, 1e-6)
    left_out = options.get("unlabelled_category")
    left_out = [] if left_out is None else left_out if isinstance(left_out, list) else [left_out]
    labels = set(reference.obs["kind"].dropna().astype(str)) - {str(u) for u in left_out}
    if set(map(str, probabilities.columns)) != labels:
        raise Wrong(f"labels {sorted(probabilities.columns)}, expected {sorted(labels)}")
    key = options.get("key_added") or "kind_transferred"
    written = query.obs[key].astype(str).to_numpy()
    best = probabilities.to_numpy(float).max(axis=1)
    check_close(query.obs[key + "_probability"], best, "the written probability", 1e-6, 1e-9)
    flagged = (
        query.obs[options["flagged_key"]].to_numpy(bool)
        if options.get("flagged_key")
        else np.zeros(query.n_obs, bool)
    )
    unassigned = flagged | (best < float(options.get("unassigned_below", 0.0)))
    argmax = probabilities.columns.astype(str).to_numpy()[probabilities.to_numpy().argmax(axis=1)]
    expected = np.where(unassigned, UNASSIGNED, argmax)
    if (written != expected).any():
        wrong = int((written != expected).sum())
        raise Wrong(f"{wrong} cells' written label is not the most probable or 'unassigned'")


def _threshold_cases(lab, groups_key) -> list[Case]:
    good = (0, 0.0, 0.3, 0.5, 0.99, 1.0, np.float32(0.5))
    bad = (-0.1, 1.1, None, "0.5") + NUMBER_BAD[:2] + (True, [0.5])
    return [
        _transfer_case(
            lab,
            f"unassigned_below={_shown(value)}",
            names,
            groups_key=groups_key,
            unassigned_below=value,
        )
        for value, names in [(v, None) for v in good] + [(v, ("unassigned_below",)) for v in bad]
    ]


def _flagged(lab, values_of):
    """The clean query with ``obs["novel"]`` = ``values_of(cells)``."""

    def make():
        query = lab.query.copy()
        query.obs["novel"] = values_of(query.n_obs)
        return query

    return make


def _flag_cases(lab, groups_key) -> list[Case]:
    column = ("novel", "flagged_key")
    rows = [
        ("some cells flagged", lambda n: np.arange(n) % 3 == 0, None),
        ("every cell flagged", lambda n: np.ones(n, bool), None),
        ("no cell flagged", lambda n: np.zeros(n, bool), None),
        ("a pandas boolean column", lambda n: pd.array(np.arange(n) % 2 == 0, "boolean"), None),
        ("flags as 0/1 integers", lambda n: (np.arange(n) % 2).astype(int), column),
        ("flags as text", lambda n: np.where(np.arange(n) % 2, "yes", "no"), column),
        ("flags as floats with a NaN", lambda n: np.r_[np.nan, np.ones(n - 1)], column),
        ("flags as objects with a None", lambda n: np.array([None] + [True] * (n - 1)), column),
        ("flags categorical True/False", lambda n: pd.Categorical(np.arange(n) % 2 == 0), None),
    ]
    cases = [
        _transfer_case(
            lab,
            f"flagged_key: {name}",
            names,
            query=_flagged(lab, values),
            groups_key=groups_key,
            flagged_key="novel",
        )
        for name, values, names in rows
    ]
    cases.append(
        _transfer_case(
            lab,
            "flagged_key a column the query lacks",
            column,
            groups_key=groups_key,
            flagged_key="novel",
        )
    )
    cases.append(
        _transfer_case(
            lab, "flagged_key=5", ("flagged_key", "5"), groups_key=groups_key, flagged_key=5
        )
    )
    cases.append(
        _transfer_case(
            lab,
            "flagged cells and unassigned_below=0.6",
            None,
            query=_flagged(lab, lambda n: np.arange(n) < 2),
            groups_key=groups_key,
            flagged_key="novel",
            unassigned_below=0.6,
        )
    )
    return cases


def _unknown_labels(share: int, label: str = "Unknown"):
    """The reference with every ``share``-th cell's label ``label``."""

    def make(lab):
        cells = lab.cells.copy()
        labels = cells.obs["kind"].astype(str).to_numpy().copy()
        labels[::share] = label
        cells.obs["kind"] = pd.Categorical(labels)
        return cells

    return make


def _unlabelled_cases(lab, groups_key) -> list[Case]:
    rows = [
        ("'Unknown' (a fifth of the cells)", _unknown_labels(5), "Unknown", None),
        ("['Unknown'] a list", _unknown_labels(5), ["Unknown"], None),
        ("a category no cell has", None, "Nope", None),
        ("[] an empty list", None, [], None),
        ("'t1' (leaving one label)", None, "t1", ("one", "label")),
        ("['t0', 't1'] (every label)", None, ["t0", "t1"], ("no label", "label")),
        ("'Unknown' on every cell", _unknown_labels(1), "Unknown", ("no label", "label")),
        ("a number 5 (one label no cell has)", None, 5, None),
        ("'unassigned' labels left out", _unknown_labels(4, UNASSIGNED), UNASSIGNED, None),
        ("'unassigned' labels kept as a type", _unknown_labels(4, UNASSIGNED), None, (UNASSIGNED,)),
    ]
    cases = []
    for name, make, value, names in rows:
        reference = (lambda m=make: m(lab)) if make is not None else None
        cases.append(
            _transfer_case(
                lab,
                f"unlabelled_category {name}",
                names,
                reference=reference,
                groups_key=groups_key,
                unlabelled_category=value,
            )
        )
    return cases


def _reference_cases(lab) -> list[Case]:
    def one_batch():
        cells = lab.cells.copy()
        cells.obs["batch"] = pd.Categorical(["a"] * cells.n_obs)
        return cells

    def one_cell_groups():
        cells = lab.cells.copy()
        cells.obs["single"] = cells.obs_names.to_numpy()
        return cells

    cases = []
    for calibration in ("bias", None):
        cases.append(
            _transfer_case(
                lab,
                f"a reference of one batch, calibration={calibration}",
                None,
                reference=one_batch,
                groups_key="batch",
                calibration=calibration,
            )
        )
        cases.append(
            _transfer_case(
                lab,
                f"groups of one cell each, calibration={calibration}",  # leave-one-out: valid
                None,
                reference=one_cell_groups,
                groups_key="single",
                calibration=calibration,
            )
        )
    for value in ("nope", True, "Bias"):
        cases.append(
            _transfer_case(lab, f"calibration={value!r}", ("calibration",), calibration=value)
        )
    cases.append(
        _transfer_case(lab, "groups_key a column the reference lacks", ("nope",), groups_key="nope")
    )
    return cases


def missing_gene_cases(lab) -> list[Case]:
    """Queries lacking fitted genes through ``transform`` and ``map_query``."""
    cases = []
    for surface in ("transform", "map_query"):
        cases += _missing_queries(lab, surface)
        cases += _missing_options(lab, surface)
    return cases + _new_batch_orders(lab)


def _embed(lab, surface: str, query, **options):
    if surface == "transform":
        return np.asarray(lab.face.transform(query, **options))
    return np.asarray(lab.map_query(query, **options))


def _drop_genes(query, drop: list[int], order=None):
    keep = [j for j in range(query.n_vars) if j not in drop]
    if order is not None:
        keep = list(np.asarray(keep)[order(len(keep))])
    return query[:, keep].copy()


def _missing_queries(lab, surface: str) -> list[Case]:
    cases = []
    reference: dict = {}

    def marginalised(drop: tuple[int, ...]) -> np.ndarray:
        """The marginalised embedding of the clean query lacking genes ``drop`` (once)."""
        if drop not in reference:
            got = _embed(
                lab, surface, _drop_genes(lab.query, list(drop)), missing_genes="marginalise"
            )
            check_finite(got, "the marginalised embedding")
            reference[drop] = got
        return reference[drop]

    def add(name, make, drop, rows=slice(None), names=None, compare=True):
        def run():
            got = _embed(lab, surface, make(), missing_genes="marginalise")
            _not_refused(names, name)
            if compare:
                check_close(got, marginalised(drop)[rows], name, 1e-6, 1e-6)
            else:
                check_finite(got, name)
            return got

        cases.append(Case("missing_genes", f"{surface}: {name}", run, names))

    query = lab.query
    for drop in ((7,), (0,), (0, 7), (1, 3, 5), (0, 1, 2, 3), tuple(range(6))):
        add(
            f"genes {list(drop)} missing",
            lambda d=drop: _drop_genes(query, list(d)),
            drop,
            compare=False,
        )
        add(
            f"genes {list(drop)} missing, the rest reversed",
            lambda d=drop: _drop_genes(query, list(d), lambda n: np.arange(n)[::-1]),
            drop,
        )
        add(
            f"genes {list(drop)} missing, cells reversed",
            lambda d=drop: _drop_genes(query, list(d))[::-1].copy(),
            drop,
            slice(None, None, -1),
        )
    add(
        "genes [0] missing, one cell",
        lambda: _drop_genes(query, [0])[3:4].copy(),
        (0,),
        slice(3, 4),
    )
    add("no gene missing", lambda: query.copy(), (), names=None)

    def full_equals_baseline():
        got = _embed(lab, surface, query.copy(), missing_genes="marginalise")
        check_close(got, lab.baseline, "marginalise with every gene", 1e-6, 1e-6)
        return got

    cases.append(
        Case(
            "missing_genes", f"{surface}: every gene present equals transform", full_equals_baseline
        )
    )

    def near_full(drop):
        def run():
            got = marginalised(drop)
            variance = query.copy()
            full = _embed(lab, "transform", variance)
            sd = np.sqrt(variance.obsm["X_gplvm_var"])
            if np.any(np.abs(got - full) > 4 * sd):
                raise Wrong(f"lacking genes {list(drop)} moves cells by over 4 posterior sd")
            return got

        return run

    cases.append(
        Case(
            "missing_genes", f"{surface}: gene 7 missing within 4 sd of all genes", near_full((7,))
        )
    )
    lacking, repeated = ("lack", "gene", "share"), ("twice", "repeat", "duplicate", "unique")
    for name, make, names in (
        ("every fitted gene missing", lambda: query[:, :0].copy(), lacking),
        ("every fitted gene missing (other names)", lambda: _renamed(query, "other"), lacking),
        ("one gene left", lambda: _drop_genes(query, list(range(7))), lacking),
        ("names in upper case", lambda: _renamed(query, "GENE"), lacking),
        ("a present gene named twice", lambda: _named(query, {1: "gene0"}), repeated),
        (
            "a missing gene's name given twice (another gene renamed to it)",
            lambda: _named(_drop_genes(query, [7]), {0: "gene7", 1: "gene7"}),
            repeated,
        ),
    ):
        add(name, make, (), names=names, compare=False)
    add(
        "extra genes besides, one fitted missing",
        lambda: _with_extra(_drop_genes(query, [7])),
        (7,),
    )
    return cases


def _new_batch_orders(lab) -> list[Case]:
    """``map_query`` learning a new batch from cells lacking genes: the same embedding whatever
    the order of the genes or of the cells."""
    cases = []
    for drop in ((7,), (0, 7)):
        for name, order, rows in (
            ("the rest reversed", lambda n: np.arange(n)[::-1], slice(None)),
            ("cells reversed", None, slice(None, None, -1)),
        ):

            def run(drop=drop, order=order, rows=rows, name=name):
                query = lab.new_batch()
                options = {"missing_genes": "marginalise"}
                natural = _embed(lab, "map_query", _drop_genes(query, list(drop)), **options)
                check_finite(natural, "the new batch's embedding")
                other = _drop_genes(query, list(drop), order)[rows].copy()
                got = _embed(lab, "map_query", other, **options)
                check_close(got, natural[rows], f"a new batch, {name}", 1e-5, 1e-6)
                return got

            title = f"map_query: a new batch, genes {list(drop)} missing, {name}"
            cases.append(Case("missing_genes", title, run))
    return cases


def _renamed(query, prefix: str):
    query = query.copy()
    query.var_names = [f"{prefix}{j}" for j in range(query.n_vars)]
    return query


def _named(query, names: dict):
    query = query.copy()
    given = list(query.var_names)
    for j, name in names.items():
        given[j] = name
    query.var_names = given
    return query


def _with_extra(query):
    import anndata
    import scipy.sparse as sp

    extra = anndata.AnnData(
        X=sp.csr_matrix((query.n_obs, 2)), obs=query.obs[[]], var=pd.DataFrame(index=["x0", "x1"])
    )
    extra.layers["counts"] = sp.csr_matrix(np.ones((query.n_obs, 2), np.float32))
    joined = anndata.concat([extra, query], axis=1, merge="first")
    joined.obs = query.obs.copy()
    return joined


def _missing_options(lab, surface: str) -> list[Case]:
    cases = []
    for value in ("marginalize", "drop", "", True, "yes", 1, "Marginalise"):
        for drop in ((), (7,)):

            def run(v=value, d=drop):
                _embed(lab, surface, _drop_genes(lab.query, list(d)), missing_genes=v)
                _not_refused(("missing_genes",), f"missing_genes={v!r}")

            cases.append(
                Case(
                    "missing_genes",
                    f"{surface}: missing_genes={value!r}, genes {list(drop)} missing",
                    run,
                    ("missing_genes",),
                )
            )
    refused = ("lack", "gene7", "marginalise")

    def lacking():
        _embed(lab, surface, _drop_genes(lab.query, [7]))
        _not_refused(refused, "a query lacking gene7")

    cases.append(
        Case("missing_genes", f"{surface}: missing_genes=None, gene 7 missing", lacking, refused)
    )
    return cases
