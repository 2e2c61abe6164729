"""Predictive variance against a covariate: each row's variance and the binned means."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from .figures import axes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_variance_against"]


def _bin_edges(values: np.ndarray, bins: int | Sequence[float], log: bool) -> np.ndarray:
    """Edges [K + 1] of ``bins`` bins spanning ``values`` [n] (geometrically spaced with ``log``),
    or the given edges, checked."""
    edges = np.asarray(bins, dtype=float)
    if edges.ndim == 0:
        if int(edges) < 1:
            raise ValueError(f"bins must be a positive number of bins or the edges, got {bins}.")
        spaced = np.geomspace if log else np.linspace
        return spaced(values.min(), values.max(), int(edges) + 1)
    if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError("Bin edges must be a 1-D increasing sequence of at least two values.")
    return edges


def plot_variance_against(
    covariate: np.ndarray,
    variance: np.ndarray,
    bins: int | Sequence[float] = 10,
    xlabel: str = "covariate",
    ylabel: str = "predictive variance",
    log_x: bool = False,
    log_y: bool = False,
    ax: Axes | None = None,
) -> Figure:
    """Predictive variance against a covariate: every point, and per bin the mean +/- 1 s.e.

    ``covariate`` and ``variance`` have the same shape [n] (e.g. the number of ratings of each
    movie and the mean predictive variance of its ratings); pairs with a non-finite value are
    left out. ``bins`` is a number of bins, equally wide in the covariate (in its logarithm with
    ``log_x``), or their edges (points outside them are drawn but not binned); empty bins are
    skipped. Error bars are standard errors of the bin means. ``log_x`` / ``log_y`` put the
    axes on a log scale (their values must then be positive).
    """
    x, v = _finite_pairs(covariate, variance, log_x, log_y)
    centres, means, errors = _bin_means(x, v, _bin_edges(x, bins, log_x))
    figure, ax = axes(ax, (6, 4))
    ax.scatter(x, v, s=6, alpha=0.3, color="grey", label="each point")
    ax.errorbar(
        centres,
        means,
        yerr=errors,
        fmt="o-",
        capsize=3,
        color="tab:blue",
        label="bin mean ± 1 s.e.",
    )
    if log_x:
        ax.set_xscale("log")
    if log_y:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend(fontsize="small")
    return figure


def _finite_pairs(
    covariate: np.ndarray, variance: np.ndarray, log_x: bool, log_y: bool
) -> tuple[np.ndarray, np.ndarray]:
    """The pairs of ``covariate`` and ``variance`` (same shape) that are both finite, flattened
    to [n], checked for plotting (variances >= 0, values > 0 on a log axis)."""
    covariate = np.asarray(covariate, dtype=float)
    variance = np.asarray(variance, dtype=float)
    if covariate.shape != variance.shape:
        raise ValueError(
            f"covariate {covariate.shape} and variance {variance.shape} must have the same shape: "
            "one covariate value per variance."
        )
    finite = np.isfinite(covariate) & np.isfinite(variance)
    x, v = covariate[finite].ravel(), variance[finite].ravel()
    if x.size == 0:
        raise ValueError("No pair of finite covariate and variance values to plot.")
    if np.any(v < 0):
        raise ValueError("Variances must be non-negative.")
    for values, name, flag, on in (
        (x, "covariate", "log_x", log_x),
        (v, "variance", "log_y", log_y),
    ):
        if on and np.any(values <= 0):
            raise ValueError(
                f"{flag}=True needs positive values, but {int(np.sum(values <= 0))} {name} "
                f"value(s) are <= 0: leave them out (e.g. keep {name} > 0) or pass {flag}=False."
            )
    return x, v


def _bin_means(
    x: np.ndarray, v: np.ndarray, edges: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Per non-empty bin of ``x`` [n] between ``edges`` [K + 1]: the mean of x, the mean of ``v``
    [n] and its standard error (0 for a bin of one point), each [K'] with K' <= K.

    .. math::

        \bar v_b = \frac{1}{n_b} \sum_{i \in b} v_i, \qquad
        \mathrm{se}_b = \frac{s_b}{\sqrt{n_b}},

    with :math:`s_b` the sample standard deviation (``ddof=1``) of the :math:`n_b` values in
    bin b.
    """
    which = np.searchsorted(edges, x, side="right") - 1
    which[x == edges[-1]] = len(edges) - 2  # the last bin includes its right edge
    centres, means, errors = [], [], []
    for b in range(len(edges) - 1):
        chosen = which == b
        count = int(chosen.sum())
        if count == 0:
            continue
        centres.append(x[chosen].mean())
        means.append(v[chosen].mean())
        errors.append(v[chosen].std(ddof=1) / np.sqrt(count) if count > 1 else 0.0)
    return np.array(centres), np.array(means), np.array(errors)
