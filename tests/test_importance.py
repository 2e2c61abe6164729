"""The importance-weighted bound: its value against a brute-force numpy computation, K = 1 against
the ELBO, its growth with K towards its limit (by quadrature on a Q = 1 toy), the DReG gradients
against a two-pass reference and against the plain estimator's expectation, the flows' density
gradient against their inverse, and bad input. Eager and tiny, but for one compiled fit."""

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from builders import move_q_u, smooth_data

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    FlowBayesianGPLVM,
    PointGPLVM,
    fit,
)
from gpflow_svi_gplvm.components.importance import importance_weighted_rows
from gpflow_svi_gplvm.latents.flow_layers import PlanarLayers
from gpflow_svi_gplvm.latents.flows import FlowLatent, log_prior

N, D, Q, M = 6, 3, 2, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return smooth_data(N, D, Q) + 0.1 * rng.standard_normal((N, D))


def _tiny(model_class, Y, **options):
    model = model_class(Y, options.pop("latent_dim", Q), M, **options)
    move_q_u(model, np.random.default_rng(3), 0.7, 0.2, 0.5)
    return model


def _bound(model, Y, idx=None, seed=7):
    """model.elbo on rows ``idx`` (default all), its draws from a generator reset to ``seed``."""
    idx = np.arange(len(Y)) if idx is None else idx
    model.latent.generator.reset_from_seed(seed)
    data = (tf.constant(idx, tf.int64), tf.constant(Y[idx]))
    return model.elbo(data)


def _numpy_bound(model, Y, idx, noise, S, K):
    """The importance-weighted bound of a whitened B-SVI model with a Gaussian likelihood, an SE
    kernel and a constant mean, by hand: the SVGP predictive at each draw, the Gaussian
    expected log likelihood, log p(x) - log q(x), log-mean-exp over K, mean over S."""
    mean, variance = (p.numpy()[idx] for p in (model.latent.mean, model.latent.variance))
    x = mean + np.sqrt(variance) * noise  # [S K, B, Q]
    Z = model.inducing_variable.Z.numpy()
    lengthscales, signal = model.kernel.lengthscales.numpy(), model.kernel.variance.numpy()

    def k(a, b):
        return signal * np.exp(-0.5 * np.sum(((a[:, None] - b[None]) / lengthscales) ** 2, -1))

    Lz = np.linalg.cholesky(k(Z, Z) + gpflow.config.default_jitter() * np.eye(len(Z)))
    flat = x.reshape(-1, x.shape[-1])
    A = np.linalg.solve(Lz, k(Z, flat))  # [M, n]
    q_mu, q_sqrt = model.q_mu.numpy(), np.tril(model.q_sqrt.numpy())
    f_mean = A.T @ q_mu + np.reshape(model.mean_function.c.numpy(), -1)
    covariance = np.sum(np.einsum("dmk,mn->dkn", q_sqrt, A) ** 2, axis=1).T  # A^T S_d A
    f_var = signal - np.sum(A**2, 0)[:, None] + covariance
    noise_variance = model.likelihood.variance.numpy()
    y = np.tile(Y[idx], (len(x), 1))
    expected = -0.5 * np.log(2 * np.pi * noise_variance) - 0.5 * ((y - f_mean) ** 2 + f_var) / (
        noise_variance
    )
    data_terms = expected.sum(-1).reshape(x.shape[:2])
    log_p = -0.5 * np.sum(x**2 + np.log(2 * np.pi), -1)
    log_q = -0.5 * np.sum(noise**2 + np.log(2 * np.pi * variance), -1)
    logs = (data_terms + log_p - log_q).reshape(S, K, -1)
    top = logs.max(axis=1, keepdims=True)
    rows = np.mean(np.log(np.mean(np.exp(logs - top), axis=1)) + top[:, 0], axis=0)
    kl = sum(
        0.5 * (np.sum(L**2) + m @ m - len(m) - 2 * np.sum(np.log(np.abs(np.diag(L)))))
        for m, L in zip(q_mu.T, q_sqrt)
    )
    return len(Y) / len(idx) * rows.sum() - kl


