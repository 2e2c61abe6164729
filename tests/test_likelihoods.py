"""The likelihoods: ``base_likelihood`` reaches the likelihood of one entry; ``MaskedLikelihood``
makes a missing entry (NaN, or a False in an explicit mask) influence nothing.

1. Property test: for 200 random NaN patterns per (model, likelihood), including fully missing
   rows, fully missing columns and fully missing batches, the training loss and every gradient
   are finite (one compiled function per model, traced once).
2. The value hidden behind a missing entry changes neither the loss nor any gradient: at the
   boundary (``check_observations`` / ``fit`` with ``mask``), and inside ``MaskedLikelihood``,
   where the hidden value is ``fill_value`` and the latent function values behind a gap.
3. A fully missing row warns and its latent follows the prior; a fully missing column warns.
4. The registry (``likelihood_facts``) gives each reader the answer it had before it held them;
   a likelihood it does not name (StudentT) trains through the generic path.

Sizes are tiny (each ``tf.function`` trace costs seconds on a 2-core CPU); most checks run eagerly.
"""

from __future__ import annotations

import warnings
from types import SimpleNamespace

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import (
    EMPTY_COLUMN,
    EMPTY_ROW,
    JUNK,
    MISSING_NOTICE,
    TOL,
    D,
    M,
    N,
    Q,
    assert_same,
    complete_data,
    dense,
    eager_loss_and_gradients,
    expect_user_warnings,
    explicit_mask,
    likelihood_of,
    make_model,
)
from gpflow.config import default_float

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    NegativeBinomial,
    PointGPLVM,
    defaults,
    fit,
)
from gpflow_svi_gplvm.components.initialisation import initial_offset
from gpflow_svi_gplvm.likelihoods import (
    NAMED_LIKELIHOODS,
    MaskedLikelihood,
    base_likelihood,
    check_likelihood_support,
    expectation_derivatives,
    generic_facts,
    is_masked,
    likelihood_by_name,
    likelihood_facts,
    log_link,
    masked,
)
from gpflow_svi_gplvm.prediction.rates import inverse_link
from gpflow_svi_gplvm.training.step import _check_q_u_optimizer
from gpflow_svi_gplvm.validation import check_observations

ALL_MODELS = [PointGPLVM, MAPGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM]
LIKELIHOODS = ["gaussian", "poisson"]
model_classes = pytest.mark.parametrize("model_class", ALL_MODELS, ids=lambda c: c.__name__)
likelihood_kinds = pytest.mark.parametrize("kind", LIKELIHOODS)
NUM_PATTERNS = 200  # per (model, likelihood): 1200 patterns in all
# The property test's models: the MAP model is the point model plus a prior term that reads no
# data, so the point model's patterns already cover its path through the gaps.
PATTERN_MODELS = [PointGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM]

# Values that MaskedLikelihood puts behind a gap before any arithmetic (``fill_value``); the
# documented contract asks for values in the base likelihood's support.
FILL_VALUES = {"gaussian": (1e6, -3.7), "poisson": (7.0, 1e6), "bernoulli": (1.0,)}


def test_base_likelihood_unwraps_a_masked_likelihood_and_returns_others_as_they_are():
    gaussian = gpflow.likelihoods.Gaussian()
    assert base_likelihood(gaussian) is gaussian
    assert base_likelihood(MaskedLikelihood(gaussian)) is gaussian
    # Wrapping twice keeps one layer, so one unwrapping always reaches the entry's likelihood.
    assert base_likelihood(MaskedLikelihood(MaskedLikelihood(gaussian))) is gaussian


def test_masked_likelihood_refuses_a_likelihood_of_several_outputs():
    softmax = gpflow.likelihoods.Softmax(3)
    with pytest.raises(ValueError, match="wraps a gpflow ScalarLikelihood .* got Softmax"):
        MaskedLikelihood(softmax)


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
@pytest.mark.parametrize("model_class", PATTERN_MODELS, ids=lambda c: c.__name__)
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
    base = likelihood_of(kind)

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
# 3. Rows and columns with nothing observed
# --------------------------------------------------------------------------------------------


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
# The registry: what the package reads of each likelihood, as each reader decided it by
# isinstance before the registry held it (the rows are those readers' answers, which the same
# calls gave on the code before the registry, masked and bare alike).

OLD_ANSWERS = {
    # The data it refuses (non-counts, non-binary), log_link, rates.inverse_link, initial_offset
    # of column means, training's q(u) optimizer by default, the closed-form data term's noise
    # variance, the held-out likelihood's nodes per entry, the outputs with parameters of their own.
    "gaussian": (None, False, "identity", "means", "natgrad", 0.3, 1, None),
    "poisson": ("counts", True, "exp", "log means", "adam", None, 20, None),
    "poisson, bins of 2": ("counts", True, "exp", "log means / 2", "adam", None, 20, None),
    "poisson, square link": ("counts", False, None, "zeros", "adam", None, 20, None),
    "negative binomial": ("counts", True, "exp", "log means", "adam", None, 20, 3),
    "bernoulli": ("binary", False, None, "zeros", "adam", None, 20, None),
    "student-t": (None, False, None, "zeros", "adam", None, 20, None),
}
# Expectation derivatives in closed form; the others by automatic differentiation.
CLOSED_FORMS = ("gaussian", "poisson", "poisson, bins of 2", "negative binomial")
LIKELIHOOD_OF = {
    "gaussian": lambda: gpflow.likelihoods.Gaussian(variance=0.3),
    "poisson": gpflow.likelihoods.Poisson,
    "poisson, bins of 2": lambda: gpflow.likelihoods.Poisson(binsize=2.0),
    "poisson, square link": lambda: gpflow.likelihoods.Poisson(invlink=tf.square),
    "negative binomial": lambda: NegativeBinomial(num_outputs=3),
    "bernoulli": gpflow.likelihoods.Bernoulli,
    "student-t": gpflow.likelihoods.StudentT,
}


