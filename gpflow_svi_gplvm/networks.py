"""A small multilayer perceptron made of GPflow Parameters, for amortised encoders.

Parameters (not Keras layers) keep the weights visible to ``trainable_variables``,
``print_summary``, ``set_trainable``, ``deepcopy`` and checkpoints like any other GPflow
parameter.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
from gpflow.base import Module, Parameter
from gpflow.config import default_float

__all__ = ["MLP"]

_ACTIVATIONS = {"tanh": tf.tanh, "relu": tf.nn.relu, "softplus": tf.nn.softplus, "elu": tf.nn.elu}


class MLP(Module):
    """h_0 = x [B, I]; h_k = act(h_{k-1} W_k + b_k); output h_K W + b [B, O] (no activation).

    Weights start Glorot-uniform (seeded), biases at zero.
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
        super().__init__(name=name)
        if activation not in _ACTIVATIONS:
            raise ValueError(
                f"activation must be one of {sorted(_ACTIVATIONS)}, got {activation!r}."
            )
        self.activation = activation
        sizes = [int(input_size), *map(int, hidden_sizes), int(output_size)]
        rng = np.random.default_rng(seed)
        self.weights = []
        self.biases = []
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            limit = np.sqrt(6.0 / (fan_in + fan_out))
            weight = rng.uniform(-limit, limit, size=(fan_in, fan_out))
            self.weights.append(Parameter(weight, dtype=default_float(), name="weight"))
            self.biases.append(Parameter(np.zeros(fan_out), dtype=default_float(), name="bias"))

    def __call__(self, inputs: tf.Tensor) -> tf.Tensor:
        activation = _ACTIVATIONS[self.activation]
        hidden = inputs
        for weight, bias in zip(self.weights[:-1], self.biases[:-1]):
            hidden = activation(tf.matmul(hidden, weight) + bias)
        return tf.matmul(hidden, self.weights[-1]) + self.biases[-1]
