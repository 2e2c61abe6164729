"""A fitted single-cell model saved to one folder and loaded in a fresh process: the same
embedding of new cells, its folder written whole or not at all, bad folders named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")

from builders import count_cells, spoiled_embedding  # noqa: E402
from gpflow.utilities import parameter_dict  # noqa: E402

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.storage import saving  # noqa: E402
from gpflow_svi_gplvm.singlecell.storage.saving import MANIFEST  # noqa: E402

Q = 2


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A B-SVI face fitted to counts with a batch key, saved with its training cells."""
    cells = count_cells()
    face = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=3)
    face.fit(cells, iterations=30, batch_size=16, progress=False)
    folder = tmp_path_factory.mktemp("saved") / "model"
    face.save(folder, adata=cells)
    return face, cells, folder


@pytest.mark.processes
def test_a_model_loaded_in_a_fresh_process_embeds_new_cells_to_the_same_numbers(saved, tmp_path):
    face, _, folder = saved
    new = count_cells(seed=7)[:9].copy()
    new.write_h5ad(tmp_path / "new.h5ad")
    expected = face.transform(new.copy())
    script = textwrap.dedent(
        f"""
        import anndata, numpy as np
        from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
        face = SingleCellGPLVM.load({str(folder)!r})
        means = face.transform(anndata.read_h5ad({str(tmp_path / "new.h5ad")!r}))
        np.save({str(tmp_path / "means.npy")!r}, means)
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    np.testing.assert_array_equal(np.load(tmp_path / "means.npy"), expected)


def test_the_folder_holds_the_registration_the_gp_and_the_minifiedcount_cells(saved):
    face, cells, folder = saved
    manifest = json.loads((folder / MANIFEST).read_text())
    assert manifest["format_version"] == saving.FORMAT_VERSION
    assert manifest["registration"]["gene_names"] == face.gene_names
    assert manifest["registration"]["categories"] == {"batch": ["a", "b"]}
    assert manifest["registration"]["layer"] == "counts"
    assert sorted(manifest["files"]) == sorted(
        ["cells.h5ad", MANIFEST, "reference.npz", "variables.npz"]
    )
    loaded = SingleCellGPLVM.load(folder)
    assert loaded.gene_names == face.gene_names and loaded.encoding == face.encoding
    assert loaded.training_record == face.training_record
    # Every global variable as fitted; the table holds the reference cells' rows.
    fitted, again = parameter_dict(face.model), parameter_dict(loaded.model)
    for name in (".q_mu", ".q_sqrt", ".inducing_variable.Z", ".likelihood.dispersion"):
        np.testing.assert_array_equal(again[name].numpy(), fitted[name].numpy())
    np.testing.assert_array_equal(
        loaded.model.size_factor_reference.numpy(), face.model.size_factor_reference.numpy()
    )
    np.testing.assert_array_equal(loaded.reference.obsm["X_gplvm"], cells.obsm["X_gplvm"])
    assert list(loaded.reference.obs_names) == list(cells.obs_names)
    assert loaded.reference.X is None  # minified: no counts


def test_a_folder_that_is_not_a_whole_saved_model_of_this_version_is_named(saved, tmp_path):
    _, _, folder = saved
    with pytest.raises(ValueError, match="is not a saved model of gpflow_svi_gplvm"):
        SingleCellGPLVM.load(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    manifest = json.loads((folder / MANIFEST).read_text())
    (other / MANIFEST).write_text(json.dumps({**manifest, "format_version": 99}))
    with pytest.raises(ValueError, match="format version 99 .* reads format 1"):
        SingleCellGPLVM.load(other)
    (other / MANIFEST).write_text(json.dumps(manifest))  # lists files the folder lacks
    with pytest.raises(ValueError, match="is incomplete: it lacks .*reference.npz"):
        SingleCellGPLVM.load(other)
    (other / MANIFEST).write_text("{not json")
    with pytest.raises(ValueError, match="is not JSON"):
        SingleCellGPLVM.load(other)


@pytest.mark.parametrize("damage", ["genes reordered", "numbers changed", "cells truncated"])
def test_a_folder_edited_or_damaged_after_the_save_is_refused(saved, tmp_path, damage):
    """An edit that keeps the folder's form (genes in another order, other numbers) would embed
    new cells wrongly without a word: the manifest's digest tells it."""
    import shutil

    _, _, folder = saved
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    if damage == "genes reordered":
        manifest = json.loads((copy / MANIFEST).read_text())
        manifest["registration"]["gene_names"].reverse()
        (copy / MANIFEST).write_text(json.dumps(manifest))
    elif damage == "numbers changed":
        with np.load(copy / "variables.npz") as stored:
            values = dict(stored)
        values[".q_mu"] = 2 * values[".q_mu"]
        np.savez(copy / "variables.npz", **values)
    else:
        data = (copy / "cells.h5ad").read_bytes()
        (copy / "cells.h5ad").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="was changed after it was saved"):
        SingleCellGPLVM.load(copy)


