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

from ..distributed.workers import Workers
from ..likelihoods import MaskedLikelihood, base_likelihood, check_support, log_link
from ..rows.sparse import row_blocks
from ..validation import check_finite_array, check_integer

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


class ColumnSummary(NamedTuple):
    """What one pass over Y [N, D] (NaN = missing) learns: each column's count of ``observed``
    entries, mean and variance (ddof 0) [D], over all workers' rows; whether every observed
    entry of every worker is a non-negative integer (``counts``) or 0 or 1 (``binary``); and of
    this worker's rows, those with nothing observed (``empty_rows``) and each one's total [n]
    (:func:`row_totals`)."""

    observed: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    counts: bool
    binary: bool
    empty_rows: int
    totals: np.ndarray


def column_summary(Y: np.ndarray, workers: Workers | None = None) -> ColumnSummary:
    """The :class:`ColumnSummary` of Y [N, D] (with ``workers``: this worker's rows [n, D] of
    the data of all), from one pass in row blocks: each block's counts, means and sums of
    squared deviations are merged as Chan et al. (1979) do, then the workers'.

    A mean or variance beyond float64's range (entries near 1e154 and above) is a ``ValueError``:
    no model can be fitted on that scale, and standardising would turn the data into zeros.
    """
    workers = workers or Workers()
    moments = np.zeros((3, Y.shape[1]))  # count, mean, sum of squared deviations
    counts, binary, empty_rows, totals = True, True, 0, list[np.ndarray]()
    with np.errstate(over="ignore", invalid="ignore"):
        for block in row_blocks(Y):
            observed = ~np.isnan(block)
            count = observed.sum(axis=0)
            mean = np.where(observed, block, 0.0).sum(axis=0) / np.maximum(count, 1)
            squares = np.square(np.where(observed, block - mean, 0.0)).sum(axis=0)
            moments = _merged(moments, np.stack([count, mean, squares]))
            values = block[observed]
            counts = counts and bool(np.all(values >= 0) and np.all(values == np.round(values)))
            binary = binary and bool(np.isin(values, (0.0, 1.0)).all())
            empty_rows += int((~observed).all(axis=1).sum())
            totals.append(row_totals(block))
        merged = np.zeros_like(moments)
        for worker in workers.stack(moments):
            merged = _merged(merged, worker)
        count, mean, squares = merged
        variance = squares / np.maximum(count, 1)
    if not (np.isfinite(mean).all() and np.isfinite(variance).all()):
        largest = max(np.nanmax(np.abs(block), initial=0.0) for block in row_blocks(Y))
        raise ValueError(
            f"The column variances of Y overflow float64 (its largest magnitude is "
            f"{largest:.3g}). Rescale Y before training: standardise each column, "
            "or divide by a power of ten."
        )
    failed = workers.sum([not counts, not binary])
    rows = np.concatenate(totals) if totals else np.zeros(0)
    return ColumnSummary(count, mean, variance, not failed[0], not failed[1], empty_rows, rows)


def row_totals(block: np.ndarray) -> np.ndarray:
    r"""Each row's total [b] of a block of rows [b, D], a row with gaps scaled up to all D
    columns, :math:`l_n = \frac{D}{|O_n|} \sum_{d \in O_n} y_{nd}` (of counts: the library size)."""
    observed = ~np.isnan(block)
    counts = np.maximum(observed.sum(axis=1), 1)
    return np.where(observed, block, 0.0).sum(axis=1) * block.shape[1] / counts


def _merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Counts, means and sums of squared deviations [3, D] of two sets of rows together."""
    count = a[0] + b[0]
    share = np.divide(b[0], count, out=np.zeros_like(count), where=count > 0)
    delta = b[1] - a[1]
    return np.stack([count, a[1] + delta * share, a[2] + b[2] + np.square(delta) * a[0] * share])


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
    Signs are fixed: each singular vector's largest entry is positive. With more than
    :data:`PCA_SAMPLE_ROWS` rows, :math:`\bar y` and V_Q are those of a sample of that many rows
    (runs of :data:`PCA_SAMPLE_RUN` consecutive rows at seeded places, so that rows on disk are
    read in runs), and every row is read once more for its scores: about 10 passes over a large
    Y become one. With ``workers``, Y [n, D] is this worker's rows (``rows`` [n] among all N,
    whose sample and noise are as on one machine) and every pass over the data a sum over
    workers (the QR stacks the workers' R factors).
    """
    workers = workers or Workers()
    Y = np.asarray(Y, dtype=float) if isinstance(Y, (list, tuple)) else Y
    num_data = int(workers.sum(Y.shape[0])) if rows is not None else Y.shape[0]
    sample = _sample_rows(Y, num_data, rows, seed)
    column_means, vt = _principal_directions(sample, latent_dim, seed, workers)

    def centred(block: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(block), column_means, block) - column_means

    scores = np.zeros((Y.shape[0], len(vt)))
    first = 0
    for block in row_blocks(Y):
        scores[first : first + len(block)] = centred(block) @ vt.T
        first += len(block)
    moments = [scores[:, 0].sum(), np.square(scores[:, 0]).sum()] if len(vt) else [0.0, 0.0]
    total, squares = workers.sum(moments)
    scale = np.sqrt(max(squares / num_data - (total / num_data) ** 2, 0.0))
    scores /= scale if scale > 0 else 1.0  # in place: [N, Q] may be most of memory
    missing = latent_dim - scores.shape[1]
    if missing > 0:
        noise = 0.01 * np.random.default_rng(seed).standard_normal((num_data, missing))
        scores = np.concatenate([scores, noise if rows is None else noise[rows]], axis=1)
    return scores


