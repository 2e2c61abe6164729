"""The rows a training step draws its batch from: held once on this worker's CPU (dense or CSR),
streamed from disk, or a user's dataset. Batches of held or stored rows are a function of the
seed and the step alone, so that a resumed run continues them without storing them."""

from __future__ import annotations

from typing import cast

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from numpy.typing import ArrayLike

from ..distributed.replicas import replica_batch_size
from ..distributed.workers import Workers
from ..likelihoods import check_likelihood_support, check_support, is_masked
from ..models import SVIGPLVM
from ..rows.facts import facts_of
from ..rows.shard import RowShard
from ..rows.sparse import RowStream, SparseRows
from ..validation import check_integer, check_observations
from .checkpoints import TrainingData

__all__ = ["TrainingRows", "minibatch_indices", "make_dataset", "BAD_BATCH"]

BAD_BATCH = "A batch of the dataset holds"
"""How a failed check of a user's batch begins (:meth:`TrainingRows.gather`)."""


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
    return untuned((batches.skip(skipped) if skipped else batches).prefetch(2))


def untuned(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """``dataset`` without tf.data's autotuning. Its thread, one per iterator, lives until a
    garbage collection frees the traced graphs that hold the iterator, and joining it there
    took seconds at a time (the collection waiting, not computing); the package's pipelines, a
    few operations per batch into fixed buffers, have nothing to tune."""
    options = tf.data.Options()
    options.autotune.enabled = False
    return dataset.with_options(options)


def make_dataset(
    model: SVIGPLVM, Y: ArrayLike, batch_size: int, seed: int = 0, mask: ArrayLike | None = None
) -> tf.data.Dataset:
    """Endless shuffled minibatches ``(idx [B] int64, Y [B, D])`` of the training rows, in the
    order of :func:`minibatch_indices`; ``mask`` [N, D] (True = observed) turns hidden entries
    into NaN.

    The dataset holds Y as a constant (about twice its size resident, plus a copy while an iterator
    is built); a :class:`~gpflow_svi_gplvm.training.trainer.Trainer` given Y itself holds it once,
    in a variable."""
    Y = _training_data(model, Y, mask)
    rows = tf.constant(Y)
    return minibatch_indices(Y.shape[0], batch_size, seed).map(
        lambda idx: (idx, tf.gather(rows, idx))
    )


class TrainingRows:
    """Where a :class:`~gpflow_svi_gplvm.training.trainer.Trainer`'s batches come from.

    ``data`` is Y [N, D] (NaN = missing, or ``mask`` [N, D] with True = observed), or a
    :class:`~gpflow_svi_gplvm.rows.shard.RowShard` of this worker's rows: held once as
    :attr:`shard`, on this worker's CPU, each step gathering its batch of shuffled rows
    (:func:`minibatch_indices`, one stream per worker) where they are. Or rows on disk
    (:attr:`on_disk`, a :class:`~gpflow_svi_gplvm.rows.sparse.RowStream`, one worker), read in
    shuffled blocks; or a user's ``tf.data.Dataset`` of ``(idx [B] int64, Y [B, D])``
    (:attr:`dataset`, one worker) taken as it is. :attr:`replica_batch` is the rows of one
    replica's batch (the global ``batch_size`` split over the replicas of all workers).
    """

    def __init__(
        self,
        model: SVIGPLVM,
        data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
        mask: ArrayLike | None,
        batch_size: int,
        seed: int,
        strategy: tf.distribute.Strategy,
        workers: Workers,
    ) -> None:
        self.model, self.seed, self.strategy, self.workers = model, seed, strategy, workers
        self.shard: RowShard | None = None
        self.on_disk: RowStream | None = None
        self.dataset: tf.data.Dataset | None = None
        if isinstance(data, (tf.data.Dataset, RowStream)):
            self._take_stream(data)
            self.replica_batch = check_integer(batch_size, "batch_size")
            return
        self.shard = _training_shard(model, data, mask, workers)
        batch_size = check_integer(batch_size, "batch_size")
        if workers.count == 1:
            batch_size = min(batch_size, self.shard.num_rows)
        self.replica_batch = replica_batch_size(
            batch_size, self.shard.num_rows, strategy.num_replicas_in_sync, workers
        )
        with tf.device("/cpu:0"):
            self._row_numbers = tf.constant(self.shard.rows)

    def _take_stream(self, data: RowStream | tf.data.Dataset) -> None:
        """Keep a user's dataset or rows on disk, on one worker, of the model's shape."""
        if self.workers.count > 1:
            raise ValueError(
                f"{self.workers.name}: a tf.data.Dataset or rows on disk cannot be split over "
                f"{self.workers.count} workers here; give each worker its rows as a RowShard "
                "(gpflow_svi_gplvm.RowShard; DiskRows.load reads a worker's rows) instead."
            )
        if isinstance(data, tf.data.Dataset):
            self.dataset = _checked_dataset(data, self.model.data_dim)
            return
        model = self.model
        if tuple(data.shape) != (model.num_data, model.data_dim):
            raise ValueError(
                f"The rows on disk are {data.shape[0]} x {data.shape[1]} but the model was "
                f"built for N={model.num_data}, D={model.data_dim}: train on the rows the model "
                "was built from."
            )
        self.on_disk = data

    @property
    def follow_from_step(self) -> bool:
        """Whether the batches are a function of the seed and the step (rows held or on disk),
        so that a checkpoint needs no iterator to continue them."""
        return self.dataset is None

    def batches(self, first_step: int = 0) -> tf.data.Dataset | tf.distribute.DistributedDataset:
        """The elements of the steps from ``first_step`` on. Held rows: their positions
        [local replicas, replica_batch] in this worker's shard (with the dense rows of a sparse
        shard), consecutive batches of one stream of the worker's own shuffled rows, a plain
        dataset of this worker's (:meth:`for_replicas` hands its rows to the replicas; a
        distributed dataset would agree across workers on every step's batch). Rows on disk:
        their own stream of ``(idx, Y)``. A user's dataset: as it is (distributed over the
        devices of a strategy)."""
        if self.shard is not None:
            return self._held_batches(first_step)
        if self.on_disk is not None:  # read from where the rows are stored
            dataset = untuned(self.on_disk.batches(self.replica_batch, self.seed, start=first_step))
        else:
            dataset = cast(tf.data.Dataset, self.dataset)
        if self.workers.strategy is None:
            return dataset
        return self.strategy.experimental_distribute_dataset(dataset)

    def _held_batches(self, first_step: int) -> tf.data.Dataset:
        shard, workers = cast(RowShard, self.shard), self.workers
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

    def for_replicas(self, element: tf.Tensor | tuple) -> tf.Tensor | tuple:
        """A step's element as the strategy's replicas take it: held rows' positions
        [local replicas, ...] become one per replica; other elements are already theirs."""
        if self.shard is None:
            return element
        first = self.workers.index * self.workers.local_replicas
        return self.strategy.experimental_distribute_values_from_function(
            lambda context: tf.nest.map_structure(
                lambda part: part[context.replica_id_in_sync_group - first], element
            )
        )

    def gather(self, element: tf.Tensor | tuple[tf.Tensor, tf.Tensor]) -> tuple[tf.Tensor, ...]:
        """In a replica: the rows' indices into the latent tables ``idx`` [B] and their
        observations ``Y`` [B, D], from its element (positions in the shard, with their dense
        rows for a sparse shard, or a user's ``(idx, Y)``)."""
        if self.shard is None:
            return self._checked_batch(*element) if self.dataset is not None else tuple(element)
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
        return idx, Y

    def _checked_batch(self, idx: tf.Tensor, Y: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """A user's batch, checked in the step: row numbers ``idx`` [B] within the latent table
        and no infinite value in ``Y`` [B, D] (NaN marks a missing one). A failed check stops
        the step with an error :class:`~gpflow_svi_gplvm.training.trainer.Trainer` reports as a
        ``ValueError`` (:data:`BAD_BATCH`)."""
        checks = [
            tf.debugging.assert_equal(
                tf.reduce_any(tf.math.is_inf(Y)), False, message=f"{BAD_BATCH} infinite values"
            )
        ]
        rows = getattr(self.model.latent, "num_data", None)  # amortised families ignore idx
        if rows is not None:
            within = (idx >= 0) & (idx < tf.cast(rows, idx.dtype))
            message = f"{BAD_BATCH} row numbers outside 0..{rows - 1}, the rows of the latent table"
            checks.append(tf.debugging.assert_equal(tf.reduce_all(within), True, message=message))
        with tf.control_dependencies(checks):
            return tf.identity(idx), tf.identity(Y)

    def record(self, batch_size: int, names: dict[str, list[str]] | None = None) -> TrainingData:
        """What the run trains on, for its checkpoints: the rows, the model's observed inputs
        of them and the ``names`` of their parts (nothing to record of a user's dataset)."""
        table = self.model.row_inputs
        inputs = None if table is None else table.numpy()
        if self.on_disk is not None:
            Y, facts = cast(np.ndarray, self.on_disk), getattr(self.on_disk, "facts", None)
            return TrainingData.of(Y, batch_size, None, self.workers, inputs, names, facts)
        if self.shard is None:
            return TrainingData({})
        rows, held = self.shard.rows, self.shard.Y
        whole = self.workers.count == 1 and np.array_equal(rows, np.arange(len(rows)))
        facts = getattr(held, "facts", None)  # rows that know their hash are not read again
        shard_rows = None if whole else rows
        return TrainingData.of(held, batch_size, shard_rows, self.workers, inputs, names, facts)


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
    if gaps and not is_masked(model.likelihood):
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
    data.check_against(cast(int, model.num_data), model.data_dim, workers)
    facts = facts_of(data.Y, workers)  # those the rows keep, or one pass's
    _check_gaps(model, facts.gaps)
    with workers.agreeing():
        check_support(model.likelihood, facts.counts, facts.binary)
    return data


def _checked_dataset(dataset: tf.data.Dataset, data_dim: int) -> tf.data.Dataset:
    """``dataset`` when its elements are ``(idx [B] integers, Y [B, D] floats)`` of the model's
    D (as :func:`make_dataset` makes them), cast to int64 and the model's float; else a
    ``ValueError`` saying what they are."""
    spec = dataset.element_spec
    parts = spec if isinstance(spec, tuple) and len(spec) == 2 else None
    if parts is not None and all(isinstance(p, tf.TensorSpec) for p in parts):
        idx, Y = parts
        if (
            idx.dtype.is_integer
            and idx.shape.rank == 1
            and Y.dtype.is_floating
            and Y.shape.rank == 2
            and Y.shape[1] in (None, data_dim)
        ):
            if (idx.dtype, Y.dtype) == (tf.int64, default_float()):
                return dataset
            # Other widths are cast: float32 values and int32 row numbers widen exactly.
            return dataset.map(lambda i, y: (tf.cast(i, tf.int64), tf.cast(y, default_float())))
    raise ValueError(
        f"A dataset to train on must give (idx [B] int64 row numbers, Y [B, D={data_dim}] "
        f"floats) per step, as make_dataset(model, Y, batch_size) does; its elements are "
        f"{spec}."
    )
