"""Reliability diagrams: do predictions given a probability p come true a share p of the time?
For any classifier's predictions (:func:`plot_reliability`) and for transferred cell labels
against the cells' own (:func:`plot_label_reliability`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from ..metrics import reliability_table, unlabelled_texts
from .figures import axes

if TYPE_CHECKING:
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = ["plot_reliability", "plot_label_reliability"]

INTERVAL_Z = 1.96
"""The normal quantile of the 95% Wilson interval drawn around each bin's share right."""


def plot_reliability(
    probability: np.ndarray, correct: np.ndarray, num_bins: int = 15, ax: Axes | None = None
) -> Figure:
    """The reliability diagram of N predictions: per bin of the predicted class's
    ``probability`` [N], the share of ``correct`` [N] (bool) predictions against their mean
    probability, with its 95% Wilson interval, beside the diagonal where the two agree; the
    expected calibration error in the title; and the predictions in each bin.

    The bins are :func:`~gpflow_svi_gplvm.metrics.reliability_table`'s (``num_bins`` equal bins
    of [0, 1]), so the ECE shown is
    :func:`~gpflow_svi_gplvm.metrics.expected_calibration_error`'s. The upper panel (or ``ax``)
    holds the diagram, the lower one the predictions per bin on a log scale (with ``ax``: grey
    bars on a second y axis of ``ax``). Empty bins have no point.
    """
    table = reliability_table(probability, correct, num_bins)
    error = float(table["weighted gap"].sum())
    if ax is None:
        import matplotlib.pyplot as plt

        figure, (ax, below) = plt.subplots(
            2,
            1,
            figsize=(5.5, 6),
            sharex=True,
            height_ratios=(3, 1),
            layout="constrained",
        )
        below.set_xlabel("probability of the predicted class")
        height = 1.0
    else:
        figure, ax = axes(ax, (5.5, 4.5))
        below = ax.twinx()
        ax.set_zorder(below.get_zorder() + 1)  # the diagram in front of the bars
        ax.patch.set_visible(False)
        ax.set_xlabel("probability of the predicted class (bin mean)")
        height = 1 / 3  # the bars below the diagram's points
    _draw_diagram(ax, table)
    ax.set_title(
        f"reliability: ECE {error:.3f}\n{int(table['cells'].sum())} predictions, {num_bins} bins",
        fontsize="medium",
    )
    _draw_counts(below, table, height)
    return figure


def _draw_counts(ax: Axes, table: pd.DataFrame, height: float) -> None:
    """Bars of the predictions in each bin of ``table``, on a log scale (a bin of a few
    predictions shows beside one of thousands) whose bars fill the lower ``height`` of ``ax``."""
    from matplotlib.ticker import FuncFormatter

    ax.bar(
        table["from"],
        table["cells"],
        width=table["to"] - table["from"],
        align="edge",
        color="0.6",
        alpha=0.5,
    )
    most = int(table["cells"].max())
    ax.set_yscale("log")
    bottom = 0.5
    ax.set_ylim(bottom, bottom * (2 * most / bottom) ** (1 / height))
    ax.set_yticks(10.0 ** np.arange(len(str(most))))  # decades up to the fullest bin only
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.set_ylabel("predictions per bin")


def _draw_diagram(ax: Axes, table: pd.DataFrame) -> None:
    """The diagonal, and each non-empty bin of ``table`` (:func:`reliability_table`'s) at
    (mean probability, share right) with its 95% Wilson interval."""
    filled = table[table["cells"] > 0]
    share = filled["share right"].to_numpy()
    low, high = _wilson_interval(share, filled["cells"].to_numpy())
    ax.plot([0, 1], [0, 1], color="0.5", linestyle="--", linewidth=1, label="probability = share")
    ax.errorbar(
        filled["mean probability"].to_numpy(),
        share,
        yerr=np.stack([share - low, high - share]),
        fmt="o-",
        color="tab:red",
        capsize=3,
        label="bins, 95% interval",
    )
    ax.set(xlim=(0, 1), ylim=(-0.03, 1.03), ylabel="share right")  # a share of 0 or 1 whole
    ax.legend(fontsize="small", loc="upper left")


