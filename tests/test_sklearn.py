"""The scikit-learn wrapper: estimator conventions, pipelines, reconstruction, missing data."""

import copy
import functools
import pickle

import numpy as np
import pytest
from check_shapes import disable_check_shapes
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks
from sklearn.utils.validation import check_is_fitted

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, LatentInference
from gpflow_svi_gplvm.metrics import nlpd, rmse
from gpflow_svi_gplvm.models import PAPER_NAMES, lookup_model
from gpflow_svi_gplvm.sklearn import MODELS, GPLVMEmbedding

N_TRAIN, N_TEST, D, Q = 100, 30, 6, 2

DEFAULTS = dict(
    model="bsvi",
    n_components=2,
    num_inducing=25,
    iterations=1000,
    batch_size=100,
    learning_rate=0.01,
    inference_iterations=300,
    seed=0,
    progress=False,
    shared_covariance=None,
    latent_dim=None,
)

# Small settings that still learn the synthetic data well (a few seconds per fit): at 200 steps
# the tests' error ratios are at most about half their bounds (0.21 and 0.25 of 0.5, 0.31 of 0.7).
FAST = dict(num_inducing=20, iterations=200, batch_size=50, learning_rate=0.02)


def smooth_map(X: np.ndarray) -> np.ndarray:
    """A smooth, non-linear map of 2-D latents [N, 2] to D = 6 outputs [N, 6]."""
    a, b = X[:, 0], X[:, 1]
    return np.column_stack(
        [np.sin(a), np.cos(b), np.tanh(a + b), 0.5 * a, np.sin(a - b), np.exp(-0.5 * b**2)]
    )


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-2, 2, (N_TRAIN + N_TEST, Q))
    Y = smooth_map(X) + 0.05 * rng.standard_normal((N_TRAIN + N_TEST, D))
    return Y[:N_TRAIN], Y[N_TRAIN:]


@pytest.fixture(scope="module")
def fitted(data):
    """A B-SVI embedding fitted by fit_transform, and the latents fit_transform returned."""
    estimator = GPLVMEmbedding(**FAST, inference_iterations=100)
    latents = estimator.fit_transform(data[0])
    return estimator, latents


# fit_transform returns the latents learnt in training, transform infers them afresh: close, not
# equal (documented in GPLVMEmbedding's notes). Both checks compare the two at atol 1e-2.
FIT_TRANSFORM_DIFFERS = "fit_transform returns the trained latents; transform re-infers them"
EXPECTED_FAILED_CHECKS = {
    "check_transformer_general": FIT_TRANSFORM_DIFFERS,
    "check_transformer_data_not_an_array": FIT_TRANSFORM_DIFFERS,
}


# The conventions are the wrapper's, the same for every model: the point model's fits and
# inferences trace in half the time of B-SVI's (whose pickling and refits are tested below).
@parametrize_with_checks(
    [
        GPLVMEmbedding(
            model="point", num_inducing=5, iterations=5, batch_size=20, inference_iterations=5
        )
    ],
    expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS,
)
def test_scikit_learn_estimator_checks(estimator, check):
    # Every fit traces the training step and every first transform or score an inference graph,
    # 4-10 s each, whatever the data's size; so the checks cost their count of fits, not steps.
    name = check.func.__name__ if isinstance(check, functools.partial) else check.__name__
    if name in EXPECTED_FAILED_CHECKS:
        # A non-strict xfail passes whether the check fails or not, so running its fits and
        # traces would assert nothing; the behaviour it trips on, fit_transform returning the
        # trained latents, is asserted in test_fit_stores_the_model_history_and_width.
        pytest.xfail(EXPECTED_FAILED_CHECKS[name])
    # scikit-learn's conventions are under test, not shapes: GPflow's shape checks would triple
    # the time of the ~40 fits these checks trace.
    with disable_check_shapes():
        check(estimator)


def column_mean_rmse(Y_train, Y):
    return rmse(Y, np.broadcast_to(np.nanmean(Y_train, axis=0), Y.shape))


def test_defaults_are_stored_verbatim():
    assert GPLVMEmbedding().get_params() == DEFAULTS
    odd = dict(DEFAULTS, model="no such model", latent_dim=-3, learning_rate="fast")
    # No validation in __init__ (scikit-learn convention): errors come from fit.
    assert GPLVMEmbedding(**odd).get_params() == odd


def test_get_params_set_params_round_trip():
    params = dict(
        model="map",
        n_components=3,
        num_inducing=7,
        iterations=12,
        batch_size=9,
        learning_rate=0.5,
        inference_iterations=4,
        seed=11,
        progress=True,
        shared_covariance=True,
        latent_dim=None,
    )
    estimator = GPLVMEmbedding()
    assert estimator.set_params(**params) is estimator
    assert estimator.get_params() == params
    assert GPLVMEmbedding(**estimator.get_params()).get_params() == params
    with pytest.raises(ValueError, match="Invalid parameter"):
        estimator.set_params(kernel="rbf")


