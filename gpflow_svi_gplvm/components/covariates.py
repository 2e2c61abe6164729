r"""Observed inputs of each row beside its latents: covariates in the kernel, size factors as an
offset.

With P observed covariates :math:`c_n` (one-hot batch, technical covariates) and, for counts, a
size factor :math:`s_n` (library size), the GP input of row n is

.. math::

    [x_n, c_n, \log s_n]\ \ [Q + P (+ 1)], \qquad
    k([x, c], [x', c']) = k_x(x, x') + k_c(c, c') \ \text{(or } k_x k_c\text{)}, \qquad
    f_d = g_d(x, c) + m_d + \log s_n,

so the latent holds what the covariates do not explain, and a count's rate is
:math:`s_n \exp(g_d + m_d)` (:class:`CovariateKernel`, :class:`SizeFactorOffset`). A row's observed
inputs travel with it: the training rows' table [N, P (+ 1)] sits in the model and is read by
the rows' indices (:func:`with_row_inputs` appends them to the latent batch); new rows bring
theirs (:func:`new_row_inputs`).
"""

from __future__ import annotations

from collections.abc import Sequence

import gpflow
import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.kernels import Kernel
from gpflow.mean_functions import MeanFunction

from ..distributed.workers import Workers
from ..latents import LatentBatch
from ..likelihoods import log_link
from ..rows.facts import row_totals
from ..rows.sparse import row_blocks
from .initialisation import ModelComponents

__all__ = [
    "CovariateKernel",
    "SizeFactorOffset",
    "RowInputs",
    "cell_cycle_kernel",
    "library_sizes",
    "new_row_inputs",
    "with_row_inputs",
    "with_row_inputs_components",
]

COMBINATIONS = ("sum", "product")


