"""Training: sparse latent gradients, one trace per fit, recovery of known structure, GPflow
interoperability, the non-finite guard, callbacks and seeding.

Sizes are tiny on purpose (each ``tf.function`` trace costs seconds on a 2-core CPU); the
recovery tests use N=150 points from a GPLVM with three well-separated 2-D clusters.
"""

from __future__ import annotations

import copy
import gc
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.config import default_float
from gpflow.keras import tf_keras
from scipy.stats import norm
from sklearn.model_selection import LeaveOneOut, cross_val_score
from sklearn.neighbors import KNeighborsClassifier

import gpflow_svi_gplvm as sg
from gpflow_svi_gplvm.latents import PointLatent
from gpflow_svi_gplvm.training.batches import make_dataset

N_SMALL, D_SMALL, Q, M_SMALL = 30, 4, 2, 5
BATCH = 7  # does not divide N_SMALL: batches straddle epoch boundaries
PER_ROW_MODELS = [sg.PointGPLVM, sg.MAPGPLVM, sg.BayesianSVIGPLVM]
ALL_MODELS = [*PER_ROW_MODELS, sg.AmortisedBayesianGPLVM]


@pytest.fixture(scope="module")
def small_Y() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((N_SMALL, D_SMALL))


def batch_of(Y: np.ndarray, rows) -> tuple[tf.Tensor, tf.Tensor]:
    idx = tf.constant(rows, dtype=tf.int64)
    return idx, tf.gather(tf.constant(Y), idx)


def fix_noise(model: sg.SVIGPLVM, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace the latent module's eps ~ N(0, I) by a stateless draw: same in eager and graph."""
    latent_dim = model.latent.latent_dim

    def noise(idx, num_samples):
        shape = tf.stack([num_samples, tf.shape(idx)[0], latent_dim])
        return tf.random.stateless_normal(shape, seed=[7, 11], dtype=default_float())

    monkeypatch.setattr(model.latent, "noise", noise)


def values(variables) -> list[np.ndarray]:
    return [v.numpy().copy() for v in variables]


# --------------------------------------------------------------------------------------------
# a. Sparse gradients of the per-row latent tables
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("model_class", PER_ROW_MODELS, ids=lambda c: c.__name__)
def test_latent_gradients_touch_only_batch_rows(model_class, small_Y):
    model = model_class(small_Y, Q, M_SMALL)
    # At initialisation (q_mu = 0, q_sqrt = I, whitened) f does not depend on x at all, so the
    # point latent's gradient would be zero everywhere: move q(u) away from the prior first.
    model.q_mu.assign(np.random.default_rng(1).standard_normal(model.q_mu.shape))
    rows = [17, 3, 0, 29, 8, 11]  # unsorted, includes the first and last row
    tables = [model.latent.mean]
    if model_class is sg.BayesianSVIGPLVM:
        tables.append(model.latent.variance)  # the softplus-transformed table
        assert model.latent.variance.transform is not None
    raw = [table.unconstrained_variable for table in tables]

    with tf.GradientTape() as tape:
        loss = model.training_loss(batch_of(small_Y, rows))
    gradients = tape.gradient(loss, raw)

    assert len(gradients) == (2 if model_class is sg.BayesianSVIGPLVM else 1)
    for table, gradient in zip(tables, gradients):
        assert isinstance(gradient, tf.IndexedSlices), (table.name, type(gradient))
        assert sorted(gradient.indices.numpy().tolist()) == sorted(rows), table.name
        assert gradient.values.shape == (len(rows), Q)
        dense = tf.convert_to_tensor(gradient).numpy()
        assert dense.shape == (N_SMALL, Q)
        others = np.setdiff1d(np.arange(N_SMALL), rows)
        np.testing.assert_array_equal(dense[others], 0.0)
        assert np.all(np.abs(dense[rows]).sum(axis=1) > 0), f"{table.name}: a batch row got 0"


# --------------------------------------------------------------------------------------------
# b. One trace per fit; eager and compiled losses agree
# --------------------------------------------------------------------------------------------


def test_compiled_step_traces_once_over_a_whole_fit(small_Y, exchanges):
    model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)
    trainer = sg.Trainer(model, small_Y, batch_size=BATCH, seed=1)
    assert N_SMALL % BATCH != 0

    history = trainer.train(23, steps_per_call=5, progress=False)  # calls of 5, 5, 5, 5, 3
    assert exchanges[-1] == "finish"
    assert history.elbo.shape == (23,)
    assert np.all(np.isfinite(history.elbo))
    assert history.tracing_count == 1
    assert trainer.steps.loop_tracing_count == 1

    first = history.elbo.copy()
    history = trainer.train(9, steps_per_call=4, progress=False)  # a second run: 4, 4, 1
    assert trainer.num_steps == 32  # more than one epoch: batches wrapped around
    # Trainer.train returns the history of every step taken so far.
    assert history.elbo.shape == (32,)
    np.testing.assert_array_equal(history.elbo[:23], first)
    assert np.all(np.isfinite(history.elbo))
    assert history.tracing_count == 1
    assert trainer.steps.step.experimental_get_tracing_count() == 1
    assert trainer.steps.loop_tracing_count == 1


