"""A fitted single-cell model exported for TensorFlow Serving: raw counts and obs columns in,
the embedding that ``transform`` gives out, in a process that imports TensorFlow alone; the
version layout TensorFlow Serving reads; bad requests named."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")

from builders import count_cells  # noqa: E402

from gpflow_svi_gplvm import export_saved_model  # noqa: E402
from gpflow_svi_gplvm.export.folder import MARKER  # noqa: E402
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.storage.serving import input_name  # noqa: E402

Q = 2


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """A B-SVI face with a batch key and a numeric covariate, a new batch mapped, exported."""
    cells = count_cells()
    face = SingleCellGPLVM(
        Q, layer="counts", batch_key="batch", covariate_keys=["depth"], num_inducing=8, seed=2
    )
    face.fit(cells, iterations=30, batch_size=16, progress=False)
    query = count_cells(seed=4)[:10].copy()
    query.obs["batch"] = pd.Categorical(["a"] * 4 + ["new"] * 6)
    face.map_query(query, progress=False)
    base = tmp_path_factory.mktemp("export") / "cells"
    folder = export_saved_model(face, base)
    return face, query, base, folder


@pytest.mark.processes
def test_served_cells_embed_as_transform_does_with_tensorflow_alone(exported, tmp_path):
    face, query, base, folder = exported
    assert folder == base / "1"
    embedded = query.copy()
    expected = face.transform(embedded)
    variance = embedded.obsm["X_gplvm_var"]
    counts = query[:, face.gene_names].layers["counts"].toarray().astype(np.float64)
    np.save(tmp_path / "counts.npy", counts)
    request = {"batch": list(query.obs["batch"].astype(str)), "depth": list(query.obs["depth"])}
    (tmp_path / "request.json").write_text(json.dumps(request))
    script = textwrap.dedent(
        f"""
        import json, sys
        import numpy as np
        import tensorflow as tf
        served = tf.saved_model.load({str(folder)!r})
        request = json.load(open({str(tmp_path / "request.json")!r}))
        out = served.signatures["embed"](
            counts=tf.constant(np.load({str(tmp_path / "counts.npy")!r})),
            batch=tf.constant(request["batch"]),
            depth=tf.constant(request["depth"], tf.float64),
        )
        np.save({str(tmp_path / "mean.npy")!r}, out["mean"].numpy())
        np.save({str(tmp_path / "variance.npy")!r}, out["variance"].numpy())
        assert "gpflow" not in sys.modules and "gpflow_svi_gplvm" not in sys.modules
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
    # The served graph sums each cell's counts itself, in another order: the modes agree to the
    # precision their single-precision terms place them (laplace.LOW), a small fraction of the
    # spread of q(x*).
    served = np.load(tmp_path / "mean.npy")
    assert np.all(np.abs(served - expected) < 1e-3 * np.sqrt(variance))
    np.testing.assert_allclose(np.load(tmp_path / "variance.npy"), variance, rtol=1e-4)


