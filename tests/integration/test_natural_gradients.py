"""Natural-gradient steps on q(u), against GPflow's ``NaturalGradient`` (per-output layout), the
collapsed optimum of GPflow's ``SGPR`` (both layouts), and automatic differentiation through the
expectation parameters (shared layout, non-Gaussian likelihood with gaps); the Trainer's option.
"""

from __future__ import annotations

import copy

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.config import default_jitter

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.likelihoods import MaskedLikelihood
from gpflow_svi_gplvm.training.natural_gradients import InducingNaturalGradient

N, D, Q, M = 30, 3, 2, 6


@pytest.fixture(scope="module")
def gaussian_Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, D))


@pytest.fixture(scope="module")
def counts_with_gaps() -> np.ndarray:
    rng = np.random.default_rng(1)
    Y = rng.poisson(3.0, size=(N, D)).astype(float)
    Y[rng.random((N, D)) < 0.3] = np.nan
    return Y


def perturb(model: sg.SVIGPLVM, seed: int = 2) -> None:
    """q(u) away from its initial value, so that a step has something to do."""
    rng = np.random.default_rng(seed)
    model.q_mu.assign(0.3 * rng.standard_normal(model.q_mu.shape))
    factors = 0.2 * np.tril(rng.standard_normal(model.q_sqrt.shape), -1)
    model.q_sqrt.assign(factors + np.eye(M) * rng.uniform(0.5, 1.0, (model.q_sqrt.shape[0], M, 1)))


def full_batch(Y: np.ndarray) -> tuple[tf.Tensor, tf.Tensor]:
    return tf.range(len(Y), dtype=tf.int64), tf.constant(Y)


def q_u_gradients(model: sg.SVIGPLVM, data) -> list[tf.Tensor]:
    variables = [model.q_mu.unconstrained_variable, model.q_sqrt.unconstrained_variable]
    with tf.GradientTape() as tape:
        loss = model.training_loss(data)
    return tape.gradient(loss, variables)


def natural_step(model: sg.SVIGPLVM, data, gamma: float) -> None:
    InducingNaturalGradient(model.q_mu, model.q_sqrt, gamma).apply_gradients(
        q_u_gradients(model, data)
    )


@pytest.mark.parametrize("counts", [False, True], ids=["gaussian", "poisson-with-gaps"])
def test_a_per_output_step_is_gpflows_natural_gradient(counts, gaussian_Y, counts_with_gaps):
    Y = counts_with_gaps if counts else gaussian_Y
    likelihood = MaskedLikelihood(gpflow.likelihoods.Poisson()) if counts else None
    ours = sg.PointGPLVM(Y, Q, M, likelihood=likelihood, shared_covariance=False)
    perturb(ours)
    reference = copy.deepcopy(ours)
    data = full_batch(Y)

    natural_step(ours, data, gamma=0.3)
    gpflow.optimizers.NaturalGradient(gamma=0.3).minimize(
        lambda: reference.training_loss(data), [(reference.q_mu, reference.q_sqrt)]
    )

    np.testing.assert_allclose(ours.q_mu.numpy(), reference.q_mu.numpy(), rtol=0, atol=1e-10)
    np.testing.assert_allclose(ours.q_sqrt.numpy(), reference.q_sqrt.numpy(), rtol=0, atol=1e-10)