def test_clone_gives_an_unfitted_estimator_with_equal_params(fitted):
    estimator, _ = fitted
    copy = clone(estimator)
    assert copy is not estimator
    assert copy.get_params() == estimator.get_params()
    with pytest.raises(NotFittedError):
        check_is_fitted(copy)
    assert not hasattr(copy, "model_")
    check_is_fitted(estimator)  # the original keeps its fit


def test_not_fitted_error_before_fit(data):
    estimator = GPLVMEmbedding()
    for method, argument in [
        (estimator.transform, data[1]),
        (estimator.inverse_transform, np.zeros((3, Q))),
        (estimator.score, data[1]),
    ]:
        with pytest.raises(NotFittedError):
            method(argument)
    with pytest.raises(NotFittedError):
        estimator.get_feature_names_out()


def test_unknown_model_name_is_a_value_error_listing_the_names(data):
    with pytest.raises(ValueError, match="Unknown model 'pca'") as error:
        GPLVMEmbedding(model="pca").fit(data[0])
    for name in ("point", "map", "bsvi", "aeb"):
        assert repr(name) in str(error.value)
    assert set(MODELS) == {"point", "map", "bsvi", "aeb", "flow"}
    with pytest.raises(ValueError, match="Unknown model"):
        GPLVMEmbedding(model=BayesianSVIGPLVM).fit(data[0])


def test_the_model_registry_names_each_class_once():
    assert [lookup_model(name) for name in MODELS] == list(MODELS.values())
    assert len(set(MODELS.values())) == len(MODELS) and set(PAPER_NAMES) == set(MODELS)
    assert PAPER_NAMES["bsvi"] == "B-SVI"
    for wrong in ("B-SVI", "BayesianSVIGPLVM", None):
        with pytest.raises(ValueError, match="choose one of 'point', 'map', 'bsvi', 'aeb'"):
            lookup_model(wrong)


TINY = dict(num_inducing=5, iterations=3, batch_size=20, inference_iterations=3)


def test_n_components_sets_the_latent_width(data):
    estimator = GPLVMEmbedding(n_components=3, **TINY).fit(data[0])
    assert estimator.model_.latent_dim == 3
    assert estimator.transform(data[1][:4]).shape == (4, 3)
    assert len(estimator.get_feature_names_out()) == 3


def test_latent_dim_is_a_deprecated_alias_of_n_components(data):
    estimator = GPLVMEmbedding(latent_dim=3, **TINY)
    with pytest.warns(FutureWarning, match="n_components"):
        latents = estimator.fit_transform(data[0])
    assert latents.shape == (N_TRAIN, 3) and estimator.model_.latent_dim == 3
    assert estimator.get_params()["latent_dim"] == 3  # stored as given, so clone keeps it
    assert clone(estimator).get_params() == estimator.get_params()
    with pytest.raises(ValueError, match="pass only n_components"):
        GPLVMEmbedding(n_components=4, latent_dim=3, **TINY).fit(data[0])


def test_fit_stores_the_model_history_and_width(fitted):
    estimator, latents = fitted
    assert isinstance(estimator.model_, BayesianSVIGPLVM)
    assert estimator.n_features_in_ == D
    assert estimator.history_.elbo.shape == (FAST["iterations"],)
    assert np.all(np.isfinite(estimator.history_.elbo))
    assert list(estimator.get_feature_names_out()) == ["gplvmembedding0", "gplvmembedding1"]
    # fit_transform returns the trained latents of the training rows, not re-inferred ones.
    assert isinstance(latents, np.ndarray) and latents.shape == (N_TRAIN, Q)
    np.testing.assert_array_equal(latents, estimator.model_.latent_mean().numpy())


def test_transform_of_training_rows_lands_near_their_trained_latents(fitted, data):
    estimator, latents = fitted
    state = dict(vars(estimator))
    inferred = estimator.transform(data[0])
    assert vars(estimator) == state  # transform does not change the estimator
    assert isinstance(inferred, np.ndarray) and inferred.shape == (N_TRAIN, Q)
    distance = np.linalg.norm(inferred - latents, axis=1)
    spread = np.linalg.norm(latents - latents.mean(0), axis=1).mean()
    assert np.median(distance) < 0.25 * spread


def test_inverse_transform_of_transform_beats_column_means(fitted, data):
    estimator, _ = fitted
    Y_train, Y_test = data
    for Y in (Y_train, Y_test):
        reconstruction = estimator.inverse_transform(estimator.transform(Y))
        assert isinstance(reconstruction, np.ndarray) and reconstruction.shape == Y.shape
        assert rmse(Y, reconstruction) < 0.5 * column_mean_rmse(Y_train, Y)


