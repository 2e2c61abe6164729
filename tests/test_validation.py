"""Bad input is rejected at the boundary with a ``ValueError`` that says what to fix.

No test here trains or traces: every error is raised before any compiled code runs.
"""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from builders import complete_data

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.latents.networks import MLP
from gpflow_svi_gplvm.training.trainer import make_dataset
from gpflow_svi_gplvm.validation import (
    check_chunk_size,
    check_device,
    check_fraction,
    check_layer_sizes,
    check_observations,
)

N, D, Q, M = 30, 4, 2, 5
ALL_MODELS = [sg.PointGPLVM, sg.MAPGPLVM, sg.BayesianSVIGPLVM, sg.AmortisedBayesianGPLVM]
model_classes = pytest.mark.parametrize("model_class", ALL_MODELS, ids=lambda c: c.__name__)


@pytest.fixture(scope="module")
def Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N, D))


@pytest.fixture(scope="module")
def counts() -> np.ndarray:
    return np.random.default_rng(1).poisson(3.0, size=(N, D)).astype(float)


@pytest.fixture(scope="module")
def binary() -> np.ndarray:
    return (np.random.default_rng(2).uniform(size=(N, D)) < 0.4).astype(float)


# --------------------------------------------------------------------------------------------
# The data array
# --------------------------------------------------------------------------------------------


@model_classes
@pytest.mark.parametrize("shape", [(N,), (N, D, 2)], ids=["1-D", "3-D"])
def test_data_must_be_two_dimensional(model_class, shape):
    data = np.ones(shape)
    with pytest.raises(ValueError, match=r"data must be 2-D \[N, D\].*got shape.*Reshape it"):
        model_class(data, Q, 1)


@model_classes
@pytest.mark.parametrize("shape", [(0, D), (N, 0)], ids=["N=0", "D=0"])
def test_data_needs_rows_and_columns(model_class, shape):
    with pytest.raises(ValueError, match=r"at least one row and one column, got shape"):
        model_class(np.zeros(shape), Q, 1)


@model_classes
@pytest.mark.parametrize("value", [np.inf, -np.inf], ids=["+inf", "-inf"])
def test_infinite_entries_are_rejected(model_class, value, Y):
    data = Y.copy()
    data[3, 1] = value
    with pytest.raises(ValueError, match=r"infinite entries.*Replace them with NaN"):
        model_class(data, Q, M)


@model_classes
def test_all_missing_data_is_rejected(model_class):
    with pytest.raises(ValueError, match=r"Every entry of data is missing \(NaN\)"):
        model_class(np.full((N, D), np.nan), Q, M)


@pytest.mark.parametrize(
    "mask",
    [np.ones((N, D - 1), dtype=bool), np.ones((N, D), dtype=int)],
    ids=["wrong shape", "not boolean"],
)
def test_observation_mask_must_be_boolean_of_the_data_shape(mask, Y):
    with pytest.raises(ValueError, match=r"mask must be a boolean array of data's shape \(30, 4\)"):
        sg.PointGPLVM(Y, Q, M, mask=mask)


def test_non_numeric_data_is_rejected():
    with pytest.raises(ValueError, match=r"data must be a numeric array \[N, D\]"):
        sg.PointGPLVM([["a", "b"], ["c", "d"]], 1, 1)


# --------------------------------------------------------------------------------------------
# Model settings
# --------------------------------------------------------------------------------------------


@model_classes
@pytest.mark.parametrize("latent_dim", [0, -1, 2.5, "2"])
def test_latent_dim_must_be_a_positive_integer(model_class, latent_dim, Y):
    with pytest.raises(ValueError, match=r"latent_dim must be a positive integer, got .*typical"):
        model_class(Y, latent_dim, M)


@model_classes
def test_num_inducing_must_not_exceed_num_data(model_class, Y):
    with pytest.raises(ValueError, match=r"num_inducing \(31\) exceeds .* N \(30\).*<= 30"):
        model_class(Y, Q, N + 1)


@pytest.mark.parametrize("num_inducing", [0, 1.5])
def test_num_inducing_must_be_a_positive_integer(num_inducing, Y):
    with pytest.raises(ValueError, match=r"num_inducing must be a positive integer"):
        sg.PointGPLVM(Y, Q, num_inducing)


@pytest.mark.parametrize("num_samples", [0, -2])
def test_num_samples_must_be_positive(num_samples, Y):
    with pytest.raises(ValueError, match=r"num_samples must be a positive integer, got"):
        sg.BayesianSVIGPLVM(Y, Q, M, num_samples=num_samples)


