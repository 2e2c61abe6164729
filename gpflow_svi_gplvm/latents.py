"""Latent-variable modules: the swappable treatments of the GPLVM inputs X [N, Q].

A latent module takes a minibatch of row indices ``idx`` [B] and the rows ``Y`` [B, D] and returns
a :class:`LatentBatch`: samples of x_n, the per-row term of the bound and the moments of q(x_n).
The model never needs to know which treatment it holds, so a new family (a flow, say) is a new
subclass of :class:`LatentVariables` and nothing else.

Per-row parameters are read with :func:`gather_rows`, which gathers the *unconstrained* table and
then applies the transform, so the gradient is a sparse ``IndexedSlices`` over the batch rows and
the cost of a step does not grow with N.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Module, Parameter
from gpflow.config import default_float
from gpflow.utilities import positive

from .distributed import owned_by_worker
from .networks import MLP, SetPooling
from .newton_rows import newton_rows
from .optimizers import adam_moments_and_step
from .validation import check_integer, check_layer_sizes

__all__ = [
    "LatentBatch",
    "NewRowFit",
    "LatentVariables",
    "RowLatentVariables",
    "PointLatent",
    "MAPLatent",
    "GaussianLatent",
    "EncoderLatent",
    "gather_rows",
    "paper_encoder_options",
]


class LatentBatch(NamedTuple):
    """What a latent module returns for a minibatch of B rows."""

    samples: tf.Tensor
    """[S, B, Q] draws of x_n (S = number of samples; 1 for a deterministic latent)."""
    row_term: tf.Tensor
    """[B] the row's term of the bound: 0, log p(x_n) or -KL(q(x_n) || p(x_n))."""
    mean: tf.Tensor
    """[B, Q] mean of q(x_n)."""
    variance: tf.Tensor
    """[B, Q] marginal variances of q(x_n) (zeros for a point estimate)."""
    scale: tf.Tensor | None = None
    """[B, Q, Q] lower Cholesky factor of a full covariance of q(x_n); None when q(x_n) is
    diagonal (or a point)."""

    @property
    def covariance(self) -> tf.Tensor:
        """The covariance of a Gaussian q(x_n): marginal variances [B, Q], or full [B, Q, Q]
        where there is a ``scale``."""
        if self.scale is None:
            return self.variance
        return tf.linalg.matmul(self.scale, self.scale, transpose_b=True)


class NewRowFit(NamedTuple):
    """How q(x*) of new rows is fitted by a family that must optimise it (see
    :meth:`LatentVariables.new_rows`); an amortised family ignores it."""

    objective: Callable[[LatentBatch, tf.Tensor, tf.Tensor], tf.Tensor]
    """(batch of A of the rows, their Y [A, D], their positions [A] among the B rows fitted) ->
    each of those rows' part of the bound [A], maximised over q(x*)."""
    initial_mean: Callable[[tf.Tensor], tf.Tensor]
    """Y [B, D] -> [B, Q]: where the mean of q(x*) of each row starts."""
    num_samples: int
    """Draws of x* per step."""
    iterations: int
    """Adam steps; with a ``tolerance``, the most Newton steps a row takes."""
    learning_rate: float
    """Adam's step size."""
    averaging_start: int
    """The first step whose iterate enters the average that gives q(x*)."""
    seed: int
    """Seed of the stateless draws of each step, common to all rows."""
    tolerance: float | None = None
    """For a deterministic objective: each row takes damped Newton steps until its Newton
    decrement falls below ``tolerance`` (relative to its part of the bound; see
    :mod:`~gpflow_svi_gplvm.newton_rows`). None: ``iterations`` Adam steps and the average of
    the iterates from ``averaging_start`` on."""


_NO_NEW_ROWS = (
    "Cannot infer latents of new rows with {name}: new-row inference needs either per-row "
    "tables (subclass RowLatentVariables, which also gives the optimisation of q(x*)) or an "
    "amortised q(x_n | y_n) (set amortised = True and compute q(x) from Y alone, ignoring idx)."
)


