"""Matplotlib figures: the latent space with the uncertainty of q(x), ARD relevances, ELBO trace,
grids of images (originals, gaps, reconstructions) and predictive variance against a covariate;
and :func:`keep_figures`, which saves a notebook's figures when it runs as a script."""

from __future__ import annotations

import atexit
import re
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.colors import Colormap
    from matplotlib.figure import Figure

    from .models import SVIGPLVM
    from .training.trainer import History

__all__ = [
    "plot_latent_space",
    "plot_ard",
    "plot_elbo",
    "plot_image_grid",
    "plot_variance_against",
    "keep_figures",
]


def keep_figures(name: str, folder: str | Path | None = None) -> Path | None:
    """Save every figure a script draws, as PNG files in ``folder`` (default
    ``runs/notebooks/<name>``, under the working directory), when the script ends.

    The notebooks call it first: in Jupyter (an IPython kernel) the figures show inline and it
    does nothing (returns None); run as scripts (``python notebooks/01_quickstart.py``), where a
    headless ``plt.show()`` shows nothing, it prints the folder and, at the end, the files
    written there (``figure_01.png``, ... in the order drawn, named after their first title).
    """
    if "ipykernel" in sys.modules:
        return None
    folder = Path("runs") / "notebooks" / name if folder is None else Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    print(f"figures: saved to {folder}/ when the script ends")
    # A headless plt.show() warns that it shows nothing: here the figures are kept instead.
    warnings.filterwarnings("ignore", "FigureCanvasAgg is non-interactive")
    atexit.register(_save_open_figures, folder)
    return folder


def _save_open_figures(folder: Path) -> None:
    """Write each open pyplot figure to ``folder`` and list the files written."""
    import matplotlib.pyplot as plt

    written: list[str] = []
    for number in plt.get_fignums():
        figure = plt.figure(number)
        titles = [ax.get_title() for ax in figure.axes if ax.get_title()]
        words = re.sub(r"[^a-z0-9]+", "_", titles[0].lower())[:40].strip("_") if titles else ""
        path = folder / f"figure_{len(written) + 1:02d}{'_' + words if words else ''}.png"
        figure.savefig(path, dpi=100, bbox_inches="tight")
        written.append(path.name)
    print(f"figures: wrote {len(written)} to {folder}/: {', '.join(written)}")


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """The figure of ``ax``, or a new figure of ``figsize`` inches with one axis."""
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure

    if ax is None:
        return plt.subplots(figsize=figsize)
    figure = ax.figure
    # An axis on a SubFigure: the root figure is the one that saves and shows.
    return (figure if isinstance(figure, Figure) else figure.figure), ax


_MAX_CLASSES = 20
"""Most labels told apart by a qualitative palette; more numeric labels get a colour scale."""


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
    figure, ax = _axes(ax, (6, 5))
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
        figure, ax = _axes(ax, (5, 3))
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
        figure, ax = _axes(ax, (6, 3))
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


def _images(rows: Sequence[np.ndarray], image_shape: tuple[int, int]) -> list[np.ndarray]:
    """Each grid row as [n, H, W] floats; checks the shapes and says how to fix them."""
    if isinstance(rows, np.ndarray) and rows.ndim < 3:
        raise ValueError(
            f"rows must be a list of arrays, one per grid row, got one array of shape "
            f"{rows.shape}: wrap it, e.g. plot_image_grid([Y[:6]], image_shape)."
        )
    if len(rows) == 0:
        raise ValueError("rows is empty: pass a list of arrays [n, H * W], one per grid row.")
    if len(tuple(image_shape)) != 2 or min(image_shape) < 1:
        raise ValueError(f"image_shape must be (height, width) of one image, got {image_shape}.")
    height, width = (int(size) for size in image_shape)
    grid = []
    for k, images in enumerate(rows):
        images = np.asarray(images, dtype=float)
        if images.ndim == 1:
            images = images[None]
        if images.ndim == 3 and images.shape[1:] == (height, width):
            images = images.reshape(len(images), -1)
        if images.ndim != 2 or images.shape[1] != height * width:
            raise ValueError(
                f"rows[{k}] has shape {images.shape}, i.e. {images.shape[-1]} values per image, "
                f"but image_shape {tuple(image_shape)} holds {height * width} pixels: pass the "
                "(height, width) of one image, e.g. the data set's metadata['image_shape'] "
                "((28, 28) for MNIST, (28, 20) for the Brendan faces)."
            )
        grid.append(images.reshape(len(images), height, width))
    counts = {len(images) for images in grid}
    if len(counts) != 1:
        raise ValueError(
            f"Every grid row needs the same number of images, got {[len(g) for g in grid]}: "
            "take the same rows of each array, e.g. Y[:6], Y_missing[:6], mean[:6]."
        )
    return grid


def _finite_range(images: Sequence[np.ndarray]) -> tuple[float, float]:
    finite = np.concatenate([image[np.isfinite(image)] for image in images])
    if finite.size == 0:
        return 0.0, 1.0
    return float(finite.min()), float(finite.max())


def plot_image_grid(
    rows: Sequence[np.ndarray],
    image_shape: tuple[int, int],
    titles: Sequence[str] | None = None,
    cmap: str = "gray",
    missing_colour: str = "tab:red",
    same_scale: bool = True,
    panel_height: float = 1.2,
    value_label: str = "value",
) -> Figure:
    """Images in a grid, one kind per grid row: e.g. originals, with gaps, reconstructions.

    ``rows`` holds K arrays of n images each, [n, H * W] (rows of Y) or [n, H, W];
    ``image_shape`` is (H, W) of one image. Missing pixels (NaN) are drawn in
    ``missing_colour``, with a legend entry when there are any. ``titles`` [K] label the grid
    rows. With ``same_scale`` all panels share one grey scale (the range of every finite pixel),
    so originals and reconstructions compare, read off one colour bar labelled ``value_label``;
    ``False`` scales each grid row on its own, with a colour bar each (for a row of predictive
    standard deviations, say). Each panel is ``panel_height`` inches high.
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    grid = _images(rows, image_shape)
    if titles is not None and len(titles) != len(grid):
        raise ValueError(f"titles has {len(titles)} entries but there are {len(grid)} grid rows.")
    num_rows, num_columns = len(grid), len(grid[0])
    height, width = grid[0].shape[1:]
    colours = plt.get_cmap(cmap).with_extremes(bad=missing_colour)
    shared = _finite_range(grid)
    figure, axes = plt.subplots(
        num_rows,
        num_columns,
        figsize=(0.6 + num_columns * panel_height * width / height, num_rows * panel_height),
        squeeze=False,
        layout="constrained",
    )
    for k, (row_axes, images) in enumerate(zip(axes, grid)):
        low, high = shared if same_scale else _finite_range([images])
        for ax, image in zip(row_axes, images):
            shown = ax.imshow(np.ma.masked_invalid(image), cmap=colours, vmin=low, vmax=high)
            ax.set_xticks([])
            ax.set_yticks([])
        if titles is not None:
            row_axes[0].set_ylabel(titles[k])
        if not same_scale:  # each grid row's own scale, beside it
            figure.colorbar(shown, ax=list(row_axes), label=value_label, aspect=8, pad=0.01)
    if same_scale:  # one scale for every panel
        figure.colorbar(shown, ax=list(axes.ravel()), label=value_label, pad=0.01)
    if any(np.isnan(images).any() for images in grid):
        figure.legend(
            handles=[Patch(color=missing_colour, label="missing")],
            loc="outside lower right",
            fontsize=8,
        )
    return figure


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
    figure, ax = _axes(ax, (6, 4))
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
