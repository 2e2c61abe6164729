"""The invertible layers of a normalising flow: planar layers and inverse autoregressive layers
(their masked networks), each with the log-determinant of its Jacobian."""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.base import Module, Parameter
from gpflow.config import default_float

from ..validation import check_integer, check_layer_sizes

__all__ = [
    "PLANAR_MARGIN",
    "Planar",
    "FlowLayers",
    "PlanarLayers",
    "MaskedNetwork",
    "AutoregressiveLayers",
]

PLANAR_MARGIN = 1e-3
r"""The constrained :math:`w^\top \hat u` of a planar layer stays above :math:`-1 +` this, so that
its Jacobian determinant stays at least this far from zero."""


# softplus(c) = 1 - margin: an unconstrained u = 0 gives u_hat = 0, so a new layer is the identity.
_PLANAR_SHIFT = float(np.log(np.expm1(1.0 - PLANAR_MARGIN)))


_LOG_SCALE_BOUND = 5.0
"""Autoregressive log-scales are squashed into (-5, 5): a layer never scales by more than e^5."""


class Planar(tfp.bijectors.Bijector):
    r"""The planar layer :math:`f(z) = z + \hat u \tanh(w^\top z + b)`, event [Q].

    Invertible because :math:`w^\top \hat u > -1`, which holds for every unconstrained ``u`` by

    .. math::

        \hat u = u + \big(m(w^\top u) - w^\top u\big) \frac{w}{\lVert w \rVert^2}, \qquad
        m(a) = -1 + \epsilon + \mathrm{softplus}(a + c),

    with :math:`\epsilon` = :data:`PLANAR_MARGIN` and :math:`c` such that :math:`m(0) = 0` (so
    :math:`u = 0` is the identity); then :math:`w^\top \hat u = m(w^\top u)`. The log-determinant
    is :math:`\log(1 + (1 - \tanh^2(w^\top z + b))\, w^\top \hat u) \ge \log \epsilon`. ``u``, ``w``
    [..., Q] and ``b`` [...] may carry batch dimensions (one layer per row). The inverse solves
    the monotone scalar equation for :math:`a = w^\top z` by bisection.
    """

    def __init__(self, u: tf.Tensor, w: tf.Tensor, b: tf.Tensor, name: str = "planar"):
        parameters = dict(locals())
        with tf.name_scope(name) as name:
            self._u = tf.convert_to_tensor(u)
            self._w = tf.convert_to_tensor(w, dtype=self._u.dtype)
            self._b = tf.convert_to_tensor(b, dtype=self._u.dtype)
            super().__init__(
                forward_min_event_ndims=1, dtype=self._u.dtype, parameters=parameters, name=name
            )

    @classmethod
    def _parameter_properties(cls, dtype, num_classes=None):
        properties = tfp.util.ParameterProperties
        return dict(u=properties(event_ndims=1), w=properties(event_ndims=1), b=properties())

    @property
    def direction(self) -> tf.Tensor:
        r""":math:`w^\top \hat u` [...], always above :math:`-1`."""
        w_u = tf.reduce_sum(self._w * self._u, axis=-1)
        return -1.0 + PLANAR_MARGIN + tf.math.softplus(w_u + _PLANAR_SHIFT)

    @property
    def u_hat(self) -> tf.Tensor:
        r"""The constrained :math:`\hat u` [..., Q]."""
        w_u = tf.reduce_sum(self._w * self._u, axis=-1)
        unit = tf.math.divide_no_nan(self._w, tf.reduce_sum(tf.square(self._w), -1, keepdims=True))
        return self._u + (self.direction - w_u)[..., None] * unit

    def _activation(self, z: tf.Tensor) -> tf.Tensor:
        return tf.reduce_sum(self._w * z, axis=-1) + self._b

    def _forward(self, z: tf.Tensor) -> tf.Tensor:
        return z + self.u_hat * tf.tanh(self._activation(z))[..., None]

    def _forward_log_det_jacobian(self, z: tf.Tensor) -> tf.Tensor:
        slope = 1.0 - tf.square(tf.tanh(self._activation(z)))
        return tf.math.log1p(slope * self.direction)

    def _inverse(self, x: tf.Tensor) -> tf.Tensor:
        # w^T x + b = a + m tanh(a) with a = w^T z + b, increasing in a; |tanh| <= 1 brackets a.
        target = self._activation(x)
        m = self.direction
        a = _bisection(tf.stop_gradient(target), tf.stop_gradient(m))
        # One Newton step from the root: the same value, and the gradient of the implicit
        # function (da/dtarget = 1 / (1 + m sech^2 a)), which the bisection's selections lack.
        slope = 1.0 + m * (1.0 - tf.square(tf.tanh(a)))
        a = a - (a + m * tf.tanh(a) - target) / slope
        return x - self.u_hat * tf.tanh(a)[..., None]


