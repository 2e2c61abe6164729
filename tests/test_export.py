"""SavedModel export: served in a process that imports TensorFlow only, equal to the model."""

import json
import shutil
import subprocess
import sys
import textwrap
from functools import partial

import numpy as np
import pytest
import tensorflow as tf
from builders import smooth_data

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, PointGPLVM, fit
from gpflow_svi_gplvm.export.folder import MARKER, check_destination
from gpflow_svi_gplvm.export.saved_model import SIGNATURES, ServingModule, export_saved_model
from gpflow_svi_gplvm.metrics import rmse

N, D, Q = 80, 5, 2
SETTINGS = dict(encode_iterations=150, num_samples=16)

SERVE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf

    path, inputs, outputs = sys.argv[1:4]
    loaded = tf.saved_model.load(path)
    arrays = dict(np.load(inputs))
    results = {}
    for name in ["decode", "encode", "reconstruct", "serving_default"]:
        function = loaded.signatures[name]
        argument = "X" if name == "decode" else "Y"
        out = function(**{argument: tf.constant(arrays[argument])})
        for key, value in out.items():
            results[f"{name}/{key}"] = value.numpy()
    np.savez(outputs, **results)
    packages = ("gpflow", "gpflow_svi_gplvm", "tensorflow_probability")
    leaked = [m for m in packages if m in sys.modules]
    print(json.dumps({"leaked": leaked, "signatures": sorted(loaded.signatures)}))
    """)


@pytest.fixture(scope="module")
def data():
    return smooth_data(N, D, Q)


@pytest.fixture(
    scope="module",
    params=[
        BayesianSVIGPLVM,
        AmortisedBayesianGPLVM,
        # The set encoder and the shared q(u) covariance change different signatures (encode,
        # decode): one model serves both.
        partial(AmortisedBayesianGPLVM, set_size=8, shared_covariance=True),
    ],
    ids=["bsvi", "aeb", "aeb-set-encoder-shared-covariance"],
)
def trained(request, data):
    model = request.param(data, Q, num_inducing=10)
    fit(model, data, iterations=400, batch_size=40, progress=False)
    return model


def _queries(data):
    Y = data[:6].copy()
    Y[0, 1] = np.nan
    Y[2, :3] = np.nan
    X = np.random.default_rng(1).standard_normal((4, Q))
    return X, Y


@pytest.mark.processes
def test_export_serves_with_tensorflow_alone_and_matches_the_model(trained, data, tmp_path):
    path = export_saved_model(trained, tmp_path / "model", **SETTINGS)
    X, Y = _queries(data)
    np.savez(tmp_path / "inputs.npz", X=X, Y=Y)
    outputs = tmp_path / "outputs.npz"
    command = [sys.executable, "-c", SERVE, str(path), str(tmp_path / "inputs.npz"), str(outputs)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["leaked"] == []
    assert report["signatures"] == sorted(SIGNATURES)

    served = dict(np.load(outputs))
    module = ServingModule(trained, **SETTINGS)
    reconstruction = module.reconstruct(Y)  # served twice: as reconstruct and serving_default
    expected = {
        "decode": module.decode(X),
        "encode": module.encode(Y),
        "reconstruct": reconstruction,
        "serving_default": reconstruction,
    }
    for name, moments in expected.items():
        for key, value in moments.items():
            got = served[f"{name}/{key}"]
            assert np.all(np.isfinite(got)), (name, key)
            np.testing.assert_allclose(got, value.numpy(), rtol=1e-10, atol=1e-12)
    # The served decoder is the model's own predictive.
    mean, variance = trained.predict_y(X)
    np.testing.assert_allclose(served["decode/mean"], mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(served["decode/variance"], variance.numpy(), rtol=1e-10)


@pytest.fixture(scope="module")
def point_export(data, tmp_path_factory):
    """An untrained point model and its export, shared: each export traces four signatures."""
    model = PointGPLVM(data, Q, num_inducing=5)
    path = tmp_path_factory.mktemp("point") / "m"
    return model, export_saved_model(model, path, encode_iterations=5, num_samples=2)


def test_an_export_carries_the_marker_that_lets_overwrite_replace_it(point_export):
    record = json.loads((point_export[1] / MARKER).read_text())
    assert record["written_by"] == "gpflow_svi_gplvm"
    assert (record["latent_dim"], record["data_dim"], record["dtype"]) == (Q, D, "float64")
    check_destination(point_export[1], overwrite=True)  # its own export: may be replaced


@pytest.mark.processes
def test_saved_model_cli_lists_the_four_signatures(point_export):
    cli = [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "show", "--all"]
    result = subprocess.run(
        [*cli, "--dir", str(point_export[1])], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for name in SIGNATURES:
        assert f"signature_def['{name}']" in result.stdout


def test_encode_of_a_non_amortised_model_reconstructs_like_the_trained_latents(data):
    model = BayesianSVIGPLVM(data, Q, num_inducing=10)
    fit(model, data, iterations=600, batch_size=40, progress=False)
    module = ServingModule(model, encode_iterations=300, num_samples=4)
    encoded = module.encode(data)["mean"]
    trained_error = rmse(data, model.predict_y(model.latent_mean())[0].numpy())
    encoded_error = rmse(data, model.predict_y(encoded)[0].numpy())
    assert encoded_error < 1.25 * trained_error + 0.01


def test_float32_export_casts_at_the_boundary(data, tmp_path):
    model = PointGPLVM(data, Q, num_inducing=5)
    path = export_saved_model(
        model, tmp_path / "f32", encode_iterations=5, num_samples=2, dtype=tf.float32
    )
    loaded = tf.saved_model.load(str(path))
    X = np.random.default_rng(2).standard_normal((3, Q))
    out = loaded.signatures["decode"](X=tf.constant(X, tf.float32))
    assert out["mean"].dtype == tf.float32
    np.testing.assert_allclose(out["mean"].numpy(), model.predict_y(X)[0].numpy(), rtol=1e-5)


def test_bad_inputs_to_the_export_are_clear_errors(data, point_export):
    signatures = tf.saved_model.load(str(point_export[1])).signatures
    errors = (TypeError, ValueError, tf.errors.InvalidArgumentError)
    with pytest.raises(errors, match="expected to be a double tensor but is a float"):
        signatures["reconstruct"](Y=tf.constant(data[:2], tf.float32))
    # Another width: the error states the shape and dtype expected and the shape received (encode
    # runs the same check as reconstruct; its first call costs a minute of graph optimisation).
    wrong_widths = [
        ("reconstruct", "Y", data[:2, :3], rf"\[rows, {D}\] float64 \(NaN .*\[2 3\]"),
        ("decode", "X", np.zeros((2, Q + 1)), rf"\[rows, {Q}\] float64; got shape\] \[2 {Q + 1}\]"),
    ]
    for name, argument, values, expected in wrong_widths:
        # TensorFlow's text names the failing node, named after the check, before the reason.
        node_then_reason = f"wrong_width_of_{argument}.*{name}: {argument} must have shape"
        with pytest.raises(errors, match=f"(?s){node_then_reason} {expected}"):
            signatures[name](**{argument: tf.constant(values)})
    rows = data[:2].copy()
    rows[1, 0] = np.inf
    reason = "Y has infinite entries; mark missing entries with NaN"
    with pytest.raises(errors, match=f"(?s)infinite_entries_in_Y.*{reason}"):
        signatures["reconstruct"](Y=tf.constant(rows))
    with pytest.raises(errors, match=r"decode: X \[None, Q\] must be finite"):
        signatures["decode"](X=tf.constant(np.full((1, Q), np.inf)))


def test_an_existing_export_is_never_overwritten_silently(point_export, tmp_path):
    model = point_export[0]
    path = shutil.copytree(point_export[1], tmp_path / "m")
    before = sorted(p.name for p in path.rglob("*"))
    with pytest.raises(ValueError, match="overwrite=True"):
        export_saved_model(model, path, encode_iterations=5, num_samples=2)
    assert sorted(p.name for p in path.rglob("*")) == before
    with pytest.raises(ValueError):
        export_saved_model(model, path, overwrite=True, dtype=tf.int32)
    assert sorted(p.name for p in path.rglob("*")) == before
    export_saved_model(model, path, overwrite=True, encode_iterations=5, num_samples=2)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".m-")]


@pytest.mark.parametrize("model_class", [BayesianSVIGPLVM, AmortisedBayesianGPLVM])
def test_served_requests_in_chunks_equal_one_pass(data, model_class):
    model = model_class(data, Q, num_inducing=5)
    whole = ServingModule(model, encode_iterations=5, num_samples=3)
    chunked = ServingModule(model, encode_iterations=5, num_samples=3, chunk_size=3)
    rows = data[:11]  # three chunks of 3 and one of 2
    for name in ("encode", "reconstruct"):
        expected, got = getattr(whole, name)(rows), getattr(chunked, name)(rows)
        for key in ("mean", "variance"):
            np.testing.assert_allclose(got[key], expected[key], rtol=1e-12, atol=1e-14)
    empty = chunked.reconstruct(np.zeros((0, D)))
    assert empty["mean"].shape == (0, D) and empty["variance"].shape == (0, D)


@pytest.mark.parametrize(
    "location, scale, message",
    [
        (np.zeros(D), None, "Pass both location and scale"),
        (
            np.zeros(D - 1),
            np.ones(D - 1),
            rf"location must be {D} finite numbers.*shape \({D - 1},\)",
        ),
        (np.zeros(D), np.full(D, np.nan), f"scale must be {D} finite numbers.* got {D} NaN or inf"),
        (np.zeros(D), np.zeros(D), "scale must be positive"),
    ],
)
def test_the_data_s_units_are_checked_before_anything_is_written(
    point_export, tmp_path, location, scale, message
):
    with pytest.raises(ValueError, match=message):
        export_saved_model(point_export[0], tmp_path / "m", location=location, scale=scale)
    assert not (tmp_path / "m").exists()


def test_an_export_in_the_model_s_units_says_so(point_export):
    assert json.loads((point_export[1] / MARKER).read_text())["units"].startswith("the model's")


@pytest.mark.parametrize(
    "where, message",
    [
        (None, r"path \(where the export goes\) must be a non-empty str or pathlib.Path"),
        ("", r"path \(where the export goes\) must be a non-empty str or pathlib.Path"),
        ("notes.txt/m", r"notes.txt is a file: name a folder"),
        ("notes.txt/a/m", r"cannot be made: .*notes.txt is a file, not a folder"),
    ],
    ids=["None", "empty", "under a file", "two below a file"],
)
def test_an_export_path_that_is_no_folder_is_named(point_export, tmp_path, where, message):
    (tmp_path / "notes.txt").write_text("mine")
    path = where if where is None or not where else str(tmp_path / where)
    with pytest.raises(ValueError, match=message):
        export_saved_model(point_export[0], path, encode_iterations=5, num_samples=2)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("model", [None, "bsvi", np.zeros((3, 2))], ids=["None", "name", "array"])
def test_exporting_what_is_not_a_model_is_named(model, tmp_path):
    with pytest.raises(ValueError, match=r"model must be a GPLVM of this package .* got"):
        export_saved_model(model, tmp_path / "m")
    assert not (tmp_path / "m").exists()
