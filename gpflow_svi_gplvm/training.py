"""Compiled minibatch training: shuffled row indices, rows gathered in the step, Adam, guards."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float
from gpflow.keras import tf_keras
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from .checkpoints import Checkpoints, TrainingData
from .likelihoods import MaskedLikelihood, base_likelihood
from .models import SVIGPLVM
from .natural_gradients import InducingNaturalGradient
from .optimizers import RowSparseAdam
from .validation import (
    ROWS_PER_BLOCK,
    check_integer,
    check_learning_rate,
    check_observations,
    row_blocks,
)

__all__ = ["fit", "Trainer", "History", "NonFiniteLossError", "make_dataset", "minibatch_indices"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; ``history`` holds the ELBO up to that step."""

    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history


@dataclass
class History:
    """What a training run returns."""

    elbo: np.ndarray
    """[iterations] the minibatch ELBO estimate at every step (noisy; smooth it to plot)."""
    seconds: float
    """Wall-clock time of the run, compilation included."""
    tracing_count: int
    """How often the compiled step was traced (1 for a healthy run)."""


def minibatch_indices(num_data: int, batch_size: int, seed: int = 0) -> tf.data.Dataset:
    r"""Endless shuffled minibatches of row indices ``idx`` [B] int64, B = min(batch_size, N).

    Each epoch is a fresh permutation of the N rows (stateless, from ``seed`` and the epoch
    number) cut into :math:`\lfloor N / B \rfloor` batches; the :math:`N \bmod B` rows at its
    end sit that epoch out. The pipeline costs a few operations per batch, not per row, its
    checkpointed state is an epoch number and a position, and batches have a fixed size, so a
    step taking them traces once.
    """
    batch_size = min(check_integer(batch_size, "batch_size"), num_data)
    num_batches = num_data // batch_size

    def epoch(number: tf.Tensor) -> tf.data.Dataset:
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_data, dtype=tf.int64), seed=tf.stack([tf.constant(seed, tf.int64), number])
        )
        batches = tf.reshape(order[: num_batches * batch_size], [num_batches, batch_size])
        return tf.data.Dataset.from_tensor_slices(batches)

    return tf.data.Dataset.counter().flat_map(epoch).prefetch(tf.data.AUTOTUNE)


def make_dataset(
    model: SVIGPLVM, Y: ArrayLike, batch_size: int, seed: int = 0, mask: ArrayLike | None = None
) -> tf.data.Dataset:
    """Endless shuffled minibatches ``(idx [B] int64, Y [B, D])`` of the training rows, in the
    order of :func:`minibatch_indices`; ``mask`` [N, D] (True = observed) turns hidden entries
    into NaN.

    The dataset holds Y as a constant (about twice its size resident, plus a copy while an
    iterator is built); :class:`Trainer` given Y itself holds it once, in a variable.
    """
    Y = _training_data(model, Y, mask)
    rows = tf.constant(Y)
    return minibatch_indices(Y.shape[0], batch_size, seed).map(
        lambda idx: (idx, tf.gather(rows, idx))
    )


def _training_data(model: SVIGPLVM, Y: ArrayLike, mask: ArrayLike | None) -> np.ndarray:
    """Y [N, D] checked against the model, with NaN where ``mask`` hides entries."""
    Y = check_observations(Y, "data", model.data_dim, mask)
    if Y.shape[0] != model.num_data:
        raise ValueError(
            f"data has {Y.shape[0]} rows but the model was built for N={model.num_data}: "
            "train on the rows the model was constructed with."
        )
    if np.isnan(Y).any() and not isinstance(model.likelihood, MaskedLikelihood):
        raise ValueError(
            "data has missing entries but the model was built on complete data, so its "
            "likelihood counts every entry. Build the model with the incomplete data (it then "
            "wraps its likelihood in MaskedLikelihood), or pass likelihood=MaskedLikelihood(...)."
        )
    return Y


