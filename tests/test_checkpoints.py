"""Checkpoints: an interrupted run resumes exactly; bad checkpoints are clear errors."""

import gc
import re
import shutil
import warnings
from functools import partial

import gpflow
import numpy as np
import pytest
from builders import smooth_data

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    MaskedLikelihood,
    NonFiniteLossError,
    fit,
)
from gpflow_svi_gplvm.training.checkpoints import (
    HISTORY_FILE,
    TrainingData,
    read_history,
    write_history,
)
from gpflow_svi_gplvm.training.refusals import ResumeRefusedError
from gpflow_svi_gplvm.training.trainer import Trainer

N, D, Q, M = 40, 4, 2, 6
SETTINGS = dict(batch_size=16, progress=False, steps_per_call=50, seed=3)


@pytest.fixture(scope="module")
def data():
    return smooth_data(N, D, Q)


# Monte Carlo steps repeat bit for bit. Closed-form steps repeat only to round-off when TF runs
# independent ops concurrently (two uninterrupted runs of 1000 steps differ by up to 3e-10
# relative; bitwise equal with one inter-op thread), so a resume is checked to that level.
# A state restored wrongly (Adam's moments, the batch order, the random generator) shows from the
# first step after the resume, so 200 + 200 steps over 100 epochs are as telling as longer runs.
@pytest.mark.parametrize(
    "model_class, rtol",
    [
        (partial(BayesianSVIGPLVM, latent_expectation="monte-carlo"), 1e-12),
        (AmortisedBayesianGPLVM, 1e-8),
        (partial(BayesianSVIGPLVM, shared_covariance=True), 1e-8),
    ],
    ids=["bsvi-monte-carlo", "aeb-closed-form", "bsvi-shared-covariance-closed-form"],
)
def test_an_interrupted_run_resumes_exactly(model_class, rtol, data, tmp_path):
    straight = model_class(data, Q, num_inducing=M)
    uninterrupted = fit(straight, data, iterations=400, **SETTINGS)

    first = model_class(data, Q, num_inducing=M)
    fit(first, data, iterations=200, checkpoint_dir=tmp_path, checkpoint_every=100, **SETTINGS)
    # A new process would start from a freshly built model: resume into one.
    resumed = model_class(data, Q, num_inducing=M)
    history = fit(
        resumed,
        data,
        iterations=400,
        checkpoint_dir=tmp_path,
        checkpoint_every=100,
        resume=True,
        **SETTINGS,
    )
    for expected, actual in zip(straight.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=rtol, atol=rtol)
    # The history is continuous: all 400 steps, equal to the uninterrupted run's.
    assert len(history.elbo) == 400
    scale = np.abs(uninterrupted.elbo).max()  # an ELBO near 0 is a difference of large terms
    np.testing.assert_allclose(history.elbo, uninterrupted.elbo, rtol=rtol, atol=rtol * scale)


def test_a_failed_run_never_overwrites_a_good_checkpoint(data, tmp_path):
    model = BayesianSVIGPLVM(data, Q, num_inducing=M)
    # One trainer (one trace): checkpoints at steps 10 to 50, then a failure in the next call.
    trainer = Trainer(model, data, checkpoint_dir=tmp_path, checkpoint_every=10)
    trainer.train(50, progress=False)
    files = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    # A likelihood variance of NaN makes every later loss NaN.
    model.likelihood.variance.unconstrained_variable.assign(np.nan)
    with pytest.raises(NonFiniteLossError, match="jitter"):
        trainer.train(100, progress=False)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == files


def test_resume_without_a_checkpoint_dir_is_a_clear_error(data):
    with pytest.raises(ValueError, match="checkpoint_dir"):
        fit(BayesianSVIGPLVM(data, Q, num_inducing=M), data, iterations=1, resume=True)


def test_trainer_restore_reports_whether_it_found_a_checkpoint(data, tmp_path):
    with Trainer(BayesianSVIGPLVM(data, Q, num_inducing=M), data, checkpoint_dir=tmp_path) as one:
        assert not one.restore()
        one.train(30, progress=False)
    again = Trainer(BayesianSVIGPLVM(data, Q, num_inducing=M), data, checkpoint_dir=tmp_path)
    assert again.restore() and again.num_steps == 30


