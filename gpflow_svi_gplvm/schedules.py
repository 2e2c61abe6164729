r"""Step sizes that change with the step: a checked schedule, and a warm-up for natural gradients.

A step size is a positive number, or a function of the step count t (a float scalar tensor, 0 at
the first step) that returns one, such as a ``tf_keras.optimizers.schedules.LearningRateSchedule``
or a ``lambda t: 0.01 / (1 + t / 5000)``. The Trainer evaluates it inside its compiled step, so
it must be built of TensorFlow operations (Python arithmetic on t is fine).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from .validation import check_integer, check_learning_rate

__all__ = ["StepSize", "WarmUp"]

PROBE_STEPS = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
"""Where a schedule is evaluated once, before training, to check it."""


class StepSize:
    """A step size of the Trainer's optimisers as a function of the step count t, checked.

    ``value``: a positive, finite number (a constant), or a function of t. The function is
    evaluated at :data:`PROBE_STEPS` when the StepSize is built: a result that is not a positive,
    finite scalar (at most ``maximum``), or an error raised, is a ``ValueError`` naming the step.
    :attr:`values` (the rates at those steps) describe it, so that two workers can compare their
    schedules without comparing functions.
    """

    def __init__(
        self,
        value: float | Callable[[tf.Tensor], tf.Tensor],
        name: str = "learning_rate",
        typical: str = "0.001 to 0.05",
        maximum: float = math.inf,
    ) -> None:
        self.name = name
        if not callable(value):
            self.constant: float | None = check_learning_rate(value, name, typical, maximum)
            self.schedule = None
            self.values: tuple[float, ...] = (self.constant,)
            return
        self.constant, self.schedule = None, value
        self.values = tuple(self._probe(step, typical, maximum) for step in PROBE_STEPS)

    @classmethod
    def of(
        cls, value: float | Callable[[tf.Tensor], tf.Tensor] | StepSize, gamma: bool = False
    ) -> StepSize:
        """``value`` itself where it is a StepSize, else ``value`` checked as Adam's learning
        rate or, with ``gamma``, as the natural-gradient step size (at most 1)."""
        if isinstance(value, StepSize):
            return value
        if gamma:
            return cls(value, "natgrad_gamma", "0.01 to 0.1", maximum=1.0)
        return cls(value)

    def _probe(self, step: int, typical: str, maximum: float) -> float:
        """The schedule's rate at ``step``, or a ``ValueError`` that says what is wrong."""
        advice = (
            f"{self.name} must be a positive number or a function of the step count t (a float "
            f"scalar tensor, 0 at the first step) returning a positive, finite scalar"
            f"{'' if maximum == math.inf else f' at most {maximum:g}'} ({typical} is typical)"
        )
        try:
            rate = np.asarray(self(tf.constant(step, tf.int64)))
        except Exception as error:  # a user's function: any failure is a bad schedule
            raise ValueError(f"{advice}; at step {step} it raised {error!r}.") from error
        if rate.shape != () or not np.isfinite(rate) or not 0 < float(rate) <= maximum:
            raise ValueError(f"{advice}; at step {step} it returned {rate!r}.")
        return float(rate)

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        """The rate at step count ``step`` (a scalar tensor, 0 at the first step)."""
        if self.schedule is None:
            return tf.constant(self.constant, default_float())
        rate = self.schedule(tf.cast(step, default_float()))
        return tf.cast(tf.convert_to_tensor(rate), default_float())

    def __repr__(self) -> str:
        if self.schedule is None:
            return f"{self.constant:g}"
        return f"{self.schedule!r} ({self.values[0]:.3g} at step 0, {self.values[-1]:.3g} at 1e6)"


class WarmUp:
    r"""A step size that grows log-linearly from ``start`` to ``end`` over ``steps`` steps and
    stays at ``end``:

    .. math::

        \gamma_t = \gamma_0 \left(\gamma_1 / \gamma_0\right)^{\min(t / T,\, 1)}.

    The warm-up proposed for natural-gradient steps on q(u) by Salimbeni, Eleftheriadis &
    Hensman (2018), who grew gamma from 1e-4 "log-linearly" to a final value: early steps, taken
    while the hyperparameters and latents are far off, stay small.
    """

    def __init__(self, start: float, end: float, steps: int) -> None:
        self.start = check_learning_rate(start, "WarmUp start", "1e-4")
        self.end = check_learning_rate(end, "WarmUp end", "0.01 to 0.1")
        self.steps = check_integer(steps, "WarmUp steps")

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        progress = tf.minimum(tf.cast(step, default_float()) / self.steps, 1.0)
        return self.start * tf.pow(tf.constant(self.end / self.start, default_float()), progress)

    def __repr__(self) -> str:
        return f"WarmUp(start={self.start:g}, end={self.end:g}, steps={self.steps})"