@model_classes
def test_unknown_latent_init_is_rejected(model_class, Y):
    with pytest.raises(ValueError, match=r"'random' or an array \[N, Q\], got 'kmeans'"):
        model_class(Y, Q, M, latent_init="kmeans")


def test_latent_init_arrays_say_what_is_wrong_with_them(Y):
    bad = np.zeros((len(Y), Q))
    bad[3, 1] = np.nan
    for given, found in [(bad, "got 1 NaN or infinite entries"), (bad[:, :1], r"got shape \(")]:
        with pytest.raises(ValueError, match=f"latent_init as an array must be .*{found}"):
            sg.BayesianSVIGPLVM(Y, Q, M, latent_init=given)


def test_map_prior_must_be_over_whole_latent_vectors(Y):
    scalar_prior = tfp.distributions.Normal(np.float64(0.0), np.float64(1.0))
    with pytest.raises(ValueError, match=r"event shape \[2\].*Independent"):
        sg.MAPGPLVM(Y, Q, M, prior=scalar_prior)


# --------------------------------------------------------------------------------------------
# Likelihood support
# --------------------------------------------------------------------------------------------


@model_classes
@pytest.mark.parametrize("bad", [-1.0, 2.5], ids=["negative", "non-integer"])
def test_poisson_needs_non_negative_integer_counts(model_class, bad, counts):
    data = counts.copy()
    data[0, 0] = bad
    with pytest.raises(ValueError, match=r"Poisson likelihood needs non-negative integer counts"):
        model_class(data, Q, M, likelihood=gpflow.likelihoods.Poisson())


@model_classes
@pytest.mark.parametrize("bad", [0.5, 2.0, -1.0])
def test_bernoulli_needs_zeros_and_ones(model_class, bad, binary):
    data = binary.copy()
    data[5, 2] = bad
    with pytest.raises(ValueError, match=r"Bernoulli likelihood needs binary data.*0 or 1"):
        model_class(data, Q, M, likelihood=gpflow.likelihoods.Bernoulli())


def test_valid_counts_and_binary_data_with_gaps_are_accepted(counts, binary):
    """The support checks ignore missing entries and accept in-support data."""
    for data, likelihood in [
        (counts, gpflow.likelihoods.Poisson),
        (binary, gpflow.likelihoods.Bernoulli),
    ]:
        model = sg.BayesianSVIGPLVM(data, Q, M, likelihood=likelihood())
        assert isinstance(model.likelihood, likelihood)
        gappy = data.copy()
        gappy[1, 1] = np.nan
        with pytest.warns(UserWarning, match="missing"):
            model = sg.BayesianSVIGPLVM(gappy, Q, M, likelihood=likelihood())
        assert isinstance(model.likelihood.base, likelihood)


def test_masked_likelihood_needs_a_scalar_likelihood():
    with pytest.raises(ValueError, match=r"wraps a gpflow ScalarLikelihood.*got Softmax"):
        sg.MaskedLikelihood(gpflow.likelihoods.Softmax(3))


# --------------------------------------------------------------------------------------------
# fit
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def point_model(Y):
    return sg.PointGPLVM(Y, Q, M)


def test_fit_rejects_data_with_the_wrong_number_of_columns(point_model, Y):
    with pytest.raises(ValueError, match=r"shape \[N, 4\] \(the model was built for 4 columns\)"):
        sg.fit(point_model, Y[:, :3], iterations=1, progress=False)


def test_fit_rejects_data_with_the_wrong_number_of_rows(point_model, Y):
    with pytest.raises(ValueError, match=r"20 rows but the model was built for N=30"):
        sg.fit(point_model, Y[:20], iterations=1, progress=False)


