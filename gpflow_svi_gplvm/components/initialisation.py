"""Initial values and default components of a model, chosen from the data.

Latents start from NaN-aware PCA (or the prior), inducing inputs from the latents; the default
likelihood, kernel and mean function are set on the data's scale (:func:`default_components`),
and the sizes and options a model is built with are checked here (:func:`check_sizes`,
:func:`default_shared_covariance`).
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np
from gpflow.kernels import Kernel, SquaredExponential
from gpflow.likelihoods import Gaussian, Likelihood
from gpflow.mean_functions import Constant, MeanFunction

from ..distributed.workers import Workers
from ..likelihoods import MaskedLikelihood, check_support, is_masked, likelihood_facts
from ..rows.facts import RowFacts, facts_of, row_totals
from ..validation import check_finite_array, check_integer
from .pca import pca_latents

__all__ = [
    "SHARED_COVARIANCE_MIN_OUTPUTS",
    "ModelComponents",
    "ColumnSummary",
    "column_summary",
    "column_moments",
    "row_totals",
    "column_location_and_scale",
    "check_sizes",
    "default_shared_covariance",
    "default_components",
    "initial_latents",
    "pca_latents",
    "random_latents",
    "inducing_inputs",
    "initial_offset",
]

SHARED_COVARIANCE_MIN_OUTPUTS = 100
"""``shared_covariance=None`` shares one q(u) covariance when D is at least this."""

# Warnings about the data point at the user's call of a public model's constructor: counted from
# default_components, the frames are it, SVIGPLVM.__init__, the subclass __init__ and the user.
_USER_FRAME = 4


class ModelComponents(NamedTuple):
    """The kernel, likelihood and mean function a model is built with."""

    kernel: Kernel
    likelihood: Likelihood
    mean_function: MeanFunction


ColumnSummary = RowFacts
"""What one pass over Y [N, D] learns (:class:`~gpflow_svi_gplvm.rows.facts.RowFacts`)."""


def column_summary(Y: np.ndarray, workers: Workers | None = None) -> ColumnSummary:
    """The :class:`~gpflow_svi_gplvm.rows.facts.RowFacts` of Y [N, D] (with ``workers``: this
    worker's rows [n, D] of the data of all): those the rows keep, or one pass's in row blocks
    (:func:`~gpflow_svi_gplvm.rows.facts.facts_of`); a ``ValueError`` when the moments overflow
    float64."""
    return facts_of(Y, workers)


def column_moments(
    Y: np.ndarray, workers: Workers | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed count, mean and variance (ddof 0) [D] of each column of Y [N, D] (NaN =
    missing), read in row blocks; mean and variance are 0 for a column with nothing observed.
    With ``workers``, Y [n, D] is this worker's rows and the moments are those of all workers'.
    Overflowing moments are a ``ValueError`` (:func:`column_summary`)."""
    summary = column_summary(Y, workers)
    return summary.observed, summary.mean, summary.variance


def column_location_and_scale(
    Y: np.ndarray, workers: Workers | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Means and standard deviations [D] of the observed entries of each column of Y [N, D] (of
    all ``workers``' rows); an empty column gets (0, 1) and a constant one the scale 1, so
    (Y - mean) / scale is defined."""
    _, mean, variance = column_moments(Y, workers)
    return mean, np.where(variance > 0, np.sqrt(variance), 1.0)


def random_latents(num_data: int, latent_dim: int, seed: int = 0) -> np.ndarray:
    """Draws [N, Q] from the prior N(0, I) (the paper: "all models were initialised randomly",
    from which distribution it does not say)."""
    return np.random.default_rng(seed).standard_normal((num_data, latent_dim))


def inducing_inputs(
    latents: np.ndarray,
    num_inducing: int,
    seed: int = 0,
    rows: np.ndarray | None = None,
    workers: Workers | None = None,
    observed: np.ndarray | None = None,
) -> np.ndarray:
    """M distinct rows of the initial latents [N, Q], chosen at random, as inducing inputs Z
    [M, Q] ([M, Q + R] with the ``observed`` inputs [N, R] of the chosen rows beside them; the
    two are joined for those rows alone). With ``rows`` [n], ``latents`` [n, Q] are this
    worker's rows of all ``workers``' N: each worker gives the chosen rows it holds, so that Z is
    the one chosen from all N rows."""
    workers = workers or Workers()

    def joined(chosen: np.ndarray) -> np.ndarray:
        parts = [latents[chosen]] + ([] if observed is None else [observed[chosen]])
        return np.concatenate(parts, axis=1).astype(float)

    num_data = latents.shape[0] if rows is None else int(workers.sum(len(rows)))
    chosen = np.random.default_rng(seed).choice(num_data, size=num_inducing, replace=False)
    if rows is None:
        return joined(chosen)
    order = np.argsort(rows)
    found = np.minimum(np.searchsorted(rows, chosen, sorter=order), max(len(rows) - 1, 0))
    held = (rows[order[found]] == chosen) if len(rows) else np.zeros(len(chosen), bool)
    width = latents.shape[1] + (0 if observed is None else observed.shape[1])
    Z = np.zeros((num_inducing, width))
    Z[held] = joined(order[found[held]])
    return workers.sum(Z)


def initial_offset(likelihood: Likelihood, means: np.ndarray) -> np.ndarray:
    """A per-output constant [D] for the mean function so that f starts at the data's level,
    from the observed column means [D] (0 for a column with nothing observed): the means for a
    Gaussian, their logs for counts with a log link, zeros otherwise (the offset is trained
    either way; this only shortens the start)."""
    facts = likelihood_facts(likelihood)
    if facts.inverse_link == "identity":
        return means
    if facts.inverse_link == "exp":
        return np.log(np.maximum(means, 1e-3) / facts.exposure)
    return np.zeros_like(means)


def check_sizes(
    num_data: int, latent_dim: int, num_inducing: int, num_samples: int
) -> tuple[int, int, int]:
    """``latent_dim``, ``num_inducing`` and ``num_samples`` as positive ints; ``ValueError`` when
    one is not, or when there are more inducing inputs than the ``num_data`` rows to place them."""
    latent_dim = check_integer(latent_dim, "latent_dim", hint="a latent_dim of 2 to 10 is typical")
    num_inducing = check_integer(num_inducing, "num_inducing", hint="25 to 100 is typical")
    num_samples = check_integer(num_samples, "num_samples", hint="1 usually suffices")
    if num_inducing > num_data:
        raise ValueError(
            f"num_inducing ({num_inducing}) exceeds the number of rows N ({num_data}): "
            f"choose num_inducing <= {num_data}."
        )
    return latent_dim, num_inducing, num_samples


def default_shared_covariance(shared_covariance: bool | None, data_dim: int) -> bool:
    """Whether q(u) shares one covariance by all ``data_dim`` outputs: ``shared_covariance``, or
    for None whether D >= :data:`SHARED_COVARIANCE_MIN_OUTPUTS`."""
    if shared_covariance is None:
        return data_dim >= SHARED_COVARIANCE_MIN_OUTPUTS
    if not isinstance(shared_covariance, (bool, np.bool_)):
        raise ValueError(
            f"shared_covariance must be True (one q(u) covariance for all outputs), False "
            f"(one per output) or None (shared when D >= {SHARED_COVARIANCE_MIN_OUTPUTS}), "
            f"got {shared_covariance!r}."
        )
    return bool(shared_covariance)


def initial_latents(
    Y: np.ndarray,
    latent_dim: int,
    latent_init: str | np.ndarray,
    seed: int = 0,
    rows: np.ndarray | None = None,
    workers: Workers | None = None,
    own_rows: bool = False,
) -> np.ndarray:
    """Initial latents [N, Q] for Y [N, D]: ``latent_init`` "pca" (:func:`pca_latents`),
    "random" (:func:`random_latents`) or the latents themselves, an array [N, Q]. With
    ``workers``, Y [n, D] is this worker's rows (``rows`` [n] among the N) and the result is the
    table of all N rows, the same on every worker, or with ``own_rows`` those of its rows [n]
    (given latents may then be those of its rows alone)."""
    workers = workers or Workers()
    num_data = Y.shape[0] if rows is None else int(workers.sum(Y.shape[0]))
    if not isinstance(latent_init, str):
        if own_rows and rows is not None and np.shape(latent_init)[0] == len(rows) != num_data:
            return _given_latents(latent_init, len(rows), latent_dim)  # this worker's rows
        table = _given_latents(latent_init, num_data, latent_dim)
    elif latent_init not in ("pca", "random"):
        raise ValueError(
            f"latent_init must be 'pca', 'random' or an array [N, Q], got {latent_init!r}."
        )
    elif latent_init == "random":
        table = random_latents(num_data, latent_dim, seed=seed)
    else:
        scores = pca_latents(Y, latent_dim, seed=seed, rows=rows, workers=workers)
        if rows is None or own_rows:
            return scores
        table = np.zeros((num_data, latent_dim))
        table[rows] = scores
        return workers.sum(table)
    return table[rows] if own_rows and rows is not None else table


def _given_latents(latents, num_data: int, latent_dim: int) -> np.ndarray:
    """Starting latents given as an array, checked to be finite numbers [N, Q]."""
    meaning = f"finite numbers of shape [N, Q] = [{num_data}, {latent_dim}]"
    return check_finite_array(latents, "latent_init as an array", (num_data, latent_dim), meaning)


def default_components(
    Y: np.ndarray,
    latent_dim: int,
    kernel: Kernel | None = None,
    likelihood: Likelihood | None = None,
    mean_function: MeanFunction | None = None,
    workers: Workers | None = None,
    summary: ColumnSummary | None = None,
) -> ModelComponents:
    r"""The given components, with defaults for those that are None, for checked data Y [N, D]
    (with ``workers``: this worker's rows of the data of all workers), from its
    :func:`column_summary` (made here unless given).

    With :math:`\bar v` the mean over columns of the observed entries' variances (at least
    :math:`10^{-3}`): a Gaussian likelihood of variance :math:`0.1 \bar v`; a squared-exponential
    kernel with unit lengthscales [Q] and variance :math:`\bar v` under a Gaussian likelihood
    (f lives on the data's scale) or 1 under another (f lives on the link's scale); a
    :class:`~gpflow.mean_functions.Constant` mean at :func:`initial_offset`. When Y has NaNs
    the likelihood is wrapped in :class:`MaskedLikelihood` (with a warning); data outside its
    support is a ``ValueError``, and rows or columns with nothing observed are warned about.
    """
    _check_components(kernel, likelihood, mean_function, Y.shape[1])
    workers = workers or Workers()
    summary = summary or column_summary(Y, workers)
    count, variance = summary.observed, summary.variance
    # Columns with no observed entry have no variance; _warn_unobserved names them.
    data_variance = max(float(np.mean(variance[count > 0])), 1e-3)
    if likelihood is None:
        likelihood = Gaussian(variance=0.1 * data_variance)
    if kernel is None:
        data_scale = likelihood_facts(likelihood).inverse_link == "identity"
        kernel = SquaredExponential(
            variance=data_variance if data_scale else 1.0, lengthscales=np.ones(latent_dim)
        )
    entries = float(workers.sum(Y.shape[0])) * Y.shape[1]
    if count.sum() < entries and not is_masked(likelihood):
        warnings.warn(
            f"{1 - count.sum() / entries:.1%} of the entries of data are missing (NaN): the "
            "likelihood is wrapped in MaskedLikelihood so that only observed entries count.",
            stacklevel=_USER_FRAME,
        )
        likelihood = MaskedLikelihood(likelihood)
    check_support(likelihood, summary.counts, summary.binary)
    _warn_unobserved(summary.empty_rows, count)
    if mean_function is None:
        mean_function = Constant(initial_offset(likelihood, summary.mean))
    return ModelComponents(kernel, likelihood, mean_function)


def _check_components(
    kernel: object, likelihood: object, mean_function: object, data_dim: int
) -> None:
    """A ``ValueError`` for a component that is not a GPflow one of its kind (e.g. a name), or a
    likelihood with per-output parameters for another number of outputs than D."""
    for name, value, kind, example in (
        ("kernel", kernel, Kernel, "gpflow.kernels.SquaredExponential()"),
        ("likelihood", likelihood, Likelihood, "gpflow.likelihoods.Poisson()"),
        ("mean_function", mean_function, MeanFunction, "gpflow.mean_functions.Constant()"),
    ):
        if value is not None and not isinstance(value, kind):
            raise ValueError(
                f"{name} must be a GPflow {kind.__name__} object, e.g. {example}, or None for "
                f"the default; got {value!r}."
            )
    outputs = None if likelihood is None else likelihood_facts(likelihood).outputs
    if outputs not in (None, 1, data_dim):
        raise ValueError(
            f"The likelihood has parameters for {outputs} outputs but the data has D={data_dim} "
            f"columns: build it with num_outputs={data_dim}."
        )


def _warn_unobserved(empty_rows: int, column_counts: np.ndarray) -> None:
    """Rows (``empty_rows`` of this worker's) or columns (``column_counts`` [D] observed
    entries, of all rows) with no observed entry are legal but learn nothing: say so."""
    empty_columns = int((column_counts == 0).sum())
    if empty_rows:
        warnings.warn(
            f"{empty_rows} row(s) of data have no observed entry: they contribute only their "
            "prior term, so their latents stay at the prior.",
            stacklevel=_USER_FRAME + 1,
        )
    if empty_columns:
        warnings.warn(
            f"{empty_columns} column(s) of data have no observed entry: their GP outputs are "
            "fitted to nothing and predict from the prior.",
            stacklevel=_USER_FRAME + 1,
        )