def test_a_closed_trainer_frees_its_optimisers_state_without_a_garbage_collection(small_Y):
    import gc
    import weakref

    model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)
    gc.disable()  # what frees the state must be the close, not a collection
    try:
        with sg.Trainer(model, small_Y, batch_size=BATCH) as trainer:
            trainer.train(3, progress=False)
            freed = [weakref.ref(trainer), weakref.ref(trainer.steps.optimizer)]
        del trainer
        assert all(ref() is None for ref in freed)
    finally:
        gc.enable()


@pytest.mark.parametrize("model_class", PER_ROW_MODELS, ids=lambda c: c.__name__)
def test_eager_and_compiled_losses_agree(model_class, small_Y, monkeypatch):
    kwargs = {"num_samples": 3} if model_class is sg.BayesianSVIGPLVM else {}
    model = model_class(small_Y, Q, M_SMALL, **kwargs)
    if model_class is sg.BayesianSVIGPLVM:
        fix_noise(model, monkeypatch)
    batch = batch_of(small_Y, [4, 9, 1, 28, 13, 22, 6])
    eager = model.training_loss(batch).numpy()

    trainer = sg.Trainer(model, small_Y, batch_size=BATCH)
    before = values(trainer.steps.variables)
    idx, _ = batch
    # The step gathers these rows (one replica's positions); the loss is from before the update.
    compiled = trainer.steps.step(idx[None]).numpy()

    np.testing.assert_allclose(compiled, eager, rtol=1e-10)
    changed = [not np.array_equal(a, v.numpy()) for a, v in zip(before, trainer.steps.variables)]
    assert any(changed), "the compiled step applied no update"
    if model_class is sg.BayesianSVIGPLVM:
        # The comparison is not vacuous: a different eps gives a different loss.
        monkeypatch.undo()
        assert not np.isclose(model.training_loss(batch).numpy(), eager, rtol=1e-6)


# --------------------------------------------------------------------------------------------
# c. Recovery of known structure
# --------------------------------------------------------------------------------------------


def clustered_gplvm_data(seed: int = 0, per_cluster: int = 50, data_dim: int = 8):
    """Three well-separated 2-D clusters mapped through random smooth functions, small noise."""
    rng = np.random.default_rng(seed)
    angles = np.array([0.0, 2.0, 4.0]) * np.pi / 3
    centres = 2.5 * np.stack([np.cos(angles), np.sin(angles)], axis=1)
    labels = np.repeat(np.arange(3), per_cluster)
    X = centres[labels] + 0.35 * rng.standard_normal((3 * per_cluster, 2))
    frequencies = rng.standard_normal((2, 6)) / 1.5
    phases = rng.uniform(0, 2 * np.pi, 6)
    weights = rng.standard_normal((6, data_dim)) / np.sqrt(6)
    F = np.cos(X @ frequencies + phases) @ weights + 0.3 * X @ rng.standard_normal((2, data_dim))
    Y = F + 0.05 * rng.standard_normal(F.shape)
    standardised = (Y - Y.mean(0)) / Y.std(0)
    counts = rng.poisson(np.exp(0.8 * standardised + 0.5)).astype(float)
    binary = (rng.uniform(size=Y.shape) < norm.cdf(2.0 * standardised)).astype(float)
    return {"labels": labels, "gaussian": Y, "poisson": counts, "bernoulli": binary}


