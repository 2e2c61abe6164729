"""Graph functions that trace without AutoGraph, and with it only where the code needs it.

AutoGraph rewrites the source of every Python function a trace calls (the model, GPflow,
check_shapes' wrappers) before running it: at oil flow's size that was most of the default
training step's first call in a fresh process (4.6 s with it, 0.7 s without, on two cores:
``benchmarks/first_call.py``, benchmarks/results/speed.md). The package's own code states its loops
and branches on tensors as ``tf.while_loop`` and ``tf.cond``, so it traces without AutoGraph. A
component that branches on a tensor in Python (a user's likelihood, say) raises
``OperatorNotAllowedInGraphError`` when traced so; :class:`GraphFunction` then traces again with
AutoGraph, as ``tf.function`` would have from the start.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import tensorflow as tf

__all__ = ["GraphFunction"]


class GraphFunction:
    """``tf.function(python_function, input_signature, jit_compile=...)`` traced without AutoGraph,
    or with it once a trace without it has failed on Python control flow over a tensor. Call it
    as the ``tf.function``; :attr:`function` is the ``tf.function`` in use."""

    def __init__(
        self,
        python_function: Callable[..., Any],
        input_signature: Sequence[Any],
        jit_compile: bool = False,
    ) -> None:
        self._options = dict(
            func=python_function, input_signature=list(input_signature), jit_compile=jit_compile
        )
        self.autograph = False
        self.function = tf.function(**self._options, autograph=False)

    def __call__(self, *args: Any) -> Any:
        return self._with_fallback(lambda: self.function(*args))

    def get_concrete_function(self) -> Any:
        """The trace for the input signature (tracing it now if it was not)."""
        return self._with_fallback(lambda: self.function.get_concrete_function())

    def experimental_get_tracing_count(self) -> int:
        return self.function.experimental_get_tracing_count()

    def _with_fallback(self, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except tf.errors.OperatorNotAllowedInGraphError:
            if self.autograph:
                raise
            self.autograph = True
            self.function = tf.function(**self._options, autograph=True)
            return call()