class CovariateKernel(Kernel):
    r"""A kernel on [x, c]: :math:`k_x(x, x') + k_c(c, c')` (``combination="sum"``) or
    :math:`k_x(x, x')\, k_c(c, c')` ("product").

    ``latent_kernel`` reads columns [0, Q) of its inputs and ``covariate_kernel`` columns
    [Q, Q + P); any columns beyond (a log size factor) are ignored. The default covariate kernel
    is linear with one variance per covariate (ARD), :math:`k_c = \sum_p w_p c_p c'_p`: a sum
    then gives each output an additive covariate effect drawn from :math:`N(0, w_p)` per
    covariate, a batch effect per gene on the link's scale. A product lets covariates change the
    shape of the latent map (use a stationary covariate kernel there: a product with a linear
    kernel vanishes at c = 0). :attr:`lengthscales` are the latent kernel's per latent dimension
    [Q] (for ARD plots; see :func:`latent_lengthscales`).
    """

    def __init__(
        self,
        latent_kernel: Kernel,
        latent_dim: int,
        num_covariates: int,
        covariate_kernel: Kernel | None = None,
        combination: str = "sum",
    ):
        super().__init__()
        if combination not in COMBINATIONS:
            raise ValueError(f"combination must be 'sum' or 'product', got {combination!r}.")
        if num_covariates and covariate_kernel is None:
            covariate_kernel = gpflow.kernels.Linear(variance=np.ones(num_covariates))
        self.latent_kernel = latent_kernel
        self.covariate_kernel = covariate_kernel if num_covariates else None
        self.latent_dim = int(latent_dim)
        self.num_covariates = int(num_covariates)
        self.combination = combination

    def _parts(self, X: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        q, p = self.latent_dim, self.num_covariates
        return X[..., :q], X[..., q : q + p]

    def _combine(self, latent: tf.Tensor, covariate: tf.Tensor | None) -> tf.Tensor:
        if covariate is None:
            return latent
        return latent + covariate if self.combination == "sum" else latent * covariate

    @inherit_check_shapes
    def K(self, X: tf.Tensor, X2: tf.Tensor | None = None) -> tf.Tensor:
        x, c = self._parts(X)
        x2, c2 = (None, None) if X2 is None else self._parts(X2)
        covariate = None if self.covariate_kernel is None else self.covariate_kernel.K(c, c2)
        return self._combine(self.latent_kernel.K(x, x2), covariate)

    @inherit_check_shapes
    def K_diag(self, X: tf.Tensor) -> tf.Tensor:
        x, c = self._parts(X)
        covariate = None if self.covariate_kernel is None else self.covariate_kernel.K_diag(c)
        return self._combine(self.latent_kernel.K_diag(x), covariate)

    @property
    def lengthscales(self) -> tf.Tensor:
        """The latent kernel's lengthscale of each latent dimension [Q]."""
        return tf.constant(latent_lengthscales(self.latent_kernel, self.latent_dim))


def latent_lengthscales(kernel: Kernel, latent_dim: int) -> np.ndarray:
    """The lengthscale [Q] that ``kernel`` (on the latents) has along each latent dimension: its
    own (ARD or one for all) over its active dimensions; a periodic kernel's base kernel's; a sum
    or product the shortest of its parts' (inf where no part reads a dimension)."""
    found = np.full(latent_dim, np.inf)
    parts = getattr(kernel, "kernels", None)
    if parts is not None:
        for part in parts:
            found = np.minimum(found, latent_lengthscales(part, latent_dim))
        return found
    base = getattr(kernel, "base_kernel", kernel)
    lengthscales = getattr(base, "lengthscales", None)
    if lengthscales is None:
        return found
    dims = np.arange(latent_dim)[kernel.active_dims]
    found[dims] = np.broadcast_to(lengthscales.numpy(), dims.shape)
    return found


def cell_cycle_kernel(latent_dim: int, periodic_dim: int = 0, period: float = 2 * np.pi) -> Kernel:
    r"""A latent kernel with a periodic part for the cell cycle:
    :math:`k(x, x') = k_{per}(x_j, x'_j)\, k_{SE}(x_{-j}, x'_{-j})`, the periodic kernel on
    latent dimension j = ``periodic_dim`` times a squared exponential with ARD on the others."""
    if not 0 <= periodic_dim < latent_dim:
        raise ValueError(f"periodic_dim must lie in [0, {latent_dim}), got {periodic_dim}.")
    others = [q for q in range(latent_dim) if q != periodic_dim]
    periodic = gpflow.kernels.Periodic(
        gpflow.kernels.SquaredExponential(active_dims=[periodic_dim]), period=period
    )
    if not others:
        return periodic
    ard = gpflow.kernels.SquaredExponential(lengthscales=np.ones(len(others)), active_dims=others)
    return periodic * ard


class SizeFactorOffset(MeanFunction):
    r""":math:`m([x, c, \log s]) = m_0([x, c]) + \log s`: the mean function ``base`` plus the log
    size factor in input column ``column`` (the last), so that a log-link rate is
    :math:`s_n \exp(g + m_0)`."""

    def __init__(self, base: MeanFunction, column: int):
        super().__init__()
        self.base = base
        self.column = int(column)

    @inherit_check_shapes
    def __call__(self, X: tf.Tensor) -> tf.Tensor:
        return self.base(X[..., : self.column]) + X[..., self.column : self.column + 1]


@check_shapes(
    "batch.samples: [S, batch, Q]",
    "inputs: [batch, R]",
    "return.samples: [S, batch, QR]",
    "return.mean: [batch, QR]",
)
def with_row_inputs(batch: LatentBatch, inputs: tf.Tensor) -> LatentBatch:
    """The latent ``batch`` with the rows' observed ``inputs`` [B, R] appended to every draw, to
    the mean and, with zero variance, to the variance and the covariance factor: [.., Q + R].
    The densities of the draws (of the latents alone) are kept as they are."""
    draws = tf.broadcast_to(inputs, tf.concat([tf.shape(batch.samples)[:1], tf.shape(inputs)], 0))
    zeros = tf.zeros_like(inputs)
    scale = batch.scale
    if scale is not None:
        width = tf.shape(inputs)[1]
        scale = tf.pad(scale, [[0, 0], [0, width], [0, width]])
    return batch._replace(
        samples=tf.concat([batch.samples, draws], axis=-1),
        mean=tf.concat([batch.mean, inputs], axis=-1),
        variance=tf.concat([batch.variance, zeros], axis=-1),
        scale=scale,
    )


def library_sizes(Y) -> np.ndarray:
    """Each row's total count [N] of Y [N, D] (:func:`~gpflow_svi_gplvm.rows.facts.row_totals`:
    a row with gaps scaled up to all D outputs), read in row blocks."""
    return np.concatenate([row_totals(block) for block in row_blocks(Y)])


class RowInputs:
    """The checked observed inputs of N rows: ``covariates`` [N, P] and ``size_factors`` [N]
    (either may be None), as the table [N, P (+ 1)] of :func:`with_row_inputs` (log size factor
    last); ``reference`` is the library size of a size factor of one, the mean of
    :math:`l_n / s_n` over the rows, by which new rows' size factors default to
    :math:`l_* / \\text{reference}`."""

    def __init__(self, covariates, size_factors, num_rows: int, names: Sequence[str] | None = None):
        self.covariates = _checked_covariates(covariates, num_rows, names)
        self.num_covariates = 0 if self.covariates is None else self.covariates.shape[1]
        self.size_factors = _checked_size_factors(size_factors, num_rows)
        self.reference = 1.0

    def set_reference(
        self, library: np.ndarray, rows: np.ndarray | None = None, workers: Workers | None = None
    ):
        """Set :attr:`reference` from the library sizes [n] (:func:`library_sizes`) of all rows,
        or of this worker's ``rows`` of all ``workers``' (the size factors are those of all N
        rows, or with ``rows`` None of this worker's)."""
        if self.size_factors is None:
            return
        workers = workers or Workers()
        factors = self.size_factors if rows is None else self.size_factors[rows]
        total, count = workers.sum(np.array([np.sum(library / factors), len(factors)]))
        self.reference = float(total) / float(count)

    @property
    def width(self) -> int:
        """R: the columns of :attr:`table`."""
        return self.num_covariates + int(self.size_factors is not None)

    @property
    def table(self) -> np.ndarray | None:
        """[N, R]: covariates, then the log size factor; None without either."""
        columns = []
        if self.covariates is not None:
            columns.append(self.covariates)
        if self.size_factors is not None:
            columns.append(np.log(self.size_factors)[:, None])
        return np.concatenate(columns, axis=1) if columns else None


def _checked_covariates(
    covariates, num_rows: int, names: Sequence[str] | None
) -> np.ndarray | None:
    """``covariates`` as a float array [N, P], or a ``ValueError`` naming a column with NaN or
    infinity (by ``names`` where given) and the first row holding it."""
    if covariates is None:
        return None
    try:
        table = np.asarray(covariates, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"covariates must be numbers [N, P] (one-hot encode categories): {error}"
        ) from error
    if table.ndim == 1:
        table = table[:, None]
    if table.ndim != 2 or table.shape[0] != num_rows:
        raise ValueError(
            f"covariates must have one row per row of the data, [{num_rows}, P], got {table.shape}."
        )
    bad = ~np.isfinite(table)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        name = names[column] if names is not None else f"column {column}"
        raise ValueError(
            f"covariate {name} is NaN or infinite in row {row} ({int(bad[:, column].sum())} rows "
            "in all): fill or drop those rows, or leave the covariate out."
        )
    return table


def _checked_size_factors(size_factors, num_rows: int) -> np.ndarray | None:
    """``size_factors`` as a positive float array [N], or a ``ValueError`` naming the first row
    whose factor is not a positive finite number."""
    if size_factors is None:
        return None
    factors = np.asarray(size_factors, dtype=float).reshape(-1)
    if factors.shape != (num_rows,):
        raise ValueError(
            f"size_factors must hold one number per row, [{num_rows}], got {factors.shape}."
        )
    bad = ~(np.isfinite(factors) & (factors > 0))
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"size factor of row {row} is {float(factors[row])} ({int(bad.sum())} rows in all): "
            "size factors must be positive (a row with no counts has none; drop it before fitting)."
        )
    return factors


