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

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Parameter
from gpflow.utilities import positive

from ..validation import check_integer
from .base import RowLatentVariables, checked_variance, row_table
from .batch import LatentBatch, NewRowFit
from .flow_layers import AutoregressiveLayers, FlowLayers, PlanarLayers

__all__ = [
    "FLOWS",
    "FLOW_PARAMETERS",
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

    def new_row_parameters(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        self.check_new_rows()
        return super().new_row_parameters(Y, fit)


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
