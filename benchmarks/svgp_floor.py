"""The floor every speed benchmark is measured against: a plain compiled GPflow SVGP loop.

An SVGP with known inputs X [N, Q] of the package's shapes (same kernel, likelihood, mean, Z and
per-output q(u)), fed by the usual GPflow ``tf.data`` pipeline and trained by ``PlainTrainer``, a
loop structured exactly like the package's ``Trainer`` without its finiteness guard. Shared by
``speed.py`` (the paper's sizes) and ``high_dim.py`` (large D).
"""

from __future__ import annotations

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from gpflow.keras import tf_keras

from gpflow_svi_gplvm.components.initialisation import inducing_inputs

SEED = 0


class PlainTrainer:
    """A plain compiled GPflow training loop, structured exactly like the package's Trainer.

    Same pipeline (given), same tf_keras Adam built before the first trace, same input signature
    and ``tf.range`` loop with a TensorArray of ELBOs; only the finiteness guard (``tf.cond``
    around the update, ``break`` on a non-finite loss) is left out, as in a plain GPflow loop.
    With an SVGP and a dataset of (X, Y) it is the floor. ``loss_kwargs`` go to
    ``model.training_loss`` (e.g. ``training=True`` for a package model, as its Trainer passes).
    ``update=False`` (diagnostic) computes the loss and all gradients but applies no update, so
    the difference to ``update=True`` is the optimiser's cost.
    """

    def __init__(
        self, model, dataset, learning_rate, seed, jit_compile, loss_kwargs=None, update=True
    ):
        tf.random.set_seed(seed)
        self.model = model
        self.loss_kwargs = dict(loss_kwargs or {})
        self.update = update
        self.iterator = iter(dataset)
        self.optimizer = tf_keras.optimizers.Adam(learning_rate)
        self.variables = model.trainable_variables
        self.optimizer.build(self.variables)
        self.step = tf.function(
            self._step, input_signature=[dataset.element_spec], jit_compile=jit_compile
        )
        self.run = tf.function(self._run, input_signature=[tf.TensorSpec([], tf.int32)])

    def _step(self, batch) -> tf.Tensor:
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(self.variables)
            loss = self.model.training_loss(batch, **self.loss_kwargs)
        gradients = tape.gradient(loss, self.variables)
        if not self.update:  # consume every gradient so that none is pruned from the graph
            values = [g.values if isinstance(g, tf.IndexedSlices) else g for g in gradients]
            return loss + 0.0 * tf.add_n([tf.reduce_sum(v) for v in values])
        self.optimizer.apply_gradients(zip(gradients, self.variables))
        return loss

    def _run(self, num_steps: tf.Tensor) -> tf.Tensor:
        elbos = tf.TensorArray(default_float(), size=num_steps)
        for i in tf.range(num_steps):
            elbos = elbos.write(i, -self.step(next(self.iterator)))
        return elbos.stack()

    def train(self, iterations: int, steps_per_call: int = 100, progress: bool = False):
        done = 0
        while done < iterations:
            chunk = min(steps_per_call, iterations - done)
            values = self.run(tf.constant(chunk, tf.int32)).numpy()
            done += len(values)
            if not np.all(np.isfinite(values)):
                raise FloatingPointError(f"non-finite ELBO {values[-1]} in the plain loop.")

    @property
    def tracing_count(self) -> int:
        return self.step.experimental_get_tracing_count()


def floor_model(
    Y: np.ndarray,
    X: np.ndarray,
    num_inducing: int,
    likelihood: gpflow.likelihoods.Likelihood | None = None,
) -> gpflow.models.SVGP:
    """The SVGP the package builds, with known inputs X [N, Q]: same kernel, likelihood, mean,
    Z and per-output q(u) (Y's missing entries count as observed: a floor of the same shapes)."""
    if likelihood is None:
        noise = 0.1 * float(np.nanmean(np.nanvar(Y, axis=0)))
        likelihood = gpflow.likelihoods.Gaussian(variance=max(noise, 1e-3))
    return gpflow.models.SVGP(
        gpflow.kernels.SquaredExponential(lengthscales=np.ones(X.shape[1])),
        likelihood,
        inducing_inputs(X, num_inducing, seed=SEED),
        mean_function=gpflow.mean_functions.Constant(np.nan_to_num(np.nanmean(Y, axis=0))),
        num_latent_gps=Y.shape[1],
        whiten=True,
        num_data=Y.shape[0],
    )


def floor_dataset(X: np.ndarray, Y: np.ndarray, batch_size: int) -> tf.data.Dataset:
    """The usual GPflow pipeline: shuffle rows, repeat, batch (work per row, not per batch)."""
    return (
        tf.data.Dataset.from_tensor_slices((X, Y))
        .shuffle(X.shape[0], seed=SEED, reshuffle_each_iteration=True)
        .repeat()
        .batch(batch_size, drop_remainder=True)
        .prefetch(tf.data.AUTOTUNE)
    )