def _bisection(target: tf.Tensor, m: tf.Tensor, steps: int = 100) -> tf.Tensor:
    """The root a of a + m tanh(a) = target (m > -1, elementwise), within [target - |m|,
    target + |m|], by ``steps`` halvings."""
    shape = tf.broadcast_dynamic_shape(tf.shape(target), tf.shape(m))
    low = tf.broadcast_to(target - tf.abs(m), shape)
    high = tf.broadcast_to(target + tf.abs(m), shape)

    def halve(i, low, high):
        middle = 0.5 * (low + high)
        above = middle + m * tf.tanh(middle) > target
        return i + 1, tf.where(above, low, middle), tf.where(above, middle, high)

    _, low, high = tf.while_loop(lambda i, *_: i < steps, halve, (0, low, high))
    return 0.5 * (low + high)


class FlowLayers(Module, abc.ABC):
    """K invertible layers on vectors of ``dim`` numbers, parameters shared or one set per row.

    :attr:`row_tables` are the per-row tables, each [N, ...] (empty when shared);
    :meth:`bijector` builds the composed map for rows of them.
    """

    def __init__(self, num_layers: int, dim: int, num_rows: int | None, name: str | None = None):
        super().__init__(name=name)
        self.num_layers = check_integer(num_layers, "num_layers", hint="at least one flow layer")
        self.dim = int(dim)
        self.num_rows = num_rows

    @property
    def per_row(self) -> bool:
        return self.num_rows is not None

    @property
    @abc.abstractmethod
    def row_tables(self) -> tuple[Parameter, ...]:
        """The tables holding each row's own parameters, [N, ...]; () when they are shared."""

    @abc.abstractmethod
    def bijector(self, rows: Sequence[tf.Tensor]) -> tfp.bijectors.Bijector:
        """g_K o ... o g_1 on events [dim], for rows of :attr:`row_tables` ([B, ...] each, so
        that it acts on [..., B, dim]), or for all rows when shared (``rows`` empty)."""


class PlanarLayers(FlowLayers):
    """K :class:`Planar` layers: parameters u, w [K, dim] and b [K], or tables u, w
    [N, K, dim] and b [N, K] per row. u starts at zero (each layer the identity), w at random."""

    def __init__(
        self, num_layers: int, dim: int, num_rows: int | None = None, seed: int = 0, name=None
    ):
        super().__init__(num_layers, dim, num_rows, name=name)
        rows = () if num_rows is None else (num_rows,)
        shape = rows + (self.num_layers, self.dim)
        rng = np.random.default_rng(seed)
        self.u = Parameter(np.zeros(shape), dtype=default_float(), name="planar_u")
        w = rng.standard_normal(shape) / np.sqrt(self.dim)
        self.w = Parameter(w, dtype=default_float(), name="planar_w")
        self.b = Parameter(np.zeros(shape[:-1]), dtype=default_float(), name="planar_b")

    @property
    def row_tables(self) -> tuple[Parameter, ...]:
        return (self.u, self.w, self.b) if self.per_row else ()

    def bijector(self, rows: Sequence[tf.Tensor]) -> tfp.bijectors.Bijector:
        u, w, b = rows if self.per_row else (self.u, self.w, self.b)
        layers = [Planar(u[..., k, :], w[..., k, :], b[..., k]) for k in range(self.num_layers)]
        return tfp.bijectors.Chain(layers[::-1])  # a Chain applies its last bijector first