@pytest.fixture(scope="module")
def clustered():
    return clustered_gplvm_data()


def knn_accuracy(latents: np.ndarray, labels: np.ndarray) -> float:
    """Leave-one-out accuracy of a 5-nearest-neighbour classifier of the true labels."""
    classifier = KNeighborsClassifier(n_neighbors=5)
    return float(cross_val_score(classifier, latents, labels, cv=LeaveOneOut()).mean())


def assert_elbo_rises(elbo: np.ndarray) -> None:
    assert np.all(np.isfinite(elbo))
    tenth = max(1, len(elbo) // 10)
    first, last = elbo[:tenth], elbo[-tenth:]
    # Clearly above: by more than three times the minibatch noise at the end of training.
    assert last.mean() - first.mean() > 3 * last.std(), (first.mean(), last.mean(), last.std())


def train_on(model_class, Y, likelihood=None, iterations=1000):
    model = model_class(Y, Q, 20, likelihood=likelihood, latent_init="random")
    before = model.latent_mean(Y).numpy()
    history = sg.fit(
        model, Y, iterations, batch_size=50, learning_rate=0.02, progress=False, steps_per_call=500
    )
    return model, before, history


@pytest.mark.slow  # four fits of 1000 steps: ~15-30 s in all on 2 idle cores, more under load
@pytest.mark.parametrize("model_class", ALL_MODELS, ids=lambda c: c.__name__)
def test_recovers_clusters_of_a_known_gplvm(model_class, clustered):
    Y, labels = clustered["gaussian"], clustered["labels"]
    assert knn_accuracy(Y, labels) > 0.95  # the structure is there to find
    model, before, history = train_on(model_class, Y)

    assert history.tracing_count == 1
    assert_elbo_rises(history.elbo)
    if not model.latent.amortised:
        # Random initial latents carry no structure, so the learned structure is the model's.
        assert knn_accuracy(before, labels) < 0.5
    after = model.latent_mean(Y).numpy()
    assert np.all(np.isfinite(after))
    accuracy = knn_accuracy(after, labels)
    assert accuracy > 0.8, f"kNN accuracy {accuracy:.2f} (chance 1/3)"


@pytest.mark.slow  # eight fits of 600 steps
@pytest.mark.parametrize("model_class", ALL_MODELS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    "kind, likelihood_class",
    [("poisson", gpflow.likelihoods.Poisson), ("bernoulli", gpflow.likelihoods.Bernoulli)],
    ids=["Poisson", "Bernoulli"],
)
def test_count_and_binary_likelihoods_train(model_class, kind, likelihood_class, clustered):
    Y, labels = clustered[kind], clustered["labels"]
    model, before, history = train_on(model_class, Y, likelihood_class(), iterations=600)

    assert isinstance(model.likelihood, likelihood_class)
    assert_elbo_rises(history.elbo)
    after = model.latent_mean(Y).numpy()
    assert np.all(np.isfinite(after))
    # Less informative data than the Gaussian case, but still well above chance (1/3).
    assert knn_accuracy(after, labels) > 0.6


def test_latent_relevance_is_the_spread_of_the_means_in_lengthscales(small_Y):
    model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)
    model.kernel.lengthscales.assign([0.5, 4.0])
    means = model.latent_mean().numpy()
    np.testing.assert_allclose(model.latent_relevance(), means.std(axis=0) / [0.5, 4.0])

    # Scaling a latent dimension and its lengthscale together changes 1/l but not the relevance.
    before = model.latent_relevance()
    model.latent.mean.assign(means * [3.0, 1.0])
    model.kernel.lengthscales.assign([1.5, 4.0])
    np.testing.assert_allclose(model.latent_relevance(), before)
    np.testing.assert_allclose(model.ard_relevance(), [1 / 1.5, 1 / 4.0])