def test_fit_rejects_bad_data_values(point_model, Y):
    data = Y.copy()
    data[0, 0] = np.inf
    with pytest.raises(ValueError, match=r"infinite entries"):
        sg.fit(point_model, data, iterations=1, progress=False)
    with pytest.raises(ValueError, match=r"data must be 2-D"):
        sg.fit(point_model, Y.ravel(), iterations=1, progress=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(batch_size=0), r"batch_size must be a positive integer, got 0"),
        (dict(batch_size=2.5), r"batch_size must be a positive integer, got 2.5"),
        (dict(iterations=-1), r"iterations must be an integer >= 0, got -1"),
        (dict(iterations=10.5), r"iterations must be an integer >= 0, got 10.5"),
        (dict(iterations=None), r"iterations must be an integer >= 0, got None"),
        (dict(iterations="100"), r"iterations must be an integer >= 0, got '100'"),
        (dict(steps_per_call=0), r"steps_per_call must be a positive integer, got 0"),
        (dict(callback_every=0), r"callback_every must be a positive integer, got 0"),
        (dict(learning_rate=-1.0), r"learning_rate must be a positive, finite number.*got -1.0"),
        (dict(learning_rate=0), r"learning_rate must be a positive, finite number.*got 0"),
        (dict(learning_rate=np.nan), r"learning_rate must be a positive, finite number.*got nan"),
        (dict(learning_rate=np.inf), r"learning_rate must be a positive, finite number.*got inf"),
        (dict(learning_rate="0.01"), r"learning_rate must be a positive, finite number.*'0.01'"),
        (dict(learning_rate=True), r"learning_rate must be a positive, finite number.*True"),
        (dict(checkpoint_dir="ckpt", checkpoint_every=0), r"checkpoint_every must be a positive"),
    ],
    ids=lambda value: str(value) if isinstance(value, dict) else "",
)
def test_fit_rejects_bad_settings(point_model, Y, kwargs, message):
    settings = dict(iterations=1, batch_size=10, progress=False) | kwargs
    with pytest.raises(ValueError, match=message):
        sg.fit(point_model, Y, **settings)


def test_trainer_rejects_a_negative_iteration_count(point_model, Y):
    trainer = sg.Trainer(point_model, Y, batch_size=10)  # builds, but traces nothing yet
    with pytest.raises(ValueError, match=r"iterations must be an integer >= 0, got -1"):
        trainer.train(-1, progress=False)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(iterations=1.5), r"iterations must be an integer >= 0, got 1.5"),
        (dict(learning_rate=0.0), r"learning_rate must be a positive, finite number"),
        (dict(learning_rate=np.nan), r"learning_rate must be a positive, finite number"),
        (dict(num_samples=0), r"num_samples must be a positive integer"),
        (dict(seed=-1), r"seed must be an integer in \[0, 2\*\*63\)"),
        (dict(chunk_size=0), r"chunk_size must be a positive integer, got 0 \(or None"),
        (dict(averaging=1.5), r"averaging must be a fraction of the steps in \[0, 1\]"),
        (dict(averaging="half"), r"averaging must be a fraction of the steps in \[0, 1\]"),
    ],
    ids=lambda value: str(value) if isinstance(value, dict) else "",
)
def test_new_row_inference_rejects_bad_settings(point_model, Y, kwargs, message):
    with pytest.raises(ValueError, match=message):
        sg.LatentInference(point_model, **kwargs).infer(Y[:2])


# --------------------------------------------------------------------------------------------
# Amortised encoders
# --------------------------------------------------------------------------------------------


def test_encoder_covariance_name_must_be_known(Y):
    match = r"covariance must be 'triangular' or 'dense', got 'full'"
    with pytest.raises(ValueError, match=match):
        sg.EncoderLatent(D, Q, covariance="full")
    with pytest.raises(ValueError, match=match):
        sg.AmortisedBayesianGPLVM(Y, Q, M, covariance="full")


@pytest.mark.parametrize(
    "options, match",
    [
        (
            dict(hidden_sizes=(10, 0)),
            r"each of mean_hidden_sizes must be a positive integer, got 0",
        ),
        (dict(covariance_hidden_sizes=(8.5,)), r"each of covariance_hidden_sizes .* got 8.5"),
        (dict(mean_hidden_sizes=16), r"mean_hidden_sizes must be a sequence of layer widths"),
    ],
)
def test_encoder_layer_widths_are_checked(Y, options, match):
    with pytest.raises(ValueError, match=match):
        sg.EncoderLatent(D, Q, **options)
    with pytest.raises(ValueError, match=match):
        sg.AmortisedBayesianGPLVM(Y, Q, M, **options)


def test_mlp_activation_must_be_known(Y):
    match = r"activation must be one of \['elu', 'relu', 'softplus', 'tanh'\], got 'sigmoid'"
    with pytest.raises(ValueError, match=match):
        MLP(D, (5,), Q, activation="sigmoid")
    with pytest.raises(ValueError, match=match):
        sg.EncoderLatent(D, Q, activation="sigmoid")
    with pytest.raises(ValueError, match=match):
        sg.AmortisedBayesianGPLVM(Y, Q, M, activation="sigmoid")


