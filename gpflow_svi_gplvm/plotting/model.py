"""Figures of a fitted model: its latent space with the uncertainty of q(x), the ARD relevances of
its kernel, and the ELBO trace of its training."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..models.base import SVIGPLVM
from ..training.trainer import History
from .figures import _MAX_CLASSES, axes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure

    from ..models import SVIGPLVM
    from ..training.trainer import History

__all__ = ["plot_latent_space", "plot_ard", "plot_elbo"]


def plot_latent_space(
    model: SVIGPLVM,
    Y: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    dims: tuple[int, int] | None = None,
    ax: Axes | None = None,
    legend_title: str | None = None,
) -> Figure:
    """Scatter of the latent means of the training rows on two dimensions, coloured by ``labels``.

    ``dims`` defaults to the two most relevant dimensions (largest spread of the latent means in
    lengthscales, :meth:`~gpflow_svi_gplvm.models.base.SVIGPLVM.latent_relevance`); the title says
    which are shown and why. Up to 20 distinct labels [N] are classes (one colour each, with a
    legend titled ``legend_title``); more numeric labels (a covariate) are drawn on a continuous
    colour scale. For a Gaussian q(x), each point carries an ellipse of +/- 1 standard
    deviation; the axes have equal scales (so an ellipse's shape is q(x)'s) and hold every
    ellipse whole. ``Y`` [N, D] (the training rows) is needed for amortised models only.
    """
    mean = model.latent_mean(Y).numpy()
    variance = model.latent_variance(Y).numpy()
    relevance = model.latent_relevance(Y)
    chosen = dims is None
    if dims is None:
        dims = _most_relevant_pair(relevance)
    figure, ax = axes(ax, (6, 5))
    x, y = mean[:, dims[0]], mean[:, dims[1]]
    sd = np.sqrt(variance[:, list(dims)])
    if np.any(variance > 0):
        _draw_ellipses(ax, x, y, sd, _class_colours(labels))
    if labels is None:
        ax.scatter(x, y, s=8)
    else:
        _scatter_labelled(figure, ax, x, y, np.asarray(labels), legend_title)
    ax.set_xlabel(f"latent dim {dims[0]}")
    ax.set_ylabel(f"latent dim {dims[1]}")
    why = "the two most relevant" if chosen else "as chosen"
    ax.set_title(
        f"{type(model).__name__}: latent means"
        + (" with 1 sd" if np.any(variance) else "")
        + f"\ndims {dims[0]} and {dims[1]} of {len(relevance)}, {why} "
        + f"(relevance {relevance[dims[0]]:.2g}, {relevance[dims[1]]:.2g})",
        fontsize="medium",
    )
    _fit_limits(ax, x, y, sd)
    return figure


def _fit_limits(ax: Axes, x: np.ndarray, y: np.ndarray, sd: np.ndarray) -> None:
    """Equal scales on both axes, with limits that hold every point (x, y) [N] and its ellipse
    of half-widths ``sd`` [N, 2] whole, plus a 5% margin."""
    low = np.array([np.min(x - sd[:, 0]), np.min(y - sd[:, 1])])
    high = np.array([np.max(x + sd[:, 0]), np.max(y + sd[:, 1])])
    margin = 0.05 * np.maximum(high - low, 1e-12)
    ax.set_xlim(low[0] - margin[0], high[0] + margin[0])
    ax.set_ylim(low[1] - margin[1], high[1] + margin[1])
    ax.set_aspect("equal", adjustable="box")


def _most_relevant_pair(relevance: np.ndarray) -> tuple[int, int]:
    """The two dimensions of largest ``relevance`` [Q], most relevant first (twice the only one
    when Q = 1)."""
    order = np.argsort(-relevance)
    return int(order[0]), int(order[min(1, len(order) - 1)])


def _draw_ellipses(
    ax: Axes, x: np.ndarray, y: np.ndarray, sd: np.ndarray, colours: np.ndarray | None
) -> None:
    """One ellipse of +/- 1 standard deviation ``sd`` [N, 2] around each point (x, y) [N], in
    its row's class colour (``colours`` [N, 4] RGBA), or grey where there are no classes."""
    from matplotlib.collections import EllipseCollection

    ellipses = EllipseCollection(
        2 * sd[:, 0],
        2 * sd[:, 1],
        np.zeros(len(sd)),
        units="xy",
        offsets=np.column_stack([x, y]),
        offset_transform=ax.transData,
        facecolors="none",
        edgecolors="grey" if colours is None else colours,
        linewidths=0.5,
        alpha=0.3,
    )
    ax.add_collection(ellipses)