def new_row_inputs(model, Y: np.ndarray, covariates=None, size_factors=None) -> np.ndarray | None:
    """The observed inputs [N*, R] of new rows Y [N*, D] for ``model``: their ``covariates``
    [N*, P] (required when the model was built with covariates, refused otherwise) and their
    ``size_factors`` [N*] (default: library size / the training reference, when the model has
    size factors), or None for a model without observed inputs."""
    num_covariates = int(getattr(model, "num_covariates", 0))
    uses_size = bool(getattr(model, "size_factor_reference", None) is not None)
    if covariates is None and num_covariates:
        raise ValueError(
            f"The model was fitted with {num_covariates} covariate column(s) in its kernel: pass "
            f"the new rows' covariates, covariates=[{len(Y)}, {num_covariates}], encoded as "
            "for training."
        )
    if covariates is not None and not num_covariates:
        raise ValueError("The model was fitted without covariates: leave covariates out.")
    if size_factors is not None and not uses_size:
        raise ValueError("The model was fitted without size factors: leave size_factors out.")
    if not (num_covariates or uses_size):
        return None
    if uses_size and size_factors is None:
        size_factors = library_sizes(Y) / float(model.size_factor_reference.numpy())
    inputs = RowInputs(covariates, size_factors if uses_size else None, len(Y))
    if inputs.num_covariates != num_covariates:
        raise ValueError(
            f"covariates must have the {num_covariates} columns the model was fitted with, got "
            f"{inputs.num_covariates}."
        )
    return inputs.table


def with_row_inputs_components(
    components: ModelComponents, latent_dim: int, inputs: RowInputs
) -> ModelComponents:
    """The model's components for GP inputs [x, c, log s]: a kernel on the latents becomes a
    :class:`CovariateKernel` (linear ARD on the covariates, summed), and the mean function is
    offset by the log size factor (:class:`SizeFactorOffset`), which needs a log link."""
    if inputs.width == 0:
        return components
    kernel, likelihood, mean_function = components
    if not isinstance(kernel, CovariateKernel):
        kernel = CovariateKernel(kernel, latent_dim, inputs.num_covariates)
    elif (kernel.latent_dim, kernel.num_covariates) != (latent_dim, inputs.num_covariates):
        raise ValueError(
            f"The CovariateKernel reads {kernel.latent_dim} latent and {kernel.num_covariates} "
            f"covariate columns, but the model has {latent_dim} and {inputs.num_covariates}."
        )
    if inputs.size_factors is not None:
        if not log_link(likelihood):
            raise ValueError(
                "size_factors scale a rate, s_n exp(f): they need a count likelihood with a log "
                f"link (Poisson, NegativeBinomial), not {type(likelihood).__name__}."
            )
        mean_function = SizeFactorOffset(mean_function, latent_dim + inputs.num_covariates)
    return ModelComponents(kernel, likelihood, mean_function)