# --------------------------------------------------------------------------------------------
# d. GPflow interoperability
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "model_class, expected",
    [
        (sg.PointGPLVM, ["latent.mean"]),
        (sg.BayesianSVIGPLVM, ["latent.mean", "latent.variance"]),
        (sg.AmortisedBayesianGPLVM, ["latent.mean_network.weights[0]", "latent.factor_network"]),
    ],
    ids=["Point", "BayesianSVI", "Amortised"],
)
def test_print_summary_lists_latent_parameters(model_class, expected, small_Y, capsys):
    model = model_class(small_Y, Q, M_SMALL)
    gpflow.utilities.print_summary(model)
    table = capsys.readouterr().out
    for name in [*expected, "kernel.lengthscales", "likelihood.variance", "q_mu", "q_sqrt"]:
        assert f"{model_class.__name__}.{name}" in table, name
    parameters = gpflow.utilities.parameter_dict(model)
    assert ".latent.mean" in parameters or ".latent.mean_network.weights[0]" in parameters


def test_set_trainable_freezes_the_kernel_and_fit_on_a_dataset_still_works(small_Y):
    model = sg.PointGPLVM(small_Y, Q, M_SMALL)
    count = len(model.trainable_variables)
    gpflow.set_trainable(model.kernel, False)

    trainable = {v.ref() for v in model.trainable_variables}
    kernel_variables = [p.unconstrained_variable for p in model.kernel.parameters]
    assert len(kernel_variables) == 2
    assert not trainable & {v.ref() for v in kernel_variables}
    assert len(model.trainable_variables) == count - 2

    kernel_before = values(kernel_variables)
    latent_before = model.latent.mean.numpy().copy()
    rows = tf.data.Dataset.from_tensor_slices((tf.range(N_SMALL, dtype=tf.int64), small_Y))
    dataset = rows.shuffle(N_SMALL, seed=0).repeat().batch(BATCH, drop_remainder=True)
    history = sg.fit(model, dataset, iterations=20, steps_per_call=6, progress=False)

    assert history.tracing_count == 1 and np.all(np.isfinite(history.elbo))
    for before, variable in zip(kernel_before, kernel_variables):
        np.testing.assert_array_equal(variable.numpy(), before)
    assert not np.array_equal(model.latent.mean.numpy(), latent_before)


def test_deepcopy_gives_an_independent_equal_model(small_Y):
    model = sg.PointGPLVM(small_Y, Q, M_SMALL)
    sg.fit(model, small_Y, iterations=5, batch_size=BATCH, progress=False)  # after real use
    batch = batch_of(small_Y, [2, 5, 8, 20])

    clone = copy.deepcopy(model)
    assert clone is not model and clone.latent is not model.latent
    np.testing.assert_array_equal(clone.elbo(batch).numpy(), model.elbo(batch).numpy())

    original = model.elbo(batch).numpy()
    clone.latent.mean.assign(np.zeros((N_SMALL, Q)))
    clone.kernel.variance.assign(3.0)
    np.testing.assert_array_equal(model.elbo(batch).numpy(), original)
    assert clone.elbo(batch).numpy() != original
    assert model.kernel.variance.numpy() != 3.0


def test_scipy_lowers_the_full_batch_loss_of_a_point_gplvm(small_Y):
    model = sg.PointGPLVM(small_Y, Q, M_SMALL)
    data = (tf.range(N_SMALL, dtype=tf.int64), tf.constant(small_Y))
    closure = model.training_loss_closure(data)
    start = closure().numpy()

    result = gpflow.optimizers.Scipy().minimize(
        closure, model.trainable_variables, options=dict(maxiter=20)
    )

    assert result.nit > 0
    end = closure().numpy()
    assert np.isfinite(end) and end < start - 1.0, (start, end)