@pytest.mark.processes
def test_the_export_is_laid_out_for_tensorflow_serving_and_described(exported):
    face, _, base, folder = exported
    cli = shutil.which("saved_model_cli") or shutil.which(
        "saved_model_cli", path=str(__import__("pathlib").Path(sys.executable).parent)
    )
    if cli is None:
        pytest.skip("saved_model_cli is not installed beside this Python")
    shown = subprocess.run(
        [cli, "show", "--dir", str(folder), "--tag_set", "serve", "--signature_def", "embed"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "inputs['counts'] tensor_info" in shown and "inputs['batch']" in shown
    assert "outputs['mean']" in shown and "outputs['variance']" in shown
    record = json.loads((folder / MARKER).read_text())
    assert record["genes"] == face.gene_names
    assert record["inputs"] == {"batch": "batch", "depth": "depth"}
    assert record["categories"] == {"batch": ["a", "b"]}
    assert record["learnt_batches"] == ["new"]
    with pytest.raises(ValueError, match="pass overwrite=True"):
        export_saved_model(face, base)
    assert face.export_saved_model(base, version=2) == base / "2"
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]


def test_requests_the_model_cannot_read_are_refused_by_name(exported):
    import tensorflow as tf

    face, query, _, folder = exported
    embed = tf.saved_model.load(str(folder)).signatures["embed"]
    counts = query[:, face.gene_names].layers["counts"].toarray().astype(np.float64)
    good = dict(batch=tf.constant(["a"] * 10), depth=tf.constant(np.ones(10)))
    cases = [
        (dict(counts=tf.constant(counts[:, :-1]), **good), "counts must have shape"),
        (dict(counts=tf.constant(counts - 0.5), **good), "non-negative integers"),
        (dict(counts=tf.constant(counts * 0), **good), "without counts"),
        (
            dict(counts=tf.constant(counts), batch=tf.constant(["z"] * 10), depth=good["depth"]),
            r"batch: a category the model does not know \(known: a, b, new\)",
        ),
        (
            dict(
                counts=tf.constant(counts),
                batch=good["batch"],
                depth=tf.constant(np.full(10, np.nan)),
            ),
            "depth must be finite",
        ),
        (
            dict(counts=tf.constant(counts), batch=good["batch"][:5], depth=good["depth"]),
            "batch must hold one value per cell",
        ),
        (
            dict(counts=tf.constant(counts), batch=good["batch"], depth=good["depth"][:5]),
            "depth must hold one value per cell",
        ),
    ]
    deep = tf.constant(counts[:, :, None])  # as many values as [cells, genes], one axis more
    cases.append((dict(counts=deep, **good), r"counts must have shape \[cells, \d+\]"))
    wide = tf.reshape(good["batch"], [5, 2])  # as many values as cells, but not one per cell
    cases.append((dict(counts=tf.constant(counts), batch=wide, depth=good["depth"]), "shape"))
    for inputs, message in cases:
        with pytest.raises(tf.errors.InvalidArgumentError, match=message):
            embed(**inputs)
    # A column per obs input, as a table's columns come, is read as the same cells.
    row = embed(counts=tf.constant(counts), **good)["mean"]
    column = embed(counts=tf.constant(counts), **{k: v[:, None] for k, v in good.items()})
    np.testing.assert_array_equal(column["mean"], row)


@pytest.mark.parametrize("dtype", ["int32", "string", "bad"])
def test_an_export_of_another_dtype_than_a_float_is_refused_before_tracing(exported, dtype):
    import tensorflow as tf

    face, _, base, _ = exported
    given = getattr(tf, dtype, dtype)
    with pytest.raises(ValueError, match="dtype must be float64 or float32"):
        face.export_saved_model(base, version=7, dtype=given)
    assert not (base / "7").exists()


def test_input_names_are_what_a_signature_accepts():
    assert input_name("batch") == "batch"
    assert input_name("sample id") == "sample_id"
    assert input_name("10x-run") == "obs_10x_run"


def test_expression_that_overflows_is_refused_naming_the_cell_and_its_obs(exported):
    """A covariate far outside the fitted range (here 1e300 where the cells held about 1) makes
    the rate overflow: refused by name rather than infinite or NaN."""
    face, query, _, _ = exported
    far = query[:4].copy()
    far.obs["depth"] = far.obs["depth"] * 1e300
    cell = far.obs_names[0]
    with pytest.raises(ValueError, match=rf"expression of cell '{cell}' overflows .*'depth'"):
        face.normalized_expression(far, n_samples=2)


def test_the_loaded_embedding_takes_counts_of_the_natural_dtypes_of_counts(exported):
    import tensorflow as tf

    face, query, _, folder = exported
    served = tf.saved_model.load(str(folder))
    counts = query[:, face.gene_names].layers["counts"].toarray()
    columns = (tf.constant(query.obs["batch"].astype(str)), tf.constant(query.obs["depth"]))
    expected = served.signatures["embed"](
        counts=tf.constant(counts, tf.float64), batch=columns[0], depth=columns[1]
    )["mean"]
    for dtype in (tf.float32, tf.float64, tf.int32, tf.int64):
        got = served.embed(tf.constant(counts, dtype), *columns)["mean"]
        np.testing.assert_array_equal(got, expected)


def test_a_request_of_no_cells_gets_empty_embeddings(exported):
    import tensorflow as tf

    face, _, _, folder = exported
    embed = tf.saved_model.load(str(folder)).signatures["embed"]
    got = embed(
        counts=tf.zeros([0, len(face.gene_names)], tf.float64),
        batch=tf.constant([], tf.string),
        depth=tf.zeros([0], tf.float64),
    )
    assert got["mean"].shape == got["variance"].shape == (0, Q)


def test_a_query_without_a_covariate_column_is_refused_naming_it(exported):
    face, query, _, _ = exported
    lacking = query.copy()
    del lacking.obs["depth"]
    for embed in (face.transform, face.map_query):
        with pytest.raises(ValueError, match="obs has no column 'depth'"):
            embed(lacking.copy())
