"""The base classes of the latent families: q(x_n) from a minibatch of row indices and rows, and
the per-row tables of families with parameters of their own for every row."""

from __future__ import annotations

import abc

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.base import Module, Parameter
from gpflow.config import default_float

from ..distributed.owned import owned_by_worker
from .batch import LatentBatch, NewRowFit
from .new_rows import fit_rows

__all__ = [
    "LatentVariables",
    "RowLatentVariables",
    "row_table",
    "gather_rows",
    "checked_variance",
]


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
    (:func:`~gpflow_svi_gplvm.distributed.owned.owned_by_worker`)."""
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
    may be taken in closed form (:mod:`gpflow_svi_gplvm.components.psi_statistics`)."""
    has_density: bool = False
    """True when q(x_n) is a density over each row's x_n whose batches carry ``log_density``
    and ``density_gradient`` at their draws, so that draws can be importance-weighted
    (:mod:`gpflow_svi_gplvm.components.importance`)."""

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
        :class:`LatentBatch` drawn with the standard normal ``noise`` [S, B or 1, Q]: the rows'
        :meth:`new_row_parameters` (fitted by ``fit`` where the family fits them), drawn by
        :meth:`new_row_batch`. The fit does not depend on the draws, so one compiled fit serves
        q(x*), the predictive and the log densities alike
        (:class:`~gpflow_svi_gplvm.LatentInference`).
        """
        return self.new_row_batch(self.new_row_parameters(Y, fit), num_samples, noise, fit)

    def new_row_parameters(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        """What q(x*) of new rows Y [B, D] is drawn from (tensors [B, ...]). An amortised family
        applies itself to Y as it draws, so here these are the rows themselves and ``fit`` is
        not needed; other families raise the ``ValueError`` of :meth:`check_new_rows`."""
        self.check_new_rows()
        return (Y,)

    def new_row_batch(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        """The :class:`LatentBatch` of new rows from their :meth:`new_row_parameters` ``rows``,
        drawn with ``noise`` [S, B or 1, Q]."""
        (Y,) = rows
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
        return self.batch_at(idx, num_samples, noise)

    def batch_at(self, idx: tf.Tensor, num_samples: int, noise: tf.Tensor | None) -> LatentBatch:
        """The :class:`LatentBatch` of rows ``idx`` [B] (``noise`` [S, B or 1, Q], or None: drawn
        by :meth:`noise`): what :meth:`__call__` returns, as a family with parameters per row
        does not read the data. Override where a row's q(x_n) depends on other rows."""
        noise = self.noise(idx, num_samples) if noise is None else noise
        return self.batch_of(self.rows(idx), num_samples, noise)

    def check_new_rows(self) -> None:
        """Nothing to refuse: new rows are fitted by :meth:`fitted_rows`."""

    def new_row_parameters(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        """The parameter rows of new rows Y [B, D], fitted as in :meth:`fitted_rows`."""
        return self.fitted_rows(Y, fit)

    def new_row_batch(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        """The :class:`LatentBatch` of parameter ``rows`` drawn with ``noise`` [S, B or 1, Q]."""
        return self.batch_of(rows, num_samples, noise)

    def fitted_rows(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        r"""The parameter rows of new rows Y [B, D] (one [B, Q] tensor per table) that maximise
        ``fit.objective``, in the tables' unconstrained space, in-graph.

        Rows start at :meth:`initial_rows` of ``fit.initial_mean(Y)``. With ``fit.tolerance``,
        each row takes damped Newton steps of its own until it converges
        (:func:`~gpflow_svi_gplvm.latents.new_rows.newton_rows`), the draws of the standard noise
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


def checked_variance(initial_variance: float | np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``initial_variance`` (a number, or one per latent) broadcast to ``shape`` [N, Q] (a
    read-only view: no [N, Q] copy is made, which at atlas scale is much of memory); a
    ``ValueError`` unless every one is a positive, finite number."""
    advice = (
        "initial_variance must be a positive, finite number (of each q(x_n) at the start, "
        f"0.1 by default), or an array of them broadcastable to the latents' shape {shape}"
    )
    try:
        values = np.asarray(initial_variance, dtype=np.float64)
        variance = np.broadcast_to(values, shape)
    except (TypeError, ValueError):
        raise ValueError(f"{advice}; got {initial_variance!r}.") from None
    if not np.all(np.isfinite(values) & (values > 0)):
        bad = values[~(np.isfinite(values) & (values > 0))][0]
        raise ValueError(f"{advice}; got {bad!r} among them.")
    return variance
