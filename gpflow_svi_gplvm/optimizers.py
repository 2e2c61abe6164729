"""The Trainer's Adam: ordinary updates for dense variables, only the minibatch's rows of tables."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

__all__ = ["RowSparseAdam"]


class RowSparseAdam(tf.Module):
    """Adam that moves only the rows a sparse gradient touches ("lazy" Adam).

    m <- b1 m + (1 - b1) g,  v <- b2 v + (1 - b2) g^2,
    x <- x - lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps),
    t counting this optimiser's steps: tf_keras' Adam, in the variables' own precision. A dense
    gradient updates the whole variable. A gradient given as ``IndexedSlices`` over rows of a
    table [N, ...] (what gathering a minibatch's rows gives) updates only those rows, with g
    summed over repeated rows; the other rows keep their values and moments, so a step costs
    O(B), not O(N). With every row in every batch it is the ordinary update.
    """

    def __init__(
        self,
        variables: Sequence[tf.Variable],
        learning_rate: float = 1e-2,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
    ):
        super().__init__()
        self.variables_to_train = list(variables)
        self.learning_rate = learning_rate
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.first_moments = [
            tf.Variable(tf.zeros_like(v), trainable=False, name="m") for v in variables
        ]
        self.second_moments = [
            tf.Variable(tf.zeros_like(v), trainable=False, name="v") for v in variables
        ]

    def apply_gradients(self, gradients: Sequence[tf.Tensor | tf.IndexedSlices | None]) -> None:
        """One step for ``gradients``, aligned with the variables given at construction."""
        t = tf.cast(self.iterations.assign_add(1), self.variables_to_train[0].dtype)
        step_size = self.learning_rate * tf.sqrt(1.0 - self.beta_2**t) / (1.0 - self.beta_1**t)
        for variable, gradient, first, second in zip(
            self.variables_to_train, gradients, self.first_moments, self.second_moments
        ):
            if gradient is None:
                continue
            if not isinstance(gradient, tf.IndexedSlices):
                m, v, step = self._moments_and_step(first, second, gradient, step_size)
                first.assign(m)
                second.assign(v)
                variable.assign_sub(step)
                continue
            rows, values = _summed_rows(gradient)
            m, v, step = self._moments_and_step(
                tf.gather(first, rows), tf.gather(second, rows), values, step_size
            )
            first.scatter_update(tf.IndexedSlices(m, rows))
            second.scatter_update(tf.IndexedSlices(v, rows))
            variable.scatter_sub(tf.IndexedSlices(step, rows))

    def _moments_and_step(
        self, first: tf.Tensor, second: tf.Tensor, gradient: tf.Tensor, step_size: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        """The new moments and the step to subtract, for the given (rows of the) moments."""
        m = self.beta_1 * first + (1.0 - self.beta_1) * gradient
        v = self.beta_2 * second + (1.0 - self.beta_2) * tf.square(gradient)
        return m, v, step_size * m / (tf.sqrt(v) + self.epsilon)


def _summed_rows(gradient: tf.IndexedSlices) -> tuple[tf.Tensor, tf.Tensor]:
    """Distinct rows [R] and their summed gradient rows [R, ...]."""
    rows, positions = tf.unique(tf.cast(gradient.indices, tf.int64))
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(rows)[0])
    return rows, values
