"""One compiled training update: the minibatch ELBO's gradients from a batch of rows, summed over
every replica of every worker, applied by Adam and, for q(u), natural-gradient steps."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float
from gpflow.keras import tf_keras

from ..compiled import GraphFunction
from ..distributed.owned import worker_owned
from ..distributed.replicas import gradient_values, local_sum, sum_over_replicas
from ..likelihoods import likelihood_facts
from ..models import SVIGPLVM
from .batches import TrainingRows
from .natural_gradients import InducingNaturalGradient
from .optimizers import RowSparseAdam
from .schedules import StepSize

__all__ = ["TrainingStep", "DENSE_ENTRIES", "check_row_updates"]

DENSE_ENTRIES = 40_000
"""Latent tables of at most this many entries (N Q for a table of means) take dense Adam updates
under ``row_updates="auto"``: below it moving every row costs at most about a tenth of a step and
trains faster per step; above it only the batch's rows move, so that a step's cost does not grow
with N (``benchmarks/row_updates.py``, ``benchmarks/convergence.py``)."""


class TrainingStep:
    """The compiled update of ``model`` from one element of ``rows``' batches, and ``run(k)``,
    k of them in one compiled loop (an explicit ``tf.while_loop``) per Python call.

    The tape differentiates every trainable variable in one pass (:attr:`variables`, Adam's first,
    q(u)'s last); the loss and the global parameters' gradients are summed over every replica of
    every worker by one all-reduce, the latent tables' gradients stay each replica's own rows.
    ``q_u_optimizer="natgrad"`` trains q(u) by natural-gradient steps of size ``natgrad_gamma``
    (:class:`~gpflow_svi_gplvm.training.natural_gradients.InducingNaturalGradient`), the rest by
    Adam (or ``optimizer``); ``"adam"`` trains q(u) with the rest; None is "natgrad" for a Gaussian
    likelihood and "adam" otherwise. A step whose loss or a gradient is not finite applies nothing
    and returns NaN, the same decision on every worker."""

    def __init__(
        self,
        model: SVIGPLVM,
        rows: TrainingRows,
        optimizer: tf_keras.optimizers.Optimizer | None,
        learning_rate: StepSize,
        natgrad_gamma: StepSize,
        q_u_optimizer: str | None,
        dense_entries: int,
        jit_compile: bool,
    ) -> None:
        self.model, self.rows, self.jit_compile = model, rows, jit_compile
        self.strategy, self.workers = rows.strategy, rows.workers
        self.q_u_optimizer = _check_q_u_optimizer(model, q_u_optimizer)
        self._build_optimizers(optimizer, learning_rate, natgrad_gamma, dense_entries)
        self.start(rows.batches())

    def start(self, dataset: tf.data.Dataset | tf.distribute.DistributedDataset) -> None:
        """Iterate over ``dataset`` and compile the step, with the iterator's ``element_spec``
        as input signature (so it traces once), and the loop of steps."""
        self.iterator = iter(dataset)
        self.step = GraphFunction(self._step, [self.iterator.element_spec], self.jit_compile)
        # The loop is an explicit tf.while_loop: nothing in it is left to AutoGraph. The iterator
        # is its argument, not a capture: a traced graph frees what it captures only in a garbage
        # collection, and an iterator's tf.data threads (a user's dataset's autotuning) with it.
        signature = [tf.TensorSpec([], tf.int32), tf.type_spec_from_value(self.iterator)]
        self._loop = tf.function(self._run, input_signature=signature, autograph=False)

    def run(self, num_steps: int) -> tf.Tensor:
        """Up to ``num_steps`` compiled steps from the iterator; their ELBOs [<= num_steps]."""
        return self._loop(tf.constant(num_steps, tf.int32), self.iterator)

    def release(self) -> None:
        """Drop the compiled step and loop, and the iterator: they hold this object, and with it
        the optimisers' state, in reference cycles that would wait for a garbage collection
        (about a second in a process holding TensorFlow, and the join of the iterator's
        threads). :meth:`start` compiles them again."""
        del self.step, self._loop, self.iterator

    def _build_optimizers(
        self,
        optimizer: tf_keras.optimizers.Optimizer | None,
        learning_rate: StepSize,
        natgrad_gamma: StepSize,
        dense_entries: int,
    ) -> None:
        """Adam (or ``optimizer``) for :attr:`optimizer_variables` and, with natural gradients,
        an :class:`InducingNaturalGradient` for q(u); :attr:`variables` lists both, Adam's first."""
        self.natural_gradient: InducingNaturalGradient | None = None
        self.variables = list(self.model.trainable_variables)
        if self.q_u_optimizer == "natgrad":
            self.natural_gradient = InducingNaturalGradient(
                self.model.q_mu, self.model.q_sqrt, natgrad_gamma
            )
            q_u = {v.ref() for v in self.natural_gradient.variables_to_train}
            # Adam's variables first, q(u)'s last: the tape differentiates all in one pass.
            self.variables = [v for v in self.variables if v.ref() not in q_u]
            self.variables += list(self.natural_gradient.variables_to_train)
        self.optimizer_variables = self.variables[: len(self.variables) - self._num_natural]
        rows = {variable.ref() for variable in self.model.table_variables}
        self._tables = frozenset(i for i, v in enumerate(self.variables) if v.ref() in rows)
        # Tables held whole by every worker (a model built from all of Y): every copy must take
        # every replica's rows.
        self._mirrored = frozenset(i for i in self._tables if not worker_owned(self.variables[i]))
        if optimizer is not None and any(worker_owned(v) for v in self.variables):
            raise ValueError(
                f"{self.workers.name}: the latent tables are each worker's own, which only the "
                "package's optimiser updates: leave optimizer=None (Adam, learning_rate=...)."
            )
        self.optimizer: RowSparseAdam | tf_keras.optimizers.Optimizer
        with self.strategy.scope():
            if optimizer is None:
                # Moves only the batch's rows of per-row tables, so a step's cost does not grow
                # with N, and costs fewer operations per variable than tf_keras' Adam.
                self.optimizer = RowSparseAdam(
                    self.optimizer_variables, learning_rate, dense_entries=dense_entries
                )
            else:
                self.optimizer = optimizer
                # Slots must exist before tracing, or their creation forces a second trace.
                self.optimizer.build(self.optimizer_variables)

    @property
    def _num_natural(self) -> int:
        """How many of :attr:`variables` (the last ones) take natural-gradient steps."""
        return 0 if self.natural_gradient is None else 2

    def _replica_gradients(self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]) -> tuple:
        """The loss and gradients of the whole step from this replica's rows (its positions in
        the shard, with their dense rows for a sparse shard, or a user's ``(idx, Y)``): the loss
        and the global parameters' gradients summed over all replicas of all workers, the
        tables' gradients this replica's own
        (:func:`~gpflow_svi_gplvm.distributed.replicas.sum_over_replicas`)."""
        idx, Y = self.rows.gather(element)
        loss, gradients = self._gradients(idx, Y)
        return sum_over_replicas(loss, gradients, self._tables, self._mirrored)

    @check_shapes("idx: [batch]", "Y: [batch, D]", "return[0]: []")
    def _gradients(self, idx: tf.Tensor, Y: tf.Tensor) -> tuple[tf.Tensor, list]:
        # Each replica's bound is scaled by N / (its batch); their mean is the global estimate,
        # and the replicas' gradients are summed.
        replicas = tf.cast(self.strategy.num_replicas_in_sync, default_float())
        with tf.GradientTape(watch_accessed_variables=False) as tape:
            tape.watch(self.variables)
            loss = self.model.training_loss((idx, Y), training=True) / replicas
        return loss, tape.gradient(loss, self.variables)

    def _replica_apply(self, gradients: list) -> None:
        """A Keras optimiser's update of each replica's copy, from gradients already summed."""
        optimizer = self.optimizer
        assert not isinstance(optimizer, RowSparseAdam), "RowSparseAdam steps outside replicas"
        optimizer.apply_gradients(
            zip(gradients, self.optimizer_variables), skip_gradients_aggregation=True
        )

    def _apply(self, gradients: list) -> None:
        """Apply the summed gradients of :attr:`variables` (Adam's first, q(u)'s last)."""
        split = len(self.optimizer_variables)
        adam_gradients, natural_gradients = gradients[:split], gradients[split:]
        step = tf.identity(self.optimizer.iterations)  # before this step's: 0 at the first
        if isinstance(self.optimizer, RowSparseAdam):
            # Every copy of every variable takes the same update.
            self.optimizer.apply_gradients(adam_gradients)
        else:
            self.strategy.run(self._replica_apply, args=(adam_gradients,))
        if self.natural_gradient is not None:
            self.natural_gradient.apply_gradients(natural_gradients, step)

    def _step(self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
        """One update from one element of the iterator (row positions, or a user's
        ``(idx, Y)``); returns the loss, or NaN when the loss or a gradient is not finite (and
        then applies nothing)."""
        element = self.rows.for_replicas(element)
        loss, faults, gradients = self.strategy.run(self._replica_gradients, args=(element,))
        # Every replica of every worker holds the same sums and gathered rows: each worker
        # updates from its first; the rows of a worker's own tables are its replicas' together.
        local = self.strategy.experimental_local_results
        own = self._tables - self._mirrored
        gradients = [
            local_sum(local(g)) if i in own else local(g)[0] for i, g in enumerate(gradients)
        ]
        loss = local(loss)[0]
        finite = [tf.math.is_finite(loss), tf.equal(local(faults)[0], 0)] + [
            tf.reduce_all(tf.math.is_finite(gradient_values(g)))
            for i, g in enumerate(gradients)
            if g is not None and i not in self._tables
        ]

        def apply() -> tf.Tensor:
            self._apply(gradients)
            return loss

        # The same decision on every worker: it reads the same sums.
        return tf.cond(tf.reduce_all(finite), apply, lambda: tf.constant(np.nan, loss.dtype))

    def _run(self, num_steps: tf.Tensor, iterator: Iterator) -> tf.Tensor:
        """Up to ``num_steps`` steps; returns their ELBOs [<= num_steps], stopping after a
        non-finite one."""

        def more(i: tf.Tensor, elbos: tf.TensorArray, finite: tf.Tensor) -> tf.Tensor:
            return tf.logical_and(i < num_steps, finite)

        def step(
            i: tf.Tensor, elbos: tf.TensorArray, finite: tf.Tensor
        ) -> tuple[tf.Tensor, tf.TensorArray, tf.Tensor]:
            loss = self.step(next(iterator))
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

    @property
    def loop_tracing_count(self) -> int:
        return self._loop.experimental_get_tracing_count()

    def rejected_natural_steps(self) -> int:
        if self.natural_gradient is None:
            return 0
        return int(self.natural_gradient.rejected_steps.numpy())


def _check_q_u_optimizer(model: SVIGPLVM, choice: str | None) -> str:
    """ "natgrad" or "adam"; None chooses natural gradients for a Gaussian likelihood."""
    if choice is None:
        return "natgrad" if likelihood_facts(model.likelihood).conjugate else "adam"
    if choice not in ("natgrad", "adam"):
        raise ValueError(
            f"q_u_optimizer must be 'natgrad' (natural-gradient steps on q(u)), 'adam' (q(u) "
            f"trained with the other parameters) or None (natgrad for a Gaussian likelihood), "
            f"got {choice!r}."
        )
    return choice


def check_row_updates(row_updates: str, optimizer: tf_keras.optimizers.Optimizer | None) -> int:
    """The most entries a latent table may have for the package's Adam to update it densely."""
    choices = {"sparse": 0, "dense": sys.maxsize, "auto": DENSE_ENTRIES}
    if row_updates not in choices:
        raise ValueError(
            f"row_updates must be 'auto' (dense updates of tables of at most {DENSE_ENTRIES} "
            f"entries), 'dense' (every row every step) or 'sparse' (only the batch's rows), got "
            f"{row_updates!r}."
        )
    if optimizer is not None and row_updates != "auto":
        raise ValueError(
            "row_updates chooses how the package's Adam updates the latent tables; with "
            "optimizer= given, that optimizer decides: leave row_updates at 'auto'."
        )
    return choices[row_updates]