class MaskedNetwork(Module):
    r"""The shift and log-scale [..., dim] of an autoregressive layer: a MADE (Germain et al.,
    2015) with ``tanh`` hidden layers whose weights are masked *in the forward pass*, so that
    outputs d read the inputs before d in ``order`` only, whatever an optimiser does to the
    masked entries (TFP's own network masks by a Keras constraint, which only Keras optimisers
    apply). With ``context_size`` C the first layer also reads a context [..., C] (a conditional
    MADE, as in inverse autoregressive flows). The output layer starts at zero, so a new layer is
    the identity; the log-scale is :math:`5 \tanh(\cdot / 5)`.
    """

    def __init__(
        self,
        dim: int,
        hidden_sizes: Sequence[int],
        order: np.ndarray,
        context_size: int = 0,
        seed: int = 0,
        name=None,
    ):
        super().__init__(name=name)
        rng = np.random.default_rng(seed)
        inputs = np.asarray(order) + 1  # input d has degree order[d] + 1 in 1..dim
        degrees = [inputs] + [np.arange(size) % max(dim - 1, 1) + 1 for size in hidden_sizes]
        # Unit j of a layer reads units of degree <= its own; output d only those below d's.
        masks = [degrees[i][:, None] <= degrees[i + 1][None, :] for i in range(len(hidden_sizes))]
        masks.append(degrees[-1][:, None] < np.tile(inputs, 2)[None, :])
        self.masks = [tf.constant(mask, dtype=default_float()) for mask in masks]
        shapes = [mask.shape for mask in masks]
        self.weights = [
            Parameter(rng.standard_normal(shape) / np.sqrt(shape[0]), dtype=default_float())
            for shape in shapes[:-1]
        ] + [Parameter(np.zeros(shapes[-1]), dtype=default_float())]
        self.biases = [Parameter(np.zeros(shape[1]), dtype=default_float()) for shape in shapes]
        self.context_weights = None
        if context_size:
            weights = rng.standard_normal((context_size, shapes[0][1])) / np.sqrt(context_size)
            self.context_weights = Parameter(weights, dtype=default_float())

    def __call__(
        self, x: tf.Tensor, context: tf.Tensor | None = None
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """(shift, log_scale), each [..., dim], for x [..., dim] (and a context [..., C])."""
        h = x
        for i, (weight, mask, bias) in enumerate(zip(self.weights, self.masks, self.biases)):
            h = tf.einsum("...i,io->...o", h, weight * mask) + bias
            if i == 0 and self.context_weights is not None:
                h += tf.einsum("...c,co->...o", context, self.context_weights)
            if i < len(self.weights) - 1:
                h = tf.tanh(h)
        shift, raw = tf.split(h, 2, axis=-1)
        return shift, _LOG_SCALE_BOUND * tf.tanh(raw / _LOG_SCALE_BOUND)


class AutoregressiveLayers(FlowLayers):
    r"""K inverse autoregressive layers: each TFP's ``MaskedAutoregressiveFlow`` with a
    :class:`MaskedNetwork`, inverted, so that :math:`x_d = (z_d - \text{shift}_d(z_{<d}))
    e^{-\text{log\_scale}_d(z_{<d})}` is one pass of the network; the variables' order is
    reversed from one layer to the next. Per row, the networks are shared and each row has a
    context vector of ``context_size`` numbers (a table [N, C], starting at zero) that every
    layer's network reads.
    """

    def __init__(
        self,
        num_layers: int,
        dim: int,
        num_rows: int | None = None,
        hidden_sizes: Sequence[int] | None = None,
        context_size: int | None = None,
        seed: int = 0,
        name=None,
    ):
        super().__init__(num_layers, dim, num_rows, name=name)
        hidden = check_layer_sizes(
            hidden_sizes if hidden_sizes is not None else (max(2 * self.dim, 8),), "hidden_sizes"
        )
        context = 0
        if self.per_row:
            context = check_integer(
                context_size if context_size is not None else max(self.dim, 2), "context_size"
            )
            self.context = Parameter(
                np.zeros((int(num_rows or 0), context)), dtype=default_float(), name="context"
            )
        order = np.arange(self.dim)
        self.networks = [
            MaskedNetwork(self.dim, hidden, order if k % 2 == 0 else order[::-1], context, seed + k)
            for k in range(self.num_layers)
        ]

    @property
    def row_tables(self) -> tuple[Parameter, ...]:
        return (self.context,) if self.per_row else ()

    def bijector(self, rows: Sequence[tf.Tensor]) -> tfp.bijectors.Bijector:
        context = rows[0] if self.per_row else None
        layers = [
            tfp.bijectors.Invert(
                tfp.bijectors.MaskedAutoregressiveFlow(
                    shift_and_log_scale_fn=_conditioned(network, context)
                )
            )
            for network in self.networks
        ]
        return tfp.bijectors.Chain(layers[::-1])


def _conditioned(network: MaskedNetwork, context: tf.Tensor | None):
    """The network as TFP's ``shift_and_log_scale_fn``, reading ``context`` [B, C] besides."""

    def shift_and_log_scale(x: tf.Tensor, **_) -> tuple[tf.Tensor, tf.Tensor]:
        return network(x, context)

    return shift_and_log_scale
