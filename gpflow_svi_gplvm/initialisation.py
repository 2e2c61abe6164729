"""Initial values and default components of a model, chosen from the data.

Latents start from NaN-aware PCA (or the prior), inducing inputs from the latents; the default
likelihood, kernel and mean function are set on the data's scale (:func:`default_components`),
and the sizes and options a model is built with are checked here (:func:`check_sizes`,
:func:`default_shared_covariance`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from gpflow.kernels import Kernel, SquaredExponential
from gpflow.likelihoods import Gaussian, Likelihood, Poisson
from gpflow.mean_functions import Constant, MeanFunction

from .distributed import Workers
from .likelihoods import MaskedLikelihood, base_likelihood, check_likelihood_support, log_link
from .validation import check_integer, row_blocks

__all__ = [
    "SHARED_COVARIANCE_MIN_OUTPUTS",
    "ModelComponents",
    "column_moments",
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


def column_moments(
    Y: np.ndarray, workers: Workers | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Observed count, mean and variance (ddof 0) [D] of each column of Y [N, D] (NaN =
    missing), read in row blocks; mean and variance are 0 for a column with nothing observed.
    With ``workers``, Y [n, D] is this worker's rows and the moments are those of all workers'.

    A mean or variance beyond float64's range (entries near 1e154 and above) is a ``ValueError``:
    no model can be fitted on that scale, and standardising would turn the data into zeros.
    """
    workers = workers or Workers()
    count, total, squares = (np.zeros(Y.shape[1]) for _ in range(3))
    with np.errstate(over="ignore", invalid="ignore"):
        for block in row_blocks(Y):
            observed = ~np.isnan(block)
            count += observed.sum(axis=0)
            total += np.where(observed, block, 0.0).sum(axis=0)
        count, total = workers.sum(np.stack([count, total]))
        mean = total / np.maximum(count, 1)
        for block in row_blocks(Y):
            squares += np.square(np.where(np.isnan(block), 0.0, block - mean)).sum(axis=0)
        variance = workers.sum(squares) / np.maximum(count, 1)
    if not (np.isfinite(mean).all() and np.isfinite(variance).all()):
        largest = max(np.nanmax(np.abs(block), initial=0.0) for block in row_blocks(Y))
        raise ValueError(
            f"The column variances of Y overflow float64 (its largest magnitude is "
            f"{largest:.3g}). Rescale Y before training: standardise each column, "
            "or divide by a power of ten."
        )
    return count, mean, variance