def _palette(classes: int) -> Colormap:
    """A qualitative palette with one colour per class: a colour map over the label values would
    give classes that merely have close numbers close colours."""
    import matplotlib.pyplot as plt

    return plt.get_cmap("tab10" if classes <= 10 else "tab20")


def _class_colours(labels: np.ndarray | None) -> np.ndarray | None:
    """Each row's class colour [N, 4] (RGBA, as its point's), or None without classes (no
    labels, or more than :data:`_MAX_CLASSES` values on a colour scale)."""
    if labels is None:
        return None
    classes, index = np.unique(np.asarray(labels), return_inverse=True)
    if len(classes) > _MAX_CLASSES:
        return None
    return np.asarray(_palette(len(classes))(index.ravel()))


def _scatter_labelled(
    figure: Figure,
    ax: Axes,
    x: np.ndarray,
    y: np.ndarray,
    labels: np.ndarray,
    title: str | None = None,
) -> None:
    """Points (x, y) [N] coloured by ``labels`` [N]: one colour and legend entry per class up to
    :data:`_MAX_CLASSES` classes, else a colour scale (numeric labels only); the legend or the
    colour bar is titled ``title`` (default "label")."""

    title = title or "label"
    classes = np.unique(labels)
    if len(classes) <= _MAX_CLASSES:
        palette = _palette(len(classes))
        for k, value in enumerate(classes):
            chosen = labels == value
            ax.scatter(x[chosen], y[chosen], s=8, color=palette(k), label=str(value))
        ax.legend(
            markerscale=2,
            fontsize="small",
            title=title,
            title_fontsize="small",
            ncol=1 + len(classes) // 11,
            loc="center left",
            bbox_to_anchor=(1.02, 0.5),
        )
    elif np.issubdtype(labels.dtype, np.number):
        points = ax.scatter(x, y, c=labels, cmap="viridis", s=8)
        figure.colorbar(points, ax=ax, label=title)
    else:
        raise ValueError(
            f"labels has {len(classes)} distinct non-numeric values; at most {_MAX_CLASSES} "
            "classes can be told apart by colour: pass numeric labels for a colour scale."
        )


def plot_ard(
    model: SVIGPLVM, Y: np.ndarray | None = None, ax: Axes | None = None, kept: float = 0.1
) -> Figure:
    """Bars of each latent dimension's relevance, and beside them its ARD 1 / lengthscale.

    The left panel (or ``ax`` alone) shows
    :meth:`~gpflow_svi_gplvm.models.base.SVIGPLVM.latent_relevance`, the spread of the latent means
    in lengthscales, which decides the dimensions kept (a dashed line at ``kept`` times the
    largest; the command line keeps those above it); the right panel the inverse lengthscales,
    which alone can mislead (a point estimate may shrink a dimension's latents and lengthscale
    together). ``Y`` [N, D] (the training rows) is needed for amortised models only.
    """
    import matplotlib.pyplot as plt

    relevance = model.latent_relevance(Y)
    positions = np.arange(len(relevance))
    if ax is None:
        figure, (ax, right) = plt.subplots(1, 2, figsize=(9, 3), layout="constrained")
        right.bar(positions, model.ard_relevance(), color="tab:grey")
        right.set_xticks(positions)
        right.set_xlabel("latent dimension")
        right.set_ylabel("1 / lengthscale")
        right.set_title("ARD: inverse lengthscales", fontsize="medium")
    else:
        figure, ax = axes(ax, (5, 3))
    ax.bar(positions, relevance)
    ax.axhline(
        kept * relevance.max(),
        color="black",
        linestyle="--",
        linewidth=0.8,
        label=f"{kept:.0%} of the largest: kept above",
    )
    ax.set_xticks(positions)
    ax.set_xlabel("latent dimension")
    ax.set_ylabel("sd(latent means) / lengthscale")
    ax.set_title("latent relevance", fontsize="medium")
    ax.legend(fontsize="small")
    return figure