def test_a_save_replaces_only_its_own_folder_and_a_failed_one_leaves_it_whole(
    saved, tmp_path, monkeypatch
):
    face, _, _ = saved
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(ValueError, match="not a saved model written by gpflow_svi_gplvm"):
        face.save(mine, overwrite=True)
    assert (mine / "notes.txt").read_text() == "mine"
    folder = face.save(tmp_path / "model")
    with pytest.raises(ValueError, match="pass overwrite=True"):
        face.save(folder)
    before = (folder / "variables.npz").read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(saving.np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        face.save(folder, overwrite=True)
    assert (folder / "variables.npz").read_bytes() == before  # the earlier save, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "model"]  # no staging left


def test_what_cannot_be_saved_is_refused_before_anything_is_written(saved, tmp_path):
    import gpflow

    face, cells, _ = saved
    with pytest.raises(ValueError, match="Fit the model first"):
        SingleCellGPLVM(Q).save(tmp_path / "unfitted")
    kernel = SingleCellGPLVM(Q, kernel=gpflow.kernels.Matern32())
    kernel.fitted = replace(face.fitted, options=kernel.options)  # as if fitted so
    with pytest.raises(ValueError, match="model option kernel=.* cannot be saved"):
        kernel.save(tmp_path / "kernel")
    with pytest.raises(ValueError, match="adata has no obsm"):
        face.save(tmp_path / "bare", adata=count_cells())
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------
# Every configuration the face accepts saves and loads back (a covering design, see below)

LIKELIHOODS = ("negative_binomial", "poisson", "gaussian")
MODELS = ("bsvi", "aeb", "map", "point")
COVARIATES = ({}, {"batch_key": "batch"}, {"batch_key": "batch", "covariate_keys": ["depth"]})
# A covering design of the 84 configurations (likelihood x size factors x model x covariates):
# each likelihood with each size factors it takes ("size": an obs column) once, and with them
# every model and every set of covariates at least once.
CONFIGURATIONS = [
    ("negative_binomial", "library", "bsvi", 2),
    ("negative_binomial", "size", "aeb", 1),
    ("negative_binomial", None, "map", 0),
    ("poisson", "library", "point", 1),
    ("poisson", "size", "map", 2),
    ("poisson", None, "aeb", 0),
    ("gaussian", None, "bsvi", 1),
]


def configurations() -> dict[str, dict]:
    return {
        f"{model}-{likelihood}-{size_factors}-{c}": dict(
            likelihood=likelihood, size_factors=size_factors, model=model, **COVARIATES[c]
        )
        for likelihood, size_factors, model, c in CONFIGURATIONS
    }


def test_the_covering_design_meets_every_level_it_claims():
    chosen = list(configurations().values())
    assert {(o["likelihood"], o["size_factors"]) for o in chosen} == {
        (likelihood, size_factors)
        for likelihood in LIKELIHOODS
        for size_factors in (("library", "size", None) if likelihood != "gaussian" else (None,))
    }
    assert {o["model"] for o in chosen} == set(MODELS)
    assert {len(o) for o in chosen} == {3, 4, 5}  # no covariates, a batch, a batch and a number


def with_size(cells):
    cells.obs["size"] = cells.obs["depth"] / cells.obs["depth"].mean()
    return cells


@pytest.fixture(scope="module")
def every_configuration(tmp_path_factory):
    """Each configuration fitted (a few steps), saved, and its embedding of new cells."""
    cells, query = with_size(count_cells()), with_size(count_cells(seed=7)[:6].copy())
    root = tmp_path_factory.mktemp("configurations")
    query.write_h5ad(root / "query.h5ad")
    faces = {}
    for name, options in configurations().items():
        face = SingleCellGPLVM(Q, layer="counts", num_inducing=6, seed=1, **options)
        face.fit(cells, iterations=3, batch_size=16, progress=False)
        face.save(root / name, adata=cells)
        faces[name] = face, face.transform(query.copy())
    return faces, root


@pytest.mark.processes
def test_every_configuration_loads_in_a_fresh_process_and_transforms_identically(
    every_configuration,
):
    faces, root = every_configuration
    script = textwrap.dedent(
        f"""
        import json, anndata, numpy as np
        from pathlib import Path
        from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
        root, told = Path({str(root)!r}), {{}}
        for name in {sorted(faces)!r}:
            face = SingleCellGPLVM.load(root / name)
            np.save(root / (name + ".npy"), face.transform(anndata.read_h5ad(root / "query.h5ad")))
            told[name] = [face.options.to_dict(), face.registration.to_dict()]
        (root / "told.json").write_text(json.dumps(told))
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=1200)
    told = json.loads((root / "told.json").read_text())
    for name, (face, means) in faces.items():
        np.testing.assert_array_equal(np.load(root / f"{name}.npy"), means, err_msg=name)
        assert told[name] == [face.options.to_dict(), face.registration.to_dict()], name


# --------------------------------------------------------------------------------------------
# A folder saved by an earlier version (format 1, its digest without the training cells)

EARLIER = Path(__file__).with_name("data") / "saved_8700c33"


@pytest.mark.parametrize("name", ["bsvi_batch_library", "aeb_poisson_covariate"])
def test_a_folder_saved_by_an_earlier_version_loads_and_transforms_as_it_did(name):
    """tests/data/saved_8700c33/make.py made them with the package at commit 8700c33."""
    face = SingleCellGPLVM.load(EARLIER / name)
    query = anndata.read_h5ad(EARLIER / "query.h5ad")
    if name.startswith("aeb"):
        query.obs["batch"] = "a"
    else:
        assert face.batch_offsets.categories == ["c"] and face.reference.n_obs == 48
    got = face.transform(query)
    # transform's Newton steps changed since (a start on the genes that carry most of the
    # curvature, then exact steps; benchmarks/results/mapping.md): each cell's mean moves by a
    # small part of its posterior standard deviation, not more.
    moved = np.abs(got - np.load(EARLIER / f"{name}.npy")) / np.sqrt(query.obsm["X_gplvm_var"])
    print(name, "moved (posterior sds): median", np.median(moved), "largest", moved.max())
    assert np.median(moved) < 0.1 and moved.max() < 0.5


def test_an_earlier_version_s_folder_with_damaged_cells_is_named(tmp_path):
    import shutil

    copy = tmp_path / "model"
    shutil.copytree(EARLIER / "bsvi_batch_library", copy)
    data = (copy / "cells.h5ad").read_bytes()
    (copy / "cells.h5ad").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="cells.h5ad cannot be read"):
        SingleCellGPLVM.load(copy)


# --------------------------------------------------------------------------------------------
# The digest covers every file; the cells a save keeps are the fitted ones


@pytest.mark.parametrize("edit", ["obsm in place", "cells replaced", "digest removed"])
def test_a_folder_whose_cells_or_digest_were_edited_is_refused(saved, tmp_path, edit):
    import shutil

    import h5py

    _, cells, folder = saved
    copy = tmp_path / "model"
    shutil.copytree(folder, copy)
    if edit == "obsm in place":
        with h5py.File(copy / "cells.h5ad", "r+") as file:
            file["obsm/X_gplvm"][0, 0] += 1.0
        match = "was changed after it was saved: .*cells.h5ad"
    elif edit == "cells replaced":
        other = anndata.AnnData(obs=cells.obs.iloc[:10].copy())
        other.obsm["X_gplvm"] = np.zeros((10, Q))
        other.obsm["X_gplvm_var"] = np.ones((10, Q))
        other.write_h5ad(copy / "cells.h5ad")
        match = "was changed after it was saved"
    else:
        manifest = json.loads((copy / MANIFEST).read_text())
        del manifest["digest"]
        (copy / MANIFEST).write_text(json.dumps(manifest))
        match = "lacks its digest"
    with pytest.raises(ValueError, match=match):
        SingleCellGPLVM.load(copy)


@pytest.mark.parametrize(
    "cells, match",
    [
        ("unrelated", "holds 77 cells, not the 48 cells the model was fitted to"),
        ("renamed", "holds other cells' names, not the 48 cells"),
        ("wide", r"have shapes \(48, 5\) and \(48, 5\), but the model's q\(x\) has Q = 2"),
        ("nan", "give cell 'cell3' a mean that is not finite"),
        ("negative", "give cell 'cell3' a variance that is negative or not finite"),
    ],
)
def test_a_save_keeps_only_the_cells_the_model_was_fitted_to_with_its_q_x(
    saved, tmp_path, cells, match
):
    face, fitted, _ = saved
    adata = fitted.copy()
    if cells == "unrelated":
        adata = anndata.concat([count_cells(seed=5)] * 2)[:77].copy()
        adata.obs_names_make_unique()
        adata.obsm["X_gplvm"], adata.obsm["X_gplvm_var"] = np.zeros((77, Q)), np.ones((77, Q))
    elif cells == "renamed":
        adata.obs_names = [f"other{i}" for i in range(adata.n_obs)]
    else:
        adata = spoiled_embedding(adata, cells, cell=3)
    with pytest.raises(ValueError, match=match):
        face.save(tmp_path / "model", adata=adata)
    assert not list(tmp_path.iterdir())


def test_save_and_export_take_overwrite_as_a_boolean_only(saved, tmp_path):
    from gpflow_svi_gplvm import PointGPLVM, export_saved_model

    face, _, folder = saved
    for value in ("no", 1, None):
        with pytest.raises(ValueError, match="overwrite must be True or False"):
            face.save(folder, overwrite=value)
        with pytest.raises(ValueError, match="overwrite must be True or False"):
            face.export_saved_model(tmp_path / "export", overwrite=value)
    point = PointGPLVM(np.random.default_rng(0).standard_normal((10, 3)), 1, num_inducing=3)
    with pytest.raises(ValueError, match="overwrite must be True or False"):
        export_saved_model(point, tmp_path / "point", overwrite="no")
    assert not list(tmp_path.iterdir())
    face.save(tmp_path / "again")
    face.save(tmp_path / "again", overwrite=np.bool_(True))  # NumPy's booleans are booleans
