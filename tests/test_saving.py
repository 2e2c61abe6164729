"""A fitted single-cell model saved to one folder and loaded in a fresh process: the same
embedding of new cells, its folder written whole or not at all, bad folders named."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")

from builders import count_cells  # noqa: E402
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
    match = "cannot be read" if damage == "cells truncated" else "was changed after it was saved"
    with pytest.raises(ValueError, match=match):
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
    kernel.model = face.model
    with pytest.raises(ValueError, match="model option kernel=.* cannot be saved"):
        kernel.save(tmp_path / "kernel")
    with pytest.raises(ValueError, match="adata has no obsm"):
        face.save(tmp_path / "bare", adata=count_cells())
    assert sorted(p.name for p in tmp_path.iterdir()) == []
