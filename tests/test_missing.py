"""Missing data: NaN (or an explicit mask) marks an entry as missing, and missing entries must not
influence anything.

1. Property test: for 200 random NaN patterns per (model, likelihood), including fully missing
   rows, fully missing columns and fully missing batches, the training loss and every gradient
   are finite (one compiled function per model, traced once).
2. The value hidden behind a missing entry changes neither the loss nor any gradient: at the
   boundary (``check_observations`` / ``fit`` with ``mask``), and inside ``MaskedLikelihood``,
   where the hidden value is ``fill_value`` and the latent function values behind a gap.
3. Training on data with 60% missing reconstructs the missing entries far better than column means.
4. Bad input: infinities are not "missing", masks must be boolean and of Y's shape, data with
   nothing observed is rejected; a fully missing row warns and its latent follows the prior.
5. The amortised encoder is NaN-safe, sees the observation mask, and hides inputs only when
   training.

Sizes are tiny (each ``tf.function`` trace costs seconds on a 2-core CPU); most checks run eagerly.
"""

from __future__ import annotations

import contextlib
import re
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.config import default_float

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    EncoderLatent,
    MaskedLikelihood,
    PointGPLVM,
    fit,
)
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.training import make_dataset
from gpflow_svi_gplvm.validation import check_observations

N, D, Q, M = 10, 4, 2, 3
ALL_MODELS = [PointGPLVM, MAPGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM]
LIKELIHOODS = ["gaussian", "poisson"]
model_classes = pytest.mark.parametrize("model_class", ALL_MODELS, ids=lambda c: c.__name__)
likelihood_kinds = pytest.mark.parametrize("kind", LIKELIHOODS)
NUM_PATTERNS = 200  # per (model, likelihood): 1600 patterns in all
TOL = 1e-12

# Arbitrary values hidden behind a False in the mask. The boundary turns all of them into NaN,
# so even values outside a likelihood's support (-3.7 for Poisson) are legal there.
JUNK = (0.0, 1e6, -3.7, 7.0)
# Values that MaskedLikelihood puts behind a gap before any arithmetic (``fill_value``); the
# documented contract asks for values in the base likelihood's support.
FILL_VALUES = {"gaussian": (1e6, -3.7), "poisson": (7.0, 1e6), "bernoulli": (1.0,)}


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------