@pytest.mark.parametrize("dreg", [True, False])
def test_bound_matches_a_brute_force_numpy_computation(data, dreg):
    S, K = 2, 3
    model = _tiny(
        BayesianSVIGPLVM, data, num_samples=S, num_importance=K, doubly_reparameterised=dreg
    )
    idx = np.array([4, 1, 0, 5])
    model.latent.generator.reset_from_seed(7)
    noise = model.latent.generator.normal([S * K, len(idx), Q], dtype=tf.float64).numpy()
    value = _bound(model, data, idx).numpy()
    np.testing.assert_allclose(value, _numpy_bound(model, data, idx, noise, S, K), rtol=1e-10)


def test_one_draw_is_the_elbo(data):
    # K = 1 is the model's ELBO itself (closed form where it applies, as without the option).
    for model_class in (BayesianSVIGPLVM, AmortisedBayesianGPLVM):
        plain, one = (_tiny(model_class, data, **o) for o in ({}, {"num_importance": 1}))
        assert one.closed_form and one.num_importance == 1
        np.testing.assert_array_equal(_bound(one, data), _bound(plain, data))
    # The flows' ELBO already estimates the row term from its draws: the importance-weighted
    # rows at K = 1 are its rows, draw for draw.
    flow = _tiny(FlowBayesianGPLVM, data, num_layers=2, num_samples=3)
    for table in flow.trainable_variables:
        if "planar_u" in table.name:
            table.assign(np.random.default_rng(1).standard_normal(table.shape))
    idx, Y = tf.range(N, dtype=tf.int64), tf.constant(data)
    flow.latent.generator.reset_from_seed(2)
    elbo_rows = flow.row_bounds(idx, Y)
    flow.latent.generator.reset_from_seed(2)
    np.testing.assert_allclose(importance_weighted_rows(flow, idx, Y), elbo_rows, rtol=1e-12)


def test_bound_grows_with_k_towards_its_limit_by_quadrature():
    # Q = 1: the limit K -> infinity, sum_n log int p(x) exp(d_n(x)) dx - KL(q(u) || p(u)), is a
    # one-dimensional integral per row.
    Y = smooth_data(8, D, 1, seed=2)
    model = _tiny(BayesianSVIGPLVM, Y, latent_dim=1, num_importance=2)
    model.latent.variance.assign(np.full((8, 1), 0.3))  # q(x) away from the posterior
    grid = np.linspace(-7.0, 7.0, 2801)
    draws = tf.constant(np.broadcast_to(grid[:, None, None], (len(grid), 8, 1)))
    data_terms = model.draw_data_terms(draws, tf.constant(Y)).numpy()  # [grid, N]
    logs = data_terms - 0.5 * grid[:, None] ** 2 - 0.5 * np.log(2 * np.pi)
    top = logs.max(0)
    limit = np.sum(top + np.log(np.trapz(np.exp(logs - top), grid, axis=0)))
    limit -= model.prior_kl().numpy()
    elbo = _tiny(BayesianSVIGPLVM, Y, latent_dim=1)
    elbo.latent.variance.assign(model.latent.variance)
    bounds = {"elbo": _bound(elbo, Y).numpy()}
    for K in (1, 5, 20):
        model.num_importance, model.num_samples = K, 4000 // K
        bounds[K] = np.mean([_bound(model, Y, seed=s).numpy() for s in range(3)])
    assert abs(bounds[1] - bounds["elbo"]) < 0.05
    assert bounds["elbo"] + 0.5 < bounds[5] < bounds[20] - 0.1 < limit
    assert limit - bounds[20] < bounds[20] - bounds[1]


def _gradients(model, Y, seed=7):
    """The bound and its gradients on every row, for common draws (the generator reset)."""
    model.latent.generator.reset_from_seed(seed)
    with tf.GradientTape() as tape:
        value = model.elbo((tf.range(len(Y), dtype=tf.int64), tf.constant(Y)))
    return value, [tf.convert_to_tensor(g) for g in tape.gradient(value, model.trainable_variables)]


