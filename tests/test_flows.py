"""Flow latents: the layers' math against autodiff, the row term against brute force, and the
flow model through every path of the package (fit, checkpoints, new rows, export, scikit-learn,
command line), each once and tiny."""

import json
import shutil
import subprocess
import sys
import textwrap

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import smooth_data
from check_shapes import disable_check_shapes

from gpflow_svi_gplvm import FlowBayesianGPLVM, export_saved_model, fit
from gpflow_svi_gplvm.cli.main import main
from gpflow_svi_gplvm.latents.flow_layers import (
    PLANAR_MARGIN,
    AutoregressiveLayers,
    Planar,
    PlanarLayers,
)
from gpflow_svi_gplvm.latents.flows import FlowLatent, JointFlowLatent, flow_latent, log_prior
from gpflow_svi_gplvm.sklearn import GPLVMEmbedding
from gpflow_svi_gplvm.training.trainer import Trainer

N, D, Q, M = 24, 4, 2, 5
SETTINGS = dict(batch_size=8, progress=False, steps_per_call=20, seed=1)
# Per-row planar layers on the fit, checkpoint, new-row and export paths; the command line and
# scikit-learn run the default (shared planar layers).
TINY = dict(num_layers=2, flow_parameters="per-row")


@pytest.fixture(scope="module")
def data():
    return smooth_data(N, D, Q)


def _log_abs_det(function, z):
    """log |det dF/dz| by autodiff, per event, for events z [..., d]."""
    flat = tf.reshape(z, [-1, z.shape[-1]])
    with tf.GradientTape() as tape:
        tape.watch(flat)
        out = tf.reshape(function(tf.reshape(flat, z.shape)), flat.shape)
    jacobian = tape.batch_jacobian(out, flat).numpy()
    return np.linalg.slogdet(jacobian)[1].reshape(z.shape[:-1])


def _random_planar(rng, batch=(), dim=3):
    u, w = rng.standard_normal((2, *batch, dim))
    return Planar(u, w, rng.standard_normal(batch))


def test_planar_log_determinant_and_inverse_match_autodiff_and_round_trip():
    rng = np.random.default_rng(1)
    bijector = _random_planar(rng, batch=(4,))  # one layer per row, as per-row tables give
    z = tf.constant(rng.standard_normal((5, 4, 3)))
    expected = _log_abs_det(bijector.forward, z)
    np.testing.assert_allclose(
        bijector.forward_log_det_jacobian(z, event_ndims=1), expected, atol=1e-10
    )
    # A fresh tensor, so that TFP's cache of forward results is not what answers.
    x = tf.constant(bijector.forward(z).numpy())
    np.testing.assert_allclose(bijector.inverse(x), z, atol=1e-10)


def test_planar_constraint_holds_for_any_raw_parameters_and_zero_u_is_the_identity():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 3))
    u = -np.array([1.0, 3.0, 10.0, 100.0, 1e4, 0.0])[:, None] * w  # w^T u far below -1
    bijector = Planar(u, w, np.zeros(6))
    np.testing.assert_allclose(
        tf.reduce_sum(bijector.u_hat * w, -1), bijector.direction, rtol=1e-12
    )
    assert np.all(bijector.direction.numpy() >= -1 + PLANAR_MARGIN * (1 - 1e-9))
    z = tf.constant(rng.standard_normal((2, 6, 3)))
    assert np.all(np.isfinite(bijector.forward_log_det_jacobian(z, event_ndims=1)))
    identity = Planar(np.zeros(3), w[0], 0.5)
    np.testing.assert_allclose(identity.forward(z[:, 0]), z[:, 0], atol=1e-15)


