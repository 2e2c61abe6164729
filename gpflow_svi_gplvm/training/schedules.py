r"""Step sizes that change with the step: a checked schedule, and a warm-up for natural gradients.

A step size is a positive number, or a function of the step count t (a float scalar tensor, 0 at
the first step) that returns one, such as a ``tf_keras.optimizers.schedules.LearningRateSchedule``
or a ``lambda t: 0.01 / (1 + t / 5000)``. The Trainer evaluates it inside its compiled step, so
it must be built of TensorFlow operations (Python arithmetic on t is fine). The rate of each step
is checked before the step is taken: one not finite or below 0 stops training there.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from ..compiled import GraphFunction
from ..validation import check_integer, check_learning_rate

__all__ = ["StepSize", "WarmUp"]

PROBE_STEPS = (0, 1, 10, 100, 1_000, 10_000, 100_000, 1_000_000)
"""Where a schedule is evaluated when it is built, to describe it."""


class StepSize:
    """A step size of the Trainer's optimisers as a function of the step count t, checked.

    ``value``: a positive, finite number (a constant), or a function of t. The function is
    evaluated, compiled as in the training step, at :data:`PROBE_STEPS` when the StepSize is
    built: an error (such as Python or numpy arithmetic that needs t's value, ``float(t)``), a
    result that is not a scalar, or a rate at step 0 that is not finite and in [0, ``maximum``]
    is a ``ValueError`` naming the step. Those rates (:attr:`values`) describe it, so that two
    workers can compare their schedules without comparing functions. The rates of the steps a
    run takes are checked just before they are taken (:meth:`valid_steps`), so a rate of 0 or
    beyond the run's last step is no concern of it.
    """

    def __init__(
        self,
        value: float | Callable[[tf.Tensor], tf.Tensor],
        name: str = "learning_rate",
        typical: str = "0.001 to 0.05",
        maximum: float = math.inf,
    ) -> None:
        self.name, self.maximum = name, maximum
        self._advice = (
            f"{name} must be a positive number or a function of the step count t (a float "
            f"scalar tensor, 0 at the first step) made of TensorFlow operations, returning a "
            f"finite scalar, at least 0{'' if maximum == math.inf else f' and at most {maximum:g}'}"
            f" ({typical} is typical)"
        )
        if not callable(value):
            self.constant: float | None = check_learning_rate(value, name, typical, maximum)
            self.schedule = None
            self.values: tuple[float, ...] = (self.constant,)
            return
        self.constant, self.schedule, self.values = None, value, ()
        # Traced as the training step is (with AutoGraph only for Python control flow on t).
        self._rates = GraphFunction(self._rates_at, [tf.TensorSpec([None], tf.int64)])
        rates = self._evaluate(np.array(PROBE_STEPS))
        self.values = tuple(float(rate) for rate in rates)
        # Above the maximum at any step is a mistake whatever the run's length; a rate that
        # reaches 0 or underflows late is not.
        self._refuse(0, rates[0], stopped=False)
        for above in np.flatnonzero(rates > maximum)[:1]:
            self._refuse(PROBE_STEPS[above], rates[above], stopped=False)

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

    def valid_steps(self, first: int, count: int) -> int:
        """How many of the steps ``first``, ..., ``first + count - 1``, from the first on, have
        a finite rate in [0, ``maximum``]; a ``ValueError`` naming the step when ``first``'s
        has not (the Trainer takes the valid steps, then stops before the invalid one)."""
        if self.schedule is None or count == 0:
            return count
        rates = self._evaluate(np.arange(first, first + count))
        invalid = np.flatnonzero(~self._valid(rates))
        if invalid.size == 0:
            return count
        self._refuse(first, rates[0], stopped=True)
        return int(invalid[0])

    def _rates_at(self, steps: tf.Tensor) -> tf.Tensor:
        """The rates [n] at step counts ``steps`` [n], each evaluated as the step evaluates it."""

        def rate(step: tf.Tensor) -> tf.Tensor:
            return self(step)

        rates = tf.vectorized_map(rate, steps)
        if rates.shape.rank != 1:
            raise ValueError(f"it returned a tensor of shape {rates.shape[1:]}, not a scalar")
        return rates

    def _evaluate(self, steps: np.ndarray) -> np.ndarray:
        """The rates [n] at ``steps`` [n]; a ``ValueError`` naming ``name`` when the schedule
        cannot be traced or evaluated."""
        try:
            return self._rates(tf.constant(steps, tf.int64)).numpy()
        except Exception as error:  # a user's function: any failure is a bad schedule
            where = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]} to {steps[-1]}"
            raise ValueError(
                f"{self._advice}. Evaluated at {where}, it failed: {error!r}. Use TensorFlow "
                "operations on t (tf.math, tf.where), not float(t), numpy or Python's math."
            ) from error

    def _valid(self, rates: np.ndarray | np.floating) -> np.ndarray:
        return np.isfinite(rates) & (rates >= 0) & (rates <= self.maximum)

    def _refuse(self, step: int, rate: np.floating, stopped: bool) -> None:
        """A ``ValueError`` when ``rate``, the rate at ``step``, is not valid (and training
        ``stopped`` before that step)."""
        if self._valid(rate):
            return
        after = " Training stopped before that step: the model keeps the parameters of the steps"
        raise ValueError(
            f"{self._advice}; at step {step} it returned {float(rate)!r}."
            + (f"{after} before it." if stopped else "")
        )

    def __call__(self, step: tf.Tensor) -> tf.Tensor:
        """The rate at step count ``step`` (a scalar tensor, 0 at the first step)."""
        if self.schedule is None:
            return tf.constant(self.constant, default_float())
        rate = self.schedule(tf.cast(step, default_float()))
        return tf.cast(tf.convert_to_tensor(rate), default_float())

    def __repr__(self) -> str:
        if self.schedule is None:
            return f"{self.constant:g}"
        if not self.values:  # (while it is being evaluated)
            return repr(self.schedule)
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