def column_location_and_scale(
    Y: np.ndarray, workers: Workers | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Means and standard deviations [D] of the observed entries of each column of Y [N, D] (of
    all ``workers``' rows); an empty column gets (0, 1) and a constant one the scale 1, so
    (Y - mean) / scale is defined."""
    _, mean, variance = column_moments(Y, workers)
    return mean, np.where(variance > 0, np.sqrt(variance), 1.0)


def pca_latents(
    Y: np.ndarray,
    latent_dim: int,
    seed: int = 0,
    rows: np.ndarray | None = None,
    workers: Workers | None = None,
) -> np.ndarray:
    r"""Principal-component scores [N, Q] of Y [N, D] with NaNs imputed by their column means:

    .. math::

        X = (\tilde Y - \bar y) V_Q / s_1,

    where :math:`\tilde Y` is the imputed Y, :math:`\bar y` [D] its column means, :math:`V_Q`
    [D, Q] the leading Q right singular vectors and :math:`s_1` the standard deviation of the
    first score, so the first dimension has unit variance like the N(0, I) prior and the others
    keep their relative scale. Dimensions beyond the rank of Y
    are filled with small noise (sd 0.01), so that no two latent dimensions start identical.

    V_Q comes from a randomised subspace iteration (Halko et al., 2011): Q + 10 directions, 5
    products with :math:`\tilde Y_c^\top \tilde Y_c` (:math:`\tilde Y_c` centred) in row blocks,
    then the SVD of :math:`\tilde Y_c` projected on them from its QR (no squared singular values):
    O(N D Q) time, O((N + D) Q) memory besides Y, exact up to rounding when min(N, D) <= Q + 10.
    Signs are fixed: each singular vector's largest entry is positive. With ``workers``, Y [n, D]
    is this worker's rows (``rows`` [n] among all N, whose noise is as on one machine) and every
    pass over the data a sum over workers (the QR stacks the workers' R factors).
    """
    workers = workers or Workers()
    Y = np.asarray(Y, dtype=float) if isinstance(Y, (list, tuple)) else Y
    _, column_means, _ = column_moments(Y, workers)
    num_data = int(workers.sum(Y.shape[0])) if rows is not None else Y.shape[0]
    data_dim = Y.shape[1]

    def centred(block: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(block), column_means, block) - column_means

    def times(matrix: np.ndarray) -> np.ndarray:  # centred Y @ matrix [n, k]
        return np.concatenate([centred(block) @ matrix for block in row_blocks(Y)])

    def gram_times(matrix: np.ndarray) -> np.ndarray:  # centred Y^T centred Y @ matrix [D, k]
        product = np.zeros((data_dim, matrix.shape[1]))
        for block in row_blocks(Y):
            product += centred(block).T @ (centred(block) @ matrix)
        return workers.sum(product)

    basis = _subspace(gram_times, data_dim, min(latent_dim + 10, num_data, data_dim), seed)
    singular_values, vt = _projected_svd(times(basis), workers)
    rank = int(np.sum(singular_values > singular_values[0] * 1e-10)) if singular_values[0] else 0
    vt = vt[: min(latent_dim, rank)] @ basis.T
    vt *= np.sign(vt[np.arange(len(vt)), np.argmax(np.abs(vt), axis=1)])[:, None]
    scores = times(vt.T)
    first = workers.sum([scores[:, 0].sum(), np.square(scores[:, 0]).sum()]) if rank else [0, 0]
    scale = np.sqrt(max(first[1] / num_data - (first[0] / num_data) ** 2, 0.0))
    scores = scores / (scale if scale > 0 else 1.0)
    missing = latent_dim - scores.shape[1]
    if missing > 0:
        noise = 0.01 * np.random.default_rng(seed).standard_normal((num_data, missing))
        scores = np.concatenate([scores, noise if rows is None else noise[rows]], axis=1)
    return scores


def _subspace(
    gram_times: Callable[[np.ndarray], np.ndarray], data_dim: int, width: int, seed: int
) -> np.ndarray:
    """An orthonormal basis [D, width] of the leading right singular subspace: 5 products of a
    random start with the Gram matrix (``gram_times``), each orthonormalised."""
    basis = np.random.default_rng(seed).standard_normal((data_dim, width))
    for _ in range(5):
        basis = np.linalg.qr(gram_times(basis))[0]
    return basis


def _projected_svd(projected: np.ndarray, workers: Workers) -> tuple[np.ndarray, np.ndarray]:
    """Singular values [k] and right singular vectors (rows of [k, k]) of all workers' rows of
    ``projected`` [n, k] together, from the R factor of the QR of their stacked R factors."""
    width = projected.shape[1]
    factor = np.zeros((width, width))
    local = np.linalg.qr(projected, mode="r")
    factor[: len(local)] = local
    stacked = workers.stack(factor).reshape(-1, width)
    _, singular_values, vt = np.linalg.svd(np.linalg.qr(stacked, mode="r"))
    return singular_values, vt


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
) -> np.ndarray:
    """M distinct rows of the initial latents [N, Q], chosen at random, as inducing inputs Z.
    With ``rows`` [n], ``latents`` [n, Q] are this worker's rows of all ``workers``' N: each
    worker gives the chosen rows it holds, so that Z is the one chosen from all N rows."""
    workers = workers or Workers()
    num_data = latents.shape[0] if rows is None else int(workers.sum(len(rows)))
    chosen = np.random.default_rng(seed).choice(num_data, size=num_inducing, replace=False)
    if rows is None:
        return np.array(latents[chosen], dtype=float)
    order = np.argsort(rows)
    found = np.minimum(np.searchsorted(rows, chosen, sorter=order), max(len(rows) - 1, 0))
    held = (rows[order[found]] == chosen) if len(rows) else np.zeros(len(chosen), bool)
    Z = np.zeros((num_inducing, latents.shape[1]))
    Z[held] = latents[order[found[held]]]
    return workers.sum(Z)


def initial_offset(
    likelihood: Likelihood, Y: np.ndarray, workers: Workers | None = None
) -> np.ndarray:
    """A per-output constant [D] for the mean function so that f starts at the data's level.

    Gaussian: the observed column means (of all ``workers``' rows). Counts with a log link
    (Poisson with the exp link, negative binomial): their logs. Other likelihoods: zeros (the
    offset is trained either way; this only shortens the start).
    """
    base = base_likelihood(likelihood)
    means = column_moments(Y, workers)[1]  # 0 for a column with nothing observed
    if isinstance(base, Gaussian):
        return means
    if log_link(base):
        binsize = float(base.binsize) if isinstance(base, Poisson) else 1.0
        return np.log(np.maximum(means, 1e-3) / binsize)
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
    latents = np.asarray(latents, dtype=float)
    if latents.shape != (num_data, latent_dim) or not np.isfinite(latents).all():
        raise ValueError(
            f"latent_init as an array must hold finite numbers of shape [N, Q] = "
            f"[{num_data}, {latent_dim}], got shape {latents.shape}."
        )
    return latents


def default_components(
    Y: np.ndarray,
    latent_dim: int,
    kernel: Kernel | None = None,
    likelihood: Likelihood | None = None,
    mean_function: MeanFunction | None = None,
    workers: Workers | None = None,
) -> ModelComponents:
    r"""The given components, with defaults for those that are None, for checked data Y [N, D]
    (with ``workers``: this worker's rows of the data of all workers).

    With :math:`\bar v` the mean over columns of the observed entries' variances (at least
    :math:`10^{-3}`): a Gaussian likelihood of variance :math:`0.1 \bar v`; a squared-exponential
    kernel with unit lengthscales [Q] and variance :math:`\bar v` under a Gaussian likelihood
    (f lives on the data's scale) or 1 under another (f lives on the link's scale); a
    :class:`~gpflow.mean_functions.Constant` mean at :func:`initial_offset`. When Y has NaNs
    the likelihood is wrapped in :class:`MaskedLikelihood` (with a warning); data outside its
    support is a ``ValueError``, and rows or columns with nothing observed are warned about.
    """
    workers = workers or Workers()
    count, _, variance = column_moments(Y, workers)
    # Columns with no observed entry have no variance; _warn_unobserved names them.
    data_variance = max(float(np.mean(variance[count > 0])), 1e-3)
    if likelihood is None:
        likelihood = Gaussian(variance=0.1 * data_variance)
    if kernel is None:
        gaussian = isinstance(base_likelihood(likelihood), Gaussian)
        kernel = SquaredExponential(
            variance=data_variance if gaussian else 1.0, lengthscales=np.ones(latent_dim)
        )
    entries = float(workers.sum(Y.shape[0])) * Y.shape[1]
    if count.sum() < entries and not isinstance(likelihood, MaskedLikelihood):
        warnings.warn(
            f"{1 - count.sum() / entries:.1%} of the entries of data are missing (NaN): the "
            "likelihood is wrapped in MaskedLikelihood so that only observed entries count.",
            stacklevel=_USER_FRAME,
        )
        likelihood = MaskedLikelihood(likelihood)
    with workers.agreeing():
        check_likelihood_support(likelihood, Y)
    _warn_unobserved(Y, count)
    if mean_function is None:
        mean_function = Constant(initial_offset(likelihood, Y, workers))
    return ModelComponents(kernel, likelihood, mean_function)


def _warn_unobserved(Y: np.ndarray, column_counts: np.ndarray) -> None:
    """Rows (of Y [n, D]) or columns (``column_counts`` [D] observed entries, of all rows) with no
    observed entry are legal but learn nothing: say so."""
    empty_rows = sum(int((np.isnan(block).all(axis=1)).sum()) for block in row_blocks(Y))
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