def test_score_is_the_mean_log_density_and_beats_a_column_gaussian(fitted, data):
    estimator, _ = fitted
    Y_train, Y_test = data
    score = estimator.score(Y_test)
    assert isinstance(score, float) and np.isfinite(score)
    baseline = -nlpd(
        Y_test,
        np.broadcast_to(Y_train.mean(0), Y_test.shape),
        np.broadcast_to(Y_train.var(0), Y_test.shape),
    )
    assert score > baseline + 0.5  # nats per entry
    # Missing entries are not scored; the observed ones still are.
    assert np.isfinite(estimator.score(np.where(np.arange(D) < 2, np.nan, Y_test)))


def test_wrong_widths_are_value_errors(fitted, data):
    estimator, _ = fitted
    with pytest.raises(ValueError, match="features"):
        estimator.transform(data[1][:, :4])
    with pytest.raises(ValueError, match="latent_dim"):
        estimator.inverse_transform(np.zeros((3, Q + 1)))


@pytest.mark.parametrize("duplicate", ["pickle", "deepcopy"])
def test_pickle_and_deepcopy_round_trip_and_the_original_keeps_working(fitted, data, duplicate):
    estimator, _ = fitted
    Y_test = data[1][:5]
    expected = estimator.transform(Y_test)  # compiles the inference graph
    expected_score = estimator.score(Y_test)
    if duplicate == "pickle":
        restored = pickle.loads(pickle.dumps(estimator))
    else:
        restored = copy.deepcopy(estimator)
    assert restored.get_params() == estimator.get_params()
    np.testing.assert_allclose(restored.transform(Y_test), expected, rtol=1e-8, atol=1e-10)
    # The original is untouched by being copied (joblib and parallel grid searches pickle it).
    np.testing.assert_allclose(estimator.transform(Y_test), expected, rtol=1e-8, atol=1e-10)
    assert estimator.score(Y_test) == pytest.approx(expected_score, rel=1e-10)


def test_pipeline_with_standard_scaler(data):
    Y_train, Y_test = data
    # Put the data far from zero mean / unit variance, so that the scaler matters.
    Y_train, Y_test = 10.0 * Y_train + 5.0, 10.0 * Y_test + 5.0
    pipeline = Pipeline(
        [("scale", StandardScaler()), ("gplvm", GPLVMEmbedding(model="aeb", **FAST))]
    )
    assert pipeline.fit(Y_train) is pipeline
    assert isinstance(pipeline.named_steps["gplvm"].model_, AmortisedBayesianGPLVM)
    latents = pipeline.transform(Y_test)
    assert isinstance(latents, np.ndarray) and latents.shape == (N_TEST, Q)
    decoded = pipeline.inverse_transform(latents)  # through the GPLVM, then the scaler
    assert decoded.shape == Y_test.shape
    assert rmse(Y_test, decoded) < 0.5 * column_mean_rmse(Y_train, Y_test)

    # For the amortised model the trained latents are the encoder's output on the rows, after
    # any number of steps: a short refit shows it without training the encoder again. (transform
    # refines the encoder's q(x*) by each row's bound, so it differs from them.)
    pipeline.set_params(gplvm__iterations=TINY["iterations"])
    trained = pipeline.fit_transform(Y_train)
    assert trained.shape == (N_TRAIN, Q)
    model = pipeline.named_steps["gplvm"].model_
    scaled = pipeline.named_steps["scale"].transform(Y_train)
    encoded = LatentInference(model, tolerance=None).infer(scaled)[0].numpy()
    np.testing.assert_allclose(trained, encoded, rtol=1e-10, atol=1e-12)


def test_nans_are_accepted_by_fit_and_transform(data):
    Y_train, Y_test = data
    rng = np.random.default_rng(1)
    Y_missing = np.where(rng.random(Y_train.shape) < 0.15, np.nan, Y_train)
    # One q(u) covariance for all outputs: new-row inference and reconstruction use it too.
    estimator = GPLVMEmbedding(
        model="point", **FAST, inference_iterations=100, shared_covariance=True
    )
    with pytest.warns(UserWarning, match="missing"):
        latents = estimator.fit_transform(Y_missing)
    assert np.all(np.isfinite(latents)) and estimator.model_.shared_covariance

    hidden = rng.random(Y_test.shape) < 0.3
    Y_gaps = np.where(hidden, np.nan, Y_test)
    Y_gaps[0] = np.nan  # a row with nothing observed maps to the prior mean
    inferred = estimator.transform(Y_gaps)
    assert inferred.shape == (N_TEST, Q) and np.all(np.isfinite(inferred))
    np.testing.assert_array_equal(inferred[0], 0.0)
    # The hidden entries are filled in from the observed ones, better than by column means.
    filled = estimator.inverse_transform(inferred)
    scored = hidden.copy()
    scored[0] = False
    assert rmse(Y_test, filled, mask=scored) < 0.7 * rmse(
        Y_test, np.broadcast_to(np.nanmean(Y_missing, 0), Y_test.shape), mask=scored
    )
    assert np.isfinite(estimator.score(Y_gaps))
    with pytest.raises(ValueError, match="infinity"):
        estimator.transform(np.where(hidden, np.inf, Y_test))