def test_amortised_latent_moments_need_the_data(Y):
    model = sg.AmortisedBayesianGPLVM(Y, Q, M)
    match = r"amortised model computes q\(x\) from the data.*model\.latent_mean\(Y\)"
    with pytest.raises(ValueError, match=match):
        model.latent_mean()
    with pytest.raises(ValueError, match=match):
        model.latent_variance()
    with pytest.raises(ValueError, match=r"Y must have shape \[N, 4\]"):
        model.latent_mean(Y[:, :3])
    assert model.latent_mean(Y).shape == (N, Q)  # with the rows it works


# --------------------------------------------------------------------------------------------
# Missing entries
# --------------------------------------------------------------------------------------------


@model_classes
def test_missing_entries_wrap_the_likelihood_with_a_warning(model_class, Y):
    data = Y.copy()
    data[[0, 4, 9], [1, 3, 0]] = np.nan
    with pytest.warns(UserWarning, match=r"2\.5% of the entries of data are missing.*Masked"):
        model = model_class(data, Q, M)
    assert isinstance(model.likelihood, sg.MaskedLikelihood)
    assert isinstance(model.likelihood.base, gpflow.likelihoods.Gaussian)
    if model_class is sg.AmortisedBayesianGPLVM:
        assert model.latent.missing_aware  # the encoder is told which entries are gaps


@model_classes
def test_complete_data_keeps_the_likelihood_and_warns_nothing(model_class, Y):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = model_class(Y, Q, M)
    assert isinstance(model.likelihood, gpflow.likelihoods.Gaussian)
    assert not isinstance(model.likelihood, sg.MaskedLikelihood)


def test_an_explicit_masked_likelihood_is_kept_without_a_warning(Y):
    data = Y.copy()
    data[2, 2] = np.nan
    likelihood = sg.MaskedLikelihood(gpflow.likelihoods.StudentT())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = sg.PointGPLVM(data, Q, M, likelihood=likelihood)
    assert model.likelihood is likelihood


# --------------------------------------------------------------------------------------------
# Formerly known gaps
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("latent_dim", [None, "two", float("nan")], ids=["None", "two", "nan"])
def test_latent_dim_of_the_wrong_type_gets_a_helpful_message(latent_dim, Y):
    with pytest.raises(ValueError) as error:
        sg.PointGPLVM(Y, latent_dim, M)
    assert "latent_dim must be a positive integer" in str(error.value)


def test_a_fully_missing_column_gets_a_value_error_or_is_handled(Y):
    data = Y.copy()
    data[:, 1] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the MaskedLikelihood notice and numpy's empty-slice one
        try:
            model = sg.PointGPLVM(data, Q, M)
        except ValueError as error:
            assert "missing" in str(error)
            return
    assert np.all(np.isfinite(model.latent_mean().numpy()))


# --------------------------------------------------------------------------------------------
# Shared checks of settings
# --------------------------------------------------------------------------------------------


def test_check_fraction_accepts_the_closed_unit_interval():
    assert check_fraction(0, "share") == 0.0 and check_fraction(1, "share") == 1.0
    for bad in (-0.1, 1.5, np.nan, "half", True):
        with pytest.raises(ValueError, match=r"share must be a part in \[0, 1\] \(0: none\)"):
            check_fraction(bad, "share", "a part", "0: none")


def test_check_chunk_size_takes_none_or_a_positive_integer():
    assert check_chunk_size(None) is None and check_chunk_size(np.int64(7)) == 7
    for bad in (0, 2.5, "10"):
        with pytest.raises(ValueError, match=r"chunk_size must be a positive integer.*or None"):
            check_chunk_size(bad)


def test_check_layer_sizes_takes_a_sequence_of_widths():
    assert check_layer_sizes([10, np.int32(5)], "sizes") == (10, 5)
    assert check_layer_sizes((), "sizes") == ()
    with pytest.raises(ValueError, match=r"sizes must be a sequence of layer widths"):
        check_layer_sizes(10, "sizes")
    with pytest.raises(ValueError, match=r"each of sizes must be a positive integer, got 0"):
        check_layer_sizes((10, 0), "sizes")