def _dreg_reference(model, Y, seed=7):
    """DReG's gradients of q(x)'s parameters, the plain estimator's of the rest, in two passes:
    log q at the draws from a TFP distribution whose parameters are held."""
    S, K = model.num_samples, model.num_importance
    latent_variables = {v.ref() for v in model.latent.trainable_variables}
    idx = tf.range(len(Y), dtype=tf.int64)
    model.latent.generator.reset_from_seed(seed)
    with tf.GradientTape(persistent=True) as tape:
        batch = model.latent_batch(idx, tf.constant(Y), S * K)
        scale = batch.scale
        if scale is None:
            scale = tf.linalg.diag(tf.sqrt(batch.variance))
        q = tfp.distributions.MultivariateNormalTriL(batch.mean, scale)
        held_q = tfp.distributions.MultivariateNormalTriL(
            tf.stop_gradient(batch.mean), tf.stop_gradient(scale)
        )
        data_terms = model.draw_data_terms(batch.samples, tf.constant(Y))
        prior = log_prior(batch.samples)
        plain = tf.reshape(data_terms + prior - q.log_prob(batch.samples), [S, K, -1])
        dreg = tf.reshape(data_terms + prior - held_q.log_prob(batch.samples), [S, K, -1])
        weights = tf.stop_gradient(tf.nn.softmax(plain, axis=1))
        plain_bound = (
            tf.reduce_sum(tf.reduce_mean(tf.reduce_logsumexp(plain, 1) - np.log(K), 0))
            - model.prior_kl()
        )
        surrogate = tf.reduce_sum(tf.reduce_mean(tf.reduce_sum(weights**2 * dreg, 1), 0))
    return [
        tf.convert_to_tensor(
            tape.gradient(surrogate if v.ref() in latent_variables else plain_bound, v)
        )
        for v in model.trainable_variables
    ]


@pytest.mark.parametrize("model_class", [BayesianSVIGPLVM, AmortisedBayesianGPLVM])
def test_dreg_gradients_match_a_two_pass_reference(data, model_class):
    model = _tiny(model_class, data, num_samples=2, num_importance=4)
    _, gradients = _gradients(model, data)
    reference = _dreg_reference(model, data)
    for variable, gradient, expected in zip(model.trainable_variables, gradients, reference):
        np.testing.assert_allclose(gradient, expected, rtol=1e-9, atol=1e-12, err_msg=variable.name)
    # The plain estimator differs for q(x)'s parameters only.
    model.doubly_reparameterised = False
    _, plain = _gradients(model, data)
    latent = {v.ref() for v in model.latent.trainable_variables}
    for variable, gradient, dreg in zip(model.trainable_variables, plain, gradients):
        same = np.allclose(gradient, dreg, rtol=1e-9, atol=1e-12)
        assert same != (variable.ref() in latent), variable.name


def test_dreg_agrees_with_the_plain_estimator_in_expectation(data):
    # Each evaluation averages S = 50 independent K = 10 estimates; 40 evaluations per estimator,
    # compiled (one trace each).
    model = _tiny(AmortisedBayesianGPLVM, data, num_samples=50, num_importance=10, hidden_sizes=[8])
    encoder = model.latent.trainable_variables
    Y = (tf.range(N, dtype=tf.int64), tf.constant(data))
    draws = {}
    for dreg in (True, False):
        model.doubly_reparameterised = dreg

        def gradient():
            with tf.GradientTape() as tape:
                value = model.elbo(Y)
            return tf.concat([tf.reshape(g, [-1]) for g in tape.gradient(value, encoder)], 0)

        compiled = tf.function(gradient, autograph=False)
        model.latent.generator.reset_from_seed(11)
        draws[dreg] = np.array([compiled().numpy() for _ in range(40)])
    z = (draws[True].mean(0) - draws[False].mean(0)) / np.sqrt(
        sum(v.var(0, ddof=1) / len(v) for v in draws.values())
    )
    assert np.mean(z**2) < 1.5 and np.max(np.abs(z)) < 5.0, (np.mean(z**2), np.max(np.abs(z)))


