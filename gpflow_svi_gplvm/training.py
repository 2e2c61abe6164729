"""Compiled minibatch training: shuffled row indices, rows gathered in the step, Adam, guards."""

from __future__ import annotations

import os
import sys
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.config import default_float
from gpflow.keras import tf_keras
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from .checkpoints import Checkpoints, TrainingData
from .compiled import GraphFunction
from .distributed import LOST_WORKER_ERRORS, RowShard, WorkerLostError, Workers, worker_owned
from .likelihoods import MaskedLikelihood, base_likelihood, check_likelihood_support
from .models import SVIGPLVM
from .natural_gradients import InducingNaturalGradient
from .optimizers import RowSparseAdam
from .schedules import StepSize
from .sparse_rows import RowStream, SparseRows
from .validation import (
    check_device,
    check_integer,
    check_observations,
    check_seed,
    row_blocks,
)

__all__ = ["fit", "Trainer", "History", "NonFiniteLossError", "make_dataset", "minibatch_indices"]

DENSE_ENTRIES = 40_000
"""Latent tables of at most this many entries (N Q for a table of means) take dense Adam updates
under ``row_updates="auto"``: below it moving every row costs at most about a tenth of a step and
trains faster per step; above it only the batch's rows move, so that a step's cost does not grow
with N (``benchmarks/row_updates.py``, ``benchmarks/convergence.py``)."""


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


def minibatch_indices(
    num_data: int,
    batch_size: int,
    seed: int = 0,
    stream: int = 0,
    num_streams: int = 1,
    start: int = 0,
) -> tf.data.Dataset:
    r"""Endless shuffled minibatches of row indices ``idx`` [B] int64, B = min(batch_size, N).

    Each epoch e is a fresh permutation of the N rows (stateless, from ``seed`` and
    :math:`e S + s` for stream s of S, so that the workers of a cluster, one stream each, shuffle
    their rows apart) cut into :math:`\lfloor N / B \rfloor` batches; the :math:`N \bmod B` rows at
    its end sit that epoch out. The stream begins at its batch number ``start``, so that a
    resumed run continues it without storing it. The pipeline costs a few operations per batch,
    not per row, and batches have a fixed size, so a step taking them traces once.
    """
    batch_size = min(check_integer(batch_size, "batch_size"), num_data)
    num_batches = num_data // batch_size
    first_epoch, skipped = divmod(check_integer(start, "start", minimum=0), num_batches)

    def epoch(number: tf.Tensor) -> tf.data.Dataset:
        shuffle_seed = tf.stack([tf.constant(seed, tf.int64), number * num_streams + stream])
        order = tf.random.experimental.stateless_shuffle(
            tf.range(num_data, dtype=tf.int64), seed=shuffle_seed
        )
        batches = tf.reshape(order[: num_batches * batch_size], [num_batches, batch_size])
        return tf.data.Dataset.from_tensor_slices(batches)

    batches = tf.data.Dataset.counter(first_epoch).flat_map(epoch)
    return (batches.skip(skipped) if skipped else batches).prefetch(tf.data.AUTOTUNE)


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
    _check_gaps(model, bool(np.isnan(Y).any()))
    check_likelihood_support(model.likelihood, Y)
    return Y


def _check_gaps(model: SVIGPLVM, gaps: bool) -> None:
    """A ``ValueError`` when data with gaps meets a model that counts every entry."""
    if gaps and not isinstance(model.likelihood, MaskedLikelihood):
        raise ValueError(
            "data has missing entries but the model was built on complete data, so its "
            "likelihood counts every entry. Build the model with the incomplete data (it then "
            "wraps its likelihood in MaskedLikelihood), or pass likelihood=MaskedLikelihood(...)."
        )