def test_data_beyond_float32_is_refused_when_training_in_float32():
    Y = np.ones((4, 2))
    Y[1, 1] = -1e39
    with gpflow.config.as_context(gpflow.config.Config(float=np.float32)):
        with pytest.raises(ValueError, match="up to 1e\\+39, beyond float32's largest"):
            check_observations(Y)
        assert check_observations(np.ones((4, 2))).dtype == np.float32
    assert check_observations(Y)[1, 1] == -1e39  # float64 holds it


@pytest.mark.parametrize(
    "device",
    ["/job:worker/replica:0/task:1/device:CPU:0", "/job:localhost/task:3/device:CPU:0", "/GPU:7"],
)
def test_a_device_of_another_job_or_task_or_that_is_missing_is_refused(device):
    with pytest.raises(ValueError, match="does not exist here: this process has"):
        check_device(device)


def test_a_device_of_this_process_is_accepted_by_its_short_or_full_name():
    assert check_device("/CPU:0") == "/CPU:0"
    full = tf.config.list_logical_devices("CPU")[0].name
    assert check_device(full) == full


# --------------------------------------------------------------------------------------------
# Missing entries: infinities are not missing, a mask is boolean and of the data's shape, and
# data with nothing observed is refused (the data here: builders.complete_data, [10, 4])
# --------------------------------------------------------------------------------------------


@model_classes
@pytest.mark.parametrize("value", [np.inf, -np.inf], ids=["+inf", "-inf"])
def test_infinities_are_not_missing(model_class, value):
    Y = complete_data("gaussian", seed=5)
    model = model_class(Y, Q, M)
    Y_inf = Y.copy()
    Y_inf[3, 1] = value
    mask = np.ones(Y.shape, dtype=bool)
    match = r"infinite entries.*infinity is not 'missing'"
    # Infinity where an entry is observed (no mask, or the mask says True) is an error...
    for use_mask in (False, True):
        full = {"mask": mask} if use_mask else {}
        rows = {"mask": mask[:4]} if use_mask else {}
        with pytest.raises(ValueError, match=match):
            model_class(Y_inf, Q, M, **full)
        with pytest.raises(ValueError, match=match):
            sg.fit(model, Y_inf, iterations=1, progress=False, **full)
        with pytest.raises(ValueError, match=match):
            model.infer_latents(Y_inf[:4], iterations=1, **rows)
        with pytest.raises(ValueError, match=match):
            model.reconstruct(Y_inf[:4], iterations=1, **rows)
    # ... while behind a False in an explicit mask it is a hidden value like any other.
    mask[3, 1] = False
    checked = check_observations(Y_inf, mask=mask)
    assert np.isnan(checked[3, 1]) and np.sum(np.isnan(checked)) == 1


@pytest.mark.parametrize(
    "shape",
    [(10, 5), (11, 4), (4, 10), (1, 4), (10,), (40,), (10, 4, 1)],
    ids=["more columns", "more rows", "transposed", "broadcastable", "1-D", "flat", "3-D"],
)
def test_a_mask_of_another_shape_is_rejected(shape):
    Y = complete_data("gaussian", seed=5)
    mask = np.ones(shape, dtype=bool)
    match = r"mask must be a boolean array of .*shape \(10, 4\)"
    with pytest.raises(ValueError, match=match):
        check_observations(Y, mask=mask)
    for model_class in (sg.PointGPLVM, sg.AmortisedBayesianGPLVM):
        with pytest.raises(ValueError, match=match):
            model_class(Y, Q, M, mask=mask)
    model = sg.PointGPLVM(Y, Q, M)
    with pytest.raises(ValueError, match=match):
        sg.fit(model, Y, iterations=1, progress=False, mask=mask)
    with pytest.raises(ValueError, match=match):
        make_dataset(model, Y, batch_size=4, mask=mask)
    with pytest.raises(ValueError, match=r"mask must be a boolean array of Y_new's shape"):
        model.infer_latents(Y, iterations=1, mask=mask)
    with pytest.raises(ValueError, match=r"mask must be a boolean array of Y_new's shape"):
        model.reconstruct(Y, iterations=1, mask=mask)