def test_natural_gradient_steps_on_q_u_lower_the_loss(small_Y, monkeypatch):
    model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)  # Gaussian likelihood by default
    assert isinstance(model.likelihood, gpflow.likelihoods.Gaussian)
    fix_noise(model, monkeypatch)  # a deterministic loss, so each step can be judged
    gpflow.set_trainable(model.q_mu, False)
    gpflow.set_trainable(model.q_sqrt, False)
    trainable = {v.ref() for v in model.trainable_variables}
    assert model.q_mu.unconstrained_variable.ref() not in trainable

    data = (tf.range(N_SMALL, dtype=tf.int64), tf.constant(small_Y))
    loss = model.training_loss_closure(data, compile=False)
    natgrad = gpflow.optimizers.NaturalGradient(gamma=0.1)
    adam = tf_keras.optimizers.Adam(0.01)

    losses = [loss().numpy()]
    for _ in range(4):
        natgrad.minimize(loss, [(model.q_mu, model.q_sqrt)])
        losses.append(loss().numpy())
    assert np.all(np.diff(losses) < 0), losses

    q_mu = model.q_mu.numpy().copy()
    adam.minimize(loss, model.trainable_variables)  # the other parameters, q(u) held fixed
    np.testing.assert_array_equal(model.q_mu.numpy(), q_mu)
    natgrad.minimize(loss, [(model.q_mu, model.q_sqrt)])
    assert np.isfinite(loss().numpy()) and loss().numpy() < losses[0]


def test_training_loss_closure_over_a_dataset_iterator(small_Y):
    model = sg.PointGPLVM(small_Y, Q, M_SMALL)
    rows = tf.data.Dataset.from_tensor_slices((tf.range(N_SMALL, dtype=tf.int64), small_Y))
    dataset = rows.batch(10).repeat()
    closure = model.training_loss_closure(iter(dataset))

    # The closure consumes the batches in order: rows 0-9, 10-19, 20-29.
    for start in (0, 10, 20):
        expected = model.training_loss(batch_of(small_Y, range(start, start + 10)))
        np.testing.assert_allclose(closure().numpy(), expected.numpy(), rtol=1e-10)

    full = (tf.range(N_SMALL, dtype=tf.int64), tf.constant(small_Y))
    before = model.training_loss(full).numpy()
    adam = tf_keras.optimizers.Adam(0.05)
    for _ in range(15):
        adam.minimize(closure, model.trainable_variables)
    assert model.training_loss(full).numpy() < before


# --------------------------------------------------------------------------------------------
# e. The non-finite guard
# --------------------------------------------------------------------------------------------


class PoisonableLatent(PointLatent):
    """A point latent whose row term is NaN once ``poisoned`` is set (a failure on demand)."""

    def __init__(self, initial_mean):
        super().__init__(initial_mean)
        self.poisoned = tf.Variable(False, trainable=False)

    def row_term(self, x):
        nan = tf.constant(np.nan, dtype=x.dtype)
        return tf.where(self.poisoned, nan, tf.zeros_like(x[:, 0]))


class NaNGradientLatent(PointLatent):
    """A point latent whose loss stays finite but whose gradient is NaN once ``h`` is 0.

    row term sqrt(x0 - x0 + h) - sqrt(h): exactly 0, but d/dx0 = inf - inf = NaN at h = 0.
    """

    def __init__(self, initial_mean):
        super().__init__(initial_mean)
        self.h = tf.Variable(1.0, trainable=False, dtype=default_float())

    def row_term(self, x):
        return tf.sqrt(x[:, 0] - x[:, 0] + self.h) - tf.sqrt(self.h)


def _guarded_fit(model, Y, callback, callback_every: int):
    """40 steps, 4 a call, with ``callback`` (which breaks the model) every ``callback_every``."""
    settings = dict(batch_size=BATCH, steps_per_call=4, progress=False)
    return sg.fit(model, Y, 40, callback=callback, callback_every=callback_every, **settings)


