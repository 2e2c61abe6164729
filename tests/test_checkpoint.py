"""Checkpoints: an interrupted run resumes exactly; bad checkpoints are clear errors."""

from functools import partial

import numpy as np
import pytest

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, NonFiniteLossError, fit
from gpflow_svi_gplvm.training import Trainer

N, D, Q, M = 40, 4, 2, 6
SETTINGS = dict(batch_size=16, progress=False, steps_per_call=250, seed=3)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    return np.tanh(rng.standard_normal((N, Q)) @ rng.standard_normal((Q, D)))


@pytest.mark.parametrize(
    "model_class",
    [BayesianSVIGPLVM, AmortisedBayesianGPLVM, partial(BayesianSVIGPLVM, shared_covariance=True)],
    ids=["bsvi", "aeb", "bsvi-shared-covariance"],
)
def test_an_interrupted_run_resumes_exactly(model_class, data, tmp_path):
    straight = model_class(data, Q, num_inducing=M)
    uninterrupted = fit(straight, data, iterations=2000, **SETTINGS)

    first = model_class(data, Q, num_inducing=M)
    fit(first, data, iterations=1000, checkpoint_dir=tmp_path, checkpoint_every=500, **SETTINGS)
    # A new process would start from a freshly built model: resume into one.
    resumed = model_class(data, Q, num_inducing=M)
    history = fit(
        resumed,
        data,
        iterations=2000,
        checkpoint_dir=tmp_path,
        checkpoint_every=500,
        resume=True,
        **SETTINGS,
    )
    for expected, actual in zip(straight.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    # The history is continuous: all 2000 steps, equal to the uninterrupted run's.
    assert len(history.elbo) == 2000
    np.testing.assert_allclose(history.elbo, uninterrupted.elbo, rtol=1e-12)


def test_a_checkpoint_of_another_shape_is_rejected_and_left_intact(data, tmp_path):
    fit(BayesianSVIGPLVM(data, Q, num_inducing=M), data, iterations=20, checkpoint_dir=tmp_path)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other = BayesianSVIGPLVM(data, Q + 1, num_inducing=M)
    with pytest.raises(
        ValueError, match=r"does not fit this model.*\(6, 3\).*\(6, 2\)|\(6, 2\).*\(6, 3\)"
    ):
        fit(other, data, iterations=40, checkpoint_dir=tmp_path, resume=True)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_a_failed_run_never_overwrites_a_good_checkpoint(data, tmp_path):
    model = BayesianSVIGPLVM(data, Q, num_inducing=M)
    fit(model, data, iterations=50, checkpoint_dir=tmp_path, checkpoint_every=50, progress=False)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # A likelihood variance of NaN makes every later loss NaN.
    model.likelihood.variance.unconstrained_variable.assign(np.nan)
    with pytest.raises(NonFiniteLossError, match="jitter"):
        fit(model, data, iterations=100, checkpoint_dir=tmp_path, checkpoint_every=10, resume=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_resume_without_a_checkpoint_dir_is_a_clear_error(data):
    with pytest.raises(ValueError, match="checkpoint_dir"):
        fit(BayesianSVIGPLVM(data, Q, num_inducing=M), data, iterations=1, resume=True)


def test_trainer_restore_reports_whether_it_found_a_checkpoint(data, tmp_path):
    trainer = Trainer(BayesianSVIGPLVM(data, Q, num_inducing=M), data, checkpoint_dir=tmp_path)
    assert not trainer.restore()
    trainer.train(30, progress=False)
    again = Trainer(BayesianSVIGPLVM(data, Q, num_inducing=M), data, checkpoint_dir=tmp_path)
    assert again.restore() and again.num_steps == 30
