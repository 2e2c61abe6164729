"""The probe's cases of the ``embed`` command (``python -m gpflow_svi_gplvm embed``): a saved
model embedding an ``.h5ad`` a block at a time, with odd blocks, odd files, odd cells and
outputs that hold a user's or an earlier run's files (benchmarks/probe.py).

A run that succeeds must write the fitted model's embedding of the cells (``transform`` of the
same cells in memory); every run, failed or not, must leave the ``.h5ad`` it read and every file
already in ``--output`` as they were, unless ``--overwrite`` replaced an earlier embedding whole.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from probe_kit import Case, Lost, Wrong, check_close, check_kept, snapshot
from probe_runs import FILE, bad_files, command

SURFACE = "embed command"


def embed_cases(lab) -> list[Case]:
    """Blocks, files, cells and outputs a user might get wrong, each run as the command line."""
    cases: list[Case] = []

    def add(name, run, names):
        cases.append(Case(SURFACE, name, run, names))

    for block in ("1", "3", "10", "4096"):
        add(
            f"--block {block}",
            lambda block=block: _embedded(lab, lab.query, ["--block", block]),
            None,
        )
    for block in ("0", "-2", "abc", "2.5"):
        add(
            f"--block {block}",
            lambda block=block: _embedded(lab, lab.query, ["--block", block]),
            ("block",),
        )
    add("the genes in another order", lambda: _embedded(lab, lab.query[:, ::-1].copy()), None)
    add("one cell", lambda: _embedded(lab, lab.query[:1].copy()), None)
    add("no cells", lambda: _embedded(lab, lab.query[:0].copy()), ("cell", "empty"))
    add(
        "cells in one batch only",
        lambda: _embedded(lab, lab.query[lab.query.obs["batch"] == "a"].copy()),
        None,
    )
    for name, cells, names in _odd_cells(lab):
        add(name, lambda cells=cells: _embedded(lab, cells), names)
    add("a gene lacking", lambda: _embedded(lab, lab.query[:, 1:].copy()), ("gene", "missing"))
    add(
        "a gene lacking, --missing-genes marginalise",
        lambda: _marginalised(lab),
        None,
    )
    for name, make in bad_files(lab).items():
        add(f"--data {name}", lambda make=make: _run(lab, data=make()), FILE + ("h5ad", "exist"))
    add(
        "--model a folder that is not a saved model",
        lambda: _run(lab, model=lab.folder("m")),
        ("model", "saved"),
    )
    add(
        "--model missing",
        lambda: _run(lab, model=lab.root / "no_model"),
        ("model", "exist", "saved"),
    )
    add("--model the .h5ad", lambda: _run(lab, model=lab.atlas), ("model", "saved", "folder"))
    add("--output a file", lambda: _run(lab, output=lab.a_file()), ("output", "file", "folder"))
    add("--output beside a user's file", lambda: _beside_user_file(lab), None)
    add("again into it", lambda: _again(lab, overwrite=False), ("overwrite", "earlier"))
    add("again into it, --overwrite", lambda: _again(lab, overwrite=True), None)
    add(
        "--overwrite, the run fails in its last block",
        lambda: _fails_late(lab),
        ("count", "negative", "cell"),
    )
    return cases


def _odd_cells(lab) -> list[tuple[str, object, tuple[str, ...] | None]]:
    """Queries whose cells or columns are wrong, and what a refusal must name."""
    no_batch = lab.query.copy()
    del no_batch.obs["batch"]
    new_batch = lab.query.copy()
    new_batch.obs["batch"] = "zz"
    no_depth = lab.query.copy()
    del no_depth.obs["depth"]
    nan_depth = lab.query.copy()
    nan_depth.obs["depth"] = np.nan
    no_layer = lab.query.copy()
    del no_layer.layers["counts"]
    negative = _with_counts(lab.query, lambda c: c - 5.0)
    fractional = _with_counts(lab.query, lambda c: c + 0.5)
    nan_counts = _with_counts(lab.query, lambda c: np.where(np.arange(c.shape[1]) == 2, np.nan, c))
    zero_cell = _with_counts(lab.query, lambda c: np.where(np.arange(len(c))[:, None] == 0, 0.0, c))
    dense = lab.query.copy()
    dense.layers["counts"] = dense.layers["counts"].toarray()
    integer = lab.query.copy()
    integer.layers["counts"] = sp.csr_matrix(integer.layers["counts"].toarray().astype(np.int64))
    duplicated = lab.query.copy()
    duplicated.var_names = ["gene0"] * 2 + list(duplicated.var_names[2:])
    return [
        ("no batch column", no_batch, ("batch",)),
        ("a batch the model never saw", new_batch, ("batch", "zz", "map_query")),
        ("no depth column (a covariate)", no_depth, ("depth", "covariate")),
        ("NaN depth", nan_depth, ("depth", "nan", "finite")),
        ("no counts layer", no_layer, ("counts", "layer")),
        ("negative counts", negative, ("negative", "count")),
        ("counts with fractions", fractional, ("integer", "count", "whole")),
        ("NaN counts", nan_counts, ("nan", "count", "finite")),
        ("a cell without counts", zero_cell, ("count", "zero", "library")),
        ("dense counts", dense, None),
        ("integer counts", integer, None),
        ("a gene name twice", duplicated, ("gene0", "duplicate", "unique", "twice")),
    ]


def _with_counts(cells, change):
    changed = cells.copy()
    changed.layers["counts"] = sp.csr_matrix(change(cells.layers["counts"].toarray()))
    return changed


def _run(
    lab,
    data: Path | None = None,
    model: Path | None = None,
    output: Path | None = None,
    extra: tuple[str, ...] = (),
) -> Path:
    """The command on ``data`` (the clean query written to a file) into ``output``; a
    :class:`Lost` when the file it read or the saved model changed."""
    data = data or _written(lab, lab.query)
    output = output or lab.folder("embed") / "out"
    args = ["embed", "--model", str(model or lab.saved), "--data", str(data)]
    args += ["--output", str(output), "--no-progress", *extra]
    read = {path: snapshot(path) for path in (data, lab.saved)}
    try:
        command(args)
    finally:
        for path, before in read.items():
            check_kept(before, path)
    return output


def _written(lab, cells) -> Path:
    path = lab.folder("query") / "query.h5ad"
    cells.write_h5ad(path)
    return path


def _embedded(lab, cells, extra: list[str] | None = None) -> None:
    """The command on ``cells``: its outputs must be ``transform``'s of the same cells."""
    output = _run(lab, data=_written(lab, cells), extra=tuple(extra or ()))
    _check_outputs(lab, output, cells)