def test_non_finite_loss_stops_fit_and_keeps_the_last_finite_parameters(small_Y):
    model = sg.SVIGPLVM(small_Y, Q, M_SMALL, latent=PoisonableLatent)
    snapshots = []

    def poison(step):
        snapshots.append(values(model.trainable_variables))
        model.latent.poisoned.assign(True)

    with pytest.raises(sg.NonFiniteLossError, match="jitter") as error:
        _guarded_fit(model, small_Y, poison, callback_every=10)

    assert "step 11" in str(error.value)
    elbo = error.value.history.elbo
    assert elbo.shape == (11,)
    assert np.all(np.isfinite(elbo[:10])) and np.isnan(elbo[10])
    assert len(snapshots) == 1
    for snapshot, variable in zip(snapshots[0], model.trainable_variables):
        assert np.all(np.isfinite(variable.numpy())), variable.name
        np.testing.assert_array_equal(variable.numpy(), snapshot)


def test_finite_loss_with_nan_gradients_leaves_parameters_finite(small_Y):
    model = sg.SVIGPLVM(small_Y, Q, M_SMALL, latent=NaNGradientLatent)

    def break_gradients(step):
        model.latent.h.assign(0.0)

    with pytest.raises(sg.NonFiniteLossError):
        _guarded_fit(model, small_Y, break_gradients, callback_every=8)
    for variable in model.trainable_variables:
        assert np.all(np.isfinite(variable.numpy())), variable.name


# --------------------------------------------------------------------------------------------
# f. Callbacks and seeds
# --------------------------------------------------------------------------------------------


def stochastic_bsvi(Y: np.ndarray) -> sg.BayesianSVIGPLVM:
    """B-SVI whose data term is drawn (Monte Carlo over q(x)), so that every step uses the seeded
    draws. Its steps repeat bit for bit; the closed form's repeat to round-off (README), since
    TensorFlow runs its independent operations concurrently."""
    return sg.BayesianSVIGPLVM(Y, Q, M_SMALL, latent_expectation="monte-carlo")


@pytest.fixture(scope="module")
def seeded_run(small_Y):
    """A B-SVI fit (stochastic latents) with a callback every 6 steps, 4 steps per call."""
    calls = []
    model = stochastic_bsvi(small_Y)
    history = sg.fit(
        model,
        small_Y,
        iterations=25,
        batch_size=BATCH,
        seed=3,
        steps_per_call=4,
        callback=calls.append,
        callback_every=6,
        progress=False,
    )
    return history, calls


def test_callback_is_called_every_k_steps(seeded_run):
    history, calls = seeded_run
    assert calls == [6, 12, 18, 24]
    assert history.elbo.shape == (25,)
    assert history.tracing_count == 1


def test_same_seed_gives_identical_elbo_histories(seeded_run, small_Y):
    reference, _ = seeded_run

    def run(seed):
        model = stochastic_bsvi(small_Y)
        # No callback and other chunking: the sequence of steps must not depend on either.
        return sg.fit(
            model,
            small_Y,
            iterations=25,
            batch_size=BATCH,
            seed=seed,
            steps_per_call=10,
            progress=False,
        ).elbo

    np.testing.assert_array_equal(run(3), reference.elbo)
    assert not np.allclose(run(4), reference.elbo)


def test_held_rows_train_exactly_like_a_dataset_of_the_rows(seeded_run, small_Y):
    """Given Y, the Trainer holds it once in a tensor and gathers each batch inside the step;
    fed make_dataset's (idx, Y) pairs of the same seed it takes the very same steps."""
    reference, _ = seeded_run
    model = stochastic_bsvi(small_Y)
    dataset = make_dataset(model, small_Y, BATCH, seed=3)
    trainer = sg.Trainer(model, dataset, seed=3)
    assert trainer.rows.shard is None
    # The same steps; the dense update of this small table runs on TensorFlow's thread pool, whose
    # split of the work can round the last bit differently from run to run.
    np.testing.assert_allclose(trainer.train(25, progress=False).elbo, reference.elbo, rtol=1e-12)