def test_autoregressive_layers_stay_triangular_after_masked_weights_move():
    rng = np.random.default_rng(3)
    layers = AutoregressiveLayers(2, 3, num_rows=4, context_size=2, seed=0)
    # An optimiser moves every weight, masked entries included (no Keras constraint runs here).
    for variable in layers.trainable_variables:
        variable.assign(rng.standard_normal(variable.shape) * 0.5)
    context = tf.constant(rng.standard_normal((4, 2)))
    bijector = layers.bijector([context])
    z = tf.constant(rng.standard_normal((5, 4, 3)))
    np.testing.assert_allclose(
        bijector.forward_log_det_jacobian(z, event_ndims=1),
        _log_abs_det(bijector.forward, z),
        atol=1e-10,
    )
    # The first layer alone is triangular in its order (each output reads earlier inputs).
    first = layers.bijector([context]).bijectors[-1]
    flat = tf.reshape(z, [-1, 3])
    with tf.GradientTape() as tape:
        tape.watch(flat)
        out = tf.reshape(first.forward(tf.reshape(flat, z.shape)), [-1, 3])
    jacobian = tape.batch_jacobian(out, flat).numpy()
    np.testing.assert_array_equal(np.triu(jacobian, 1), 0.0)


def _reference_log_q(latent: FlowLatent, rows, x: np.ndarray) -> np.ndarray:
    """log q(x) by change of variables through the *inverse*: log N(g^-1(x)) + log|det J_g^-1|,
    the determinant from autodiff."""
    mean, variance, *flow_rows = rows
    bijector = latent.layers.bijector(flow_rows)
    x = tf.constant(x)
    z = bijector.inverse(x).numpy()
    log_base = -0.5 * np.sum((z - mean) ** 2 / variance + np.log(2 * np.pi * variance), -1)
    return log_base + _log_abs_det(bijector.inverse, x)


def test_row_term_is_the_monte_carlo_estimate_at_the_transformed_draws():
    rng = np.random.default_rng(4)
    latent = flow_latent(rng.standard_normal((5, Q)), "planar", 3, "per-row", seed=2)
    for table in latent.layers.row_tables:
        table.assign(rng.standard_normal(table.shape))
    idx = tf.constant([4, 0, 2], tf.int64)
    noise = tf.constant(rng.standard_normal((7, 3, Q)))
    batch = latent(idx, None, 7, noise)
    rows = [r.numpy() for r in latent.rows(idx)]
    x = batch.samples.numpy()
    log_q = _reference_log_q(latent, rows, x)
    expected = np.mean(log_prior(x).numpy() - log_q, axis=0)
    np.testing.assert_allclose(batch.row_term, expected, rtol=1e-9)


def test_row_term_of_an_identity_flow_averages_to_minus_the_gaussian_kl():
    rng = np.random.default_rng(5)
    mean, variance = rng.standard_normal((2, Q)), np.array([[0.3, 1.5], [0.8, 0.2]])
    latent = FlowLatent(mean, PlanarLayers(2, Q), initial_variance=variance)  # u = 0: identity
    batch = latent(tf.constant([0, 1], tf.int64), None, 20000)
    kl = 0.5 * np.sum(variance + mean**2 - 1 - np.log(variance), -1)
    np.testing.assert_allclose(batch.row_term, -kl, atol=0.05)


