"""The step across replicas: the batch each replica draws, what a strategy cannot train, and the
gradients summed over replicas (one all-reduce) or over this worker's devices."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

from .owned import worker_owned
from .workers import Workers

__all__ = [
    "replica_batch_size",
    "check_strategy",
    "sum_over_replicas",
    "gradient_values",
    "local_sum",
]


def replica_batch_size(batch_size: int, num_rows: int, replicas: int, workers: Workers) -> int:
    """The rows of each replica's batch: the global ``batch_size`` split evenly over the
    ``replicas`` of all workers, each worker holding at least that many of its ``num_rows``;
    else a ``ValueError`` (the same on every worker) that says what to choose."""
    if batch_size % replicas:
        raise ValueError(
            f"{workers.name}: batch_size={batch_size} cannot be split evenly over the "
            f"{replicas} replicas ({workers.count} worker(s) x {workers.local_replicas} "
            f"device(s)): choose a multiple of {replicas}, e.g. "
            f"{max(replicas, batch_size // replicas * replicas)}."
        )
    with workers.agreeing():
        if num_rows < batch_size // replicas:
            raise ValueError(
                f"it holds {num_rows} rows, fewer than a replica's batch of "
                f"{batch_size // replicas}: lower batch_size, or give it more rows."
            )
    return batch_size // replicas


def check_strategy(
    variables: Sequence[tf.Variable],
    strategy: tf.distribute.Strategy,
    jit_compile: bool,
    device: str | None,
    workers: Workers,
) -> None:
    """A ``ValueError`` (the same on every worker) for what a strategy cannot train: compiled
    XLA, a device of the caller's choosing, or a model's shared ``variables`` made outside the
    strategy's scope."""
    where = f"{workers.name}: " if workers.count > 1 else ""
    if jit_compile:
        raise ValueError(f"{where}jit_compile=True is not supported with a strategy: leave it off.")
    if device is not None:
        raise ValueError(
            f"{where}device={device!r} with a strategy: the strategy places the step on its own "
            "devices (choose them when building it, e.g. MirroredStrategy(['/GPU:0'])); leave "
            "device=None."
        )
    shared = [v for v in variables if not worker_owned(v)]
    if not all(strategy.extended.variable_created_in_scope(v) for v in shared):
        raise ValueError(
            f"{where}The model's variables were not created under this strategy: build the model "
            "inside `with strategy.scope():` and pass the same strategy to fit."
        )


def sum_over_replicas(
    loss: tf.Tensor, gradients: list, tables: frozenset[int], mirrored: frozenset[int]
) -> tuple:
    """In a replica: the ``loss`` and the gradients of the global parameters summed over all
    replicas of all workers, the same on every replica, from one all-reduce. Of the ``tables``
    (positions in ``gradients``), the ``mirrored`` ones (a table every worker holds whole: a
    model built from all of Y) take every replica's batch rows, gathered, so that every copy
    takes the same update; the others (each worker's own rows) stay this replica's own, and
    only the count of their non-finite entries joins the all-reduce, so that every worker takes
    the same decision to apply the step. What crosses the network does not grow with N."""
    faults = tf.add_n(
        [tf.constant(0.0, loss.dtype)]
        + [
            tf.reduce_sum(tf.cast(~tf.math.is_finite(gradient_values(gradients[i])), loss.dtype))
            for i in sorted(tables)
            if gradients[i] is not None
        ]
    )
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return loss, faults, gradients
    present = [i for i, g in enumerate(gradients) if g is not None]
    gathered = [
        i for i in present if i in mirrored and isinstance(gradients[i], tf.IndexedSlices)
    ]  # a mirrored table's batch rows, from every replica
    shared = [
        i for i in present if i not in gathered and (i not in tables or i in mirrored)
    ]  # global parameters (an IndexedSlices of one is summed densely: they are small)
    loss, faults, *sums = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [loss, faults] + [tf.convert_to_tensor(gradients[i]) for i in shared],
    )
    rows = [(gradients[i].values, gradients[i].indices) for i in gathered]
    rows = context.all_gather(rows, axis=0) if rows else rows
    summed = list(gradients)
    for i, total in zip(shared, sums):
        summed[i] = total
    for i, (values, indices) in zip(gathered, rows):
        summed[i] = tf.IndexedSlices(values, indices, gradients[i].dense_shape)
    return loss, faults, summed


def gradient_values(gradient: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    """The numbers of a gradient: a dense one, or a row-sliced one's rows."""
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def local_sum(gradients: tuple) -> tf.Tensor | tf.IndexedSlices | None:
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
