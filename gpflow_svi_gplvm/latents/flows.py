r"""Normalising-flow latents: q(x_n) a per-row base Gaussian pushed through K invertible layers.

As in the paper's supplement ("Flexible Variational Families using Normalising Flows"),

.. math::

    x_n^{(0)} \sim \mathcal{N}(\mu_n, \mathrm{diag}\, s_n), \qquad
    x_n = g_K \circ \dots \circ g_1 (x_n^{(0)}), \qquad
    \log q(x_n) = \log \mathcal{N}(x_n^{(0)}; \mu_n, \mathrm{diag}\, s_n)
    - \sum_k \log \Big| \det \frac{\partial g_k}{\partial x_n^{(k-1)}} \Big|,

and the row term of the bound is the Monte Carlo estimate, over the J draws of the batch,

.. math::

    r_n = \frac{1}{J} \sum_j \big[ \log p(x_n^{(j)}) - \log q(x_n^{(j)}) \big],

with :math:`\log p` at the *transformed* draw :math:`x_n^{(j)}` (not at the base draw).

The layers' parameters are shared by all rows (``"shared"``), tables with a row each
(``"per-row"``, updated row-sparsely like the base tables), or, for a few rows, one flow over
:math:`\mathrm{vec}(X)` of all rows jointly (``"joint"``, :class:`JointFlowLatent`). Layers:
:class:`Planar` (Rezende & Mohamed, 2015), written here as a ``tfp.bijectors.Bijector``, and
``"iaf"``, inverse autoregressive layers made of TFP's ``MaskedAutoregressiveFlow`` (inverted, so
that drawing is one pass) with a masked network whose per-row variant reads a context vector
of each row (:class:`AutoregressiveLayers`).
"""

from __future__ import annotations

import abc
from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Module, Parameter
from gpflow.config import default_float
from gpflow.utilities import positive

from ..validation import check_integer, check_layer_sizes
from .base import RowLatentVariables, checked_variance, row_table
from .batch import LatentBatch, NewRowFit

__all__ = [
    "FLOWS",
    "FLOW_PARAMETERS",
    "Planar",
    "FlowLayers",
    "PlanarLayers",
    "AutoregressiveLayers",
    "FlowLatent",
    "JointFlowLatent",
    "flow_latent",
    "check_flow_options",
]

FLOWS = ("planar", "iaf")
"""The layer kinds: planar layers, or inverse autoregressive layers (TFP's masked
autoregressive flow, inverted)."""

FLOW_PARAMETERS = ("shared", "per-row", "joint")
"""Whose the layers' parameters are: all rows', each row's own, or one flow over vec(X)."""

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


