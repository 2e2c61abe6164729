"""Distances between two sets of draws, with an interval: MMD^2 under a Gaussian kernel (median
bandwidth) and the sliced Wasserstein distance; how far a q(x)'s draws lie from the posterior's."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from check_shapes import check_shapes
from scipy.spatial.distance import cdist, pdist

from .validation import (
    check_fraction,
    check_integer,
    check_seed,
)

__all__ = ["Discrepancy", "median_bandwidth", "mmd", "sliced_wasserstein"]


class Discrepancy(NamedTuple):
    """A distance between two sets of draws and a bootstrap interval around it."""

    value: float
    low: float
    high: float


@check_shapes("x: [n, d]", "y: [m, d]")
def median_bandwidth(x: np.ndarray, y: np.ndarray, max_points: int = 2000) -> float:
    """The median heuristic: the median distance between distinct points of x and y pooled
    (at most ``max_points`` of them, evenly spaced); 1 when all are one point (every bandwidth
    then gives an MMD of 0, the right answer)."""
    pooled = np.concatenate([x, y])
    pooled = pooled[:: max(1, len(pooled) // max_points)]
    distances = pdist(pooled)
    distinct = distances[distances > 0]
    return float(np.median(distinct)) if distinct.size else 1.0


def _checked_draws(x, y) -> tuple[np.ndarray, np.ndarray]:
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1]:
        raise ValueError(
            f"Draws must be two arrays [n, d] and [m, d] of one width, got {x.shape} and "
            f"{y.shape}: flatten each draw (e.g. draws.reshape(len(draws), -1))."
        )
    if min(len(x), len(y)) < 2 or not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError("Each set needs at least two draws, all finite.")
    return x, y


def mmd(
    x,
    y,
    bandwidth: float | None = None,
    num_bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> Discrepancy:
    r"""The unbiased estimate of the squared maximum mean discrepancy between the distributions of
    draws x [n, d] and y [m, d], under :math:`k(a, b) = \exp(-\lVert a - b \rVert^2 / 2\ell^2)`
    with :math:`\ell` = ``bandwidth`` (default :func:`median_bandwidth`):

    .. math::

        \widehat{\mathrm{MMD}}^2 = \frac{\sum_{i \ne j} k(x_i, x_j)}{n(n - 1)}
        + \frac{\sum_{i \ne j} k(y_i, y_j)}{m(m - 1)} - \frac{2}{nm} \sum_{i, j} k(x_i, y_j),

    (it may be slightly negative when the distributions agree) with a percentile bootstrap
    interval at ``level`` over ``num_bootstrap`` resamples of both sets, each leaving out the
    pairs that repeat one draw (which would otherwise bias it upwards).
    """
    x, y = _checked_draws(x, y)
    num_bootstrap = check_integer(num_bootstrap, "num_bootstrap")
    seed = check_seed(seed)
    ell = median_bandwidth(x, y) if bandwidth is None else _check_bandwidth(bandwidth)
    pairs = [(x, x), (y, y), (x, y)]
    kernels = [np.exp(-0.5 * cdist(a, b, "sqeuclidean") / ell**2) for a, b in pairs]
    others = [kernels[0] - np.eye(len(x)), kernels[1] - np.eye(len(y)), kernels[2]]
    if max(float(np.mean(kernel)) for kernel in others) < 1e-12:
        raise ValueError(
            f"bandwidth={ell:g} is so far below the distances between the draws that the kernel "
            "of nearly every two draws is 0: the estimate would be about 0 whatever the draws. "
            f"Pass a larger bandwidth, or None (the median heuristic, here "
            f"{median_bandwidth(x, y):g})."
        )
    rng = np.random.default_rng(seed)
    weights = [
        np.vstack([np.ones(n), rng.multinomial(n, np.full(n, 1 / n), num_bootstrap)])
        for n in (len(x), len(y))
    ]
    values = _weighted_mmd(kernels, *weights)
    return _with_interval(values, level)


def _check_bandwidth(bandwidth) -> float:
    """``bandwidth`` as a positive, finite float, or a ``ValueError``."""
    number = isinstance(bandwidth, (int, float, np.number)) and not isinstance(bandwidth, bool)
    if not (number and np.isfinite(bandwidth) and bandwidth > 0):
        raise ValueError(
            "bandwidth must be a positive, finite length (the kernel's, in the draws' units), or "
            f"None for the median heuristic (median_bandwidth), got {bandwidth!r}."
        )
    return float(bandwidth)


def _weighted_mmd(kernels: list[np.ndarray], wx: np.ndarray, wy: np.ndarray) -> np.ndarray:
    """The estimate for each row of draw counts ``wx`` [R, n], ``wy`` [R, m] (a row of ones: the
    sample itself), pairs of a draw with a copy of itself left out."""

    def within(kernel: np.ndarray, w: np.ndarray) -> np.ndarray:
        pairs = np.einsum("ri,ij,rj->r", w, kernel, w) - np.einsum("ri,i->r", w**2, np.diag(kernel))
        return pairs / (w.sum(1) ** 2 - (w**2).sum(1))

    between = np.einsum("ri,ij,rj->r", wx, kernels[2], wy) / (wx.sum(1) * wy.sum(1))
    return within(kernels[0], wx) + within(kernels[1], wy) - 2.0 * between


def _with_interval(values: np.ndarray, level: float) -> Discrepancy:
    """values[0] and the percentile interval at ``level`` of values[1:]."""
    level = check_fraction(level, "level", "a probability", "e.g. 0.95")
    low, high = np.quantile(values[1:], [(1 - level) / 2, (1 + level) / 2])
    return Discrepancy(float(values[0]), float(low), float(high))


def sliced_wasserstein(
    x,
    y,
    num_projections: int = 128,
    num_bootstrap: int = 200,
    level: float = 0.95,
    seed: int = 0,
) -> Discrepancy:
    r"""The sliced 2-Wasserstein distance between the distributions of draws x [n, d] and y [m, d],

    .. math::

        \mathrm{SW}_2 = \Big( \frac{1}{P} \sum_{p=1}^{P} W_2^2(\theta_p^\top x, \theta_p^\top y)
        \Big)^{1/2},

    over ``num_projections`` random unit directions :math:`\theta_p` (fixed by ``seed``), each
    one-dimensional :math:`W_2^2` the mean squared difference of the two sets' quantiles (at
    max(n, m) levels); with a percentile bootstrap interval at ``level``.
    """
    x, y = _checked_draws(x, y)
    rng = np.random.default_rng(check_seed(seed))
    num_projections = check_integer(num_projections, "num_projections")
    directions = rng.standard_normal((x.shape[1], num_projections))
    directions /= np.linalg.norm(directions, axis=0)
    px, py = x @ directions, y @ directions
    values = [_sliced(px, py)]
    for _ in range(check_integer(num_bootstrap, "num_bootstrap")):
        resampled = [p[rng.integers(0, len(p), len(p))] for p in (px, py)]
        values.append(_sliced(*resampled))
    return _with_interval(np.array(values), level)


def _sliced(px: np.ndarray, py: np.ndarray) -> float:
    """SW_2 from projected draws [n, P] and [m, P]."""
    size = max(len(px), len(py))
    qx, qy = (_quantiles(np.sort(p, axis=0), size) for p in (px, py))
    return float(np.sqrt(np.mean(np.square(qx - qy))))


def _quantiles(ordered: np.ndarray, size: int) -> np.ndarray:
    """The quantiles [size, P] at levels (i + 1/2) / size of sorted columns [n, P], linearly
    interpolated between order statistics (the order statistics themselves when size = n)."""
    position = np.clip((np.arange(size) + 0.5) * len(ordered) / size - 0.5, 0, len(ordered) - 1)
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, len(ordered) - 1)
    weight = (position - below)[:, None]
    return (1 - weight) * ordered[below] + weight * ordered[above]