def _check_outputs(lab, output: Path, cells, **options) -> None:
    if cells.n_obs:
        expected = np.asarray(lab.face.transform(cells.copy(), **options))
    else:  # transform refuses no cells; a file of none embeds to empty arrays
        expected = np.zeros((0, lab.face.latent_dim))
    check_close(np.load(output / "X_gplvm.npy"), expected, "the embedded means", 1e-6, 1e-6)
    record = json.loads((output / "embed.json").read_text())
    if record["cells"] != cells.n_obs:
        raise Wrong(f"embed.json says {record['cells']} cells of {cells.n_obs}")
    leftovers = [path.name for path in output.iterdir() if path.name.endswith(".partial")]
    if leftovers:
        raise Wrong(f"left half-written files {leftovers}")


def _marginalised(lab) -> None:
    cells = lab.query[:, 1:].copy()
    output = _run(lab, data=_written(lab, cells), extra=("--missing-genes", "marginalise"))
    _check_outputs(lab, output, cells, missing_genes="marginalise")


def _beside_user_file(lab) -> None:
    output = lab.folder("embed") / "out"
    output.mkdir()
    (output / "notes.txt").write_text("mine")
    before = snapshot(output)
    _run(lab, output=output)
    check_kept(before, output)
    _check_outputs(lab, output, lab.query)


def _again(lab, overwrite: bool) -> None:
    """A second run into the first's output: refused without ``--overwrite`` (the first's
    outputs kept), replaced whole with it."""
    output = _run(lab)
    (output / "notes.txt").write_text("mine")
    before = snapshot(output)
    other = lab.query[::-1].copy()
    try:
        _run(lab, data=_written(lab, other), output=output, extra=("--overwrite",) * overwrite)
    except BaseException:
        check_kept(before, output)
        raise
    check_kept(before, output, only=["notes.txt"])
    _check_outputs(lab, output, other)


def _fails_late(lab) -> None:
    """``--overwrite`` over an earlier embedding, the run failing in its last block: the earlier
    embedding must be kept whole, with nothing half-written beside it."""
    output = _run(lab)
    before = snapshot(output)
    bad = _with_counts(lab.query, lambda c: np.where(np.arange(len(c))[:, None] == 9, -1.0, c))
    try:
        _run(lab, data=_written(lab, bad), output=output, extra=("--overwrite", "--block", "3"))
    except BaseException as error:
        check_kept(before, output)
        if snapshot(output) != before:
            left = sorted(set(snapshot(output)) - set(before))
            raise Lost(f"the failed run left {left}") from error
        raise