def row_table(
    values: np.ndarray, name: str, transform: tfp.bijectors.Bijector | None = None
) -> Parameter:
    """A per-row table [N, ...] of a latent family, as a Parameter. When a model is built from a
    shard on several workers it holds this worker's rows only, and is this worker's alone
    (:func:`~gpflow_svi_gplvm.distributed.owned_by_worker`)."""
    return owned_by_worker(
        lambda: Parameter(values, transform=transform, dtype=default_float(), name=name)
    )


@check_shapes("parameter: [N, row_shape...]", "idx: [batch]", "return: [batch, row_shape...]")
def gather_rows(parameter: Parameter, idx: tf.Tensor) -> tf.Tensor:
    """Rows ``idx`` [B] of ``parameter`` [N, ...], constrained: transform(gather(raw, idx)).

    Gathering before transforming keeps the gradient an ``IndexedSlices`` over B rows.
    """
    rows = tf.gather(parameter.unconstrained_variable, idx)
    return rows if parameter.transform is None else parameter.transform.forward(rows)


class LatentVariables(Module, abc.ABC):
    """Base class of q(x_n): maps (idx [B], Y [B, D]) to a :class:`LatentBatch`.

    New rows (unseen in training) go through :meth:`new_rows`: the base class serves amortised
    families, :class:`RowLatentVariables` optimises per-row parameters, and a family that can do
    neither raises a ``ValueError`` from :meth:`check_new_rows`.
    """

    amortised: bool = False
    """True when q(x_n) is computed from y_n (no per-row parameters)."""
    gaussian: bool = False
    """True when q(x_n) is a Gaussian with the batch's moments, so that expectations over it
    may be taken in closed form (:mod:`gpflow_svi_gplvm.latent_expectations`)."""

    def __init__(self, latent_dim: int, name: str | None = None):
        super().__init__(name=name)
        self.latent_dim = int(latent_dim)
        # All draws come from this generator: its state is checkpointed, so resumed runs repeat.
        self.generator = tf.random.Generator.from_seed(0)

    @abc.abstractmethod
    @check_shapes("idx: [batch]", "Y: [batch, D]", "return[0]: [batch, Q]", "return[1]: [batch, Q]")
    def moments(self, idx: tf.Tensor, Y: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance of q(x_n), both [B, Q]. ``Y`` [B, D], the rows' data, is
        needed by amortised families only (per-row families read their tables by ``idx``)."""

    @abc.abstractmethod
    @check_shapes(
        "idx: [batch]",
        "Y: [batch, D]",
        "noise: [num_noise, broadcast batch, Q]",
        "return.samples: [num_draws, batch, Q]",
        "return.row_term: [batch]",
        "return.mean: [batch, Q]",
        "return.variance: [batch, Q]",
        "return.scale: [batch, Q, Q]",
    )
    def __call__(
        self,
        idx: tf.Tensor,
        Y: tf.Tensor,
        num_samples: int,
        noise: tf.Tensor | None = None,
        training: bool = False,
    ) -> LatentBatch:
        """Samples of x_n [S, B, Q], the row term [B] and the moments of q(x_n).

        ``noise`` [S, B or 1, Q] replaces the standard normal draws of :meth:`noise`.
        ``training`` is True inside the training bound, where a module may regularise itself
        (the encoder hides random inputs); predictions leave it False.
        """

    def noise(self, idx: tf.Tensor, num_samples: int) -> tf.Tensor:
        """Standard normal draws eps [S, B, Q] for the reparameterisation x = mu + L eps.

        Override to supply common random numbers or quasi-random draws.
        """
        shape = tf.stack([num_samples, tf.shape(idx)[0], self.latent_dim])
        return self.generator.normal(shape, dtype=default_float())

    def check_new_rows(self) -> None:
        """A ``ValueError`` unless :meth:`new_rows` can describe rows unseen in training: here,
        unless the family is amortised. Override together with :meth:`new_rows`."""
        if not self.amortised:
            raise ValueError(_NO_NEW_ROWS.format(name=type(self).__name__))

    @check_shapes(
        "Y: [batch, D]",
        "noise: [num_noise, broadcast batch, Q]",
        "return.samples: [num_draws, batch, Q]",
        "return.mean: [batch, Q]",
    )
    def new_rows(
        self, Y: tf.Tensor, num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        """q(x*) of new rows Y [B, D] (NaN = missing), with the model's globals frozen, as a
        :class:`LatentBatch` drawn with the standard normal ``noise`` [S, B or 1, Q].

        An amortised family applies itself to Y, so ``fit`` is not needed; other families raise
        the ``ValueError`` of :meth:`check_new_rows`.
        """
        self.check_new_rows()
        return self(tf.range(tf.shape(Y)[0], dtype=tf.int64), Y, num_samples, noise)


class RowLatentVariables(LatentVariables):
    """q(x_n) with parameters of its own for every row: tables [N, Q] (``row_parameters``).

    Subclasses say how a batch of rows (constrained values, one tensor [B, Q] per table) gives
    the moments and the :class:`LatentBatch`, and where the rows of new data start
    (:meth:`initial_rows`); gathering the rows is shared, and so is the fit of new rows
    (:meth:`fitted_rows`), which optimises the same parameters with the model frozen.
    """

    def __init__(self, num_data: int, latent_dim: int, name: str | None = None):
        super().__init__(latent_dim, name=name)
        self.num_data = int(num_data)

    @property
    @abc.abstractmethod
    def row_parameters(self) -> tuple[Parameter, ...]:
        """The per-row tables, each [N, Q]."""

    def rows(self, idx: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """The constrained parameter rows ``idx`` [B]: one [B, Q] tensor per table."""
        return tuple(gather_rows(parameter, idx) for parameter in self.row_parameters)

    @abc.abstractmethod
    @check_shapes("return[0]: [batch, Q]", "return[1]: [batch, Q]")
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [B, Q] of q(x_n) for parameter rows."""

    @abc.abstractmethod
    @check_shapes(
        "noise: [num_noise, broadcast batch, Q]",
        "return.samples: [num_draws, batch, Q]",
        "return.row_term: [batch]",
        "return.mean: [batch, Q]",
        "return.variance: [batch, Q]",
    )
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        """The :class:`LatentBatch` for parameter rows, with standard normal ``noise``."""

    @abc.abstractmethod
    @check_shapes("mean: [batch, Q]")
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """Starting parameter rows for new data whose latent means start at ``mean`` [B, Q]."""

    @inherit_check_shapes
    def moments(self, idx: tf.Tensor, Y: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        return self.moments_of(self.rows(idx))

    @inherit_check_shapes
    def __call__(
        self,
        idx: tf.Tensor,
        Y: tf.Tensor,
        num_samples: int,
        noise: tf.Tensor | None = None,
        training: bool = False,
    ) -> LatentBatch:
        noise = self.noise(idx, num_samples) if noise is None else noise
        return self.batch_of(self.rows(idx), num_samples, noise)

    def check_new_rows(self) -> None:
        """Nothing to refuse: new rows are fitted by :meth:`fitted_rows`."""

    @inherit_check_shapes
    def new_rows(
        self, Y: tf.Tensor, num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        """q(x*) of new rows Y [B, D] from their parameter rows fitted as in :meth:`fitted_rows`,
        drawn with ``noise`` [S, B or 1, Q]."""
        return self.batch_of(self.fitted_rows(Y, fit), num_samples, noise)

    def fitted_rows(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        r"""The parameter rows of new rows Y [B, D] (one [B, Q] tensor per table) that maximise
        ``fit.objective``, in the tables' unconstrained space, in-graph.

        Rows start at :meth:`initial_rows` of ``fit.initial_mean(Y)``. With ``fit.tolerance``,
        each row takes damped Newton steps of its own until it converges
        (:func:`~gpflow_svi_gplvm.newton_rows.newton_rows`), the draws of the standard noise
        [S, 1, Q] fixed for the whole fit. Without, every row takes ``fit.iterations`` Adam
        steps, step t drawing the noise from the stateless seed (``fit.seed``, t), and the
        result is the Polyak-Ruppert average of the iterates from step :math:`t_0` =
        ``fit.averaging_start`` on (each step's gradient comes from a few draws, so the last
        iterate alone jitters around the optimum), kept as a running mean:

        .. math::

            \bar\theta_t = \bar\theta_{t-1} + \frac{\theta_t - \bar\theta_{t-1}}{t - t_0 + 1},
            \qquad t \ge t_0.

        The draws are common to all rows, so that rows fitted together, one by one or in chunks
        agree.
        """
        transforms = [parameter.transform for parameter in self.row_parameters]
        initial = self.initial_rows(fit.initial_mean(Y))
        return fit_rows(self.batch_of, transforms, initial, Y, fit)


def fit_rows(
    batch_of: Callable[[tuple[tf.Tensor, ...], int, tf.Tensor], LatentBatch],
    transforms: Sequence[tfp.bijectors.Bijector | None],
    start: Sequence[tf.Tensor],
    Y: tf.Tensor,
    fit: NewRowFit,
) -> tuple[tf.Tensor, ...]:
    """Parameter rows (one tensor [B, ...] per table, from ``start``) of new rows Y [B, D] that
    maximise ``fit.objective`` of ``batch_of(rows, draws, noise)``, in the unconstrained space of
    ``transforms`` (one GPflow transform or None per table), as
    :meth:`RowLatentVariables.fitted_rows` describes."""
    raw = [r if t is None else t.inverse(r) for t, r in zip(transforms, start)]

    def constrain(raw: Sequence[tf.Tensor]) -> tuple[tf.Tensor, ...]:
        return tuple(r if t is None else t.forward(r) for t, r in zip(transforms, raw))

    def loss(step: tf.Tensor, raw: list[tf.Tensor], rows: tf.Tensor) -> tf.Tensor:
        seed = tf.stack([tf.constant(fit.seed, tf.int64), step])
        shape = [fit.num_samples, 1, start[0].shape[-1]]
        noise = tf.random.stateless_normal(shape, seed=seed, dtype=Y.dtype)
        batch = batch_of(constrain(raw), fit.num_samples, noise)
        return -fit.objective(batch, tf.gather(Y, rows), rows)  # [A]

    if fit.tolerance is None:
        every_row = tf.range(tf.shape(Y, out_type=tf.int64)[0])
        return constrain(_polyak_adam(lambda step, raw: loss(step, raw, every_row), raw, fit))
    # One set of draws for the whole fit (those of step 0): the objective stays fixed.
    step = tf.constant(0, tf.int64)
    return constrain(
        newton_rows(lambda raw, rows: loss(step, raw, rows), raw, fit.tolerance, fit.iterations)
    )


def _polyak_adam(
    loss: Callable[[tf.Tensor, list[tf.Tensor]], tf.Tensor],
    start: list[tf.Tensor],
    fit: NewRowFit,
) -> list[tf.Tensor]:
    """``fit.iterations`` Adam steps on ``loss(step, parameters)`` (each row's part [B], rows
    independent) from ``start`` [B, ...], inside one explicit ``tf.while_loop``, and the average
    of the iterates from ``fit.averaging_start`` on (the last one when that is the last step)."""

    def adam_step(step, raw, first, second, average):
        with tf.GradientTape() as tape:
            tape.watch(raw)
            total = tf.reduce_sum(loss(step, raw))
        gradients = tape.gradient(total, raw)
        updates = [
            adam_moments_and_step(m, v, g, step + 1, fit.learning_rate)
            for m, v, g in zip(first, second, gradients)
        ]
        raw = [r - u[2] for r, u in zip(raw, updates)]
        # The running mean of the iterates from averaging_start on (weight 1 at that step).
        dtype = raw[0].dtype
        weight = 1.0 / tf.cast(tf.maximum(step - fit.averaging_start + 1, 1), dtype)
        weight *= tf.cast(step >= fit.averaging_start, dtype)
        average = [a + weight * (r - a) for a, r in zip(average, raw)]
        return step + 1, raw, [u[0] for u in updates], [u[1] for u in updates], average

    def more(step: tf.Tensor, *_) -> tf.Tensor:
        return step < fit.iterations

    # An explicit while loop: the compiled graph does not depend on AutoGraph converting the
    # caller (a notebook kernel once ran it unconverted).
    zeros = [tf.zeros_like(r) for r in start]
    state = (tf.constant(0, tf.int64), start, zeros, list(zeros), list(start))
    return tf.while_loop(more, adam_step, state, parallel_iterations=1)[4]


class PointLatent(RowLatentVariables):
    r"""x_n is a free parameter (a delta :math:`q(x_n) = \delta(x_n - \mu_n)`); no row term. The
    sparse GPLVM."""

    def __init__(self, initial_mean: np.ndarray, name: str | None = None):
        initial_mean = np.asarray(initial_mean)
        num_data, latent_dim = initial_mean.shape
        super().__init__(num_data, latent_dim, name=name)
        self.mean = row_table(initial_mean, "latent_mean")

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean,)

    def row_term(self, x: tf.Tensor) -> tf.Tensor:
        """The row term at the point x [B, Q]: zero for the unregularised point estimate."""
        return tf.zeros_like(x[:, 0])

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        return rows[0], tf.zeros_like(rows[0])

    @inherit_check_shapes
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        # A delta q(x) needs one "sample" whatever num_samples is: all draws would be identical.
        mean, variance = self.moments_of(rows)
        return LatentBatch(mean[None], self.row_term(mean), mean, variance)

    @inherit_check_shapes
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return (mean,)

    def noise(self, idx: tf.Tensor, num_samples: int) -> tf.Tensor:
        """A point estimate draws nothing: an empty [0, B, Q] tensor."""
        return tf.zeros(tf.stack([0, tf.shape(idx)[0], self.latent_dim]), dtype=default_float())


class MAPLatent(PointLatent):
    r"""x_n a free parameter regularised by :math:`\log p(x_n)` (default
    :math:`p = \mathcal{N}(0, I)`): the MAP GPLVM."""

    def __init__(
        self,
        initial_mean: np.ndarray,
        prior: tfp.distributions.Distribution | None = None,
        name: str | None = None,
    ):
        super().__init__(initial_mean, name=name)
        if prior is None:
            zeros = tf.zeros(self.latent_dim, dtype=default_float())
            prior = tfp.distributions.MultivariateNormalDiag(zeros, tf.ones_like(zeros))
        if tuple(prior.event_shape) != (self.latent_dim,):
            raise ValueError(
                f"The MAP prior must have event shape [{self.latent_dim}] (one density over a "
                f"whole latent vector), got {tuple(prior.event_shape)}. Wrap a scalar prior in "
                "tfp.distributions.Independent(..., reinterpreted_batch_ndims=1)."
            )
        self.prior = prior

    def row_term(self, x: tf.Tensor) -> tf.Tensor:
        """log p(x_n) [B], once per row."""
        return self.prior.log_prob(x)


class GaussianLatent(RowLatentVariables):
    r"""q(x_n) = N(mu_n, diag s_n) with per-row parameters; row term -KL(q(x_n) || N(0, I)):

    .. math::

        \mathrm{KL} = \frac{1}{2} \sum_q \left(s_{nq} + \mu_{nq}^2 - 1 - \log s_{nq}\right).
    """

    gaussian = True

    def __init__(
        self,
        initial_mean: np.ndarray,
        initial_variance: float | np.ndarray = 0.1,
        name: str | None = None,
    ):
        initial_mean = np.asarray(initial_mean)
        num_data, latent_dim = initial_mean.shape
        super().__init__(num_data, latent_dim, name=name)
        variance = checked_variance(initial_variance, initial_mean.shape)
        self.mean = row_table(initial_mean, "latent_mean")
        self.variance = row_table(variance, "latent_variance", positive())

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean, self.variance)

    @inherit_check_shapes
    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        return rows[0], rows[1]

    @inherit_check_shapes
    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        return diagonal_gaussian_batch(rows, num_samples, noise)

    @inherit_check_shapes
    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """New rows start at the median trained variance of each dimension."""
        median = tfp.stats.percentile(self.variance, 50.0, axis=0, interpolation="midpoint")
        return mean, tf.broadcast_to(median, tf.shape(mean))


def diagonal_gaussian_batch(
    rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
) -> LatentBatch:
    r"""The :class:`LatentBatch` of :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, s_n)` for rows
    (means, variances), each [B, Q], drawn with ``noise`` [S, B or 1, Q]; the row term is
    :math:`-\mathrm{KL}(q(x_n) \| N(0, I))`."""
    mean, variance = rows
    samples = mean + tf.sqrt(variance) * noise
    kl = 0.5 * tf.reduce_sum(variance + tf.square(mean) - 1.0 - tf.math.log(variance), -1)
    return LatentBatch(samples, -kl, mean, variance)


class EncoderLatent(LatentVariables):
    r"""Amortised :math:`q(x_n) = \mathcal{N}(G(y_n), L(y_n) L(y_n)^\top)` with MLPs G and L
    (AEB-SVI).

    The mean network G has ``mean_hidden_sizes`` hidden layers and the factor network L
    ``covariance_hidden_sizes``; ``hidden_sizes`` sets both where they are not given (default
    :func:`default_encoder_sizes`: two layers whose width grows with D and Q). The paper's
    networks are wider for the covariance than for the mean: :func:`paper_encoder_options` gives
    them.

    ``covariance="triangular"`` (default): L is lower triangular with a softplus-positive
    diagonal (plus ``jitter``), which trains stably. ``covariance="dense"``: the paper's dense
    Q x Q factor H, with :math:`L = \operatorname{chol}(H H^\top + \text{jitter}\, I)`.
    The row term is

    .. math::

        -\mathrm{KL} = -\frac{1}{2} \left(\operatorname{tr}(L L^\top) + \lVert G \rVert^2 - Q
        - 2 \sum_q \log L_{qq}\right).

    The encoder reads the observed values of y_n standardised per column, :math:`(y_{nd} -
    \text{input\_location}_d) / \text{input\_scale}_d` (identity by default; the amortised model
    sets the training data's column means and standard deviations, so raw counts in the thousands do
    not saturate the first layer), with missing entries (NaN) set to zero, the column mean; with
    ``missing_aware=True`` it also reads the 0/1 observation mask, so it can tell a zero from a gap,
    and ``hide_fraction`` > 0 hides that share of the observed inputs at random while training, so
    that q(x) widens honestly for rows with gaps (the likelihood still sees every observed entry).
    With ``set_size`` the MLPs read instead a permutation-invariant pooling of the observed (value,
    column) pairs (:class:`~gpflow_svi_gplvm.networks.SetPooling`, ``set_size`` features):
    missing-aware by construction, and its input size does not grow with the share of gaps.
    """

    amortised = True
    gaussian = True

    def __init__(
        self,
        data_dim: int,
        latent_dim: int,
        hidden_sizes: Sequence[int] | None = None,
        activation: str = "tanh",
        covariance: str = "triangular",
        missing_aware: bool = False,
        hide_fraction: float = 0.0,
        jitter: float = 1e-6,
        seed: int = 0,
        input_location: np.ndarray | None = None,
        input_scale: np.ndarray | None = None,
        set_size: int | None = None,
        mean_hidden_sizes: Sequence[int] | None = None,
        covariance_hidden_sizes: Sequence[int] | None = None,
        name: str | None = None,
    ):
        super().__init__(latent_dim, name=name)
        if hidden_sizes is None:
            hidden_sizes = default_encoder_sizes(data_dim, latent_dim)
        mean_sizes = check_layer_sizes(
            hidden_sizes if mean_hidden_sizes is None else mean_hidden_sizes, "mean_hidden_sizes"
        )
        covariance_sizes = check_layer_sizes(
            hidden_sizes if covariance_hidden_sizes is None else covariance_hidden_sizes,
            "covariance_hidden_sizes",
        )
        if set_size is not None:
            set_size = check_integer(set_size, "set_size", hint="or None for the MLP encoder")
        # The set holds only observed pairs: a set encoder always knows the gaps.
        missing_aware = missing_aware or set_size is not None
        _check_encoder_options(covariance, missing_aware, hide_fraction)
        self.data_dim = int(data_dim)
        self.covariance = covariance
        self.missing_aware = bool(missing_aware)
        self.hide_fraction = float(hide_fraction)
        self.jitter = jitter
        location, scale = _standardisation(self.data_dim, input_location, input_scale)
        # Variables (not trainable) so that checkpoints and exports carry them.
        self.input_location = tf.Variable(location, dtype=default_float(), trainable=False)
        self.input_scale = tf.Variable(scale, dtype=default_float(), trainable=False)
        self._build_networks(activation, seed, set_size, mean_sizes, covariance_sizes)

    def _build_networks(
        self,
        activation: str,
        seed: int,
        set_size: int | None,
        mean_sizes: tuple[int, ...],
        covariance_sizes: tuple[int, ...],
    ) -> None:
        """The mean network G, the factor network L and, with ``set_size``, the set pooling
        that both read."""
        q = self.latent_dim
        factor_size = q * (q + 1) // 2 if self.covariance == "triangular" else q * q
        self.set_network: SetPooling | None = None
        if set_size is not None:
            self.set_network = SetPooling(self.data_dim, set_size, activation, seed=seed + 2)
            input_size = self.set_network.output_size
        else:
            input_size = 2 * self.data_dim if self.missing_aware else self.data_dim
        self.mean_network = MLP(input_size, mean_sizes, q, activation, seed=seed)
        self.factor_network = MLP(
            input_size, covariance_sizes, factor_size, activation, seed=seed + 1
        )

    def encoder_input(self, Y: tf.Tensor, training: bool = False) -> tf.Tensor:
        """[B, D] (or [B, 2D] with the mask, or [B, set_size + 1] pooled by the set encoder):
        NaNs replaced by zero before any arithmetic.

        When training, each observed entry is hidden with probability ``hide_fraction``.
        """
        observed = tf.math.is_finite(Y)
        if training and self.hide_fraction > 0:
            kept = self.generator.uniform(tf.shape(Y), dtype=Y.dtype) >= self.hide_fraction
            observed = tf.logical_and(observed, kept)
        standardised = (tf.where(observed, Y, self.input_location) - self.input_location) / (
            self.input_scale
        )
        values = tf.where(observed, standardised, tf.zeros_like(Y))
        if self.set_network is not None:
            return self.set_network(values, observed)
        if not self.missing_aware:
            return values
        return tf.concat([values, tf.cast(observed, Y.dtype)], axis=-1)

    def scale_tril(self, inputs: tf.Tensor) -> tf.Tensor:
        """L(y) [B, Q, Q], lower triangular with a positive diagonal."""
        raw = self.factor_network(inputs)
        q = self.latent_dim
        if self.covariance == "triangular":
            shift = tf.constant(self.jitter, dtype=raw.dtype)
            return tfp.bijectors.FillScaleTriL(diag_shift=shift).forward(raw)
        factor = tf.reshape(raw, [-1, q, q])
        covariance = tf.matmul(factor, factor, transpose_b=True)
        return tf.linalg.cholesky(covariance + self.jitter * tf.eye(q, dtype=raw.dtype))

    def _mean_and_scale(self, Y: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        inputs = self.encoder_input(Y, training)
        return self.mean_network(inputs), self.scale_tril(inputs)

    @inherit_check_shapes
    def moments(self, idx: tf.Tensor, Y: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        if Y is None:
            raise ValueError(
                "An amortised q(x) is computed from the data: pass the rows Y with their indices."
            )
        mean, scale = self._mean_and_scale(Y)
        return mean, tf.reduce_sum(tf.square(scale), axis=-1)

    @inherit_check_shapes
    def __call__(
        self,
        idx: tf.Tensor,
        Y: tf.Tensor,
        num_samples: int,
        noise: tf.Tensor | None = None,
        training: bool = False,
    ) -> LatentBatch:
        mean, scale = self._mean_and_scale(Y, training)
        eps = self.noise(idx, num_samples) if noise is None else noise
        eps = tf.broadcast_to(eps, tf.stack([tf.shape(eps)[0], tf.shape(mean)[0], self.latent_dim]))
        samples = mean + tf.einsum("bij,sbj->sbi", scale, eps)
        variance = tf.reduce_sum(tf.square(scale), axis=-1)
        trace = tf.reduce_sum(variance, axis=-1)
        log_det = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(scale)), axis=-1)
        kl = 0.5 * (trace + tf.reduce_sum(tf.square(mean), -1) - self.latent_dim - log_det)
        return LatentBatch(samples, -kl, mean, variance, scale)

    @inherit_check_shapes
    def new_rows(
        self, Y: tf.Tensor, num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        """The encoder's q(x*) of new rows Y [B, D]; with ``fit.tolerance`` (where the row bound
        has no draws), refined from there row by row by damped Newton steps on that bound, as
        a diagonal Gaussian starting at the encoder's means and marginal variances
        (:func:`fit_rows`; semi-amortised inference: the encoder's q(x*) is a start, not the
        optimum of the row's bound)."""
        if fit.tolerance is None:
            return super().new_rows(Y, num_samples, noise, fit)
        start = self.moments(tf.range(tf.shape(Y, out_type=tf.int64)[0]), Y)
        transforms = [None, positive()]
        rows = fit_rows(diagonal_gaussian_batch, transforms, start, Y, fit)
        return diagonal_gaussian_batch(rows, num_samples, noise)


def _check_encoder_options(covariance: str, missing_aware: bool, hide_fraction: float) -> None:
    if covariance not in ("triangular", "dense"):
        raise ValueError(f"covariance must be 'triangular' or 'dense', got {covariance!r}.")
    if not 0.0 <= hide_fraction < 1.0:
        raise ValueError(f"hide_fraction must lie in [0, 1), got {hide_fraction}.")
    if hide_fraction > 0 and not missing_aware:
        raise ValueError(
            "hide_fraction > 0 needs missing_aware=True (or a set_size): the encoder must "
            "see the mask."
        )


def _standardisation(
    data_dim: int, location: np.ndarray | None, scale: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The encoder's per-column input location and scale [D] (default 0 and 1), checked."""
    location = np.zeros(data_dim) if location is None else location
    scale = np.ones(data_dim) if scale is None else scale
    location, scale = (np.asarray(a, dtype=np.float64) for a in (location, scale))
    if location.shape != (data_dim,) or scale.shape != (data_dim,):
        raise ValueError(
            f"input_location and input_scale must have shape ({data_dim},), got "
            f"{location.shape} and {scale.shape}."
        )
    if not (np.all(np.isfinite(location)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError("input_location must be finite and input_scale finite and positive.")
    return location, scale


def default_encoder_sizes(data_dim: int, latent_dim: int) -> tuple[int, int]:
    """Hidden widths (H, H) of each encoder network, H = D + Q (Q + 1) / 2 (the input width plus
    the factor's outputs) clipped to [32, 128].

    Chosen by held-out RMSE (``benchmarks/encoder_width.py``, results/paper.md "Encoder width"):
    wider than (10, 5) was better on oil flow, qPCR and MNIST, but (404, 404) was worse than
    (128, 128) on MNIST, so the width stops growing at 128.
    """
    width = int(data_dim) + int(latent_dim) * (int(latent_dim) + 1) // 2
    width = min(128, max(32, width))
    return width, width


def paper_encoder_options(data_dim: int, latent_dim: int) -> dict:
    """The AEB-SVI encoder of the paper's supplement, as options of :class:`EncoderLatent` (and
    of :class:`~gpflow_svi_gplvm.models.AmortisedBayesianGPLVM`).

    Two tanh MLPs with two hidden layers each, reading y_n only: the mean network
    (D, 10, 5, Q) and the covariance network (D, H, H, Q^2) with H = (D + Q^2) / 2 (rounded
    down), whose Q^2 outputs form the dense factor of the covariance. This is the supplement's
    rule and its oil-flow and qPCR networks (its taxi mean network is (3, 3, 3, 2); its oil-flow
    layer sizes are written for Q=12 where its configuration table gives Q=10).
    """
    width = (int(data_dim) + int(latent_dim) ** 2) // 2
    return dict(
        mean_hidden_sizes=(10, 5),
        covariance_hidden_sizes=(width, width),
        covariance="dense",
        activation="tanh",
        missing_aware=False,
        hide_fraction=0.0,
    )


def checked_variance(initial_variance: float | np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``initial_variance`` (a number, or one per latent) broadcast to ``shape`` [N, Q]; a
    ``ValueError`` unless every one is a positive, finite number."""
    advice = (
        "initial_variance must be a positive, finite number (of each q(x_n) at the start, "
        f"0.1 by default), or an array of them broadcastable to the latents' shape {shape}"
    )
    try:
        variance = np.broadcast_to(np.asarray(initial_variance, dtype=np.float64), shape).copy()
    except (TypeError, ValueError):
        raise ValueError(f"{advice}; got {initial_variance!r}.") from None
    if not np.all(np.isfinite(variance) & (variance > 0)):
        bad = variance[~(np.isfinite(variance) & (variance > 0))][0]
        raise ValueError(f"{advice}; got {bad!r} among them.")
    return variance