# --------------------------------------------------------------------------------------------
# Resuming on other data, and damaged checkpoints (restore() traces nothing: cheap to repeat)


@pytest.fixture(scope="module")
def checkpointed(data, tmp_path_factory):
    """A B-SVI run checkpointed at steps 10, 20 and 30 (batch 16)."""
    directory = tmp_path_factory.mktemp("run")
    model = BayesianSVIGPLVM(data, Q, num_inducing=M)
    fit(model, data, iterations=30, checkpoint_dir=directory, checkpoint_every=10, **SETTINGS)
    return directory


def restored(directory, data, batch_size=SETTINGS["batch_size"], **kwargs) -> Trainer:
    model = BayesianSVIGPLVM(data, Q, num_inducing=M)
    trainer = Trainer(model, data, batch_size=batch_size, checkpoint_dir=directory, **kwargs)
    assert trainer.restore()
    return trainer


def copy_of(directory, tmp_path):
    return shutil.copytree(directory, tmp_path / "run")


def test_resume_on_the_same_data_restores_the_latest_checkpoint(checkpointed, data, tmp_path):
    directory = copy_of(checkpointed, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        trainer = restored(directory, data)
    assert trainer.num_steps == 30 and len(trainer.elbo[0]) == 30


@pytest.mark.parametrize("change", ["values", "a gap", "row order"])
def test_resume_on_other_data_names_the_difference_unless_allowed(
    checkpointed, data, tmp_path, change
):
    directory = copy_of(checkpointed, tmp_path)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    other = data.copy()
    if change == "values":
        other[5, 1] += 1e-9
    elif change == "a gap":
        other[5, 1] = np.nan
    else:
        other = other[::-1].copy()
    # Built like the model that wrote it; a model for data with gaps wraps its likelihood.
    masked = {"likelihood": MaskedLikelihood(gpflow.likelihoods.Gaussian())}
    model = BayesianSVIGPLVM(data, Q, num_inducing=M, **(masked if change == "a gap" else {}))
    with pytest.raises(ValueError, match=r"other data \(values and gaps .*allow_new_data=True"):
        fit(model, other, iterations=40, checkpoint_dir=directory, resume=True, **SETTINGS)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files
    if change != "a gap":  # the model that wrote it does not take gaps
        assert restored(directory, other, allow_new_data=True).num_steps == 30


@pytest.mark.parametrize(
    "latent_dim, num_inducing, shapes",
    [
        (Q + 1, M, (f"[{M}, {Q}]", f"[{M}, {Q + 1}]")),
        (Q, M + 1, (f"[{M}, {Q}]", f"[{M + 1}, {Q}]")),
    ],
    ids=["another Q", "another M"],
)
def test_a_checkpoint_of_another_shape_is_rejected_and_left_intact(
    checkpointed, data, tmp_path, caplog, latent_dim, num_inducing, shapes
):
    directory = copy_of(checkpointed, tmp_path)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    other = BayesianSVIGPLVM(data, latent_dim, num_inducing=num_inducing)
    written, this = (re.escape(shape) for shape in shapes)
    named = rf"whose inducing_variable.Z has shape {written}; this model's has {this}\."
    with pytest.raises(ValueError, match=named):
        fit(other, data, iterations=40, checkpoint_dir=directory, resume=True, **SETTINGS)
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files
    gc.collect()  # a half-done restore would log "unrestored values" as it is collected
    assert not [r for r in caplog.records if "unrestored" in r.getMessage()]


def test_a_checkpoint_of_another_q_u_optimizer_is_refused_in_a_few_words(
    checkpointed, data, tmp_path
):
    """Natural-gradient steps keep no Adam state for q(u): resuming them with Adam is refused,
    naming this run's optimizer, without the unmatched values TensorFlow lists."""
    directory = copy_of(checkpointed, tmp_path)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    model = BayesianSVIGPLVM(data, Q, num_inducing=M)
    refusal = r"does not fit this model \(Found \d+ Python objects .*\)\. Resume .* the same "
    refusal += r"q_u_optimizer \(this run has q_u_optimizer='adam'\), or use another checkpoint_dir"
    with pytest.raises(ResumeRefusedError, match=refusal) as refused:
        fit(
            model,
            data,
            iterations=40,
            checkpoint_dir=directory,
            resume=True,
            q_u_optimizer="adam",
            **SETTINGS,
        )
    said = str(refused.value)
    assert len(said) < 400 + len(str(directory)) and "tf.Variable" not in said  # was 3,900
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files


@pytest.mark.parametrize("shared_covariance", [False, True], ids=["per-output", "shared"])
def test_a_checkpoint_of_another_d_names_both_ds(checkpointed, data, tmp_path, shared_covariance):
    directory = copy_of(checkpointed, tmp_path)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    narrower = data[:, : D - 1]
    model = BayesianSVIGPLVM(narrower, Q, num_inducing=M, shared_covariance=shared_covariance)
    written = rf"written by a model with D={D} outputs .*, but this model has D={D - 1}\."
    for allow_new_data in (False, True):
        with pytest.raises(ValueError, match=written):
            fit(
                model,
                narrower,
                iterations=40,
                checkpoint_dir=directory,
                resume=True,
                allow_new_data=allow_new_data,
                **SETTINGS,
            )
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files


@pytest.mark.parametrize(
    "other, named",
    [
        (
            lambda data: MAPGPLVM(data, Q, num_inducing=M),
            "class BayesianSVIGPLVM there, MAPGPLVM here",
        ),
        (
            lambda data: BayesianSVIGPLVM(
                data, Q, num_inducing=M, likelihood=gpflow.likelihoods.StudentT()
            ),
            "likelihood Gaussian there, StudentT here",
        ),
    ],
    ids=["another class", "another likelihood"],
)
def test_a_checkpoint_of_another_model_names_what_differs(
    checkpointed, data, tmp_path, other, named
):
    """Restored into a model of the same shapes, it would continue without a word (the new
    likelihood's parameters left as built)."""
    directory = copy_of(checkpointed, tmp_path)
    files = {p.name: p.read_bytes() for p in directory.iterdir()}
    for allow_new_data in (False, True):
        with pytest.raises(ValueError, match=rf"written by another model \({named}\)"):
            fit(
                other(data),
                data,
                iterations=40,
                checkpoint_dir=directory,
                resume=True,
                allow_new_data=allow_new_data,
                **SETTINGS,
            )
    assert {p.name: p.read_bytes() for p in directory.iterdir()} == files


def test_resume_with_other_covariates_or_names_is_refused_naming_them(data, tmp_path):
    rng = np.random.default_rng(0)
    batch = np.eye(2)[rng.integers(0, 2, N)]
    model = BayesianSVIGPLVM(data, Q, num_inducing=M, covariates=batch)
    names = {"covariates": ["batch=a", "batch=b"]}
    options = dict(checkpoint_dir=tmp_path, data_names=names, **SETTINGS)
    fit(model, data, iterations=10, **options)
    swapped = BayesianSVIGPLVM(data, Q, num_inducing=M, covariates=batch[:, ::-1])
    with pytest.raises(ValueError, match=r"other data \(covariates and size factors [0-9a-f]+ "):
        fit(swapped, data, iterations=20, resume=True, **options)
    renamed = {"covariates": ["donor=a", "donor=b"]}
    again = BayesianSVIGPLVM(data, Q, num_inducing=M, covariates=batch)
    with pytest.raises(ValueError, match=r"covariates 2 \(batch=a, batch=b; [0-9a-f]+\) there, 2 "):
        fit(again, data, iterations=20, resume=True, **{**options, "data_names": renamed})


def test_resume_with_another_batch_size_names_both(checkpointed, data, tmp_path):
    directory = copy_of(checkpointed, tmp_path)
    with pytest.raises(ValueError, match=r"batch_size=16, this run has batch_size=10"):
        restored(directory, data, batch_size=10)


def damage(directory, how: str) -> None:
    """Damage the latest checkpoint (ckpt-30) or the ELBO history the way a crash or disk might."""
    data_file = directory / "ckpt-30.data-00000-of-00001"
    if how == "truncated data":
        data_file.write_bytes(data_file.read_bytes()[:100])
    elif how == "flipped bytes":
        raw = bytearray(data_file.read_bytes())
        raw[len(raw) // 2 : len(raw) // 2 + 64] = bytes(64)
        data_file.write_bytes(bytes(raw))
    elif how == "missing index":
        (directory / "ckpt-30.index").unlink()
    elif how == "garbage index":
        (directory / "ckpt-30.index").write_bytes(b"not an index")


@pytest.mark.parametrize(
    "how", ["truncated data", "flipped bytes", "missing index", "garbage index"]
)
def test_a_damaged_latest_checkpoint_falls_back_to_the_newest_intact_one(
    checkpointed, data, tmp_path, how
):
    directory = copy_of(checkpointed, tmp_path)
    damage(directory, how)
    with pytest.warns(UserWarning, match=r"ckpt-30 .*resumed from .*ckpt-20, step 20"):
        trainer = restored(directory, data)
    assert trainer.num_steps == 20
    intact = restored(copy_of(checkpointed, tmp_path / "again"), data)
    np.testing.assert_array_equal(trainer.elbo[0], intact.elbo[0][:20])


def test_a_garbage_history_file_is_a_warning_and_nan_history(checkpointed, data, tmp_path):
    directory = copy_of(checkpointed, tmp_path)
    (directory / "elbo_history.npy").write_bytes(b"garbage")
    with pytest.warns(UserWarning, match=r"elbo_history.npy cannot be read"):
        trainer = restored(directory, data)
    assert trainer.num_steps == 30 and np.isnan(trainer.elbo[0]).all()


def test_no_readable_checkpoint_is_one_clear_error(checkpointed, data, tmp_path):
    directory = copy_of(checkpointed, tmp_path)
    for index in directory.glob("ckpt-*.index"):
        index.unlink()
    with pytest.raises(ValueError, match=r"No checkpoint in .* can be read.*start afresh"):
        restored(directory, data)


# --------------------------------------------------------------------------------------------
# The history file and the data record on their own (no training)


def test_the_history_file_round_trips_and_pads_missing_steps_with_nan(tmp_path):
    write_history(tmp_path, np.array([-3.0, -2.0, -1.0]))
    assert [p.name for p in tmp_path.iterdir()] == [HISTORY_FILE]  # no staging file left
    np.testing.assert_array_equal(read_history(tmp_path, 2), [-3.0, -2.0])
    np.testing.assert_array_equal(read_history(tmp_path, 5)[:3], [-3.0, -2.0, -1.0])
    assert np.isnan(read_history(tmp_path, 5)[3:]).all()
    assert np.isnan(read_history(tmp_path / "elsewhere", 4)).all()


def test_the_data_record_tells_values_gaps_and_batch_size_apart(data):
    record = TrainingData.of(data, 16)
    record.check_against(TrainingData.of(data.copy(), 16).current, "ckpt")
    gap = data.copy()
    gap[0, 0] = np.nan
    with pytest.raises(ValueError, match=r"other data \(values and gaps"):
        record.check_against(TrainingData.of(gap, 16).current, "ckpt")
    with pytest.raises(ValueError, match=r"batch_size=8, this run has batch_size=16"):
        record.check_against(TrainingData.of(data, 8).current, "ckpt")
    TrainingData({}).check_against(record.current, "ckpt")  # a user's dataset: nothing to compare


def test_save_without_a_checkpoint_dir_is_a_clear_error(data):
    trainer = Trainer(BayesianSVIGPLVM(data, Q, num_inducing=M), data)
    with pytest.raises(ValueError, match="checkpoint_dir"):
        trainer.save()
    assert not trainer.restore()