def whitened_collapsed_q_u(model: sg.SVIGPLVM, Y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """GPflow's SGPR optimum q(u) at the model's latents, whitened: mean [M, D], covariance."""
    X = model.latent_mean()
    sgpr = gpflow.models.SGPR(
        (X, tf.constant(Y)),
        model.kernel,
        model.inducing_variable,
        mean_function=model.mean_function,
        noise_variance=model.likelihood.variance,
    )
    mean, covariance = sgpr.compute_qu()
    Kuu = gpflow.covariances.Kuu(model.inducing_variable, model.kernel, jitter=default_jitter())
    Lz = tf.linalg.cholesky(Kuu)
    whitened_mean = tf.linalg.triangular_solve(Lz, mean)
    whitened_covariance = tf.linalg.triangular_solve(
        Lz, tf.transpose(tf.linalg.triangular_solve(Lz, covariance))
    )
    return whitened_mean.numpy(), whitened_covariance.numpy(), sgpr.elbo().numpy()


@pytest.mark.parametrize("shared", [False, True], ids=["per-output", "shared"])
def test_one_full_batch_step_of_size_one_lands_on_the_collapsed_optimum(shared, gaussian_Y):
    model = sg.PointGPLVM(gaussian_Y, Q, M, shared_covariance=shared)
    perturb(model)
    mean, covariance, collapsed_elbo = whitened_collapsed_q_u(model, gaussian_Y)

    natural_step(model, full_batch(gaussian_Y), gamma=1.0)

    np.testing.assert_allclose(model.q_mu.numpy(), mean, rtol=0, atol=1e-8)
    for factor in model.q_sqrt.numpy():
        np.testing.assert_allclose(factor @ factor.T, covariance, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model.elbo(full_batch(gaussian_Y)).numpy(), collapsed_elbo, 1e-10)


def test_a_shared_step_moves_the_natural_parameters_along_the_expectation_gradient(
    counts_with_gaps,
):
    """theta <- theta - gamma d loss / d eta, with d loss / d eta by automatic differentiation
    through m = eta_1, L = chol((eta_2 - eta_1 eta_1^T) / D) (the implementation differentiates
    the Cholesky factor in closed form)."""
    gamma = 0.2
    likelihood = MaskedLikelihood(gpflow.likelihoods.Poisson())
    model = sg.PointGPLVM(counts_with_gaps, Q, M, likelihood=likelihood, shared_covariance=True)
    perturb(model)
    data = full_batch(counts_with_gaps)
    m, L = model.q_mu.numpy(), model.q_sqrt.numpy()[0]
    mean_gradient, unconstrained_gradient = q_u_gradients(model, data)
    L_gradient = tfp.math.fill_triangular(unconstrained_gradient)[0]

    eta_1 = tf.constant(m)
    eta_2 = tf.constant(D * L @ L.T + m @ m.T)
    with tf.GradientTape() as tape:
        tape.watch([eta_1, eta_2])
        covariance = (eta_2 - tf.matmul(eta_1, eta_1, transpose_b=True)) / D
        factor = tf.linalg.cholesky(0.5 * (covariance + tf.transpose(covariance)))
        mean = tf.identity(eta_1)
    eta_1_gradient, eta_2_gradient = tape.gradient(
        [mean, factor], [eta_1, eta_2], output_gradients=[mean_gradient, L_gradient]
    )
    precision = np.linalg.inv(L @ L.T)
    new_precision = precision + 2 * gamma * eta_2_gradient.numpy()
    new_theta_1 = precision @ m - gamma * eta_1_gradient.numpy()

    natural_step(model, data, gamma)

    new_covariance = model.q_sqrt.numpy()[0] @ model.q_sqrt.numpy()[0].T
    np.testing.assert_allclose(np.linalg.inv(new_covariance), new_precision, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(model.q_mu.numpy(), new_covariance @ new_theta_1, atol=1e-9)


def test_the_trainer_steps_q_u_naturally_and_everything_else_with_adam(gaussian_Y):
    """A full batch and gamma = 1: after one step q(u) is the collapsed optimum for the
    parameters before the step, while Adam moved the kernel from the same gradient pass."""
    model = sg.PointGPLVM(gaussian_Y, Q, M, shared_covariance=True)
    perturb(model)
    before = copy.deepcopy(model)
    mean, covariance, _ = whitened_collapsed_q_u(before, gaussian_Y)
    trainer = sg.Trainer(model, gaussian_Y, batch_size=N, q_u_optimizer="natgrad", natgrad_gamma=1)
    q_u = {model.q_mu.unconstrained_variable.ref(), model.q_sqrt.unconstrained_variable.ref()}
    assert not q_u & {v.ref() for v in trainer.steps.optimizer.variables_to_train}

    trainer.train(1, progress=False)

    np.testing.assert_allclose(model.q_mu.numpy(), mean, rtol=0, atol=1e-8)
    factor = model.q_sqrt.numpy()[0]
    np.testing.assert_allclose(factor @ factor.T, covariance, rtol=0, atol=1e-8)
    assert model.kernel.variance.numpy() != before.kernel.variance.numpy()


def test_natural_gradients_are_the_default_for_a_gaussian_likelihood_only(
    gaussian_Y, counts_with_gaps
):
    gaussian = sg.BayesianSVIGPLVM(gaussian_Y, Q, M)
    assert sg.Trainer(gaussian, gaussian_Y).steps.q_u_optimizer == "natgrad"
    assert sg.Trainer(gaussian, gaussian_Y, q_u_optimizer="adam").steps.natural_gradient is None
    likelihood = MaskedLikelihood(gpflow.likelihoods.Poisson())
    counts = sg.BayesianSVIGPLVM(counts_with_gaps, Q, M, likelihood=likelihood)
    assert sg.Trainer(counts, counts_with_gaps).steps.q_u_optimizer == "adam"


def test_natural_gradients_train_a_poisson_model_with_gaps(counts_with_gaps):
    likelihood = MaskedLikelihood(gpflow.likelihoods.Poisson())
    model = sg.BayesianSVIGPLVM(counts_with_gaps, Q, M, likelihood=likelihood)
    history = sg.fit(
        model, counts_with_gaps, 200, batch_size=10, q_u_optimizer="natgrad", progress=False
    )
    assert np.all(np.isfinite(history.elbo))
    assert history.elbo[-20:].mean() > history.elbo[:20].mean()


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(q_u_optimizer="sgd"), "q_u_optimizer must be"),
        (dict(natgrad_gamma=1.5), "natgrad_gamma must be a positive, finite number at most 1"),
        (dict(natgrad_gamma=0.0), "natgrad_gamma must be"),
    ],
)
def test_bad_q_u_settings_are_value_errors(options, message, gaussian_Y):
    model = sg.PointGPLVM(gaussian_Y, Q, M)
    with pytest.raises(ValueError, match=message):
        sg.Trainer(model, gaussian_Y, **options)


