"""Compiled minibatch training: a ``tf.data`` pipeline of (idx, y), Adam, progress and guards."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from gpflow.keras import tf_keras
from tqdm.auto import tqdm

from .models import SVIGPLVM
from .validation import check_observations

__all__ = ["fit", "Trainer", "History", "NonFiniteLossError", "make_dataset"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; ``history`` holds the ELBO up to that step."""

    def __init__(self, message: str, history: History):
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


def make_dataset(model: SVIGPLVM, Y, batch_size: int, seed: int = 0, mask=None) -> tf.data.Dataset:
    """Endless shuffled minibatches ``(idx [B] int64, Y [B, D])`` of the training rows.

    Each epoch is a fresh permutation; batches have a fixed size so the step traces once.
    ``mask`` [N, D] (True = observed) turns hidden entries into NaN.
    """
    Y = check_observations(Y, "data", model.data_dim, mask)
    if Y.shape[0] != model.num_data:
        raise ValueError(
            f"data has {Y.shape[0]} rows but the model was built for N={model.num_data}: "
            "train on the rows the model was constructed with."
        )
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}.")
    num_data = Y.shape[0]
    rows = tf.data.Dataset.from_tensor_slices((tf.range(num_data, dtype=tf.int64), Y))
    return (
        rows.shuffle(num_data, seed=seed, reshuffle_each_iteration=True)
        .repeat()
        .batch(min(batch_size, num_data), drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )


class Trainer:
    """Holds a model, its optimiser and a data iterator, and runs compiled training steps.

    One compiled step with the dataset's ``element_spec`` as input signature (so it traces once),
    run ``k`` times inside one compiled loop per Python call to keep dispatch cost off each step.
    A step whose loss is not finite applies no update, so the model keeps its last good state.
    """

    def __init__(
        self,
        model: SVIGPLVM,
        data,
        batch_size: int = 100,
        learning_rate: float = 1e-2,
        optimizer: tf_keras.optimizers.Optimizer | None = None,
        seed: int = 0,
        jit_compile: bool = False,
        mask=None,
    ):
        tf.random.set_seed(seed)
        self.model = model
        dataset = data if isinstance(data, tf.data.Dataset) else None
        if dataset is None:
            dataset = make_dataset(model, data, batch_size, seed, mask)
        self.iterator = iter(dataset)
        self.optimizer = optimizer or tf_keras.optimizers.Adam(learning_rate)
        self.variables = model.trainable_variables
        # Slots must exist before tracing, or their creation forces a second trace.
        self.optimizer.build(self.variables)
        self.step = tf.function(
            self._step, input_signature=[dataset.element_spec], jit_compile=jit_compile
        )
        self.run = tf.function(self._run, input_signature=[tf.TensorSpec([], tf.int32)])
        self.num_steps = 0

    def _step(self, batch) -> tf.Tensor:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(self.variables)
            loss = self.model.training_loss(batch, training=True)
        gradients = tape.gradient(loss, self.variables)

        def apply() -> tf.Tensor:
            self.optimizer.apply_gradients(zip(gradients, self.variables))
            return loss

        return tf.cond(tf.math.is_finite(loss), apply, lambda: loss)

    def _run(self, num_steps: tf.Tensor) -> tf.Tensor:
        """Up to ``num_steps`` steps; returns their ELBOs, stopping after a non-finite one."""
        elbos = tf.TensorArray(default_float(), size=0, dynamic_size=True)
        for i in tf.range(num_steps):
            loss = self.step(next(self.iterator))
            elbos = elbos.write(i, -loss)
            if not tf.math.is_finite(loss):
                break
        return elbos.stack()

    @property
    def tracing_count(self) -> int:
        return self.step.experimental_get_tracing_count()

    def train(
        self,
        iterations: int,
        steps_per_call: int = 100,
        progress: bool = True,
        callback: Callable[[int], None] | None = None,
        callback_every: int = 100,
    ) -> History:
        """Run ``iterations`` steps; ``callback(step)`` runs every ``callback_every`` steps.

        A ``gpflow.monitor.Monitor`` is a valid callback (e.g. for TensorBoard).
        """
        if iterations < 0 or steps_per_call < 1 or callback_every < 1:
            raise ValueError(
                "iterations must be >= 0 and steps_per_call, callback_every >= 1; got "
                f"{iterations}, {steps_per_call}, {callback_every}."
            )
        start = time.perf_counter()
        elbos: list[np.ndarray] = []
        done = 0
        with tqdm(total=iterations, disable=not progress, desc="fit", unit="step") as bar:
            while done < iterations:
                chunk = min(steps_per_call, iterations - done)
                if callback is not None:
                    chunk = min(chunk, callback_every - self.num_steps % callback_every)
                values = self.run(tf.constant(chunk, tf.int32)).numpy()
                elbos.append(values)
                done += len(values)
                self.num_steps += len(values)
                if not np.all(np.isfinite(values)):
                    history = self._history(elbos, start)
                    raise NonFiniteLossError(
                        f"The training loss became {values[-1]} at step {self.num_steps}. This is "
                        "usually a failed Cholesky factorisation: raise the jitter "
                        "(gpflow.config.set_default_jitter(1e-4)), train in float64, or lower the "
                        "learning rate. The model keeps its parameters from the last finite step.",
                        history,
                    )
                bar.update(len(values))
                bar.set_postfix(elbo=f"{values.mean():.4g}")
                if callback is not None and self.num_steps % callback_every == 0:
                    callback(self.num_steps)
        return self._history(elbos, start)

    def _history(self, elbos: list[np.ndarray], start: float) -> History:
        values = np.concatenate(elbos) if elbos else np.zeros(0)
        return History(values, time.perf_counter() - start, self.tracing_count)


def fit(
    model: SVIGPLVM,
    data,
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
    mask=None,
) -> History:
    """Maximise the minibatch ELBO of ``model`` on ``data`` with Adam; returns the ELBO history.

    ``data`` is the training Y [N, D] (NaN = missing, or ``mask`` [N, D] with True = observed) or
    a ``tf.data.Dataset`` of ``(idx [B] int64, Y [B, D])``. ``seed`` fixes the batch order and
    the latent samples.
    """
    trainer = Trainer(model, data, batch_size, learning_rate, optimizer, seed, jit_compile, mask)
    return trainer.train(iterations, steps_per_call, progress, callback, callback_every)
