"""The Trainer's Adam: ordinary updates for dense variables, only the minibatch's rows of tables."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import tensorflow as tf

from ..distributed.owned import owned_by_worker, worker_owned, worker_owned_variables
from .schedules import StepSize

__all__ = ["RowSparseAdam", "adam_moments_and_step"]


def adam_moments_and_step(
    first: tf.Tensor,
    second: tf.Tensor,
    gradient: tf.Tensor,
    count: tf.Tensor,
    learning_rate: float | tf.Tensor,
    beta_1: float = 0.9,
    beta_2: float = 0.999,
    epsilon: float = 1e-7,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
    r"""One Adam update in tf_keras' form: the new moments and the step to subtract.

    .. math::

        m' = \beta_1 m + (1 - \beta_1) g, \qquad v' = \beta_2 v + (1 - \beta_2) g^2,

        \Delta = \alpha \frac{\sqrt{1 - \beta_2^c}}{1 - \beta_1^c}
        \frac{m'}{\sqrt{v'} + \epsilon},

    so :math:`\epsilon` is added to :math:`\sqrt{v'}` before the bias correction. ``first``,
    ``second`` and ``gradient`` share one shape [R, ...]; the bias-correction count ``count`` (c)
    is a scalar or one per row [R]. A pure function of tensors: it creates no variables, so it
    serves both a stateful optimiser and an optimisation written out in a compiled loop.
    """
    m = beta_1 * first + (1.0 - beta_1) * gradient
    v = beta_2 * second + (1.0 - beta_2) * tf.square(gradient)
    k = tf.cast(count, m.dtype)
    step_size = learning_rate * tf.sqrt(1.0 - beta_2**k) / (1.0 - beta_1**k)
    if k.shape.rank == 1 and m.shape.rank > 1:  # one size per row, over its entries
        step_size = tf.reshape(step_size, [-1] + [1] * (m.shape.rank - 1))
    return m, v, step_size * m / (tf.sqrt(v) + epsilon)


class RowSparseAdam(tf.Module):
    r"""Adam that moves only the rows a sparse gradient touches ("lazy" Adam).

    Each step is :func:`adam_moments_and_step`, in the variables' own precision. A dense
    gradient updates the whole variable. A gradient given as ``IndexedSlices`` over rows of a
    table [N, ...] (what gathering a minibatch's rows gives) updates only those rows, with g
    summed over repeated rows; the other rows keep their values and moments, so a step costs
    O(B), not O(N). With every row in every batch it is tf_keras' Adam.

    ``bias_correction`` chooses c. "global" (default): c = t, this optimiser's step count, for
    every row. A row visited k times holds moments of only k updates, so early in training its
    steps are up to :math:`\sqrt{1 - \beta_2^t} / \sqrt{1 - \beta_2^k}` times (more than 2x at
    t = 1000, k = 125) those of an Adam over its own visits. "row": c = k, each row's own update
    count (kept per row and checkpointed), the exact correction of its moments. Measured on oil
    flow (``benchmarks/convergence.py``) "global" trains faster: a row of a lazy Adam moves only
    when visited, while a dense Adam's decaying moments keep moving it between visits.
    """

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        learning_rate: float | Callable[[tf.Tensor], tf.Tensor] | StepSize = 1e-2,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
        bias_correction: str = "global",
        dense_entries: int = 0,
    ):
        super().__init__()
        if bias_correction not in ("global", "row"):
            raise ValueError(
                f"bias_correction must be 'global' (the step count) or 'row' (each row's own "
                f"update count), got {bias_correction!r}."
            )
        self.variables_to_train = list(variables)
        self.learning_rate = StepSize.of(learning_rate)
        self.dense_entries = dense_entries
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.first_moments = [_slot(v, tf.zeros_like(v), "m") for v in variables]
        self.second_moments = [_slot(v, tf.zeros_like(v), "v") for v in variables]
        # Per variable, how often each row [rows] (a scalar: the variable) has been updated.
        self.row_updates = (
            [_slot(v, tf.zeros(v.shape[:1], tf.int64), "k") for v in variables]
            if bias_correction == "row"
            else None
        )

    def _moments_and_step(
        self,
        first: tf.Tensor,
        second: tf.Tensor,
        gradient: tf.Tensor,
        counts: tf.Tensor,
        learning_rate: tf.Tensor,
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The new moments and the step to subtract for (the given rows of) a variable."""
        rates = (tf.cast(learning_rate, first.dtype), self.beta_1, self.beta_2, self.epsilon)
        return adam_moments_and_step(first, second, gradient, counts, *rates)

    def apply_gradients(self, gradients: Sequence[tf.Tensor | tf.IndexedSlices | None]) -> None:
        """One step for ``gradients``, aligned with the variables given at construction."""
        t = self.iterations.assign_add(1)
        learning_rate = self.learning_rate(t - 1)
        for i, (variable, gradient, first, second) in enumerate(
            zip(self.variables_to_train, gradients, self.first_moments, self.second_moments)
        ):
            if gradient is None:
                continue
            updates = None if self.row_updates is None else self.row_updates[i]
            if isinstance(gradient, tf.IndexedSlices) and _entries(variable) <= self.dense_entries:
                gradient = tf.math.unsorted_segment_sum(
                    gradient.values, gradient.indices, variable.shape[0]
                )
            if not isinstance(gradient, tf.IndexedSlices):
                counts = t if updates is None else updates.assign_add(tf.ones_like(updates))
                m, v, step = self._moments_and_step(first, second, gradient, counts, learning_rate)
                first.assign(m)
                second.assign(v)
                variable.assign_sub(step)
                continue
            rows, values = _summed_rows(gradient)
            counts = t if updates is None else tf.gather(updates, rows) + 1
            m, v, step = self._moments_and_step(
                tf.gather(first, rows), tf.gather(second, rows), values, counts, learning_rate
            )
            if updates is not None:
                updates.scatter_update(tf.IndexedSlices(counts, rows))
            first.scatter_update(tf.IndexedSlices(m, rows))
            second.scatter_update(tf.IndexedSlices(v, rows))
            variable.scatter_sub(tf.IndexedSlices(step, rows))


def _slot(variable: tf.Variable, initial: tf.Tensor, name: str) -> tf.Variable:
    """A state variable of ``variable``'s optimiser: this worker's own when ``variable`` is (a
    table of its rows: its moments never leave it either)."""
    with worker_owned_variables(worker_owned(variable)):
        return owned_by_worker(lambda: tf.Variable(initial, trainable=False, name=name))


def _summed_rows(gradient: tf.IndexedSlices) -> tuple[tf.Tensor, tf.Tensor]:
    """Distinct rows [R] and their summed gradient rows [R, ...]."""
    rows, positions = tf.unique(tf.cast(gradient.indices, tf.int64))
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(rows)[0])
    return rows, values


def _entries(variable: tf.Variable) -> int:
    """How many numbers ``variable`` holds."""
    return int(variable.shape.num_elements())