def complete_data(kind: str, seed: int = 0, num_data: int = N, num_columns: int = D):
    """Data [num_data, num_columns] in the support of ``kind``, from a smooth 2-D latent map."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, Q))
    W = 1.5 * rng.standard_normal((Q, num_columns))
    f = np.tanh(X @ W)
    if kind == "gaussian":
        return f + 0.1 * rng.standard_normal(f.shape)
    if kind == "poisson":
        return rng.poisson(np.exp(0.5 + f)).astype(float)
    if kind == "bernoulli":
        return (f + 0.3 * rng.standard_normal(f.shape) > 0).astype(float)
    raise ValueError(kind)


def base_likelihood(kind: str) -> gpflow.likelihoods.ScalarLikelihood:
    if kind == "gaussian":
        return gpflow.likelihoods.Gaussian(variance=0.3)
    if kind == "poisson":
        return gpflow.likelihoods.Poisson()
    return gpflow.likelihoods.Bernoulli()


def make_model(model_class, kind: str, Y: np.ndarray, seed: int = 0, **kwargs):
    """A tiny model with an explicit MaskedLikelihood and q(u) moved away from its prior, so that
    f (and hence every gradient) depends on the latents."""
    if model_class in (BayesianSVIGPLVM, AmortisedBayesianGPLVM):
        kwargs.setdefault("num_samples", 2)
    model = model_class(Y, Q, M, likelihood=MaskedLikelihood(base_likelihood(kind)), **kwargs)
    rng = np.random.default_rng(100 + seed)
    model.q_mu.assign(0.7 * rng.standard_normal(model.q_mu.shape))
    q_sqrt = np.tril(0.2 * rng.standard_normal((D, M, M)), -1) + 0.5 * np.eye(M)
    model.q_sqrt.assign(q_sqrt)
    return model


MISSING_NOTICE = r"of the entries of data are missing \(NaN\): the likelihood is wrapped"
EMPTY_ROW = r"1 row\(s\) of data have no observed entry: .*latents stay at the prior"
EMPTY_COLUMN = r"1 column\(s\) of data have no observed entry"


@contextlib.contextmanager
def expect_user_warnings(*patterns: str, empty_column: bool = False):
    """Exactly the expected UserWarnings: each pattern matches one, and no other one is raised.
    (``pytest.warns(match=...)`` would re-emit the others; construction with gaps and no
    explicit MaskedLikelihood always adds the notice that the likelihood was wrapped.)

    ``empty_column``: also silence numpy's RuntimeWarnings ("Mean of empty slice" and the like),
    which reductions over a column with nothing observed may raise: not the subject of these
    tests."""
    with pytest.warns(UserWarning) as record, warnings.catch_warnings():
        if empty_column:
            warnings.simplefilter("ignore", RuntimeWarning)
        yield
    messages = [str(w.message) for w in record if issubclass(w.category, UserWarning)]
    for pattern in patterns:
        assert any(re.search(pattern, m) for m in messages), (pattern, messages)
    assert all(any(re.search(p, m) for p in patterns) for m in messages), messages


def dense(gradient) -> np.ndarray:
    return tf.convert_to_tensor(gradient).numpy()


def eager_loss_and_gradients(model, idx, Y, training: bool = True, seed: int = 5):
    """Loss and dense gradients w.r.t. every trainable variable, eagerly. The latent module's
    generator (the source of the latent draws and of the encoder's hidden inputs) is reset first,
    so repeated evaluations use common random numbers."""
    model.latent.generator.reset_from_seed(seed)
    data = (tf.constant(idx, dtype=tf.int64), tf.constant(Y, dtype=default_float()))
    with tf.GradientTape() as tape:
        loss = model.training_loss(data, training=training)
    gradients = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in gradients)
    return loss.numpy(), [dense(g) for g in gradients]


def assert_same(result, reference, tol: float = TOL, what: str = ""):
    (loss, gradients), (loss_ref, gradients_ref) = result, reference
    assert np.isfinite(loss_ref), what
    np.testing.assert_allclose(loss, loss_ref, rtol=tol, atol=tol, err_msg=f"loss {what}")
    assert len(gradients) == len(gradients_ref)
    for k, (g, g_ref) in enumerate(zip(gradients, gradients_ref)):
        assert np.all(np.isfinite(g_ref)), f"gradient {k} {what}"
        np.testing.assert_allclose(g, g_ref, rtol=tol, atol=tol, err_msg=f"gradient {k} {what}")


def random_patterns(seed: int, count: int):
    """``count`` minibatches (rows [B], missing [B, D]) over N rows: batch sizes 1..N, sometimes
    with repeated rows; every 10th complete, every 10th entirely missing, the rest missing at a
    random rate in [0.05, 0.95] with, half the time each, a fully missing row and column."""
    rng = np.random.default_rng(seed)
    for i in range(count):
        size = int(rng.integers(1, N + 1))
        rows = rng.choice(N, size=size, replace=bool(rng.random() < 0.15)).astype(np.int64)
        if i % 10 == 0:
            missing = np.zeros((size, D), dtype=bool)
        elif i % 10 == 1:
            missing = np.ones((size, D), dtype=bool)
        else:
            missing = rng.random((size, D)) < rng.uniform(0.05, 0.95)
            if rng.random() < 0.5:
                missing[rng.integers(size)] = True
            if rng.random() < 0.5:
                missing[:, rng.integers(D)] = True
        yield rows, missing


def compiled_loss_and_gradients(model):
    """One compiled function (idx [None] int64, Y [None, D]) -> (loss, dense gradients)."""
    variables = model.trainable_variables
    signature = [tf.TensorSpec([None], tf.int64), tf.TensorSpec([None, D], default_float())]

    @tf.function(input_signature=signature)
    def loss_and_gradients(idx, Y):
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(variables)
            loss = model.training_loss((idx, Y), training=True)
        gradients = tape.gradient(loss, variables)
        missing = [v.name for v, g in zip(variables, gradients) if g is None]
        assert not missing, f"no gradient for {missing}"
        return loss, [tf.convert_to_tensor(g) for g in gradients]

    return loss_and_gradients


# --------------------------------------------------------------------------------------------
# 1. Finite loss and gradients for any missing pattern
# --------------------------------------------------------------------------------------------


@likelihood_kinds
@model_classes
def test_loss_and_gradients_are_finite_for_random_missing_patterns(model_class, kind):
    Y = complete_data(kind, seed=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # complete data and an explicit MaskedLikelihood: silent
        model = make_model(model_class, kind, Y)
    before = [v.numpy().copy() for v in model.trainable_variables]
    loss_and_gradients = compiled_loss_and_gradients(model)

    losses, failures = [], []
    seen = dict(full_row=0, full_column=0, all_missing=0, complete=0, repeated_rows=0)
    seed = 10 * ALL_MODELS.index(model_class) + LIKELIHOODS.index(kind)
    for rows, missing in random_patterns(seed, count=NUM_PATTERNS):
        seen["full_row"] += bool(missing.all(axis=1).any())
        seen["full_column"] += bool(missing.all(axis=0).any())
        seen["all_missing"] += bool(missing.all())
        seen["complete"] += bool(not missing.any())
        seen["repeated_rows"] += len(set(rows.tolist())) < len(rows)
        Y_batch = np.where(missing, np.nan, Y[rows])
        loss, gradients = loss_and_gradients(tf.constant(rows), tf.constant(Y_batch))
        losses.append(loss.numpy())
        bad = [
            v.name
            for v, g in zip(model.trainable_variables, gradients)
            if not np.all(np.isfinite(g.numpy()))
        ]
        if not np.isfinite(loss.numpy()) or bad:
            failures.append((rows.tolist(), missing.astype(int).tolist(), loss.numpy(), bad))

    assert not failures, f"{len(failures)} patterns gave non-finite values, e.g. {failures[0]}"
    assert loss_and_gradients.experimental_get_tracing_count() == 1
    assert seen["full_row"] >= 50 and seen["full_column"] >= 50, seen
    assert seen["all_missing"] >= 20 and seen["complete"] >= 20 and seen["repeated_rows"] >= 5
    assert len(np.unique(np.round(losses, 8))) > NUM_PATTERNS // 2  # the patterns do differ
    for old, variable in zip(before, model.trainable_variables):  # the same model every time
        np.testing.assert_array_equal(variable.numpy(), old)


def test_finiteness_check_catches_compute_then_mask():
    """The check above has teeth: filling gaps with NaN (i.e. computing with the NaN targets and
    masking afterwards) gives a finite loss but NaN gradients, exactly the failure it looks for."""
    Y = complete_data("gaussian", seed=1)
    model = make_model(PointGPLVM, "gaussian", Y)
    rows = np.arange(N)
    missing = np.zeros((N, D), dtype=bool)
    missing[[1, 4], [2, 0]] = True
    Y_batch = np.where(missing, np.nan, Y)
    loss, gradients = eager_loss_and_gradients(model, rows, Y_batch)
    assert np.isfinite(loss) and all(np.all(np.isfinite(g)) for g in gradients)

    model.likelihood.fill_value = np.nan
    loss, gradients = eager_loss_and_gradients(model, rows, Y_batch)
    assert np.isfinite(loss)
    assert not all(np.all(np.isfinite(g)) for g in gradients)


# --------------------------------------------------------------------------------------------
# 2. What hides behind a missing entry does not matter
# --------------------------------------------------------------------------------------------


def explicit_mask(seed: int = 7) -> np.ndarray:
    """[N, D] True = observed: ~40% missing, row 2 fully missing, column 1 fully missing."""
    rng = np.random.default_rng(seed)
    mask = rng.random((N, D)) > 0.4
    mask[2] = False
    mask[:, 1] = False
    mask[[0, 5, 8], 3] = True  # keep some of every other row observed
    mask[[0, 5, 8], 0] = True
    assert mask.any(axis=1).sum() == N - 1
    return mask


@likelihood_kinds
@model_classes
def test_hidden_values_change_neither_loss_nor_gradients(model_class, kind):
    Y = complete_data(kind, seed=2)
    model = make_model(model_class, kind, Y, seed=2)
    mask = explicit_mask()
    rows = np.array([2, 7, 0, 5, 9, 3, 8])  # includes the fully missing row
    Y_nan = np.where(mask, Y, np.nan)
    # training=True for every model (the encoder hides inputs); with common random numbers two
    # evaluations agree bit for bit (checked first).
    reference = eager_loss_and_gradients(model, rows, Y_nan[rows])
    assert_same(eager_loss_and_gradients(model, rows, Y_nan[rows]), reference, 0.0, "repeat")

    for junk in JUNK:
        Y_junk = np.where(mask, Y, junk)
        original = Y_junk.copy()
        checked = check_observations(Y_junk, mask=mask)
        np.testing.assert_array_equal(Y_junk, original)  # the caller's array is not modified
        np.testing.assert_array_equal(checked, Y_nan)  # hidden values became NaN (NaN == NaN)
        result = eager_loss_and_gradients(model, rows, checked[rows])
        assert_same(result, reference, what=f"junk {junk} through check_observations")

    # Inside the likelihood the hidden value *is* used in arithmetic: it is fill_value.
    for fill_value in FILL_VALUES[kind]:
        model.likelihood.fill_value = fill_value
        result = eager_loss_and_gradients(model, rows, Y_nan[rows])
        assert_same(result, reference, what=f"fill_value {fill_value}")
    model.likelihood.fill_value = 0.0

    # Control: an observed entry does matter, so the equalities above are not vacuous.
    assert mask[0, 0]
    Y_changed = Y_nan.copy()
    Y_changed[0, 0] += 1.0
    changed_loss, _ = eager_loss_and_gradients(model, rows, Y_changed[rows])
    assert abs(changed_loss - reference[0]) > 1e-6


@pytest.mark.parametrize("kind", ["gaussian", "poisson", "bernoulli"])
def test_masked_likelihood_ignores_everything_behind_a_nan(kind):
    """For the likelihood alone NaN is the only "missing" marker, so a junk value in Y would be
    an observation. What may hide behind a NaN at this level is (a) ``fill_value``, the number the
    likelihood computes with in its place, and (b) the latent function values F at that entry.
    Neither may change any value or gradient, and a gap's gradient w.r.t. its F is exactly 0.
    (c) Junk behind a False in an explicit mask reaches the likelihood only through
    ``check_observations``, which turns it into NaN; raw junk counts as observed."""
    rng = np.random.default_rng(11)
    B = 9
    Y = complete_data(kind, seed=3, num_data=B)
    missing = rng.random((B, D)) < 0.4
    missing[4] = True  # a fully missing row
    missing[:, 2] = True  # a fully missing column
    missing[[0, 1], 0] = False
    Y_nan = np.where(missing, np.nan, Y)
    X = tf.constant(rng.standard_normal((B, Q)))
    Fmu = rng.standard_normal((B, D))
    Fvar = rng.uniform(0.1, 1.5, size=(B, D))
    base = base_likelihood(kind)

    def evaluate(likelihood, Y, Fmu, Fvar):
        Fmu, Fvar, Y = tf.constant(Fmu), tf.constant(Fvar), tf.constant(Y)
        variables = base.trainable_variables
        results = []
        for method, args in [
            (likelihood.variational_expectations, (X, Fmu, Fvar, Y)),
            (likelihood.predict_log_density, (X, Fmu, Fvar, Y)),
            (likelihood.log_prob, (X, Fmu, Y)),
        ]:
            with tf.GradientTape() as tape:
                tape.watch([Fmu, Fvar])
                value = method(*args)
                total = tf.reduce_sum(value)
            grads = tape.gradient(total, [Fmu, Fvar, *variables])
            grads = [
                np.zeros(v.shape) if g is None else dense(g)
                for g, v in zip(grads, [Fmu, Fvar, *variables])
            ]
            results.append((value.numpy(), grads))
        return results

    def assert_results_equal(results, expected, what):
        for (value, grads), (value_ref, grads_ref) in zip(results, expected):
            assert value.shape == (B,)
            assert np.all(np.isfinite(value_ref))
            np.testing.assert_allclose(value, value_ref, rtol=TOL, atol=TOL, err_msg=what)
            for g, g_ref in zip(grads, grads_ref):
                assert np.all(np.isfinite(g_ref)), what
                np.testing.assert_allclose(g, g_ref, rtol=TOL, atol=TOL, err_msg=what)

    reference = evaluate(MaskedLikelihood(base), Y_nan, Fmu, Fvar)
    for value, (g_mu, g_var, *_) in reference:
        assert value[4] == 0.0  # nothing observed: the row contributes exactly nothing
        assert np.all(g_mu[missing] == 0.0) and np.all(g_var[missing] == 0.0)
        assert np.all(g_mu[~missing] != 0.0)  # observed entries do get gradients

    # (a) the fill value
    for fill_value in FILL_VALUES[kind]:
        results = evaluate(MaskedLikelihood(base, fill_value), Y_nan, Fmu, Fvar)
        assert_results_equal(results, reference, f"fill_value {fill_value}")

    # (b) the latent function values behind the gaps
    Fmu_other = np.where(missing, rng.uniform(-3, 3, size=(B, D)), Fmu)
    Fvar_other = np.where(missing, rng.uniform(0.01, 5.0, size=(B, D)), Fvar)
    results = evaluate(MaskedLikelihood(base), Y_nan, Fmu_other, Fvar_other)
    assert_results_equal(results, reference, "F behind the gaps")

    # (c) junk behind an explicit mask: through the boundary it is NaN; raw, it is observed
    junk = 1.0 if kind == "bernoulli" else 7.0
    Y_junk = np.where(missing, junk, Y)
    checked = check_observations(Y_junk, mask=~missing)
    assert_results_equal(evaluate(MaskedLikelihood(base), checked, Fmu, Fvar), reference, "mask")
    raw = evaluate(MaskedLikelihood(base), Y_junk, Fmu, Fvar)
    assert not np.allclose(raw[0][0], reference[0][0])


def test_fit_with_junk_behind_a_mask_equals_fit_on_nans():
    """The amortised model: the data reach it twice (the likelihood and the encoder input), and
    its steps draw both latent noise and randomly hidden encoder inputs."""
    model_class = AmortisedBayesianGPLVM
    num_data = 12
    Y = complete_data("gaussian", seed=4, num_data=num_data)
    rng = np.random.default_rng(12)
    mask = rng.random(Y.shape) > 0.35
    mask[3] = False  # a fully missing row
    mask[:, 2] = False  # and a fully missing column
    mask[1, 0] = True  # (row 1 would be empty too)
    assert (~mask.any(axis=1)).sum() == 1 and (~mask.any(axis=0)).sum() == 1
    junk = rng.choice(np.array([0.0, 1e6, -3.7]), size=Y.shape)
    Y_junk = np.where(mask, Y, junk)
    Y_nan = np.where(mask, Y, np.nan)

    expected = (MISSING_NOTICE, EMPTY_ROW, EMPTY_COLUMN)
    with expect_user_warnings(*expected, empty_column=True):
        model_junk = model_class(Y_junk, Q, M, mask=mask, num_samples=2)
    with expect_user_warnings(*expected, empty_column=True):
        model_nan = model_class(Y_nan, Q, M, num_samples=2)
    for a, b in zip(model_junk.trainable_variables, model_nan.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())  # identical fresh models

    settings = dict(iterations=15, batch_size=5, seed=3, steps_per_call=15, progress=False)
    history_junk = fit(model_junk, Y_junk, mask=mask, **settings)
    history_nan = fit(model_nan, Y_nan, **settings)
    assert history_junk.elbo.shape == (15,) and np.all(np.isfinite(history_junk.elbo))
    np.testing.assert_array_equal(history_junk.elbo, history_nan.elbo)
    for a, b in zip(model_junk.trainable_variables, model_nan.trainable_variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --------------------------------------------------------------------------------------------
# 3. Reconstruction of missing entries
# --------------------------------------------------------------------------------------------


def test_reconstructs_missing_entries_of_training_rows():
    num_data, num_columns = 300, 12
    Y = complete_data("gaussian", seed=3, num_data=num_data, num_columns=num_columns)
    rng = np.random.default_rng(3)
    missing = rng.random(Y.shape) < 0.6
    missing[~(~missing).any(axis=1), 0] = False  # every row keeps at least one entry
    assert 0.58 < missing.mean() < 0.62
    Y_missing = np.where(missing, np.nan, Y)

    with expect_user_warnings(r"(59|60)\.\d% " + MISSING_NOTICE):
        model = BayesianSVIGPLVM(Y_missing, Q, num_inducing=15)
    history = fit(
        model, Y_missing, iterations=1000, batch_size=100, learning_rate=0.03, progress=False
    )
    assert np.all(np.isfinite(history.elbo))
    assert history.elbo[-100:].mean() > history.elbo[:100].mean() + 100.0

    mean, variance = model.reconstruct(Y_missing, rows=np.arange(num_data))
    mean = mean.numpy()
    assert mean.shape == Y.shape and np.all(np.isfinite(mean))
    assert np.all(variance.numpy() > 0)
    column_means = np.broadcast_to(np.nanmean(Y_missing, axis=0), Y.shape)
    model_rmse = rmse(Y, mean, mask=missing)
    baseline = rmse(Y, column_means, mask=missing)
    assert model_rmse < 0.6 * baseline, (model_rmse, baseline)


# --------------------------------------------------------------------------------------------
# 4. Bad input, and rows with nothing observed
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
            fit(model, Y_inf, iterations=1, progress=False, **full)
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
    [(N, D + 1), (N + 1, D), (D, N), (1, D), (N,), (N * D,), (N, D, 1)],
    ids=["more columns", "more rows", "transposed", "broadcastable", "1-D", "flat", "3-D"],
)
def test_a_mask_of_another_shape_is_rejected(shape):
    Y = complete_data("gaussian", seed=5)
    mask = np.ones(shape, dtype=bool)
    match = r"mask must be a boolean array of .*shape \(10, 4\)"
    with pytest.raises(ValueError, match=match):
        check_observations(Y, mask=mask)
    for model_class in (PointGPLVM, AmortisedBayesianGPLVM):
        with pytest.raises(ValueError, match=match):
            model_class(Y, Q, M, mask=mask)
    model = PointGPLVM(Y, Q, M)
    with pytest.raises(ValueError, match=match):
        fit(model, Y, iterations=1, progress=False, mask=mask)
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
        PointGPLVM(Y, Q, M, mask=mask)
    with pytest.raises(ValueError, match=match):
        AmortisedBayesianGPLVM(Y, Q, M, mask=mask)
    model = PointGPLVM(Y, Q, M)
    with pytest.raises(ValueError, match=match):
        fit(model, Y, iterations=1, progress=False, mask=mask)
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
        fit(model, np.full(Y.shape, np.nan), iterations=1, progress=False)
    with pytest.raises(ValueError, match=match):
        fit(model, Y, iterations=1, progress=False, mask=nothing)
    with pytest.raises(ValueError, match=match):
        model.infer_latents(Y[:3], iterations=1, mask=nothing[:3])


def fully_missing_row_data(row: int = 3) -> tuple[np.ndarray, np.ndarray]:
    Y = complete_data("gaussian", seed=6, num_data=12)
    mask = np.random.default_rng(6).random(Y.shape) > 0.2
    mask[row] = False
    mask[~mask.any(axis=1) & (np.arange(12) != row), 0] = True
    assert mask.any(axis=0).all() and (~mask.any(axis=1)).sum() == 1
    return Y, mask


@model_classes
def test_a_fully_missing_row_warns_and_gets_only_its_prior_term(model_class):
    """The row's latent parameters get exactly the gradient of its row term (scaled by N / B):
    Point 0, MAP x (from -log N(x; 0, I)), B-SVI that of KL(q(x) || N(0, I))."""
    row = 3
    Y, mask = fully_missing_row_data(row)
    with expect_user_warnings(MISSING_NOTICE, EMPTY_ROW):
        model = model_class(Y, Q, M, mask=mask)
    assert isinstance(model.likelihood, MaskedLikelihood)
    rng = np.random.default_rng(13)
    model.q_mu.assign(rng.standard_normal(model.q_mu.shape))
    Y_nan = np.where(mask, Y, np.nan)
    rows = np.array([0, row, 7, 11, 5])
    scale = 12 / len(rows)

    if model_class is AmortisedBayesianGPLVM:
        loss, gradients = eager_loss_and_gradients(model, rows, Y_nan[rows])
        assert np.isfinite(loss) and all(np.all(np.isfinite(g)) for g in gradients)
        mean, variance = model.latent.moments(None, tf.constant(Y_nan[[row]]))
        assert np.all(np.isfinite(mean.numpy())) and np.all(variance.numpy() > 0)
        return

    mu = np.array([1.5, -1.0])
    model.latent.mean.assign(tf.tensor_scatter_nd_update(model.latent.mean, [[row]], [mu]))
    tables = [model.latent.mean.unconstrained_variable]
    if model_class is BayesianSVIGPLVM:
        s = np.array([0.3, 2.0])
        model.latent.variance.assign(
            tf.tensor_scatter_nd_update(model.latent.variance, [[row]], [s])
        )
        tables.append(model.latent.variance.unconstrained_variable)
    with tf.GradientTape() as tape:
        loss = model.training_loss((tf.constant(rows), tf.constant(Y_nan[rows])), training=True)
    gradients = [dense(g) for g in tape.gradient(loss, tables)]

    if model_class is PointGPLVM:
        expected = [np.zeros(Q)]
    elif model_class is MAPGPLVM:
        expected = [scale * mu]
    else:
        raw = model.latent.variance.unconstrained_variable.numpy()[row]
        softplus_derivative = 1.0 / (1.0 + np.exp(-raw))
        expected = [scale * mu, scale * 0.5 * (1.0 - 1.0 / s) * softplus_derivative]
    for gradient, value in zip(gradients, expected):
        np.testing.assert_allclose(gradient[row], value, rtol=1e-10, atol=1e-14)
        assert np.any(gradient[rows[rows != row]] != 0.0)  # other rows see their data


@pytest.mark.parametrize("model_class", [PointGPLVM, BayesianSVIGPLVM], ids=lambda c: c.__name__)
def test_a_fully_missing_row_stays_put_or_moves_to_the_prior_in_training(model_class):
    row = 3
    Y, mask = fully_missing_row_data(row)
    with expect_user_warnings(MISSING_NOTICE, EMPTY_ROW):
        model = model_class(Y, Q, M, mask=mask)
    start = np.array([1.5, -1.0])
    model.latent.mean.assign(tf.tensor_scatter_nd_update(model.latent.mean, [[row]], [start]))

    def kl_to_prior():
        m = model.latent.mean.numpy()[row]
        s = model.latent.variance.numpy()[row]
        return 0.5 * np.sum(s + m**2 - 1.0 - np.log(s))

    before_kl = kl_to_prior() if model_class is BayesianSVIGPLVM else None
    others = np.arange(12) != row
    before_others = model.latent.mean.numpy()[others].copy()
    history = fit(
        model, Y, mask=mask, iterations=150, batch_size=12, learning_rate=0.02, progress=False
    )
    assert np.all(np.isfinite(history.elbo))
    after = model.latent.mean.numpy()
    assert not np.allclose(after[others], before_others)  # training did move the other rows
    if model_class is PointGPLVM:
        # No observed entry and no prior: zero gradient, so Adam never moves it.
        np.testing.assert_array_equal(after[row], start)
    else:
        variance = model.latent.variance.numpy()[row]
        assert np.all(np.abs(after[row]) < 0.5 * np.abs(start)), after[row]
        assert np.all(np.abs(variance - 1.0) < 0.5 * abs(0.1 - 1.0)), variance
        assert kl_to_prior() < 0.25 * before_kl


@pytest.mark.parametrize("latent_init", ["pca", "random"])
def test_a_fully_missing_column_warns_and_its_loss_and_gradients_stay_finite(latent_init):
    Y = complete_data("gaussian", seed=5)
    mask = np.ones(Y.shape, dtype=bool)
    mask[:, 2] = False
    with expect_user_warnings(MISSING_NOTICE, EMPTY_COLUMN, empty_column=True):
        model = BayesianSVIGPLVM(Y, Q, M, mask=mask, latent_init=latent_init)
    assert np.all(np.isfinite(model.latent_mean().numpy()))
    assert np.all(np.isfinite(model.mean_function.c.numpy()))
    loss, gradients = eager_loss_and_gradients(model, np.arange(N), np.where(mask, Y, np.nan))
    assert np.isfinite(loss) and all(np.all(np.isfinite(g)) for g in gradients)


# --------------------------------------------------------------------------------------------
# 5. The amortised encoder
# --------------------------------------------------------------------------------------------


def encoder_batch(num_rows: int = 500, seed: int = 8):
    rng = np.random.default_rng(seed)
    Y = rng.standard_normal((num_rows, D))
    missing = rng.random(Y.shape) < 0.3
    missing[0] = True  # a fully missing row
    missing[1, :2] = True
    return np.where(missing, np.nan, Y), missing


def fixed_noise(num_rows: int, num_samples: int = 3) -> tf.Tensor:
    return tf.random.stateless_normal(
        [num_samples, num_rows, Q], seed=[1, 2], dtype=default_float()
    )


def test_encoder_is_nan_safe():
    Y_nan, missing = encoder_batch(num_rows=40)
    Y_t = tf.constant(Y_nan)
    idx = tf.range(40, dtype=tf.int64)
    for options in (
        dict(),
        dict(missing_aware=True, hide_fraction=0.2),
        dict(covariance="dense", missing_aware=True),
        dict(set_size=6, hide_fraction=0.2),
    ):
        encoder = EncoderLatent(D, Q, **options)
        mean, variance = encoder.moments(idx, Y_t)
        assert np.all(np.isfinite(mean.numpy())) and np.all(variance.numpy() > 0), options
        for training in (False, True):
            with tf.GradientTape() as tape:
                batch = encoder(idx, Y_t, 3, training=training)
                objective = tf.reduce_sum(batch.row_term) + tf.reduce_sum(batch.samples)
            for part in batch:
                assert np.all(np.isfinite(part.numpy())), (options, training)
            gradients = tape.gradient(objective, encoder.trainable_variables)
            assert len(gradients) == len(encoder.trainable_variables) > 0
            for g in gradients:
                assert np.all(np.isfinite(dense(g))), (options, training)


def test_missing_aware_encoder_input_is_values_and_observation_pattern():
    Y_nan, missing = encoder_batch()
    Y_t = tf.constant(Y_nan)
    encoder = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.2)
    inputs = encoder.encoder_input(Y_t, training=False).numpy()
    assert inputs.shape == (len(Y_nan), 2 * D)
    np.testing.assert_array_equal(inputs[:, D:], (~missing).astype(float))
    np.testing.assert_array_equal(inputs[:, :D], np.where(missing, 0.0, Y_nan))

    # training=True hides a random ~20% of the *observed* inputs, differently on each call.
    encoder.generator.reset_from_seed(0)
    first = encoder.encoder_input(Y_t, training=True).numpy()
    second = encoder.encoder_input(Y_t, training=True).numpy()
    for hidden_inputs in (first, second):
        shown = hidden_inputs[:, D:] == 1.0
        assert not np.any(shown & missing)  # a gap is never shown as observed
        np.testing.assert_array_equal(hidden_inputs[:, :D], np.where(shown, Y_nan, 0.0))
        hidden_share = 1.0 - shown[~missing].mean()
        assert abs(hidden_share - 0.2) < 0.04, hidden_share
    assert not np.array_equal(first, second)

    # Without hiding, training changes nothing; without the mask, input is [B, D].
    no_hiding = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.0)
    np.testing.assert_array_equal(no_hiding.encoder_input(Y_t, training=True).numpy(), inputs)
    plain = EncoderLatent(D, Q, missing_aware=False)
    np.testing.assert_array_equal(plain.encoder_input(Y_t, training=True).numpy(), inputs[:, :D])


def test_only_the_missing_aware_encoder_tells_a_gap_from_a_zero():
    Y_nan, missing = encoder_batch(num_rows=20)
    Y_zero = np.where(missing, 0.0, Y_nan)
    idx = tf.range(20, dtype=tf.int64)
    plain = EncoderLatent(D, Q, missing_aware=False)
    aware = EncoderLatent(D, Q, missing_aware=True)
    for a, b in zip(
        plain.moments(idx, tf.constant(Y_nan)), plain.moments(idx, tf.constant(Y_zero))
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    mean_nan = aware.moments(idx, tf.constant(Y_nan))[0].numpy()
    mean_zero = aware.moments(idx, tf.constant(Y_zero))[0].numpy()
    rows_with_gaps = missing.any(axis=1)
    assert np.all(np.any(mean_nan[rows_with_gaps] != mean_zero[rows_with_gaps], axis=1))
    np.testing.assert_array_equal(mean_nan[~rows_with_gaps], mean_zero[~rows_with_gaps])


def test_set_encoder_pools_observed_pairs_as_a_brute_force_mean_does():
    Y_nan, missing = encoder_batch(num_rows=25)
    encoder = EncoderLatent(D, Q, set_size=5, activation="tanh")
    assert encoder.missing_aware  # by construction
    pooling = encoder.set_network
    w, c = pooling.value_weight.numpy(), pooling.column_embedding.numpy()
    expected = np.zeros((len(Y_nan), 6))
    for n, row in enumerate(Y_nan):
        observed = np.flatnonzero(~np.isnan(row))
        features = [np.tanh(row[d] * w + c[d]) for d in observed]
        expected[n, :5] = np.mean(features, axis=0) if len(observed) else 0.0
        expected[n, 5] = len(observed) / D
    inputs = encoder.encoder_input(tf.constant(Y_nan)).numpy()
    np.testing.assert_allclose(inputs, expected, rtol=1e-12, atol=1e-14)
    assert np.all(inputs[0] == 0.0)  # the fully missing row

    # A function of the set of (value, column) pairs: permuting the columns together with their
    # embeddings changes nothing, and neither does what lies behind a gap.
    permutation = np.random.default_rng(3).permutation(D)
    values = tf.constant(np.where(missing, 0.0, Y_nan)[:, permutation])
    observed = tf.constant(~missing[:, permutation])
    pooling.column_embedding.assign(c[permutation])
    np.testing.assert_allclose(pooling(values, observed).numpy(), expected, rtol=1e-12)
    junk = tf.where(observed, values, 1e6 * tf.ones_like(values))
    np.testing.assert_allclose(pooling(junk, observed).numpy(), expected, rtol=1e-12)


@likelihood_kinds
def test_amortised_model_with_a_set_encoder_ignores_hidden_values(kind):
    Y = complete_data(kind, seed=4)
    model = make_model(AmortisedBayesianGPLVM, kind, Y, seed=4, set_size=4)
    assert model.latent.set_network is not None
    mask = explicit_mask()
    rows = np.array([2, 7, 0, 5, 9, 3, 8])
    reference = eager_loss_and_gradients(model, rows, np.where(mask, Y, np.nan)[rows])
    for junk in JUNK:
        checked = check_observations(np.where(mask, Y, junk), mask=mask)
        assert_same(eager_loss_and_gradients(model, rows, checked[rows]), reference, what=junk)
    names = {v.name.split(":")[0] for v in model.trainable_variables}
    assert {"value_weight", "column_embedding"} <= names


@pytest.mark.parametrize("set_size", [None, 4])
def test_the_encoder_hides_inputs_by_default_only_when_the_data_has_gaps(set_size):
    Y_nan, _ = encoder_batch(num_rows=30)
    Y_complete = np.nan_to_num(Y_nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the notices about gaps and an empty row
        gappy = AmortisedBayesianGPLVM(Y_nan, Q, num_inducing=4, set_size=set_size)
    complete = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, set_size=set_size)
    assert gappy.latent.hide_fraction == 0.2 and complete.latent.hide_fraction == 0.0
    mask = np.ones(Y_complete.shape, bool)
    mask[3, 1] = False  # an explicit mask counts as gaps too
    masked = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, mask=mask, set_size=set_size)
    assert masked.latent.hide_fraction == 0.2
    paper = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, missing_aware=False)
    assert paper.latent.hide_fraction == 0.0
    asked = AmortisedBayesianGPLVM(Y_complete, Q, num_inducing=4, hide_fraction=0.1)
    assert asked.latent.hide_fraction == 0.1


@pytest.mark.parametrize("set_size", [0, -3, 2.5])
def test_set_size_is_checked(set_size):
    with pytest.raises(ValueError, match="set_size must be a positive integer"):
        EncoderLatent(D, Q, set_size=set_size)


def test_encoder_hides_inputs_only_when_training():
    Y_nan, _ = encoder_batch(num_rows=30)
    Y_t = tf.constant(Y_nan)
    idx = tf.range(30, dtype=tf.int64)
    noise = fixed_noise(30)
    encoder = EncoderLatent(D, Q, missing_aware=True, hide_fraction=0.3)

    moments = [encoder.moments(idx, Y_t) for _ in range(3)]
    for mean, variance in moments[1:]:
        np.testing.assert_array_equal(mean.numpy(), moments[0][0].numpy())
        np.testing.assert_array_equal(variance.numpy(), moments[0][1].numpy())

    evaluation = [encoder(idx, Y_t, 3, noise, training=False) for _ in range(2)]
    for a, b in zip(*evaluation):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(evaluation[0].mean.numpy(), moments[0][0].numpy())
    np.testing.assert_array_equal(evaluation[0].variance.numpy(), moments[0][1].numpy())

    training = [encoder(idx, Y_t, 3, noise, training=True) for _ in range(2)]
    assert not np.array_equal(training[0].mean.numpy(), training[1].mean.numpy())
    assert not np.array_equal(training[0].samples.numpy(), training[1].samples.numpy())
    assert not np.array_equal(training[0].mean.numpy(), evaluation[0].mean.numpy())

    # The same through a model: training=False makes the bound deterministic given the noise.
    Y_model = complete_data("gaussian", seed=9)
    model = make_model(AmortisedBayesianGPLVM, "gaussian", Y_model, hide_fraction=0.3)
    assert model.latent.missing_aware and model.latent.hide_fraction > 0
    model.latent.noise = lambda idx, num_samples: fixed_noise(N, num_samples)
    data = (tf.range(N, dtype=tf.int64), tf.constant(np.where(Y_model > 1.0, np.nan, Y_model)))
    assert model.elbo(data, training=False).numpy() == model.elbo(data, training=False).numpy()
    assert model.elbo(data, training=True).numpy() != model.elbo(data, training=True).numpy()


def test_fitting_gaps_into_a_model_built_on_complete_data_is_a_clear_error():
    Y = np.random.default_rng(0).standard_normal((12, 4))
    model = PointGPLVM(Y, 2, 3)
    mask = np.ones(Y.shape, bool)
    mask[1, 2] = False
    with pytest.raises(ValueError, match="built on complete data"):
        fit(model, Y, mask=mask, iterations=5, batch_size=12, progress=False)


def test_amortised_encoder_reads_standardised_columns():
    # Column means and scales come from the observed training entries, so the encoder's inputs
    # are ~N(0, 1) per column whatever the data's units: an affine change of units leaves the
    # initial q(x) of every row unchanged (raw counts in the thousands would saturate tanh).
    Y_nan, missing = encoder_batch(num_rows=40)
    shift, scale = np.linspace(-3e3, 4e3, D), np.linspace(10.0, 900.0, D)
    datasets = [Y_nan, shift + scale * Y_nan]
    models = [AmortisedBayesianGPLVM(Y, Q, num_inducing=5, hide_fraction=0.0) for Y in datasets]
    inputs = models[1].latent.encoder_input(tf.constant(datasets[1])).numpy()[:, :D]
    observed_inputs = np.where(missing, np.nan, inputs)
    np.testing.assert_allclose(np.nanmean(observed_inputs, axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(np.nanstd(observed_inputs, axis=0), 1.0, rtol=1e-12)
    np.testing.assert_array_equal(inputs[missing], 0.0)
    moments = (
        [m.latent_mean(Y) for m, Y in zip(models, datasets)],
        [m.latent_variance(Y) for m, Y in zip(models, datasets)],
    )
    for original, rescaled in moments:
        np.testing.assert_allclose(rescaled, original, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(
    "location, scale", [(np.zeros(D - 1), np.ones(D)), (np.zeros(D), np.zeros(D))]
)
def test_encoder_input_standardisation_is_checked(location, scale):
    with pytest.raises(ValueError, match="input_"):
        EncoderLatent(D, Q, input_location=location, input_scale=scale)