@pytest.mark.parametrize("wrapped", [False, True], ids=["bare", "masked"])
@pytest.mark.parametrize("name", OLD_ANSWERS)
def test_each_reader_gets_the_answer_it_had_before_the_registry(name, wrapped):
    support, log_linked, link, offset, q_u, noise, nodes, outputs = OLD_ANSWERS[name]
    base = LIKELIHOOD_OF[name]()
    likelihood = MaskedLikelihood(base) if wrapped else base
    once = masked(likelihood)
    assert is_masked(likelihood) == wrapped and once.base is base and masked(once) is once
    counts, binary = np.array([[0.0, 1.0, 3.0]]), np.array([[0.0, 1.0, np.nan]])
    for kind, Y in [("real", np.array([[0.5, -1.0, 2.0]])), ("counts", counts), ("binary", binary)]:
        refused = {None: False, "counts": kind == "real", "binary": kind != "binary"}[support]
        if refused:
            with pytest.raises(ValueError, match=f"A {type(base).__name__} likelihood needs"):
                check_likelihood_support(likelihood, Y)
        else:
            check_likelihood_support(likelihood, Y)
    assert log_link(likelihood) == log_linked
    if link is None:
        with pytest.raises(ValueError, match="Rates are read through a log link"):
            inverse_link(likelihood)
    else:
        assert inverse_link(likelihood) == link
    means = np.array([0.5, 2.0, 0.0])
    expected = {
        "means": means,
        "log means": np.log(np.maximum(means, 1e-3)),
        "log means / 2": np.log(np.maximum(means, 1e-3) / 2.0),
        "zeros": np.zeros(3),
    }[offset]
    np.testing.assert_allclose(initial_offset(likelihood, means), expected)
    assert _check_q_u_optimizer(SimpleNamespace(likelihood=likelihood), None) == q_u
    facts = likelihood_facts(likelihood)
    assert (facts.noise_variance is None) == (noise is None)
    if noise is not None:
        np.testing.assert_allclose(facts.noise_variance.numpy(), noise)
    assert facts.predictive_nodes == nodes and facts.outputs == outputs and facts.deterministic
    rng = np.random.default_rng(0)
    Y = tf.constant([[1.0, np.nan, 0.0], [0.0, 1.0, 1.0]], default_float())
    mean, variance = tf.constant(rng.normal(size=(2, 3))), tf.constant(rng.uniform(size=(2, 3)))
    for bare, wrapped_too in zip(
        expectation_derivatives(base, Y, mean, variance),
        expectation_derivatives(likelihood, Y, mean, variance),
    ):
        np.testing.assert_array_equal(bare.numpy(), wrapped_too.numpy())
    assert (facts.derivatives is not None) == (name in CLOSED_FORMS)


def test_a_monte_carlo_likelihood_is_not_deterministic_and_a_new_kind_can_be_registered():
    assert not likelihood_facts(gpflow.likelihoods.Softmax(3)).deterministic

    class Counts(gpflow.likelihoods.StudentT):
        """A likelihood of the user's own, registered as counts with a log link."""

    assert likelihood_facts(Counts()) == generic_facts(Counts())
    likelihood_facts.register(Counts)(
        lambda likelihood: generic_facts(likelihood)._replace(support="counts", inverse_link="exp")
    )
    assert log_link(MaskedLikelihood(Counts())) and likelihood_facts(Counts()).support == "counts"
    with pytest.raises(ValueError, match="A Counts likelihood needs non-negative integer"):
        check_likelihood_support(Counts(), np.array([[0.5]]))


def test_the_names_are_the_registry_s():
    assert tuple(sorted(NAMED_LIKELIHOODS)) == defaults.LIKELIHOOD_NAMES
    built = {name: likelihood_by_name(name, 3) for name in defaults.CELL_LIKELIHOOD_NAMES}
    counts = {
        name
        for name, likelihood in built.items()
        if likelihood is not None and likelihood_facts(likelihood).support == "counts"
    }
    assert counts == set(defaults.COUNT_LIKELIHOOD_NAMES)


def test_a_student_t_likelihood_trains_through_the_generic_path():
    """A GPflow likelihood the registry does not name: no support check, no log link, f
    starting at zero, Adam on q(u), derivatives by automatic differentiation."""
    Y = np.random.default_rng(0).standard_t(4.0, (24, 3))
    Y[0, 0] = np.nan
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        model = BayesianSVIGPLVM(Y, 1, 4, likelihood=gpflow.likelihoods.StudentT(), seed=0)
    assert likelihood_facts(model.likelihood) == generic_facts(model.likelihood.base)
    np.testing.assert_array_equal(model.mean_function.c.numpy(), np.zeros(3))
    history = fit(model, Y, iterations=20, batch_size=8, progress=False, seed=0)
    assert np.all(np.isfinite(history.elbo)) and history.elbo[-1] > history.elbo[0]