def test_the_package_s_batch_pipelines_run_untuned_and_a_user_s_as_given(small_Y):
    """tf.data's autotuning keeps a thread per iterator that only a garbage collection joins,
    seconds at a time on loaded cores; the package's pipelines (held rows, dense or sparse, and
    make_dataset's) have nothing to tune and start none. A user's own dataset keeps its options,
    and each pipeline still yields batches."""
    import scipy.sparse

    from gpflow_svi_gplvm.rows.sparse import SparseRows

    model = stochastic_bsvi(small_Y)
    csr = SparseRows.from_matrix(scipy.sparse.csr_matrix(small_Y))
    sparse = sg.RowShard(csr, np.arange(len(small_Y)), len(small_Y))
    for data in (small_Y, sparse, make_dataset(model, small_Y, 5)):
        batches = sg.Trainer(model, data, batch_size=BATCH).rows.batches()
        assert batches.options().autotune.enabled is False
        assert next(iter(batches)) is not None
    own = tf.data.Dataset.from_tensors((tf.range(3, dtype=tf.int64), tf.constant(small_Y[:3])))
    assert sg.Trainer(model, own.repeat()).rows.batches().options().autotune.enabled is not False


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="counts threads in /proc")
def test_a_fit_on_a_users_dataset_leaves_no_threads_behind(small_Y):
    """A user's dataset keeps tf.data's autotuning, a thread per iterator: the fit's end frees
    its iterator at once, not in a later garbage collection (which would join the threads,
    seconds at a time on loaded cores)."""
    model = stochastic_bsvi(small_Y)
    rows = (tf.range(len(small_Y), dtype=tf.int64), tf.constant(small_Y))
    own = tf.data.Dataset.from_tensor_slices(rows).repeat().batch(BATCH).prefetch(tf.data.AUTOTUNE)
    threads = []
    gc.disable()
    try:
        for _ in range(3):
            sg.fit(model, own, iterations=3, progress=False)
            threads.append(len(list(Path("/proc/self/task").iterdir())))
    finally:
        gc.enable()
    assert threads[2] == threads[1] == threads[0], threads


def test_the_held_rows_are_the_data_and_stay_out_of_the_model_and_checkpoints(small_Y, tmp_path):
    Y = small_Y.copy()
    Y[3, 1] = np.nan
    model = sg.PointGPLVM(Y, Q, M_SMALL)
    trainer = sg.Trainer(model, Y, batch_size=BATCH, checkpoint_dir=tmp_path)
    np.testing.assert_array_equal(trainer.rows.shard.Y.numpy(), Y)  # NaN where missing, bit for bit
    np.testing.assert_array_equal(trainer.rows.shard.rows, np.arange(len(Y)))
    assert "CPU" in trainer.rows.shard.Y.device
    trainer.save()
    stored = tf.train.list_variables(str(tmp_path))
    assert all(tuple(shape) != Y.shape for _, shape in stored), stored


def test_a_named_device_trains_like_the_default_placement(seeded_run, small_Y):
    """device="/CPU:0" on a machine whose only device is the CPU: the same steps, the same ELBOs
    (to the rounding of a thread pool's split of the work)."""
    reference, _ = seeded_run
    model = stochastic_bsvi(small_Y)
    options = dict(iterations=25, batch_size=BATCH, seed=3, steps_per_call=4, progress=False)
    history = sg.fit(model, small_Y, device="/CPU:0", **options)
    np.testing.assert_allclose(history.elbo, reference.elbo, rtol=1e-12)


@pytest.mark.parametrize("device", ["/GPU:99", "/CPU:7", "no such device", 0])
def test_a_device_this_process_lacks_is_refused_before_training(small_Y, device):
    model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)
    before = values(model.trainable_variables)
    with pytest.raises(ValueError, match="device.*this process has .*CPU:0"):
        sg.fit(model, small_Y, iterations=5, device=device, progress=False)
    for old, new in zip(before, values(model.trainable_variables)):
        np.testing.assert_array_equal(old, new)


def test_a_device_with_a_strategy_is_refused(small_Y):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        model = sg.BayesianSVIGPLVM(small_Y, Q, M_SMALL)
    with pytest.raises(ValueError, match="the strategy places the step on its own devices"):
        sg.Trainer(model, small_Y, strategy=strategy, device="/CPU:0")