def _data_variable(Y: np.ndarray) -> tf.Variable:
    """Y [N, D] in a non-trainable variable, filled in row blocks, so that besides Y itself it
    costs one copy and no temporary as large as Y (``tf.Variable(Y)`` briefly holds two)."""
    rows = tf.Variable(lambda: tf.zeros(Y.shape, Y.dtype), trainable=False, name="training_data")
    for start, block in zip(range(0, Y.shape[0], ROWS_PER_BLOCK), row_blocks(Y)):
        indices = tf.range(start, start + len(block), dtype=tf.int64)
        rows.scatter_update(tf.IndexedSlices(tf.constant(block), indices))
    return rows


class Trainer:
    """Holds a model, its optimiser and a data iterator, and runs compiled training steps.

    ``data`` is Y [N, D] (NaN = missing, or ``mask`` [N, D] with True = observed), held once in
    a non-trainable variable (``rows``) from which each step gathers its batch of shuffled row
    indices (:func:`minibatch_indices`), or a ``tf.data.Dataset`` of ``(idx [B] int64, Y [B, D])``.
    One compiled step with the iterator's ``element_spec`` as input signature (so it traces once),
    run ``k`` times inside one compiled loop per Python call to keep dispatch cost off each step.
    A step whose loss is not finite applies no update, so the model keeps its last good state.
    ``strategy``: train under a ``tf.distribute.Strategy`` (build the model in its scope).

    ``q_u_optimizer="natgrad"`` trains q(u) by natural-gradient steps of size ``natgrad_gamma``
    (:class:`~gpflow_svi_gplvm.natural_gradients.InducingNaturalGradient`) and everything else
    with Adam, from one gradient pass in the same compiled step; ``"adam"`` trains q(u) with the
    rest. The default (None) is "natgrad" for a Gaussian likelihood and "adam" otherwise. With
    a constant step size, the minibatch noise in q(u) grows with gamma: 0.03 (the default) gave
    a higher ELBO than Adam on q(u) at every mark from 500 to 3000 steps on MNIST (2000 images, 60%
    missing), where 0.1 fell behind Adam after 1000 steps (``benchmarks/convergence.py``).

    With ``checkpoint_dir``, a :class:`~gpflow_svi_gplvm.checkpoints.Checkpoints` folder keeps
    the model, the optimiser, the data iterator (with its shuffling state), the latent module's
    random generator and the step count every ``checkpoint_every`` steps and at the end of each
    :meth:`train`, beside the ELBO history; :meth:`restore` resumes exactly where the latest
    checkpoint left off.
    """

    def __init__(
        self,
        model: SVIGPLVM,
        data: ArrayLike | tf.data.Dataset,
        batch_size: int = 100,
        learning_rate: float = 1e-2,
        optimizer: tf_keras.optimizers.Optimizer | None = None,
        seed: int = 0,
        jit_compile: bool = False,
        mask: ArrayLike | None = None,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = 1000,
        max_to_keep: int = 3,
        strategy: tf.distribute.Strategy | None = None,
        allow_new_data: bool = False,
        q_u_optimizer: str | None = None,
        natgrad_gamma: float = 0.03,
    ) -> None:
        self.strategy = strategy or tf.distribute.get_strategy()
        if strategy is not None:
            _check_distributed(model, strategy, jit_compile)
        model.latent.generator.reset_from_seed(seed)
        self.model = model
        dataset, Y = self._dataset(data, mask, batch_size, seed)
        if strategy is not None:
            dataset = strategy.experimental_distribute_dataset(dataset)
        self.iterator = iter(dataset)
        self.q_u_optimizer = _check_q_u_optimizer(model, q_u_optimizer)
        self._build_optimizers(optimizer, learning_rate, natgrad_gamma)
        self.step = tf.function(
            self._step, input_signature=[self.iterator.element_spec], jit_compile=jit_compile
        )
        # The loop is an explicit tf.while_loop: nothing in it is left to AutoGraph.
        self.run = tf.function(
            self._run, input_signature=[tf.TensorSpec([], tf.int32)], autograph=False
        )
        self.step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_count")
        self.elbo: list[np.ndarray] = []
        self.checkpoints: Checkpoints | None = None
        if checkpoint_dir is not None:
            record = TrainingData({}) if Y is None else TrainingData.of(Y, batch_size)
            self.checkpoints = self._checkpoints(
                checkpoint_dir, record, checkpoint_every, max_to_keep, allow_new_data
            )

    def _dataset(
        self, data: ArrayLike | tf.data.Dataset, mask: ArrayLike | None, batch_size: int, seed: int
    ) -> tuple[tf.data.Dataset, np.ndarray | None]:
        """The dataset of steps and the checked Y [N, D], held in :attr:`rows` (under the
        strategy) for batches of row indices; a user's dataset as it is, with no Y."""
        self.rows: tf.Variable | None = None
        if isinstance(data, tf.data.Dataset):
            return data, None
        Y = _training_data(self.model, data, mask)
        with self.strategy.scope():
            self.rows = _data_variable(Y)
        return minibatch_indices(Y.shape[0], batch_size, seed), Y

    def _build_optimizers(
        self,
        optimizer: tf_keras.optimizers.Optimizer | None,
        learning_rate: float,
        natgrad_gamma: float,
    ) -> None:
        """Adam (or ``optimizer``) for :attr:`optimizer_variables` and, with natural gradients,
        an :class:`InducingNaturalGradient` for q(u); :attr:`variables` lists both, Adam's first."""
        self.natural_gradient: InducingNaturalGradient | None = None
        self.variables = list(self.model.trainable_variables)
        if self.q_u_optimizer == "natgrad":
            gamma = check_learning_rate(natgrad_gamma, "natgrad_gamma", "0.01 to 0.1", maximum=1.0)
            self.natural_gradient = InducingNaturalGradient(
                self.model.q_mu, self.model.q_sqrt, gamma
            )
            q_u = {v.ref() for v in self.natural_gradient.variables_to_train}
            # Adam's variables first, q(u)'s last: the tape differentiates all in one pass.
            self.variables = [v for v in self.variables if v.ref() not in q_u]
            self.variables += list(self.natural_gradient.variables_to_train)
        self.optimizer_variables = self.variables[: len(self.variables) - self._num_natural]
        self.optimizer: RowSparseAdam | tf_keras.optimizers.Optimizer
        with self.strategy.scope():
            if optimizer is None:
                # Moves only the batch's rows of per-row tables, so a step's cost does not grow
                # with N, and costs fewer operations per variable than tf_keras' Adam.
                self.optimizer = RowSparseAdam(
                    self.optimizer_variables, check_learning_rate(learning_rate)
                )
            else:
                self.optimizer = optimizer
                # Slots must exist before tracing, or their creation forces a second trace.
                self.optimizer.build(self.optimizer_variables)

    def _checkpoints(
        self,
        directory: str | Path,
        record: TrainingData,
        every: int,
        max_to_keep: int,
        allow_new_data: bool,
    ) -> Checkpoints:
        """The checkpoint folder of this run's model, optimiser, iterator, generator and steps."""
        # Adam's state lives under a key of its own per q_u_optimizer (its variables differ),
        # so a checkpoint of the other choice is refused, not restored into the wrong slots.
        optimizer_key = "optimizer" if self.natural_gradient is None else "optimizer_natgrad"
        objects = {
            "model": self.model,
            optimizer_key: self.optimizer,
            "iterator": self.iterator,
            "generator": self.model.latent.generator,
        }
        return Checkpoints(
            directory,
            objects,
            self.step_count,
            record,
            self.q_u_optimizer,
            every=every,
            max_to_keep=max_to_keep,
            allow_new_data=allow_new_data,
        )

    @property
    def _num_natural(self) -> int:
        """How many of :attr:`variables` (the last ones) take natural-gradient steps."""
        return 0 if self.natural_gradient is None else 2

    @property
    def num_steps(self) -> int:
        """Steps taken so far, restored ones included."""
        return int(self.step_count.numpy())

    def _replica_gradients(
        self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]
    ) -> tuple[tf.Tensor, list, tf.Tensor]:
        """One replica's loss, gradients and 1.0 where a gradient is not finite (0.0 else), from
        its row indices (gathered from :attr:`rows`) or its ``(idx, Y)``."""
        if self.rows is None:
            idx, Y = element
        else:
            idx, Y = element, tf.gather(self.rows, element)
        return self._gradients(idx, Y)

    @check_shapes("idx: [batch]", "Y: [batch, D]", "return[0]: []", "return[2]: []")
    def _gradients(self, idx: tf.Tensor, Y: tf.Tensor) -> tuple[tf.Tensor, list, tf.Tensor]:
        # Each replica's bound is scaled by N / (its batch); their mean is the global estimate,
        # and the optimiser sums the replicas' gradients.
        replicas = tf.cast(self.strategy.num_replicas_in_sync, default_float())
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(self.variables)
            loss = self.model.training_loss((idx, Y), training=True) / replicas
        gradients = tape.gradient(loss, self.variables)
        finite = [
            tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
            for g in gradients
            if g is not None
        ]
        not_finite = tf.cast(tf.logical_not(tf.reduce_all(finite)), loss.dtype)
        return loss, gradients, not_finite

    def _replica_apply(self, gradients: list) -> None:
        """Each replica applies its own gradients with a Keras optimiser (which synchronises)."""
        optimizer = self.optimizer
        assert not isinstance(optimizer, RowSparseAdam), "RowSparseAdam steps outside replicas"
        optimizer.apply_gradients(zip(gradients, self.optimizer_variables))

    def _apply(self, gradients: list) -> None:
        """Apply the replicas' gradients of :attr:`variables` (Adam's first, q(u)'s last)."""
        split = len(self.optimizer_variables)
        adam_gradients, natural_gradients = gradients[:split], gradients[split:]
        if isinstance(self.optimizer, RowSparseAdam):
            # Every replica's gradients in one update, applied to all copies of the variables.
            self.optimizer.apply_gradients(
                [_sum_over_replicas(self.strategy, g) for g in adam_gradients]
            )
        else:
            self.strategy.run(self._replica_apply, args=(adam_gradients,))
        if self.natural_gradient is not None:
            self.natural_gradient.apply_gradients(
                [_sum_over_replicas(self.strategy, g) for g in natural_gradients]
            )

    def _step(self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        """One update from one element of the iterator (row indices, or a user's ``(idx, Y)``);
        returns the loss, or NaN when the loss or a gradient is not finite (and then applies
        nothing)."""
        losses, gradients, not_finite = self.strategy.run(self._replica_gradients, args=(element,))
        total = self.strategy.reduce("SUM", losses, axis=None)
        healthy = tf.logical_and(
            tf.math.is_finite(total), self.strategy.reduce("SUM", not_finite, axis=None) == 0
        )

        def apply() -> tf.Tensor:
            self._apply(gradients)
            return total

        # The condition sits outside the replicas, where synchronisation may be conditional.
        return tf.cond(healthy, apply, lambda: tf.constant(np.nan, total.dtype))

    def _run(self, num_steps: tf.Tensor) -> tf.Tensor:
        """Up to ``num_steps`` steps; returns their ELBOs [<= num_steps], stopping after a
        non-finite one."""

        def more(i: tf.Tensor, elbos: tf.TensorArray, finite: tf.Tensor) -> tf.Tensor:
            return tf.logical_and(i < num_steps, finite)

        def step(
            i: tf.Tensor, elbos: tf.TensorArray, finite: tf.Tensor
        ) -> tuple[tf.Tensor, tf.TensorArray, tf.Tensor]:
            loss = self.step(next(self.iterator))
            return i + 1, elbos.write(i, -loss), tf.math.is_finite(loss)

        start = (
            tf.constant(0, tf.int32),
            tf.TensorArray(default_float(), size=0, dynamic_size=True),
            tf.constant(True),
        )
        _, elbos, _ = tf.while_loop(more, step, start)
        return elbos.stack()

    @property
    def tracing_count(self) -> int:
        return self.step.experimental_get_tracing_count()

    def restore(self) -> bool:
        """Load the latest readable checkpoint, if any; True when one was restored.

        A checkpoint of a model with other shapes or another q(u) covariance layout, or written
        while training on other data or with another batch size (unless ``allow_new_data``), is
        a ``ValueError`` that names the difference; the checkpoint files are left as they are. A
        checkpoint that cannot be read (truncated, missing or damaged files) is passed over for
        the newest older one, with a warning naming both (see :meth:`Checkpoints.restore`).
        """
        if self.checkpoints is None:
            return False
        elbo = self.checkpoints.restore(self.model)
        if elbo is None:
            return False
        self.elbo = [elbo]
        return True

    def save(self) -> None:
        """Write a checkpoint now (history first, so it always covers the checkpoint's steps)."""
        if self.checkpoints is None:
            raise ValueError(
                "save() needs a checkpoint folder: build the Trainer with checkpoint_dir."
            )
        self.checkpoints.save(self._elbo_array())

    def train(
        self,
        iterations: int,
        steps_per_call: int = 100,
        progress: bool = True,
        callback: Callable[[int], None] | None = None,
        callback_every: int = 100,
    ) -> History:
        """Run ``iterations`` more steps; ``callback(step)`` runs every ``callback_every`` steps.

        A ``gpflow.monitor.Monitor`` is a valid callback (e.g. for TensorBoard). Returns the
        history of every step taken so far (restored ones included).
        """
        iterations = check_integer(iterations, "iterations", minimum=0)
        steps_per_call = check_integer(steps_per_call, "steps_per_call")
        callback_every = check_integer(callback_every, "callback_every")
        start = time.perf_counter()
        target = self.num_steps + iterations
        rejected = self._rejected_natural_steps()
        with tqdm(total=iterations, disable=not progress, desc="fit", unit="step") as bar:
            while self.num_steps < target:
                chunk = min(steps_per_call, target - self.num_steps)
                if callback is not None:
                    chunk = min(chunk, callback_every - self.num_steps % callback_every)
                if self.checkpoints is not None:
                    chunk = min(chunk, self.checkpoints.steps_to_next())
                values = self._advance(chunk, start)
                bar.update(len(values))
                bar.set_postfix(elbo=f"{values.mean():.4g}")
                if self.checkpoints is not None and self.num_steps % self.checkpoints.every == 0:
                    self.save()
                if callback is not None and self.num_steps % callback_every == 0:
                    callback(self.num_steps)
        if self.checkpoints is not None and self.checkpoints.saved_at != self.num_steps:
            self.save()
        self._warn_of_rejected_steps(self._rejected_natural_steps() - rejected, iterations)
        return self._history(start)

    def _advance(self, num_steps: int, start: float) -> np.ndarray:
        """Run ``num_steps`` compiled steps and record their ELBOs [num_steps]; a
        :class:`NonFiniteLossError` after a non-finite one (the model keeps its last good
        state, and no checkpoint is written)."""
        values = self.run(tf.constant(num_steps, tf.int32)).numpy()
        self.elbo.append(values)
        self.step_count.assign_add(len(values))
        if not np.all(np.isfinite(values)):
            raise NonFiniteLossError(
                f"The training loss or its gradient stopped being finite at step "
                f"{self.num_steps}. This is usually a failed Cholesky factorisation: raise "
                "the jitter "
                "(gpflow.config.set_default_jitter(1e-4)), train in float64, or lower the "
                "learning rate. The model keeps its parameters from the last finite step.",
                self._history(start),
            )
        return values

    def _rejected_natural_steps(self) -> int:
        if self.natural_gradient is None:
            return 0
        return int(self.natural_gradient.rejected_steps.numpy())

    @staticmethod
    def _warn_of_rejected_steps(rejected: int, iterations: int) -> None:
        if rejected:
            warnings.warn(
                f"{rejected} of {iterations} natural-gradient steps on q(u) were rejected (the new "
                "q(u) covariance was not positive definite, usually from a badly conditioned "
                "Kuu with data on a large scale), so q(u) did not move in them. Standardise the "
                "data, lower natgrad_gamma, or pass q_u_optimizer='adam'.",
                stacklevel=3,
            )

    def _elbo_array(self) -> np.ndarray:
        return np.concatenate(self.elbo) if self.elbo else np.zeros(0)

    def _history(self, start: float) -> History:
        return History(self._elbo_array(), time.perf_counter() - start, self.tracing_count)


def _sum_over_replicas(
    strategy: tf.distribute.Strategy, gradient: tf.Tensor | tf.IndexedSlices | None
) -> tf.Tensor | tf.IndexedSlices | None:
    """The replicas' gradients of one table as one gradient; row slices are concatenated
    (repeated rows are summed by the optimiser)."""
    if gradient is None:
        return None
    local = strategy.experimental_local_results(gradient)
    if len(local) == 1:
        return local[0]
    if isinstance(local[0], tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.concat([g.values for g in local], axis=0),
            tf.concat([tf.cast(g.indices, tf.int64) for g in local], axis=0),
            local[0].dense_shape,
        )
    return tf.add_n(list(local))


def _check_q_u_optimizer(model: SVIGPLVM, choice: str | None) -> str:
    """ "natgrad" or "adam"; None chooses natural gradients for a Gaussian likelihood."""
    if choice is None:
        gaussian = isinstance(base_likelihood(model.likelihood), gpflow.likelihoods.Gaussian)
        return "natgrad" if gaussian else "adam"
    if choice not in ("natgrad", "adam"):
        raise ValueError(
            f"q_u_optimizer must be 'natgrad' (natural-gradient steps on q(u)), 'adam' (q(u) "
            f"trained with the other parameters) or None (natgrad for a Gaussian likelihood), "
            f"got {choice!r}."
        )
    return choice


def _check_distributed(
    model: SVIGPLVM, strategy: tf.distribute.Strategy, jit_compile: bool
) -> None:
    if jit_compile:
        raise ValueError("jit_compile=True is not supported with a strategy: leave it False.")
    if not all(strategy.extended.variable_created_in_scope(v) for v in model.variables):
        raise ValueError(
            "The model's variables were not created under this strategy: build the model inside "
            "`with strategy.scope():` and pass the same strategy to fit."
        )


def fit(
    model: SVIGPLVM,
    data: ArrayLike | tf.data.Dataset,
    iterations: int = 1000,
    batch_size: int = 100,
    learning_rate: float = 1e-2,
    optimizer: tf_keras.optimizers.Optimizer | None = None,
    seed: int = 0,
    progress: bool = True,
    jit_compile: bool = False,
    steps_per_call: int = 100,
    callback: Callable[[int], None] | None = None,
    callback_every: int = 100,
    mask: ArrayLike | None = None,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 1000,
    resume: bool = False,
    strategy: tf.distribute.Strategy | None = None,
    allow_new_data: bool = False,
    q_u_optimizer: str | None = None,
    natgrad_gamma: float = 0.03,
) -> History:
    """Maximise the minibatch ELBO of ``model`` on ``data`` with Adam; returns the ELBO history.

    ``data``: the training Y [N, D] (NaN = missing, or ``mask`` [N, D], True = observed) or a
    ``tf.data.Dataset`` of ``(idx [B] int64, Y [B, D])``. ``checkpoint_dir``: checkpoints every
    ``checkpoint_every`` steps; ``resume=True`` continues from the latest one up to ``iterations``
    steps in all, exactly as if never interrupted, refusing (``ValueError``) one written on other
    data (values, gaps or row order) or with another ``batch_size`` unless ``allow_new_data``.
    ``seed`` fixes the batch order and latent samples; the rest are :class:`Trainer`'s settings.
    """
    iterations = check_integer(iterations, "iterations", minimum=0)
    if resume and checkpoint_dir is None:
        raise ValueError("resume=True needs the checkpoint_dir of the run to resume.")
    trainer = Trainer(
        model,
        data,
        batch_size=batch_size,
        learning_rate=learning_rate,
        optimizer=optimizer,
        seed=seed,
        jit_compile=jit_compile,
        mask=mask,
        checkpoint_dir=checkpoint_dir,
        checkpoint_every=checkpoint_every,
        strategy=strategy,
        allow_new_data=allow_new_data,
        q_u_optimizer=q_u_optimizer,
        natgrad_gamma=natgrad_gamma,
    )
    if resume:
        trainer.restore()
    return trainer.train(
        max(iterations - trainer.num_steps, 0),
        steps_per_call=steps_per_call,
        progress=progress,
        callback=callback,
        callback_every=callback_every,
    )