def _training_shard(
    model: SVIGPLVM,
    data: ArrayLike | RowShard,
    mask: ArrayLike | None,
    workers: Workers,
) -> RowShard:
    """The rows this worker trains on: a given shard checked against the model and the other
    workers' shards, or this worker's block of Y [N, D] (all of Y for one worker)."""
    if not isinstance(data, RowShard):
        Y = _training_data(model, data, mask)
        if workers.count == 1:
            return RowShard(Y, np.arange(len(Y)), len(Y))
        return RowShard.for_worker(Y, workers.strategy)
    if mask is not None:
        raise ValueError("Give the mask to the RowShard (RowShard(Y, rows, num_data, mask=...)).")
    data.check(workers)
    with workers.agreeing():
        if (data.num_data, data.data_dim) != (model.num_data, model.data_dim):
            raise ValueError(
                f"the shard holds rows of a data set of N={data.num_data}, D={data.data_dim}, but "
                f"the model was built for N={model.num_data}, D={model.data_dim}: train on the "
                "rows the model was built from."
            )
    rows = cast(np.ndarray, data.Y)  # dense or sparse, read a block at a time
    gaps = sum(int(np.isnan(block).sum()) for block in row_blocks(rows))
    _check_gaps(model, bool(workers.sum(gaps) > 0))
    with workers.agreeing():
        check_likelihood_support(model.likelihood, rows)
    return data


