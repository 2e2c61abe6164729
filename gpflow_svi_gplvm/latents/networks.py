"""Small networks made of GPflow Parameters for amortised encoders: an MLP, and a
permutation-invariant pooling of a row's observed (value, column) pairs.

Parameters (not Keras layers) keep the weights visible to ``trainable_variables``,
``print_summary``, ``set_trainable``, ``deepcopy`` and checkpoints like any other GPflow
parameter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes
from gpflow.base import Module, Parameter
from gpflow.config import default_float

__all__ = ["MLP", "SetPooling"]

_ACTIVATIONS = {"tanh": tf.tanh, "relu": tf.nn.relu, "softplus": tf.nn.softplus, "elu": tf.nn.elu}


class _Network(Module):
    """A network with a named, checked activation function."""

    def __init__(self, activation: str, name: str | None):
        super().__init__(name=name)
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}."
            )
        self.activation = activation

    def activate(self, values: tf.Tensor) -> tf.Tensor:
        """The activation function, elementwise."""
        return _ACTIVATIONS[self.activation](values)


class MLP(_Network):
    r"""A multi-layer perceptron from inputs [B, I] to outputs [B, O]:

    .. math::

        h_0 = x, \qquad h_k = \sigma(h_{k-1} W_k + b_k), \qquad
        \text{output} = h_K W_{K+1} + b_{K+1}

    (no activation on the output). Weights start Glorot-uniform (seeded), biases at zero.
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: Sequence[int],
        output_size: int,
        activation: str = "tanh",
        seed: int = 0,
        name: str | None = None,
    ):
        super().__init__(activation, name)
        sizes = [int(input_size), *map(int, hidden_sizes), int(output_size)]
        rng = np.random.default_rng(seed)
        self.weights = []
        self.biases = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            weight = rng.uniform(-limit, limit, size=(fan_in, fan_out))
            self.weights.append(Parameter(weight, dtype=default_float(), name="weight"))
            self.biases.append(Parameter(np.zeros(fan_out), dtype=default_float(), name="bias"))

    @check_shapes("inputs: [batch, input_size]", "return: [batch, output_size]")
    def __call__(self, inputs: tf.Tensor) -> tf.Tensor:
        # Einsum, not matmul: TensorFlow's oneDNN graph rewrite would try to fuse matmul, bias
        # and activation, and log a line at every trace that it cannot for float64.
        hidden = inputs
        for weight, bias in zip(self.weights[:-1], self.biases[:-1]):
            hidden = self.activate(tf.einsum("bi,io->bo", hidden, weight) + bias)
        return tf.einsum("bi,io->bo", hidden, self.weights[-1]) + self.biases[-1]


class SetPooling(_Network):
    r"""A row as the set of its observed (value, column) pairs, pooled to a fixed size.

    For each observed entry :math:`d \in \mathcal{O}_n` of row n, with :math:`w` [H] shared and
    :math:`c_d` [H] a learnt embedding of column d, the output [B, H + 1] is

    .. math::

        h_{nd} = \sigma(v_{nd} w + c_d), \qquad
        \Big(\frac{1}{|\mathcal{O}_n|} \sum_{d \in \mathcal{O}_n} h_{nd},\;
        \frac{|\mathcal{O}_n|}{D}\Big).

    It depends on the row only through the set :math:`\{(v_{nd}, d) : d \in \mathcal{O}_n\}`,
    so a gap is never read as a value and any number of entries may be missing (a row with none
    gives zeros and fraction 0).
    """

    def __init__(
        self,
        num_columns: int,
        size: int,
        activation: str = "tanh",
        seed: int = 0,
        name: str | None = None,
    ):
        super().__init__(activation, name)
        self.num_columns = int(num_columns)
        self.size = int(size)
        rng = np.random.default_rng(seed)
        # Unit-variance pre-activations for standardised values: Var(v w + c) = 1.
        self.value_weight = Parameter(
            rng.normal(0.0, np.sqrt(0.5), self.size), dtype=default_float(), name="value_weight"
        )
        self.column_embedding = Parameter(
            rng.normal(0.0, np.sqrt(0.5), (self.num_columns, self.size)),
            dtype=default_float(),
            name="column_embedding",
        )

    @property
    def output_size(self) -> int:
        return self.size + 1

    @check_shapes("values: [batch, D]", "observed: [batch, D]", "return: [batch, H_plus_one]")
    def __call__(self, values: tf.Tensor, observed: tf.Tensor) -> tf.Tensor:
        """values [B, D] (finite; anything at unobserved entries), observed [B, D] bool."""
        features = self.activate(values[..., None] * self.value_weight + self.column_embedding)
        weights = tf.cast(observed, values.dtype)
        count = tf.reduce_sum(weights, axis=-1, keepdims=True)
        pooled = tf.einsum("bd,bdh->bh", weights, features) / tf.maximum(count, 1.0)
        return tf.concat([pooled, count / self.num_columns], axis=-1)