@pytest.mark.parametrize(
    "make_mask",
    [
        lambda m: m.astype(int),
        lambda m: m.astype(float),
        lambda m: np.where(m, "yes", "no"),
        lambda m: m.astype(object),
    ],
    ids=["int 0/1", "float 0/1", "strings", "object"],
)
def test_a_non_boolean_mask_is_rejected(make_mask):
    Y = complete_data("gaussian", seed=5)
    observed = np.random.default_rng(0).random(Y.shape) > 0.3
    mask = make_mask(observed)
    match = r"mask must be a boolean array"
    with pytest.raises(ValueError, match=match):
        check_observations(Y, mask=mask)
    with pytest.raises(ValueError, match=match):
        sg.PointGPLVM(Y, Q, M, mask=mask)
    with pytest.raises(ValueError, match=match):
        sg.AmortisedBayesianGPLVM(Y, Q, M, mask=mask)
    model = sg.PointGPLVM(Y, Q, M)
    with pytest.raises(ValueError, match=match):
        sg.fit(model, Y, iterations=1, progress=False, mask=mask)
    with pytest.raises(ValueError, match=match):
        model.infer_latents(Y, iterations=1, mask=mask)
    # The same pattern as booleans is fine (and a list of bools is a boolean array).
    assert np.isnan(check_observations(Y, mask=observed.tolist())).sum() == (~observed).sum()


@model_classes
def test_data_with_nothing_observed_is_rejected(model_class):
    Y = complete_data("gaussian", seed=5)
    nothing = np.zeros(Y.shape, dtype=bool)
    match = r"Every entry of .* is missing"
    with pytest.raises(ValueError, match=match):
        model_class(np.full(Y.shape, np.nan), Q, M)
    with pytest.raises(ValueError, match=match):
        model_class(Y, Q, M, mask=nothing)  # complete values, all masked out
    model = model_class(Y, Q, M)
    with pytest.raises(ValueError, match=match):
        sg.fit(model, np.full(Y.shape, np.nan), iterations=1, progress=False)
    with pytest.raises(ValueError, match=match):
        sg.fit(model, Y, iterations=1, progress=False, mask=nothing)
    with pytest.raises(ValueError, match=match):
        model.infer_latents(Y[:3], iterations=1, mask=nothing[:3])


def test_a_boolean_option_takes_true_or_false_only():
    from gpflow_svi_gplvm.validation import check_bool

    assert check_bool(np.True_, "overwrite") is True and check_bool(False, "overwrite") is False
    for value in ("no", "False", 0, 1, None, np.array([True])):
        with pytest.raises(ValueError, match=r"overwrite must be True or False \(replace\)"):
            check_bool(value, "overwrite", "replace")


def test_every_boolean_option_of_the_package_refuses_a_string():
    # "no" is truthy: read as a bool it would do what the user declined.
    from gpflow_svi_gplvm.datasets.files import fetch
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    Y = complete_data("gaussian", seed=5)
    model = sg.PointGPLVM(Y, Q, M)
    built = {
        "whiten": lambda v: sg.PointGPLVM(Y, Q, M, whiten=v),
        "doubly_reparameterised": lambda v: sg.PointGPLVM(Y, Q, M, doubly_reparameterised=v),
        "missing_aware": lambda v: sg.AmortisedBayesianGPLVM(Y, Q, M, missing_aware=v),
        "standardise_inputs": lambda v: sg.AmortisedBayesianGPLVM(Y, Q, M, standardise_inputs=v),
        "jit_compile": lambda v: sg.Trainer(model, Y, jit_compile=v),
        "allow_new_data": lambda v: sg.Trainer(model, Y, allow_new_data=v),
        "overwrite": lambda v: sg.Trainer(model, Y, overwrite=v),
        "progress": lambda v: sg.fit(model, Y, iterations=1, progress=v),
        "resume": lambda v: sg.fit(model, Y, iterations=1, resume=v),
        "download": lambda v: fetch("qpcr/guo_qpcr.csv", download=v),
        "verify": lambda v: fetch("qpcr/guo_qpcr.csv", verify=v),
    }
    face = SingleCellGPLVM()
    built["fit(progress)"] = lambda v: face.fit(None, progress=v)
    built["transform(progress)"] = lambda v: face.transform(None, progress=v)
    for name, call in built.items():
        option = name.split("(")[-1].rstrip(")")
        with pytest.raises(ValueError, match=rf"{option} must be True or False, got 'no'"):
            call("no")


def test_an_importance_count_too_large_for_memory_is_refused_with_the_size_it_needs():
    Y = complete_data("gaussian", seed=5)
    model = sg.BayesianSVIGPLVM(Y, Q, M, num_importance=10**8)
    with pytest.raises(ValueError, match=r"num_importance=100000000 .* GiB for the draws alone"):
        sg.Trainer(model, Y)
    sg.Trainer(sg.BayesianSVIGPLVM(Y, Q, M, num_importance=20), Y)  # a typical count is fine