class Trainer:
    """Holds a model, its optimiser and a data iterator, and runs compiled training steps.

    ``data`` is Y [N, D] (NaN = missing, or ``mask`` [N, D] with True = observed), held once
    in a tensor on the CPU from which each step gathers its batch of shuffled rows
    (:func:`minibatch_indices`); or, on each of several workers, a
    :class:`~gpflow_svi_gplvm.distributed.RowShard` of its own rows (dense, or CSR densified a
    minibatch at a time); or rows too many for memory, streamed from disk in shuffled blocks (a
    :class:`~gpflow_svi_gplvm.sparse_rows.RowStream` such as
    :class:`~gpflow_svi_gplvm.disk_rows.DiskRows`, one worker; its batches follow from the seed
    and the step, so checkpoints need no iterator); or a ``tf.data.Dataset`` of
    ``(idx [B] int64, Y [B, D])`` (one worker). One compiled step with the iterator's
    ``element_spec`` as input signature (so it traces once), run ``k`` times inside one compiled
    loop per Python call to keep dispatch cost off each step. A step whose loss is not finite
    applies no update, so the model keeps its last good state.

    ``strategy``: train under a ``tf.distribute.Strategy`` (build the model in its scope):
    ``MirroredStrategy`` over the devices of one machine, or ``MultiWorkerMirroredStrategy`` over
    the workers of ``TF_CONFIG``. ``batch_size`` is the global batch, split evenly over the
    replicas; each worker draws its replicas' batches from its own rows. The loss and gradients
    are summed over every replica of every worker inside the step, by one all-reduce (the
    latent tables' rows each in their replica's block), so that every worker applies the same
    update and all hold the same parameters. A worker that stops makes the others raise
    :class:`~gpflow_svi_gplvm.distributed.WorkerLostError`; with checkpoints, restarting every
    worker with ``resume=True`` continues the run exactly.

    ``q_u_optimizer="natgrad"`` trains q(u) by natural-gradient steps of size ``natgrad_gamma``
    (:class:`~gpflow_svi_gplvm.natural_gradients.InducingNaturalGradient`) and everything else
    with Adam, from one gradient pass in the same compiled step; ``"adam"`` trains q(u) with the
    rest. The default (None) is "natgrad" for a Gaussian likelihood and "adam" otherwise. With
    a constant step size, the minibatch noise in q(u) grows with gamma: 0.03 (the default) gave
    a higher ELBO than Adam on q(u) at every mark from 500 to 3000 steps on MNIST (2000 images, 60%
    missing), where 0.1 fell behind Adam after 1000 steps (``benchmarks/convergence.py``).

    ``learning_rate`` (Adam's) and ``natgrad_gamma`` are numbers or schedules: functions of the
    step count t (0 at the first step), such as a ``tf_keras`` ``LearningRateSchedule`` or a
    :class:`~gpflow_svi_gplvm.schedules.WarmUp`, checked before training
    (:class:`~gpflow_svi_gplvm.schedules.StepSize`) and read from Adam's step count, so a resumed
    run continues them. ``row_updates`` chooses how the package's Adam moves the per-row latent
    tables: "sparse" moves only the batch's rows (a step's cost does not grow with N), "dense"
    every row every step (the rows' moments keep moving them between their batches, as tf_keras'
    Adam does), "auto" (default) dense for tables of at most :data:`DENSE_ENTRIES` entries.

    ``device`` runs the compiled steps on that device ("/CPU:0", "/GPU:1"; a device this process
    lacks is a ``ValueError``); None (default) lets TensorFlow place them, on the first GPU when
    it sees one. The model's variables stay where they were built.

    With ``checkpoint_dir``, a :class:`~gpflow_svi_gplvm.checkpoints.Checkpoints` folder keeps
    the model, the optimiser, the latent module's random generator and the step count (from
    which the batches follow; a user's dataset's iterator besides) every ``checkpoint_every``
    steps and at the end of each :meth:`train`, beside the ELBO history; :meth:`restore` resumes
    exactly where the latest checkpoint left off. Under several workers only the chief (worker
    0) writes to the folder, which every worker must be able to read.
    """

    def __init__(
        self,
        model: SVIGPLVM,
        data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
        batch_size: int = 100,
        learning_rate: float | Callable[[tf.Tensor], tf.Tensor] = 1e-2,
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
        natgrad_gamma: float | Callable[[tf.Tensor], tf.Tensor] = 0.03,
        overwrite: bool = False,
        row_updates: str = "auto",
        device: str | None = None,
    ) -> None:
        _check_kinds(model, optimizer, strategy)
        seed = check_seed(seed)
        self.device = check_device(device)
        learning_rate = StepSize.of(learning_rate)
        natgrad_gamma = StepSize.of(natgrad_gamma, gamma=True)
        self.dense_entries = _dense_entries(row_updates, optimizer)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.workers = Workers.of(strategy) if strategy is not None else Workers()
        if strategy is not None:
            _check_distributed(model, strategy, jit_compile, self.workers, device)
        settings = dict(
            batch_size=batch_size,
            seed=seed,
            learning_rate=learning_rate.values,
            natgrad_gamma=natgrad_gamma.values,
            q_u_optimizer=q_u_optimizer,
            row_updates=row_updates,
            checkpoints=checkpoint_dir is not None,
            checkpoint_every=checkpoint_every,
        )
        self.workers.agree("called fit with other settings", settings)
        model.latent.generator.reset_from_seed(seed)
        self.model, self.seed, self.jit_compile = model, seed, jit_compile
        self.step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_count")
        self.shard, dataset = self._data(data, mask, batch_size)
        self.q_u_optimizer = _check_q_u_optimizer(model, q_u_optimizer)
        self._build_optimizers(optimizer, learning_rate, natgrad_gamma)
        self._start(dataset if self.shard is None else self._stream(0))
        self.elbo: list[np.ndarray] = []
        self.checkpoints: Checkpoints | None = None
        if checkpoint_dir is not None:
            self.checkpoints = self._checkpoints(
                checkpoint_dir,
                self._record(batch_size),
                checkpoint_every,
                max_to_keep,
                allow_new_data,
                overwrite,
            )

    closed: bool = False
    """Whether :meth:`close` was called: a closed Trainer neither trains nor saves."""

    def close(self) -> None:
        """Release the checkpoint folder to other processes (``fit`` does this at its end; a
        Trainer also releases it when garbage collected or used in a ``with`` block). The
        Trainer is then done: :meth:`train` and :meth:`save` are a ``ValueError``."""
        self.closed = True
        if self.checkpoints is not None:
            self.checkpoints.close()

    def _check_open(self, action: str) -> None:
        if self.closed:
            raise ValueError(
                f"This Trainer was closed (its checkpoint folder released, perhaps now another "
                f"run's), so it cannot {action}: build a new Trainer (resume=True continues "
                "from the folder's latest checkpoint)."
            )

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *error: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "checkpoints", None) is not None:
            self.close()

    def _data(
        self,
        data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
        mask: ArrayLike | None,
        batch_size: int,
    ) -> tuple[RowShard | None, tf.data.Dataset | None]:
        """This worker's rows (held once, on its CPU: each step gathers its batch from them) and
        :attr:`replica_batch`, the rows of a replica's batch; or a user's dataset, as it is."""
        self.row_stream: RowStream | None = None
        if isinstance(data, (tf.data.Dataset, RowStream)):
            if self.workers.count > 1:
                raise ValueError(
                    f"{self.workers.name}: a tf.data.Dataset or rows on disk cannot be split over "
                    f"{self.workers.count} workers here; give each worker its rows as a RowShard "
                    "(gpflow_svi_gplvm.RowShard; DiskRows.load reads a worker's rows) instead."
                )
            if isinstance(data, tf.data.Dataset):
                return None, data
            if tuple(data.shape) != (self.model.num_data, self.model.data_dim):
                raise ValueError(
                    f"The rows on disk are {data.shape[0]} x {data.shape[1]} but the model was "
                    f"built for N={self.model.num_data}, D={self.model.data_dim}: train on the "
                    "rows the model was built from."
                )
            self.row_stream, self.replica_batch = data, check_integer(batch_size, "batch_size")
            return None, self._stream(0)
        shard = _training_shard(self.model, data, mask, self.workers)
        self.replica_batch = self._replica_batch_size(batch_size, shard)
        with tf.device("/cpu:0"):
            self._row_numbers = tf.constant(shard.rows)
        return shard, None

    def _replica_batch_size(self, batch_size: int, shard: RowShard) -> int:
        """The rows of each replica's batch: ``batch_size`` (at most N on one worker) split evenly
        over the replicas, every worker holding at least that many rows; else a ``ValueError``."""
        batch_size = check_integer(batch_size, "batch_size")
        if self.workers.count == 1:
            batch_size = min(batch_size, shard.num_rows)
        replicas = self.strategy.num_replicas_in_sync
        if batch_size % replicas:
            raise ValueError(
                f"{self.workers.name}: batch_size={batch_size} cannot be split evenly over the "
                f"{replicas} replicas ({self.workers.count} worker(s) x "
                f"{self.workers.local_replicas} device(s)): choose a multiple of {replicas}, e.g. "
                f"{max(replicas, batch_size // replicas * replicas)}."
            )
        with self.workers.agreeing():
            if shard.num_rows < batch_size // replicas:
                raise ValueError(
                    f"it holds {shard.num_rows} rows, fewer than a replica's batch of "
                    f"{batch_size // replicas}: lower batch_size, or give it more rows."
                )
        return batch_size // replicas

    def _stream(self, first_step: int) -> tf.data.Dataset:
        """The row positions [local replicas, replica_batch] in this worker's shard of its
        replicas' batches, step by step from ``first_step`` on: consecutive batches of one stream
        of the worker's own shuffled rows (:func:`minibatch_indices`), a function of the seed and
        the step only. A plain dataset of this worker's: :meth:`_step` hands its rows to the
        replicas (a distributed dataset would agree across workers on every step's batch). For
        rows on disk, their own stream of ``(idx, Y)`` from ``first_step`` on."""
        if self.row_stream is not None:  # read from where the rows are stored
            return self.row_stream.batches(self.replica_batch, self.seed, start=first_step)
        shard, workers = self.shard, self.workers
        assert shard is not None
        local = workers.local_replicas
        positions = minibatch_indices(
            shard.num_rows,
            self.replica_batch,
            self.seed,
            workers.index,
            workers.count,
            start=first_step * local,
        ).batch(local, drop_remainder=True)
        if not shard.sparse:
            return positions
        rows = cast(SparseRows, shard.Y)
        shape = [local, self.replica_batch, shard.data_dim]

        def dense(element: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            # Densified off the step's thread, one batch at a time, while the step runs.
            flat = tf.numpy_function(rows.take, [tf.reshape(element, [-1])], tf.float64)
            return element, tf.reshape(tf.cast(flat, default_float()), shape)

        return positions.map(dense).prefetch(2)

    def _start(self, dataset: tf.data.Dataset | tf.distribute.DistributedDataset) -> None:
        """Iterate over ``dataset`` (a user's dataset is distributed here) and compile the step,
        with the iterator's ``element_spec`` as input signature (so it traces once), and the
        loop of steps."""
        if self.shard is None and self.workers.strategy is not None:
            dataset = self.strategy.experimental_distribute_dataset(dataset)
        self.iterator = iter(dataset)
        self.step = GraphFunction(self._step, [self.iterator.element_spec], self.jit_compile)
        # The loop is an explicit tf.while_loop: nothing in it is left to AutoGraph.
        self.run = tf.function(
            self._run, input_signature=[tf.TensorSpec([], tf.int32)], autograph=False
        )

    def _record(self, batch_size: int) -> TrainingData:
        """What this run trains on, for its checkpoints (nothing to record of a user's dataset)."""
        if self.row_stream is not None:
            return TrainingData.of(cast(np.ndarray, self.row_stream), batch_size)
        if self.shard is None:
            return TrainingData({})
        rows = self.shard.rows
        whole = self.workers.count == 1 and np.array_equal(rows, np.arange(len(rows)))
        return TrainingData.of(self.shard.Y, batch_size, None if whole else rows, self.workers)

    def _build_optimizers(
        self,
        optimizer: tf_keras.optimizers.Optimizer | None,
        learning_rate: StepSize,
        natgrad_gamma: StepSize,
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
                    self.optimizer_variables, learning_rate, dense_entries=self.dense_entries
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
        overwrite: bool,
    ) -> Checkpoints:
        """The checkpoint folder of this run's model, optimiser, generator and steps (and the
        iterator of a user's dataset: the batches of rows held here follow from the step)."""
        if not isinstance(directory, (str, os.PathLike)) or not str(directory).strip():
            raise ValueError(
                f"checkpoint_dir must name a folder (a str or path), got {directory!r}: e.g. "
                "checkpoint_dir='checkpoints/'."
            )
        # Adam's state lives under a key of its own per q_u_optimizer (its variables differ),
        # so a checkpoint of the other choice is refused, not restored into the wrong slots.
        optimizer_key = "optimizer" if self.natural_gradient is None else "optimizer_natgrad"
        objects = {
            "model": self.model,
            optimizer_key: self.optimizer,
            "generator": self.model.latent.generator,
        }
        if self.shard is None and self.row_stream is None:
            objects["iterator"] = self.iterator
        return Checkpoints(
            directory,
            objects,
            self.step_count,
            record,
            self.q_u_optimizer,
            every=every,
            max_to_keep=max_to_keep,
            allow_new_data=allow_new_data,
            workers=self.workers,
            overwrite=overwrite,
            model=_description(self.model, self.q_u_optimizer),
            own_tables=self.model.table_rows is not None,
        )

    @property
    def _num_natural(self) -> int:
        """How many of :attr:`variables` (the last ones) take natural-gradient steps."""
        return 0 if self.natural_gradient is None else 2

    @property
    def num_steps(self) -> int:
        """Steps taken so far, restored ones included."""
        return int(self.step_count.numpy())

    def _replica_gradients(self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]) -> tuple:
        """The loss and gradients of the whole step from this replica's rows (its positions in
        the shard, with their dense rows for a sparse shard, or a user's ``(idx, Y)``): the loss
        and the global parameters' gradients summed over all replicas of all workers, the
        tables' gradients this replica's own (:func:`_sum_over_replicas`)."""
        if self.shard is None:
            idx, Y = element
        else:
            positions, Y = element if self.shard.sparse else (element, None)
            # Tables owned by this worker are indexed by position in its shard.
            idx = positions
            if self.model.table_rows is None:
                idx = tf.gather(self._row_numbers, positions)
            if Y is None:
                held = cast(tf.Variable, self.shard.Y)
                # Gathered where the rows are, so that only the batch moves to the device.
                with tf.device(held.device):
                    Y = tf.gather(held, positions)
        loss, gradients = self._gradients(idx, Y)
        return _sum_over_replicas(loss, gradients, self._tables)

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
        if self.shard is not None:  # positions [local replicas, replica_batch]: one per replica
            first = self.workers.index * self.workers.local_replicas
            element = self.strategy.experimental_distribute_values_from_function(
                lambda context: tf.nest.map_structure(
                    lambda part: part[context.replica_id_in_sync_group - first], element
                )
            )
        loss, faults, gradients = self.strategy.run(self._replica_gradients, args=(element,))
        # Every replica of every worker holds the same sums: each worker updates from its first;
        # the tables' rows of this worker's replicas are all its own.
        local = self.strategy.experimental_local_results
        gradients = [
            _local_sum(local(g)) if i in self._tables else local(g)[0]
            for i, g in enumerate(gradients)
        ]
        loss = local(loss)[0]
        finite = [tf.math.is_finite(loss), tf.equal(local(faults)[0], 0)] + [
            tf.reduce_all(tf.math.is_finite(g.values if isinstance(g, tf.IndexedSlices) else g))
            for i, g in enumerate(gradients)
            if g is not None and i not in self._tables
        ]

        def apply() -> tf.Tensor:
            self._apply(gradients)
            return loss

        # The same decision on every worker: it reads the same sums.
        return tf.cond(tf.reduce_all(finite), apply, lambda: tf.constant(np.nan, loss.dtype))

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
        if self.shard is not None or self.row_stream is not None:
            self._start(self._stream(self.num_steps))
        return True

    def save(self) -> None:
        """Write a checkpoint now (history first, so it always covers the checkpoint's steps),
        once the folder is checked to be still this run's."""
        self._check_open("save")
        if self.checkpoints is None:
            raise ValueError(
                "save() needs a checkpoint folder: build the Trainer with checkpoint_dir."
            )
        self.checkpoints.folder.check_held()
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
        self._check_open("train")
        iterations = check_integer(iterations, "iterations", minimum=0)
        steps_per_call = check_integer(steps_per_call, "steps_per_call")
        callback_every = check_integer(callback_every, "callback_every")
        _check_callback(callback)
        if self.checkpoints is not None:
            self.checkpoints.check_owner()  # before the first step, on every worker alike
        start = time.perf_counter()
        target = self.num_steps + iterations
        # Workers step together: each must stop at the same step, with checkpoints between.
        self.workers.agree(
            "called train with other iterations",
            dict(
                iterations=target,
                steps_per_call=steps_per_call,
                callback_every=callback_every,
                callback=callback is not None,
            ),
        )
        rejected = self._rejected_natural_steps()
        # The rates a step will use, each checked before the step (a user's optimizer has its own).
        step_sizes = [getattr(self.optimizer, "learning_rate", None)]
        step_sizes += [getattr(self.natural_gradient, "gamma", None)]
        with tqdm(total=iterations, disable=not progress, desc="fit", unit="step") as bar:
            while self.num_steps < target:
                chunk = min(steps_per_call, target - self.num_steps)
                if callback is not None:
                    chunk = min(chunk, callback_every - self.num_steps % callback_every)
                if self.checkpoints is not None:
                    chunk = min(chunk, self.checkpoints.steps_to_next())
                for size in step_sizes:
                    if isinstance(size, StepSize):
                        chunk = size.valid_steps(self.num_steps, chunk)
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
        try:
            with nullcontext() if self.device is None else tf.device(self.device):
                values = self.run(tf.constant(num_steps, tf.int32)).numpy()
        except LOST_WORKER_ERRORS as error:
            if self.workers.count == 1:
                raise
            raise WorkerLostError(self._lost_worker(error)) from error
        except tf.errors.InvalidArgumentError as error:
            if self.row_stream is None:
                raise
            # The rows on disk could not be read (e.g. their file changed): say so plainly.
            raise ValueError(f"Reading the rows on disk failed: {error.message}") from error
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

    def _lost_worker(self, error: tf.errors.OpError) -> str:
        """What to do when another worker stopped answering (``error``) after this one's step."""
        checkpoints = self.checkpoints
        if checkpoints is None or checkpoints.saved_at is None:
            where = "no checkpoint was written (pass checkpoint_dir to fit to resume after a loss)"
        else:
            where = f"the last checkpoint is step {checkpoints.saved_at} in {checkpoints.directory}"
        message = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return (
            f"{self.workers.name}: another worker stopped or cannot be reached after step "
            f"{self.num_steps} ({message}); {where}. Start every worker again with the same "
            "command and resume=True."
        )

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