def plot_elbo(history: History, window: int = 50, ax: Axes | None = None) -> Figure:
    """The minibatch ELBO per step and its running mean over ``window`` steps.

    The left panel (or ``ax`` alone) shows the whole run on a symmetric-log scale, where the
    first steps (often -1e6 and more) and the converged values (often positive) both show; the
    right panel the last 90% of the steps on a linear scale, where convergence shows.
    """
    import matplotlib.pyplot as plt

    elbo = np.asarray(history.elbo)
    if ax is not None:
        figure, ax = axes(ax, (6, 3))
        panels = [(ax, 0, True)]
    else:
        figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3), layout="constrained")
        panels = [(left, 0, True), (right, len(elbo) // 10, False)]
    for panel, start, symlog in panels:
        _elbo_panel(panel, elbo, start, window, symlog)
    return figure


def _elbo_panel(ax: Axes, elbo: np.ndarray, start: int, window: int, symlog: bool) -> None:
    """The ELBO trace [steps] from step ``start`` on, with its running mean over ``window``
    steps where there are that many; on a symmetric-log axis with ``symlog``."""
    steps = np.arange(len(elbo))
    ax.plot(steps[start:], elbo[start:], alpha=0.3, label="minibatch ELBO")
    if len(elbo) >= window:
        smooth = np.convolve(elbo, np.ones(window) / window, mode="valid")
        shown = steps[window - 1 :] >= start
        ax.plot(steps[window - 1 :][shown], smooth[shown], label=f"mean of {window}")
    if symlog and len(elbo):
        _symlog_axis(ax, elbo, window)
    ax.set_xlabel("step")
    ax.set_ylabel("ELBO" + (" (symlog)" if symlog else ""))
    ax.set_title(
        "the whole run" if start == 0 else f"steps {start} to {len(elbo) - 1}", fontsize="medium"
    )
    ax.legend(fontsize="small")


def _symlog_axis(ax: Axes, elbo: np.ndarray, window: int) -> None:
    """A symmetric-log y axis for the ELBO trace [steps]: linear within a tenth of the run's
    typical final magnitude (so the plateau is not squeezed into the log scale's bend),
    logarithmic beyond; labelled ticks at 1, 2 and 5 of every decade where the run spans few
    decades (so there are labels above 10^4 too), at every decade where it spans many; and a
    margin above the plateau, which would otherwise lie on the panel's top edge."""
    from matplotlib.ticker import FuncFormatter, NullLocator, SymmetricalLogLocator

    linthresh = max(1.0, 0.1 * float(np.median(np.abs(elbo[-window:]))))
    ax.set_yscale("symlog", linthresh=linthresh)
    # Decades on the axis: on each side of zero, from the linear band out to the run's extreme.
    decades = sum(
        np.log10(max(extreme, linthresh) / linthresh) for extreme in (-np.min(elbo), np.max(elbo))
    )
    subs = (1.0, 2.0, 5.0) if decades <= 3 else (1.0,)
    ax.yaxis.set_major_locator(SymmetricalLogLocator(linthresh=linthresh, base=10, subs=subs))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:.3g}"))
    ax.yaxis.set_minor_locator(NullLocator())
    transform = ax.yaxis.get_transform()
    low, high = transform.transform(np.array([np.min(elbo), np.max(elbo)]))
    margin = 0.08 * max(high - low, 1e-12)
    inverse = transform.inverted()
    ax.set_ylim(*inverse.transform(np.array([low - margin, high + margin])))
