"""An Adam for per-row tables that touches only the rows of the minibatch."""

from __future__ import annotations

from collections.abc import Sequence

import tensorflow as tf

__all__ = ["RowSparseAdam"]


class RowSparseAdam(tf.Module):
    """Adam ("lazy" Adam) for tables [N, ...] whose gradients are ``IndexedSlices`` over rows.

    For the rows r in the gradient, with values g summed over repeated rows:
    m_r <- b1 m_r + (1 - b1) g,  v_r <- b2 v_r + (1 - b2) g^2,
    x_r <- x_r - lr sqrt(1 - b2^t) / (1 - b1^t) m_r / (sqrt(v_r) + eps),
    t counting this optimiser's steps: the update of tf_keras' Adam restricted to those rows.
    Rows outside the batch keep their values and moments, so a step costs O(B), not O(N); with
    every row in every batch it equals tf_keras' Adam.
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
        beta_1, beta_2 = self.beta_1, self.beta_2
        step_size = self.learning_rate * tf.sqrt(1.0 - beta_2**t) / (1.0 - beta_1**t)
        for variable, gradient, first, second in zip(
            self.variables_to_train, gradients, self.first_moments, self.second_moments
        ):
            if gradient is None:
                continue
            rows, values = _rows_and_values(gradient, variable)
            m = beta_1 * tf.gather(first, rows) + (1.0 - beta_1) * values
            v = beta_2 * tf.gather(second, rows) + (1.0 - beta_2) * tf.square(values)
            first.scatter_update(tf.IndexedSlices(m, rows))
            second.scatter_update(tf.IndexedSlices(v, rows))
            variable.scatter_sub(
                tf.IndexedSlices(step_size * m / (tf.sqrt(v) + self.epsilon), rows)
            )


def _rows_and_values(gradient, variable) -> tuple[tf.Tensor, tf.Tensor]:
    """Distinct rows [R] and their summed gradient rows [R, ...]."""
    if not isinstance(gradient, tf.IndexedSlices):
        rows = tf.range(tf.shape(variable, out_type=tf.int64)[0])
        return rows, tf.convert_to_tensor(gradient)
    rows, positions = tf.unique(tf.cast(gradient.indices, tf.int64))
    values = tf.math.unsorted_segment_sum(gradient.values, positions, tf.shape(rows)[0])
    return rows, values