PCA_SAMPLE_ROWS = 2**15
r"""Rows beyond which :func:`pca_latents` finds the principal directions from a sample of this
many rows (a starting point: their sampling error, of order :math:`1 / \sqrt{32768}`, is far
below what training moves the latents)."""

PCA_SAMPLE_RUN = 512
"""Consecutive rows of one piece of :func:`pca_latents`' sample (64 pieces)."""


def _sample_rows(Y, num_data: int, rows: np.ndarray | None, seed: int):
    """The rows of Y [n, D] (of all N = ``num_data``; ``rows`` [n] their numbers among them)
    in :func:`pca_latents`' sample: Y itself when N <= PCA_SAMPLE_ROWS, else a reader of the
    sampled rows Y holds (runs at seeded places of the N rows), served a block at a time."""
    if num_data <= PCA_SAMPLE_ROWS:
        return Y
    runs = -(-num_data // PCA_SAMPLE_RUN)
    rng = np.random.default_rng([seed, PCA_SAMPLE_ROWS])
    starts = np.sort(rng.choice(runs, size=PCA_SAMPLE_ROWS // PCA_SAMPLE_RUN, replace=False))
    chosen = (starts[:, None] * PCA_SAMPLE_RUN + np.arange(PCA_SAMPLE_RUN)).reshape(-1)
    chosen = chosen[chosen < num_data]
    local = chosen if rows is None else np.flatnonzero(np.isin(rows, chosen))
    return _RowSubset(Y, local)


class _RowSubset:
    """Rows ``index`` [k] of Y [N, D], read when sliced (``subset[a:b]`` [b - a, D])."""

    def __init__(self, Y, index: np.ndarray):
        self.Y, self.index = Y, index
        self.shape = (len(index), Y.shape[1])

    def __getitem__(self, rows: slice) -> np.ndarray:
        picked = self.index[rows]
        if isinstance(self.Y, np.ndarray):
            return self.Y[picked]
        if hasattr(self.Y, "sparse_read"):  # a variable: read the rows alone, as row_blocks does
            return self.Y.sparse_read(picked).numpy()
        return self.Y.take(picked)  # SparseRows, DiskRows: a run of rows is one read


def _principal_directions(
    Y, latent_dim: int, seed: int, workers: Workers
) -> tuple[np.ndarray, np.ndarray]:
    """Column means [D] of Y [n, D] (NaN imputed, of all ``workers``' rows) and its leading
    right singular vectors centred, as rows [min(Q, rank), D], signs fixed."""
    _, column_means, _ = column_moments(Y, workers)
    num_data, data_dim = int(workers.sum(Y.shape[0])), Y.shape[1]

    def centred(block: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(block), column_means, block) - column_means

    def gram_times(matrix: np.ndarray) -> np.ndarray:  # centred Y^T centred Y @ matrix [D, k]
        product = np.zeros((data_dim, matrix.shape[1]))
        for block in row_blocks(Y):
            product += centred(block).T @ (centred(block) @ matrix)
        return workers.sum(product)

    basis = _subspace(gram_times, data_dim, min(latent_dim + 10, num_data, data_dim), seed)
    projected = np.zeros((Y.shape[0], basis.shape[1]))
    first = 0
    for block in row_blocks(Y):
        projected[first : first + len(block)] = centred(block) @ basis
        first += len(block)
    singular_values, vt = _projected_svd(projected, workers)
    rank = int(np.sum(singular_values > singular_values[0] * 1e-10)) if singular_values[0] else 0
    vt = vt[: min(latent_dim, rank)] @ basis.T
    vt *= np.sign(vt[np.arange(len(vt)), np.argmax(np.abs(vt), axis=1)])[:, None]
    return column_means, vt


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
    base = base_likelihood(likelihood)
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
    base = base_likelihood(likelihood) if isinstance(likelihood, Likelihood) else None
    outputs = getattr(base, "num_outputs", None)
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