def test_flow_density_gradient_is_the_gradient_of_log_q_through_the_inverse():
    rng = np.random.default_rng(4)
    latent = FlowLatent(rng.standard_normal((3, Q)), PlanarLayers(3, Q, num_rows=3, seed=1))
    for table in latent.layers.row_tables:
        table.assign(rng.standard_normal(table.shape))
    idx = tf.constant([2, 0, 1], tf.int64)
    batch = latent(idx, None, 5, tf.constant(rng.standard_normal((5, 3, Q))))
    mean, variance, *flow_rows = latent.rows(idx)
    bijector = latent.layers.bijector(flow_rows)
    x = tf.constant(batch.samples.numpy())
    with tf.GradientTape() as tape:
        tape.watch(x)
        z = bijector.inverse(x)
        base = tfp.distributions.MultivariateNormalDiag(mean, tf.sqrt(variance))
        log_q = base.log_prob(z) + bijector.inverse_log_det_jacobian(x, event_ndims=1)
    np.testing.assert_allclose(batch.log_density, log_q, rtol=1e-8)
    np.testing.assert_allclose(batch.density_gradient, tape.gradient(log_q, x), rtol=1e-6)


def test_an_importance_weighted_fit_traces_once_and_raises_the_bound(data):
    Y = smooth_data(40, D, Q, seed=1)
    model = AmortisedBayesianGPLVM(Y, Q, M, num_importance=5)
    start = _bound(model, Y).numpy()
    history = fit(model, Y, iterations=60, batch_size=10, progress=False, seed=1)
    assert history.tracing_count == 1 and np.all(np.isfinite(history.elbo))
    assert _bound(model, Y).numpy() > start


@pytest.mark.parametrize(
    ("model_class", "options", "message"),
    [
        (BayesianSVIGPLVM, {"num_importance": 0}, "num_importance must be a positive integer"),
        (BayesianSVIGPLVM, {"num_importance": 2.5}, "num_importance must be a positive integer"),
        (BayesianSVIGPLVM, {"num_importance": True}, "num_importance must be a positive integer"),
        (PointGPLVM, {"num_importance": 5}, "point and MAP estimates have no q"),
        (MAPGPLVM, {"num_importance": 5}, "use BayesianSVIGPLVM, AmortisedBayesianGPLVM"),
        (
            FlowBayesianGPLVM,
            {"num_importance": 5, "flow_parameters": "joint", "num_layers": 1},
            "joint flow's density is all rows' together",
        ),
        (
            BayesianSVIGPLVM,
            {"num_importance": 5, "latent_expectation": "closed-form"},
            "use latent_expectation='auto'",
        ),
    ],
)
def test_bad_importance_options_say_what_to_use(data, model_class, options, message):
    with pytest.raises(ValueError, match=message):
        model_class(data, Q, M, **options)


@pytest.mark.processes
@pytest.mark.slow
def test_an_importance_weighted_fit_on_two_replicas_traces_once():
    script = textwrap.dedent("""
        import json
        import tensorflow as tf

        cpu = tf.config.list_physical_devices("CPU")[0]
        devices = [tf.config.LogicalDeviceConfiguration()] * 2
        tf.config.set_logical_device_configuration(cpu, devices)
        import numpy as np
        from gpflow_svi_gplvm import FlowBayesianGPLVM, fit

        Y = np.tanh(np.random.default_rng(0).standard_normal((40, 2)) @ np.ones((2, 4)))
        strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
        with strategy.scope():
            model = FlowBayesianGPLVM(Y, 2, 5, num_layers=2, num_importance=3)
        history = fit(model, Y, 40, batch_size=10, strategy=strategy, progress=False)
        print(json.dumps([history.tracing_count, bool(np.all(np.isfinite(history.elbo)))]))
        """)
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "[1, true]"


@pytest.mark.processes
@pytest.mark.slow
def test_the_tutorials_block_runs_as_written(tmp_path):
    tutorial = (Path(__file__).resolve().parents[1] / "tutorials" / "01_the_bound.md").read_text()
    section = tutorial.split("## A tighter bound", 1)[1]
    block = re.search(r"```python\n(.*?)```", section, flags=re.DOTALL).group(1)
    result = subprocess.run(
        [sys.executable, "-c", block], capture_output=True, text=True, timeout=900, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    log_likelihood, error = map(float, result.stdout.split()[-2:])
    assert np.isfinite(log_likelihood) and 0.0 < error < 1.0