def _check_callback(callback: Callable[[int], None] | None) -> None:
    if callback is not None and not callable(callback):
        raise ValueError(
            f"callback must be a function of the step number (or a gpflow.monitor.Monitor), "
            f"got {callback!r}."
        )


def _sum_over_replicas(loss: tf.Tensor, gradients: list, tables: frozenset[int]) -> tuple:
    """In a replica: the ``loss`` and the gradients of the global parameters summed over all
    replicas of all workers, the same on every replica, from one all-reduce; the gradients of
    the ``tables`` (positions in ``gradients``) stay this replica's own, and only the count of
    their non-finite entries joins the all-reduce, so that every worker takes the same decision
    to apply the step. What crosses the network does not grow with N or the batch."""
    faults = tf.add_n(
        [tf.constant(0.0, loss.dtype)]
        + [
            tf.reduce_sum(tf.cast(~tf.math.is_finite(_values(gradients[i])), loss.dtype))
            for i in sorted(tables)
            if gradients[i] is not None
        ]
    )
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return loss, faults, gradients
    shared = [
        i for i, g in enumerate(gradients) if g is not None and i not in tables
    ]  # global parameters; an IndexedSlices of one is summed densely (they are small)
    loss, faults, *sums = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [loss, faults] + [tf.convert_to_tensor(gradients[i]) for i in shared],
    )
    summed = list(gradients)
    for i, total in zip(shared, sums):
        summed[i] = total
    return loss, faults, summed