def test_a_model_optimizer_or_strategy_that_is_not_one_is_refused_by_name():
    Y = np.random.default_rng(0).standard_normal((20, 3))
    model = sg.PointGPLVM(Y, 2, num_inducing=5)
    with pytest.raises(ValueError, match="optimizer must be a tf_keras optimizer"):
        sg.fit(model, Y, 2, optimizer="adam")
    with pytest.raises(ValueError, match="strategy must be a tf.distribute strategy"):
        sg.fit(model, Y, 2, strategy="mirrored")
    gpr = gpflow.models.GPR((Y[:, :1], Y[:, 1:2]), gpflow.kernels.SquaredExponential())
    with pytest.raises(ValueError, match="fit trains the GPLVMs of this package .* GPR"):
        sg.fit(gpr, Y, 2)


def test_fitting_gaps_into_a_model_built_on_complete_data_is_a_clear_error():
    Y = np.random.default_rng(0).standard_normal((12, 4))
    model = sg.PointGPLVM(Y, 2, 3)
    mask = np.ones(Y.shape, bool)
    mask[1, 2] = False
    with pytest.raises(ValueError, match="built on complete data"):
        sg.fit(model, Y, mask=mask, iterations=5, batch_size=12, progress=False)


@pytest.mark.parametrize(
    "elements",
    [
        lambda Y: tf.constant(Y),  # rows alone, no row numbers
        lambda Y: (tf.range(len(Y), dtype=tf.int64), tf.constant(Y[:, :2])),  # another D
        lambda Y: (tf.constant(Y[:, 0]), tf.constant(Y)),  # row numbers that are floats
    ],
)
def test_a_dataset_of_other_elements_is_refused_saying_what_they_are(small_Y, elements):
    model = sg.PointGPLVM(small_Y, 2, num_inducing=5)
    dataset = tf.data.Dataset.from_tensors(elements(small_Y)).repeat()
    with pytest.raises(ValueError, match=r"\(idx \[B\] int64 row numbers, Y \[B, D=4\]"):
        sg.Trainer(model, dataset)


def test_a_dataset_of_float32_rows_and_int32_row_numbers_trains_like_its_float64_twin(small_Y):
    """Widened exactly on the way in (a float32 batch met the float64 model in a raw TypeError)."""
    Y = small_Y.astype(np.float32)
    idx = np.arange(len(Y))[:BATCH]
    elbos = []
    for index_type, value_type in ((tf.int32, tf.float32), (tf.int64, tf.float64)):
        model = sg.PointGPLVM(small_Y, 2, num_inducing=5, seed=0)
        batch = (tf.constant(idx, index_type), tf.constant(Y[idx], value_type))
        dataset = tf.data.Dataset.from_tensors(batch).repeat()
        elbos.append(sg.fit(model, dataset, 3, progress=False).elbo)
    np.testing.assert_array_equal(elbos[0], elbos[1])
    assert np.all(np.isfinite(elbos[0]))


@pytest.mark.parametrize(
    "idx, bad, found",
    [
        ([0, 1, 99], None, r"row numbers outside 0\.\.\d+, the rows of the latent table"),
        ([0, 1, -1], None, r"row numbers outside 0\.\.\d+, the rows of the latent table"),
        ([0, 1, 2], np.inf, "infinite values"),
    ],
)
def test_a_dataset_batch_out_of_the_table_or_infinite_is_a_clear_error(small_Y, idx, bad, found):
    """Checked in the step: a raw gather error or a non-finite loss would not say which."""
    model = sg.PointGPLVM(small_Y, 2, num_inducing=5)
    Y = small_Y[:3].copy()
    if bad is not None:
        Y[1, 2] = bad
    dataset = tf.data.Dataset.from_tensors((tf.constant(idx, tf.int64), tf.constant(Y))).repeat()
    with pytest.raises(ValueError, match=f"A batch of the dataset holds {found}: give"):
        sg.fit(model, dataset, 2, progress=False)