def test_joint_flow_density_is_over_vec_x_and_rows_share_it():
    rng = np.random.default_rng(6)
    latent = flow_latent(rng.standard_normal((3, Q)), "planar", 2, "joint", seed=1)
    assert isinstance(latent, JointFlowLatent) and latent.layers.dim == 3 * Q
    latent.layers.u.assign(rng.standard_normal(latent.layers.u.shape))
    noise = tf.constant(rng.standard_normal((6, 3, Q)))
    everything = tf.range(3, dtype=tf.int64)
    batch = latent(everything, None, 6, noise)
    x, log_q = latent.transformed(latent.rows(everything), noise)
    flat = x.numpy().reshape(6, -1)
    mean, variance = (r.numpy().reshape(-1) for r in latent.rows(everything))
    bijector = latent.layers.bijector(())
    z = bijector.inverse(tf.constant(flat)).numpy()
    reference = -0.5 * np.sum((z - mean) ** 2 / variance + np.log(2 * np.pi * variance), -1)
    reference += _log_abs_det(bijector.inverse, tf.constant(flat))
    np.testing.assert_allclose(np.sum(log_q, axis=1), reference, rtol=1e-9)
    joint = np.mean(np.sum(log_prior(x), -1) - reference)
    np.testing.assert_allclose(np.sum(batch.row_term), joint, rtol=1e-9)
    # A batch of some rows draws all rows, then keeps its own draws and each row's share.
    latent.generator.reset_from_seed(7)
    whole = latent(everything, None, 6)
    latent.generator.reset_from_seed(7)
    part = latent(tf.constant([2, 0], tf.int64), None, 6)
    np.testing.assert_allclose(part.samples, whole.samples.numpy()[:, [2, 0]])
    np.testing.assert_allclose(part.row_term, whole.row_term.numpy()[[2, 0]])


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(num_layers=0), "num_layers must be a positive integer"),
        (dict(flow="radial"), "Unknown flow 'radial'"),
        (dict(flow_parameters="each"), "flow_parameters must be one of"),
        (dict(initial_variance=-1.0), "initial_variance must be a positive, finite .* -1.0"),
        (dict(initial_variance=0.0), "initial_variance must be a positive, finite .* 0.0"),
        (dict(initial_variance=np.nan), "initial_variance must be a positive, finite .* nan"),
        (dict(initial_variance=[0.1, 0.2, 0.3]), "initial_variance .* broadcastable"),
    ],
)
def test_bad_flow_options_are_value_errors_saying_what_to_change(data, options, message):
    with pytest.raises(ValueError, match=message):
        FlowBayesianGPLVM(data, Q, M, **options)


def test_a_joint_flow_refuses_new_rows(data):
    model = FlowBayesianGPLVM(data[:4], Q, 3, num_layers=1, flow_parameters="joint")
    with pytest.raises(ValueError, match="flow_parameters='shared' or 'per-row'"):
        model.infer_latents(data[:2])


@pytest.mark.parametrize("flow, tables", [("planar", 5), ("iaf", 3)])
def test_per_row_tables_take_row_sparse_gradients(data, flow, tables):
    # Counts with gaps under a Poisson likelihood and one shared q(u) covariance: the bound's
    # other parts work unchanged under a flow.
    counts = np.round(5 * (data + 1))
    counts[0, 1] = counts[3, 2] = np.nan
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        model = FlowBayesianGPLVM(
            counts,
            Q,
            M,
            likelihood=gpflow.likelihoods.Poisson(),
            shared_covariance=True,
            flow=flow,
            num_layers=2,
            flow_parameters="per-row",
        )
    idx = tf.constant([3, 5], tf.int64)
    parameters = model.latent.row_parameters  # base mean and variance; u, w, b or a context
    with tf.GradientTape() as tape:
        loss = model.training_loss((idx, tf.constant(counts[[3, 5]])))
    gradients = tape.gradient(loss, [p.unconstrained_variable for p in parameters])
    assert len(parameters) == tables and np.isfinite(loss.numpy())
    assert all(isinstance(g, tf.IndexedSlices) for g in gradients)
    assert all(np.all(np.isfinite(g.values.numpy())) for g in gradients)


@pytest.fixture(scope="module")
def resumed(data, tmp_path_factory):
    """(uninterrupted model and history, resumed model and history): one run of 80 steps
    checkpointed at step 40, and a new model resumed from that checkpoint."""
    folder, copy = tmp_path_factory.mktemp("run"), tmp_path_factory.mktemp("at_40") / "run"
    straight = FlowBayesianGPLVM(data, Q, M, **TINY)
    options = {k: v for k, v in SETTINGS.items() if k in ("batch_size", "seed")}
    trainer = Trainer(straight, data, checkpoint_dir=folder, **options)
    trainer.train(40, steps_per_call=20, progress=False)
    shutil.copytree(folder, copy)  # what an interruption after step 40 leaves
    uninterrupted = trainer.train(40, steps_per_call=20, progress=False)
    again = FlowBayesianGPLVM(data, Q, M, **TINY)
    history = fit(again, data, iterations=80, checkpoint_dir=copy, resume=True, **SETTINGS)
    return straight, uninterrupted, again, history