def _wilson_interval(share: np.ndarray, cells: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The Wilson score interval [K] of a binomial share ``share`` [K] of ``cells`` [K] trials
    (z = :data:`INTERVAL_Z`),

    .. math::

        \frac{\hat p + z^2 / 2n \pm z \sqrt{\hat p (1 - \hat p) / n + z^2 / 4n^2}}{1 + z^2 / n},

    which, unlike :math:`\hat p \pm z \sqrt{\hat p (1 - \hat p) / n}`, is not empty for a small
    bin whose predictions are all right (or all wrong)."""
    z2 = INTERVAL_Z**2
    centre = (share + z2 / (2 * cells)) / (1 + z2 / cells)
    half = INTERVAL_Z * np.sqrt(share * (1 - share) / cells + z2 / (4 * cells**2))
    half /= 1 + z2 / cells
    return centre - half, centre + half


def plot_label_reliability(
    probabilities: pd.DataFrame,
    labels: Sequence | np.ndarray | pd.Series,
    num_bins: int = 15,
    ax: Axes | None = None,
    unlabelled_category: str | Sequence[str] | None = None,
) -> Figure:
    """:func:`plot_reliability` of transferred labels: ``probabilities`` [N*, T], a DataFrame
    whose columns name the classes (what
    :func:`~gpflow_svi_gplvm.singlecell.genes.labels.transfer_labels` returns), against the
    cells' own ``labels`` [N*] (e.g. ``query.obs["cell_type"]``, compared as text). Each cell's
    most probable class is right where it is the cell's label.

    Cells whose label is missing (NaN, None) or ``unlabelled_category`` (a label of any type or
    several, e.g. "unlabelled"; as ``transfer_labels`` reads it) are left out; a label that no
    column names counts as wrong, with a warning naming it (no probability the reference gives
    can be right about it). The probabilities, not the ``obs`` columns ``transfer_labels``
    writes, are read: a cell left "unassigned" there still has a most probable class, and is
    scored by it.
    """
    import pandas as pd

    if not isinstance(probabilities, pd.DataFrame):
        raise ValueError(
            "probabilities must be a DataFrame whose columns name the classes, as "
            f"transfer_labels returns, got {type(probabilities).__name__}: for other "
            "predictions, pass their probability and correctness to plot_reliability."
        )
    truth = _cell_labels(probabilities, labels)
    scored = ~pd.isna(truth)
    if unlabelled_category is not None:
        scored &= ~np.isin(truth.astype(str), unlabelled_texts(unlabelled_category))
    if not scored.any():
        raise ValueError(
            f"None of the {len(truth)} cells has a label to score (every label is missing or "
            "unlabelled_category): pass the cells' own labels."
        )
    truth = truth[scored].astype(str)
    classes = np.asarray(probabilities.columns).astype(str)
    _warn_of_unknown_labels(truth, classes)
    values = probabilities.to_numpy(dtype=float)[scored]
    return plot_reliability(
        values.max(axis=1), classes[values.argmax(axis=1)] == truth, num_bins, ax
    )


def _cell_labels(probabilities: pd.DataFrame, labels) -> np.ndarray:
    """``labels`` [N*] as an object array, one per row of ``probabilities``; a Series must be
    indexed by the same cells."""
    import pandas as pd

    if isinstance(labels, pd.Series) and not labels.index.equals(probabilities.index):
        raise ValueError(
            "labels is a Series whose index is not probabilities' (the cells): pass the labels "
            "of the same cells in the same order, e.g. query.obs.loc[probabilities.index, key]."
        )
    truth = np.asarray(labels, dtype=object)
    if truth.shape != (len(probabilities),):
        raise ValueError(
            f"labels must hold one label per row of probabilities, [N*={len(probabilities)}], "
            f"got shape {truth.shape}."
        )
    return truth


def _warn_of_unknown_labels(truth: np.ndarray, classes: np.ndarray) -> None:
    """Warn of labels in ``truth`` that none of ``classes`` names: they count as wrong."""
    unknown = sorted(set(truth) - set(classes))
    if unknown:
        cells = int(np.isin(truth, unknown).sum())
        warnings.warn(
            f"{cells} cells have labels no class of the probabilities names, counted as wrong: "
            f"{unknown[:5]}{' ...' if len(unknown) > 5 else ''}. If they mean 'no label', pass "
            "unlabelled_category to leave those cells out; if they name classes otherwise, "
            "rename them.",
            UserWarning,
            stacklevel=3,
        )
