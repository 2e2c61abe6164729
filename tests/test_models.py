"""SVIGPLVM's hooks: the latent module built from the checked data, and the GP at latent draws."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import gpflow_svi_gplvm.models as models
from gpflow_svi_gplvm import SVIGPLVM, AmortisedBayesianGPLVM, BayesianSVIGPLVM
from gpflow_svi_gplvm.latents import PointLatent

N, D, Q, M = 20, 3, 2, 5


@pytest.fixture(scope="module")
def Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, D))


@pytest.mark.parametrize("shared", [False, True])
def test_predict_f_at_draws_is_predict_f_at_each_draw(Y, shared):
    model = BayesianSVIGPLVM(Y, Q, M, shared_covariance=shared)
    model.q_mu.assign(np.random.default_rng(1).standard_normal(model.q_mu.shape))
    samples = tf.constant(np.random.default_rng(2).standard_normal((3, 4, Q)))
    mean, variance = model.predict_f_at_draws(samples)
    assert mean.shape == variance.shape == (3, 4, D)
    for draw in range(3):
        expected_mean, expected_variance = model.predict_f(samples[draw])
        np.testing.assert_allclose(mean[draw], expected_mean, rtol=1e-12)
        np.testing.assert_allclose(variance[draw], expected_variance, rtol=1e-12)


def test_svigplvm_takes_a_one_argument_latent_factory_and_needs_one(Y):
    model = SVIGPLVM(Y, Q, M, latent=lambda initial: PointLatent(initial))
    assert isinstance(model.latent, PointLatent) and model.latent.num_data == N
    with pytest.raises(ValueError, match="SVIGPLVM needs latent="):
        SVIGPLVM(Y, Q, M)


def test_a_latent_module_of_the_wrong_size_is_refused(Y):
    with pytest.raises(ValueError, match=f"holds {N - 1} rows but data has {N}"):
        SVIGPLVM(Y, Q, M, latent=lambda initial: PointLatent(initial[1:]))
    with pytest.raises(ValueError, match=f"has {Q + 1} dims but latent_dim={Q}"):
        SVIGPLVM(Y, Q, M, latent=lambda initial: PointLatent(np.ones((N, Q + 1))))


def test_the_latent_hook_receives_the_checked_data(Y):
    seen = []

    class Recording(SVIGPLVM):
        def _build_latent(self, latent, initial_latents, data, workers):
            seen.append(data)
            return PointLatent(initial_latents)

    mask = np.ones_like(Y, dtype=bool)
    mask[0, 0] = False
    with pytest.warns(UserWarning, match="missing"):
        Recording(Y.tolist(), Q, M, mask=mask)
    (data,) = seen
    assert isinstance(data, np.ndarray) and np.isnan(data[0, 0])
    np.testing.assert_array_equal(data[1:], Y[1:])


def test_the_amortised_model_checks_its_data_once_and_passes_seed_and_mask_on(Y, monkeypatch):
    calls, check = [], models.check_observations

    def counting(*args, **kwargs):
        calls.append(args)
        return check(*args, **kwargs)

    monkeypatch.setattr(models, "check_observations", counting)
    reference = AmortisedBayesianGPLVM(Y, Q, M)
    monkeypatch.undo()
    assert len(calls) == 1

    mask = np.ones_like(Y, dtype=bool)
    mask[0, 0] = False
    with pytest.warns(UserWarning, match="missing"):
        masked = AmortisedBayesianGPLVM(Y, Q, M, mask=mask)
    assert masked.latent.hide_fraction == 0.2  # gaps seen through the mask
    assert reference.latent.hide_fraction == 0.0

    def weights(model):
        return np.concatenate([v.numpy().ravel() for v in model.latent.trainable_variables])

    same_seed = AmortisedBayesianGPLVM(Y, Q, M, seed=0)
    np.testing.assert_array_equal(weights(same_seed), weights(reference))
    assert not np.array_equal(weights(AmortisedBayesianGPLVM(Y, Q, M, seed=1)), weights(reference))
    np.testing.assert_array_equal(
        AmortisedBayesianGPLVM(Y, Q, M, seed=1).inducing_variable.Z.numpy(),
        SVIGPLVM(Y, Q, M, seed=1, latent=PointLatent).inducing_variable.Z.numpy(),
    )
