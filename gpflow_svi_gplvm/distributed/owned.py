"""The variables a worker owns: per-row tables made for this worker alone, never mirrored, whose
gradients are never summed over workers."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import tensorflow as tf

T = TypeVar("T")

__all__ = ["worker_owned_variables", "owned_by_worker", "worker_owned", "outside_strategy"]

_OWNING = threading.local()


@contextlib.contextmanager
def worker_owned_variables(active: bool = True) -> Iterator[None]:
    """Inside (when ``active``), :func:`owned_by_worker` makes its variables for this worker
    alone: how a model built from a :class:`RowShard` on several workers keeps its per-row
    tables."""
    previous = getattr(_OWNING, "active", False)
    _OWNING.active = active
    try:
        yield
    finally:
        _OWNING.active = previous


def owned_by_worker(create: Callable[[], T]) -> T:
    """``create()``, whose variables are this worker's alone inside
    :func:`worker_owned_variables` (made outside any strategy's scope, never mirrored, and marked
    for :func:`worker_owned`); elsewhere ``create()`` as it is."""
    if not getattr(_OWNING, "active", False):
        return create()
    made = outside_strategy(create)
    variables = [made] if isinstance(made, tf.Variable) else list(getattr(made, "variables", ()))
    for variable in variables:
        variable._worker_owned = True  # read by worker_owned
    return made


def worker_owned(variable: tf.Variable) -> bool:
    """Whether ``variable`` belongs to this worker alone (a per-row table of its rows, or such a
    table's optimiser moments): its gradient is never summed over workers."""
    return bool(getattr(variable, "_worker_owned", False))


def outside_strategy(create: Callable[[], T]) -> T:
    """``create()`` run in a thread of its own: a strategy's scope holds for its own thread only,
    so the variables made there are plain ones of this process."""
    made: list = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(create())
        except BaseException as error:  # raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]
