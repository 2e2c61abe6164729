"""SVIGPLVM's hooks: the latent module built from the checked data, and the GP at latent draws."""

from __future__ import annotations

import inspect
import re

import numpy as np
import pytest
import tensorflow as tf

import gpflow_svi_gplvm.models as models
import gpflow_svi_gplvm.models.building as model_building
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


def test_the_bound_of_anything_but_a_batch_is_refused_saying_what_it_takes(Y):
    model = BayesianSVIGPLVM(Y, Q, M)
    batch = (np.arange(N), Y)
    assert np.isfinite(model.elbo(batch).numpy())
    for data, given in [
        (Y, f"a ndarray of shape [{N}, {D}]"),
        ((np.arange(N), Y[:, :2]), f"a pair of shapes [[{N}], [{N}, 2]]"),
        ((np.arange(N - 1), Y), f"a pair of shapes [[{N - 1}], [{N}, {D}]]"),
        ((np.arange(N, dtype=float), Y), f"a pair of shapes [[{N}], [{N}, {D}]]"),
    ]:
        for method in (model.elbo, model.training_loss):
            name = method.__name__
            expected = rf"{name} takes a batch \(idx, Y\).*{re.escape(given)}"
            with pytest.raises(ValueError, match=expected):
                method(data)


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
    calls, check = [], model_building.check_observations

    def counting(*args, **kwargs):
        calls.append(args)
        return check(*args, **kwargs)

    monkeypatch.setattr(model_building, "check_observations", counting)
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


PUBLIC_MODELS = [
    models.SVIGPLVM,
    models.PointGPLVM,
    models.MAPGPLVM,
    models.BayesianSVIGPLVM,
    models.AmortisedBayesianGPLVM,
]


@pytest.mark.parametrize("model_class", PUBLIC_MODELS, ids=lambda cls: cls.__name__)
def test_every_model_shows_its_parameters_with_defaults_and_documents_each(model_class):
    """``help(Model)`` and ``inspect.signature`` show every option (nothing hidden in
    ``**kwargs``), with one default for M, and the docstring lists each in GPflow's style."""
    parameters = list(inspect.signature(model_class).parameters.values())
    kinds = {parameter.kind for parameter in parameters}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}
    assert [p.name for p in parameters[:2]] == ["data", "latent_dim"]
    assert all(p.default is not inspect.Parameter.empty for p in parameters[2:])
    assert parameters[2].name == "num_inducing"
    assert parameters[2].default == models.DEFAULT_NUM_INDUCING
    for doc in (model_class.__doc__, model_class.__init__.__doc__):
        undocumented = [p.name for p in parameters if f":param {p.name}:" not in doc]
        assert not undocumented, f"{model_class.__name__}: {undocumented}"
        assert "q_diag" not in doc and "num_latent_gps" not in doc  # SVGP's own, refused here


def test_one_default_for_the_inducing_points_everywhere_but_single_cells():
    """Single cells take more (``singlecell.face.NUM_INDUCING``, measured on hard atlases);
    the command line leaves M unset until it knows the data's kind (tests/test_cli.py)."""
    from gpflow_svi_gplvm.cli.main import build_parser
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.face import NUM_INDUCING
    from gpflow_svi_gplvm.sklearn import GPLVMEmbedding

    assert build_parser().get_default("num_inducing") is None
    assert GPLVMEmbedding().num_inducing == models.DEFAULT_NUM_INDUCING
    assert SingleCellGPLVM().options.num_inducing == NUM_INDUCING > models.DEFAULT_NUM_INDUCING


def test_the_named_models_pass_every_option_on(Y):
    """An option given to a named model reaches the model (no option dropped on the way)."""
    mask = ~np.eye(N, D, dtype=bool)
    model = models.MAPGPLVM(
        Y, Q, 4, num_samples=3, latent_init="random", whiten=False, mask=mask,
        shared_covariance=True, latent_expectation="monte-carlo", seed=2,
    )  # fmt: skip
    assert model.inducing_variable.num_inducing == 4 and model.num_samples == 3
    assert not model.whiten and model.shared_covariance and not model.closed_form
    encoder = models.AmortisedBayesianGPLVM(Y, Q, M, hidden_sizes=(3,), hide_fraction=0.5)
    assert encoder.latent.hide_fraction == 0.5