def test_fit_traces_once_and_an_interrupted_run_resumes_exactly(resumed):
    straight, uninterrupted, again, history = resumed
    assert uninterrupted.tracing_count == 1 and np.all(np.isfinite(uninterrupted.elbo))
    # Every row's trained planar layers still satisfy w^T u_hat > -1: they stay invertible.
    for layer in straight.latent.layers.bijector(straight.latent.layers.row_tables).bijectors:
        assert np.all(layer.direction.numpy() > -1 + PLANAR_MARGIN / 2)
    for expected, actual in zip(straight.trainable_variables, again.trainable_variables):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(history.elbo, uninterrupted.elbo, rtol=1e-12)


SERVE = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf

    loaded = tf.saved_model.load(sys.argv[1])
    Y = tf.constant(np.array(json.loads(sys.argv[2])))
    encoded = loaded.signatures["encode"](Y=Y)
    reconstructed = loaded.signatures["reconstruct"](Y=Y)
    leaked = [m for m in ("gpflow", "tensorflow_probability") if m in sys.modules]
    outputs = {"encode": encoded["mean"], "reconstruct": reconstructed["mean"]}
    print(json.dumps({**{k: v.numpy().tolist() for k, v in outputs.items()}, "leaked": leaked}))
    """)


@pytest.mark.processes
def test_new_rows_and_an_export_served_by_tensorflow_alone(resumed, data, tmp_path):
    model = resumed[0]
    Y = data[:3].copy()
    Y[1, 0] = np.nan
    mean, variance = model.infer_latents(Y, iterations=30, seed=2)
    assert mean.shape == (3, Q) and np.all(variance.numpy() > 0)
    # Shapes are checked while tracing fit and infer_latents above; the export traces six graphs
    # (its signatures and the inference graphs it holds), three times as long under the checks.
    with disable_check_shapes():
        path = export_saved_model(model, tmp_path / "flow", encode_iterations=30, seed=2)
    command = [sys.executable, "-c", SERVE, str(path), json.dumps(Y.tolist())]  # NaN as NaN
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert served["leaked"] == []
    np.testing.assert_allclose(served["encode"], mean.numpy(), rtol=1e-8, atol=1e-10)
    reconstruction = np.array(served["reconstruct"])
    assert np.sqrt(np.mean((reconstruction - data[:3]) ** 2)) < np.std(data)


def test_scikit_learn_embedding_of_the_flow_model(data):
    embedding = GPLVMEmbedding(model="flow", n_components=Q, num_inducing=M, iterations=40)
    X = embedding.fit_transform(data)
    assert X.shape == (N, Q) and np.all(np.isfinite(X))
    assert isinstance(embedding.model_, FlowBayesianGPLVM)


def test_command_line_trains_the_flow_model_on_data_with_gaps(data, tmp_path):
    path = tmp_path / "mine.csv"
    cells = [
        ["" if (i + j) % 7 == 0 else f"{v:.6f}" for j, v in enumerate(row)]
        for i, row in enumerate(data)
    ]
    path.write_text("\n".join(",".join(row) for row in cells) + "\n")
    args = ["--data", str(path), "--model", "flow", "--latent-dim", str(Q), "--iterations", "20"]
    args += ["--num-inducing", str(M), "--shared-covariance", "--no-progress"]
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        assert main([*args, "--output", str(tmp_path)]) == 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model"] == "FlowBayesianGPLVM" and metrics["shared_covariance"] is True
    assert np.isfinite(metrics["elbo_final"]) and np.isfinite(metrics["reconstruction_rmse"])
