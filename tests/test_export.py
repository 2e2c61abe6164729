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
from gpflow_svi_gplvm.export import saved_model
from gpflow_svi_gplvm.export.folder import MARKER, check_destination
from gpflow_svi_gplvm.export.saved_model import SIGNATURES, ServingModule, export_saved_model
from gpflow_svi_gplvm.metrics import rmse

N, D, Q = 80, 5, 2
SETTINGS = dict(encode_iterations=150, num_samples=16)

# Serves every export given in one process that imports TensorFlow alone (each process costs
# seconds of TensorFlow import), then runs saved_model_cli on one of them as `python -m` does.
SERVE = textwrap.dedent("""
    import contextlib, io, json, runpy, sys
    import numpy as np
    import tensorflow as tf

    inputs, cli_path, *exports = sys.argv[1:]
    arrays = dict(np.load(inputs))
    signatures = {}
    for export in exports:
        path, outputs = export.split("=")
        loaded = tf.saved_model.load(path)
        results = {}
        for name in ["decode", "encode", "reconstruct", "serving_default"]:
            function = loaded.signatures[name]
            argument = "X" if name == "decode" else "Y"
            out = function(**{argument: tf.constant(arrays[argument])})
            for key, value in out.items():
                results[f"{name}/{key}"] = value.numpy()
        np.savez(outputs, **results)
        signatures[outputs] = sorted(loaded.signatures)
    packages = ("gpflow", "gpflow_svi_gplvm", "tensorflow_probability")
    leaked = [m for m in packages if m in sys.modules]
    sys.argv = ["saved_model_cli", "show", "--all", "--dir", cli_path]
    shown = io.StringIO()
    with contextlib.redirect_stdout(shown):
        try:
            runpy.run_module("tensorflow.python.tools.saved_model_cli", run_name="__main__")
            status = 0
        except SystemExit as exit:
            status = exit.code or 0
    report = {"leaked": leaked, "signatures": signatures, "cli": [status, shown.getvalue()]}
    print(json.dumps(report))
    """)

# The set encoder and the shared q(u) covariance change different signatures (encode, decode):
# one model serves both.
KINDS = {
    "bsvi": BayesianSVIGPLVM,
    "aeb": AmortisedBayesianGPLVM,
    "aeb-set-encoder-shared-covariance": partial(
        AmortisedBayesianGPLVM, set_size=8, shared_covariance=True
    ),
}


@pytest.fixture(scope="module")
def data():
    return smooth_data(N, D, Q)


@pytest.fixture(scope="module")
def trained(data):
    """A model of each kind, trained once and only read by the tests."""
    models = {}
    for kind, model_class in KINDS.items():
        models[kind] = model_class(data, Q, num_inducing=10)
        fit(models[kind], data, iterations=600, batch_size=40, progress=False)
    return models


def _queries(data):
    Y = data[:6].copy()
    Y[0, 1] = np.nan
    Y[2, :3] = np.nan
    X = np.random.default_rng(1).standard_normal((4, Q))
    return X, Y


class RecordedServingModule(ServingModule):
    """A ServingModule that lists itself in ``made``: the module an export served."""

    made: list[ServingModule] = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.made.append(self)


@pytest.fixture(scope="module")
def point_export(data, tmp_path_factory):
    """An untrained point model, its export and the module the export served, shared: each
    export traces three functions (four signatures)."""
    model = PointGPLVM(data, Q, num_inducing=5)
    path = tmp_path_factory.mktemp("point") / "m"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(saved_model, "ServingModule", RecordedServingModule)
        path = export_saved_model(model, path, encode_iterations=5, num_samples=2)
    return model, path, RecordedServingModule.made[-1]


def test_an_export_traces_each_served_function_once(point_export):
    # A trace made before the save would be made again in TensorFlow's save context.
    module = point_export[2]
    functions = (module.decode, module.encode, module.reconstruct)
    assert [f.experimental_get_tracing_count() for f in functions] == [1, 1, 1]


@pytest.fixture(scope="module")
def served(trained, point_export, data, tmp_path_factory):
    """Each trained model's export served by SERVE in one process: the outputs by kind, and the
    process's report (its return code, stderr and last line of output)."""
    folder = tmp_path_factory.mktemp("served")
    X, Y = _queries(data)
    np.savez(folder / "inputs.npz", X=X, Y=Y)
    exports = [
        f"{export_saved_model(model, folder / kind, **SETTINGS)}={folder / kind}.npz"
        for kind, model in trained.items()
    ]
    command = [sys.executable, "-c", SERVE, str(folder / "inputs.npz"), str(point_export[1])]
    result = subprocess.run([*command, *exports], capture_output=True, text=True, timeout=600)
    outputs = {kind: folder / f"{kind}.npz" for kind in trained}
    return outputs, result


def _report(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.processes
@pytest.mark.parametrize("kind", KINDS)
def test_export_serves_with_tensorflow_alone_and_matches_the_model(kind, served, trained, data):
    outputs, result = served
    report = _report(result)
    assert report["leaked"] == []
    assert report["signatures"][str(outputs[kind])] == sorted(SIGNATURES)

    served_outputs = dict(np.load(outputs[kind]))
    model = trained[kind]
    X, Y = _queries(data)
    module = ServingModule(model, **SETTINGS)
    reconstruction = module.reconstruct(Y)  # served twice: as reconstruct and serving_default
    expected = {
        "decode": module.decode(X),
        "encode": module.encode(Y),
        "reconstruct": reconstruction,
        "serving_default": reconstruction,
    }
    for name, moments in expected.items():
        for key, value in moments.items():
            got = served_outputs[f"{name}/{key}"]
            assert np.all(np.isfinite(got)), (name, key)
            np.testing.assert_allclose(got, value.numpy(), rtol=1e-10, atol=1e-12)
    # The served decoder is the model's own predictive.
    mean, variance = model.predict_y(X)
    np.testing.assert_allclose(served_outputs["decode/mean"], mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(served_outputs["decode/variance"], variance.numpy(), rtol=1e-10)


def test_an_export_carries_the_marker_that_lets_overwrite_replace_it(point_export):
    record = json.loads((point_export[1] / MARKER).read_text())
    assert record["written_by"] == "gpflow_svi_gplvm"
    assert (record["latent_dim"], record["data_dim"], record["dtype"]) == (Q, D, "float64")
    check_destination(point_export[1], overwrite=True)  # its own export: may be replaced


@pytest.mark.processes
def test_saved_model_cli_lists_the_four_signatures(served):
    status, shown = _report(served[1])["cli"]
    assert status == 0, shown[-3000:]
    for name in SIGNATURES:
        assert f"signature_def['{name}']" in shown


def test_encode_of_a_non_amortised_model_reconstructs_like_the_trained_latents(data, trained):
    model = trained["bsvi"]
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