def _values(gradient: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def _local_sum(gradients: tuple) -> tf.Tensor | tf.IndexedSlices | None:
    """The sum of this worker's replicas' gradients of one table: their row slices concatenated
    (the optimiser sums repeated rows), or dense ones added."""
    first = gradients[0]
    if first is None or len(gradients) == 1:
        return first
    if isinstance(first, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.concat([g.values for g in gradients], 0),
            tf.concat([g.indices for g in gradients], 0),
            first.dense_shape,
        )
    return tf.add_n(list(gradients))


def _check_kinds(model: object, optimizer: object, strategy: object) -> None:
    """A ``ValueError`` for a model, optimizer or strategy that is not one (e.g. a name)."""
    if not isinstance(model, SVIGPLVM):
        raise ValueError(
            f"fit trains the GPLVMs of this package (SVIGPLVM and its subclasses), got a "
            f"{type(model).__name__}: build one, e.g. BayesianSVIGPLVM(Y, latent_dim=2)."
        )
    if optimizer is not None and not isinstance(optimizer, tf_keras.optimizers.Optimizer):
        raise ValueError(
            f"optimizer must be a tf_keras optimizer object or None (Adam), got {optimizer!r}: "
            "e.g. from gpflow.keras import tf_keras; tf_keras.optimizers.Adam(0.01)."
        )
    if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(
            f"strategy must be a tf.distribute strategy or None, got {strategy!r}: e.g. "
            "tf.distribute.MirroredStrategy(), or multi_worker_strategy() on several machines."
        )


def _description(model: SVIGPLVM, q_u_optimizer: str) -> dict:
    """A model in a few numbers, for the run record of a checkpoint folder."""
    return {
        "class": type(model).__name__,
        "N": model.num_data,
        "D": model.data_dim,
        "Q": model.latent_dim,
        "M": int(model.inducing_variable.num_inducing),
        "shared_covariance": model.shared_covariance,
        "q_u_optimizer": q_u_optimizer,
    }


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


def _dense_entries(row_updates: str, optimizer: tf_keras.optimizers.Optimizer | None) -> int:
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


def _check_distributed(
    model: SVIGPLVM,
    strategy: tf.distribute.Strategy,
    jit_compile: bool,
    workers: Workers,
    device: str | None,
) -> None:
    """A ``ValueError`` (the same on every worker) for what a strategy cannot train."""
    where = f"{workers.name}: " if workers.count > 1 else ""
    if jit_compile:
        raise ValueError(f"{where}jit_compile=True is not supported with a strategy: leave it off.")
    if device is not None:
        raise ValueError(
            f"{where}device={device!r} with a strategy: the strategy places the step on its own "
            "devices (choose them when building it, e.g. MirroredStrategy(['/GPU:0'])); leave "
            "device=None."
        )
    shared = [v for v in model.variables if not worker_owned(v)]
    if not all(strategy.extended.variable_created_in_scope(v) for v in shared):
        raise ValueError(
            f"{where}The model's variables were not created under this strategy: build the model "
            "inside `with strategy.scope():` and pass the same strategy to fit."
        )


def fit(
    model: SVIGPLVM,
    data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
    iterations: int = 1000,
    batch_size: int = 100,
    learning_rate: float | Callable[[tf.Tensor], tf.Tensor] = 1e-2,
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
    natgrad_gamma: float | Callable[[tf.Tensor], tf.Tensor] = 0.03,
    overwrite: bool = False,
    row_updates: str = "auto",
    device: str | None = None,
) -> History:
    """Maximise the minibatch ELBO of ``model`` on ``data`` with Adam; returns the ELBO history.

    ``data``: as :class:`Trainer`'s. ``checkpoint_dir``: this run's own folder, saved every
    ``checkpoint_every`` steps; ``resume=True`` continues its run up to ``iterations`` steps in
    all, as if never interrupted, refusing one written on other data (values, gaps, row order) or
    with another ``batch_size`` unless ``allow_new_data``; ``overwrite=True`` deletes them and
    starts afresh; without either, a folder holding a run's checkpoints is a ``ValueError``. The
    rest are :class:`Trainer`'s."""
    iterations = check_integer(iterations, "iterations", minimum=0)
    _check_resume(resume, overwrite, checkpoint_dir)
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
        overwrite=overwrite,
        row_updates=row_updates,
        device=device,
    )
    with trainer:  # agreed first: a worker restoring alone would wait for the others forever
        trainer.workers.agree("called fit with other settings", {"resume": resume})
        if resume:
            trainer.restore()
        remaining = max(iterations - trainer.num_steps, 0)
        return trainer.train(remaining, steps_per_call, progress, callback, callback_every)


def _check_resume(resume: bool, overwrite: bool, checkpoint_dir: str | Path | None) -> None:
    if (resume or overwrite) and checkpoint_dir is None:
        raise ValueError("resume=True and overwrite=True need the checkpoint_dir of the run.")
    if resume and overwrite:
        raise ValueError("Pass resume=True (continue the run) or overwrite=True, not both.")