class FlowLatent(RowLatentVariables):
    r"""q(x_n): the base :math:`\mathcal{N}(\mu_n, \mathrm{diag}\, s_n)` (tables [N, Q]) pushed
    through ``layers`` (a :class:`FlowLayers` on events [Q]; its per-row tables join the base
    tables, so a batch gathers and updates only its rows of all of them).

    The row term is the Monte Carlo estimate of the module docstring over the batch's draws.
    Mean and marginal variance of q(x_n) have no closed form: :meth:`moments_of` estimates them
    from ``moment_draws`` fixed draws (common to all rows, so rows agree however they are
    grouped).
    """

    has_density = True

    def __init__(
        self,
        initial_mean: np.ndarray,
        layers: FlowLayers,
        initial_variance: float | np.ndarray = 0.1,
        moment_draws: int = 256,
        name: str | None = None,
    ):
        initial_mean = np.asarray(initial_mean)
        num_data, latent_dim = initial_mean.shape
        super().__init__(num_data, latent_dim, name=name)
        if layers.dim != self.event_size:
            raise ValueError(
                f"The flow layers act on events of {layers.dim} numbers, but this family's "
                f"events have {self.event_size}: build them with dim={self.event_size}."
            )
        self.layers = layers
        variance = checked_variance(initial_variance, initial_mean.shape)
        # The variance first: its transform's inverse takes several [N, Q] temporaries.
        self.variance = row_table(variance, "base_variance", positive())
        self.mean = row_table(initial_mean, "base_mean")
        self.moment_draws = check_integer(moment_draws, "moment_draws", hint="e.g. 256")

    @property
    def event_size(self) -> int:
        """The size of the vectors the flow acts on: Q, one row's latent."""
        return self.latent_dim

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean, self.variance, *self.layers.row_tables)

    @check_shapes("noise: [num_draws, broadcast batch, Q]", "return[0]: [num_draws, batch, Q]")
    def transformed(
        self, rows: tuple[tf.Tensor, ...], noise: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        r"""Draws x [S, B, Q] of q(x_n) for parameter rows, from standard ``noise`` [S, B or 1,
        Q], and their log densities :math:`\log q(x)` [S, B]."""
        mean, variance, *flow_rows = rows
        base = mean + tf.sqrt(variance) * noise
        log_base = -0.5 * tf.reduce_sum(
            tf.square(noise) + tf.math.log(2.0 * np.pi * variance), axis=-1
        )
        bijector = self.layers.bijector(flow_rows)
        x = bijector.forward(base)
        return x, log_base - bijector.forward_log_det_jacobian(base, event_ndims=1)

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        shape = [self.moment_draws, 1, self.latent_dim]
        noise = tf.random.stateless_normal(shape, seed=[0, 0], dtype=rows[0].dtype)
        x, _ = self.transformed(rows, noise)
        mean, variance = tf.nn.moments(x, axes=[0])
        return mean, variance

    @check_shapes(
        "noise: [num_draws, broadcast batch, Q]",
        "return[0]: [num_draws, batch, Q]",
        "return[1]: [num_draws, batch]",
        "return[2]: [num_draws, batch, Q]",
    )
    def transformed_with_gradient(
        self, rows: tuple[tf.Tensor, ...], noise: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        r""":meth:`transformed`'s draws x and :math:`\log q(x)` [S, B], and the gradient in x of
        :math:`\log q(x)` with the parameters held fixed [S, B, Q]: with :math:`x = T(\epsilon)`
        and :math:`h(\epsilon) = \log q(T(\epsilon))`,
        :math:`\nabla_x \log q = J^{-\top} \nabla_\epsilon h`, :math:`J = \partial x /
        \partial \epsilon` [Q, Q] per draw (one Jacobian of the flow per draw, no inverse)."""
        shape = tf.broadcast_dynamic_shape(tf.shape(noise), tf.shape(rows[0][None]))  # [S, B, Q]
        flat = tf.reshape(tf.broadcast_to(noise, shape), [-1, self.latent_dim])
        with tf.GradientTape(persistent=True, watch_accessed_variables=False) as tape:
            tape.watch(flat)
            x, log_q = self.transformed(rows, tf.reshape(flat, shape))
            flat_x = tf.reshape(x, [-1, self.latent_dim])
        jacobian = tape.batch_jacobian(flat_x, flat)  # [S B, Q, Q]
        along_noise = tape.gradient(log_q, flat)[..., None]  # each draw's h reads its own eps
        gradient = tf.linalg.solve(jacobian, along_noise, adjoint=True)[..., 0]
        return x, log_q, tf.reshape(tf.stop_gradient(gradient), shape)

    @inherit_check_shapes
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        if self.has_density:
            x, log_q, gradient = self.transformed_with_gradient(rows, noise)
            densities = (log_q, gradient)
        else:  # a joint flow's log q is all rows' together
            x, log_q = self.transformed(rows, noise)
            densities = (None, None)
        row_term = tf.reduce_mean(log_prior(x) - log_q, axis=0)
        mean, variance = self.moments_of(rows)
        return LatentBatch(x, row_term, mean, variance, None, *densities)

    @inherit_check_shapes
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """New rows start with the median trained variance of each dimension and the median
        of each per-row flow parameter."""
        medians = [
            tfp.stats.percentile(table, 50.0, axis=0, interpolation="midpoint")
            for table in self.row_parameters[1:]
        ]
        batch = tf.shape(mean)[:1]
        starts = [tf.broadcast_to(m, tf.concat([batch, tf.shape(m)], 0)) for m in medians]
        return (mean, *starts)


@check_shapes("x: [batch..., Q]", "return: [batch...]")
def log_prior(x: tf.Tensor) -> tf.Tensor:
    r""":math:`\log \mathcal{N}(x; 0, I)` over the last axis."""
    size = tf.cast(tf.shape(x)[-1], x.dtype)
    return -0.5 * (tf.reduce_sum(tf.square(x), axis=-1) + size * np.log(2.0 * np.pi))


class JointFlowLatent(FlowLatent):
    r"""One flow over :math:`\mathrm{vec}(X)` of all N rows: the base Gaussians of the rows
    [N, Q] flattened to one vector [N Q] and pushed through ``layers`` (on events [N Q]), so that
    q(X) need not factorise over rows (the paper's flow "over vec(X)" of a few points).

    Every step draws all rows (cost O(N)): meant for a few rows. Each row's term is
    :math:`\frac{1}{N}` of the joint :math:`\frac1J \sum_j [\log p(X^{(j)}) - \log q(X^{(j)})]`,
    so the bound's rows add up to it for any batch. Its flow describes the training rows only:
    new rows are refused (:meth:`check_new_rows`), and so is the importance-weighted bound, whose
    weights need each row's own density.
    """

    has_density = False

    @property
    def event_size(self) -> int:
        """N Q: the flow acts on all rows' latents at once."""
        return self.num_data * self.latent_dim

    def _everything(self) -> tuple[tf.Tensor, ...]:
        return self.rows(tf.range(self.num_data, dtype=tf.int64))

    @inherit_check_shapes
    def transformed(
        self, rows: tuple[tf.Tensor, ...], noise: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Draws [S, N, Q] of all rows (``rows`` must be all N of them) and :math:`\\log q(X)`
        / N [S, N] (each row's share of the joint density)."""
        mean, variance = rows
        noise = self._all_rows_noise(noise)
        base = mean + tf.sqrt(variance) * noise
        log_base = -0.5 * tf.reduce_sum(
            tf.square(noise) + tf.math.log(2.0 * np.pi * variance), axis=[-2, -1]
        )
        flat = tf.reshape(base, [-1, self.event_size])
        bijector = self.layers.bijector(())
        x = tf.reshape(bijector.forward(flat), tf.shape(base))
        log_q = log_base - bijector.forward_log_det_jacobian(flat, event_ndims=1)
        share = log_q[:, None] / self.num_data
        return x, tf.broadcast_to(share, tf.shape(x)[:2])

    def _all_rows_noise(self, noise: tf.Tensor) -> tf.Tensor:
        """``noise`` [S, N, Q]; noise of fewer rows ([S, 1, Q], shared by the rows of a
        prediction) would tie the rows' base draws, so it seeds independent draws instead."""
        shape = tf.stack([tf.shape(noise)[0], self.num_data, self.latent_dim])

        def independent() -> tf.Tensor:
            seed = tf.stack([tf.bitcast(tf.reduce_sum(noise), tf.int64), tf.constant(1, tf.int64)])
            return tf.random.stateless_normal(shape, seed=seed, dtype=noise.dtype)

        rows = tf.shape(noise)[1]
        return tf.cond(
            tf.equal(rows, self.num_data), lambda: tf.broadcast_to(noise, shape), independent
        )

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        shape = [self.moment_draws, self.num_data, self.latent_dim]
        noise = tf.random.stateless_normal(shape, seed=[0, 0], dtype=rows[0].dtype)
        x, _ = self.transformed(rows, noise)
        mean, variance = tf.nn.moments(x, axes=[0])
        return mean, variance

    @inherit_check_shapes
    def moments(self, idx: tf.Tensor, Y: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        mean, variance = self.moments_of(self._everything())
        return tf.gather(mean, idx), tf.gather(variance, idx)

    def batch_at(self, idx: tf.Tensor, num_samples: int, noise: tf.Tensor | None) -> LatentBatch:
        """The rows ``idx`` of one batch of all the training rows, as q(vec X) is joint."""
        everything = tf.range(self.num_data, dtype=tf.int64)
        noise = self.noise(everything, num_samples) if noise is None else noise
        batch = self.batch_of(self._everything(), num_samples, noise)
        return LatentBatch(
            tf.gather(batch.samples, idx, axis=1),
            tf.gather(batch.row_term, idx),
            tf.gather(batch.mean, idx),
            tf.gather(batch.variance, idx),
        )

    def check_new_rows(self) -> None:
        """A joint flow over the training rows' vec(X) describes those rows only."""
        raise ValueError(
            "A joint flow (flow_parameters='joint') is one distribution over the training rows' "
            "latents together and has no q(x*) for new rows: use flow_parameters='shared' or "
            "'per-row' to infer latents of new rows, reconstruct them or export the model."
        )

    def new_rows(
        self, Y: tf.Tensor, num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        self.check_new_rows()
        return super().new_rows(Y, num_samples, noise, fit)


def check_flow_options(flow: str, num_layers: int, parameters: str) -> int:
    """A ``ValueError`` for an unknown ``flow`` or ``parameters`` or fewer than one layer;
    returns the layer count."""
    if flow not in FLOWS:
        raise ValueError(
            f"Unknown flow {flow!r}: choose one of {', '.join(map(repr, FLOWS))} (planar layers, "
            "or inverse autoregressive layers)."
        )
    if parameters not in FLOW_PARAMETERS:
        raise ValueError(
            f"flow_parameters must be one of {', '.join(map(repr, FLOW_PARAMETERS))}, got "
            f"{parameters!r}."
        )
    return check_integer(num_layers, "num_layers", hint="at least one flow layer, e.g. 10")


def flow_latent(
    initial_mean: np.ndarray,
    flow: str = "planar",
    num_layers: int = 10,
    parameters: str = "shared",
    initial_variance: float = 0.1,
    hidden_sizes: Sequence[int] | None = None,
    context_size: int | None = None,
    moment_draws: int = 256,
    seed: int = 0,
) -> FlowLatent:
    """The flow family for initial latents [N, Q]: ``num_layers`` layers of kind ``flow``
    (:data:`FLOWS`) whose parameters are ``parameters`` (:data:`FLOW_PARAMETERS`);
    ``hidden_sizes`` and ``context_size`` shape the autoregressive networks."""
    num_layers = check_flow_options(flow, num_layers, parameters)
    num_data, latent_dim = np.shape(initial_mean)
    joint = parameters == "joint"
    dim = num_data * latent_dim if joint else latent_dim
    rows = num_data if parameters == "per-row" else None
    layers: FlowLayers
    if flow == "planar":
        layers = PlanarLayers(num_layers, dim, rows, seed=seed)
    else:
        layers = AutoregressiveLayers(num_layers, dim, rows, hidden_sizes, context_size, seed)
    family = JointFlowLatent if joint else FlowLatent
    return family(initial_mean, layers, initial_variance, moment_draws)