def test_a_checkpoint_of_the_other_q_u_optimizer_is_refused(gaussian_Y, tmp_path):
    model = sg.PointGPLVM(gaussian_Y, Q, M)
    sg.Trainer(model, gaussian_Y, q_u_optimizer="adam", checkpoint_dir=tmp_path).save()
    resumed = sg.Trainer(model, gaussian_Y, q_u_optimizer="natgrad", checkpoint_dir=tmp_path)
    with pytest.raises(ValueError, match="same q_u_optimizer"):
        resumed.restore()


def test_a_step_to_an_indefinite_covariance_leaves_q_u_and_is_counted(gaussian_Y):
    """d loss / dS = -c I with c large pushes the precision below zero: the step is refused."""
    model = sg.PointGPLVM(gaussian_Y, Q, M, shared_covariance=False)
    perturb(model)
    q_mu, q_sqrt = model.q_mu.numpy().copy(), model.q_sqrt.numpy().copy()
    L_gradient = -2.0 * 1e6 * q_sqrt  # d loss / dL = 2 (d loss / dS) L
    unconstrained_gradient = tfp.math.fill_triangular_inverse(tf.constant(L_gradient))
    step = InducingNaturalGradient(model.q_mu, model.q_sqrt, gamma=0.5)
    step.apply_gradients((tf.zeros_like(model.q_mu), unconstrained_gradient))
    np.testing.assert_array_equal(model.q_mu.numpy(), q_mu)
    np.testing.assert_allclose(model.q_sqrt.numpy(), q_sqrt, rtol=1e-14)
    assert step.rejected_steps.numpy() == 1
