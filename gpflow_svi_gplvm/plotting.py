"""Matplotlib figures: the latent space with the uncertainty of q(x), ARD relevances, ELBO trace."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .models import SVIGPLVM
    from .training import History

__all__ = ["plot_latent_space", "plot_ard", "plot_elbo"]


def _axes(ax, figsize):
    import matplotlib.pyplot as plt

    if ax is not None:
        return ax.figure, ax
    figure, ax = plt.subplots(figsize=figsize)
    return figure, ax


def plot_latent_space(
    model: SVIGPLVM,
    Y: np.ndarray | None = None,
    labels: np.ndarray | None = None,
    dims: tuple[int, int] | None = None,
    ax=None,
) -> Figure:
    """Scatter of the latent means of the training rows on two dimensions, coloured by ``labels``.

    ``dims`` defaults to the two most relevant dimensions by ARD (largest inverse lengthscales).
    For a Gaussian q(x), each point carries an ellipse of +/- 1 standard deviation.
    ``Y`` (the training rows) is needed for amortised models only.
    """
    from matplotlib.collections import EllipseCollection

    mean = model.latent_mean(Y).numpy()
    variance = model.latent_variance(Y).numpy()
    if dims is None:
        order = np.argsort(-model.ard_relevance())
        dims = (int(order[0]), int(order[min(1, len(order) - 1)]))
    figure, ax = _axes(ax, (6, 5))
    x, y = mean[:, dims[0]], mean[:, dims[1]]
    colours = None if labels is None else np.asarray(labels)
    if np.any(variance > 0):
        sd = np.sqrt(variance[:, list(dims)])
        ellipses = EllipseCollection(
            2 * sd[:, 0],
            2 * sd[:, 1],
            np.zeros(len(sd)),
            units="xy",
            offsets=np.column_stack([x, y]),
            offset_transform=ax.transData,
            facecolors="none",
            edgecolors="grey",
            linewidths=0.5,
            alpha=0.3,
        )
        ax.add_collection(ellipses)
    if colours is not None and np.issubdtype(colours.dtype, np.number):
        points = ax.scatter(x, y, c=colours, cmap="tab10", s=8)
        figure.colorbar(points, ax=ax, label="label")
    elif colours is not None:
        for value in np.unique(colours):
            chosen = colours == value
            ax.scatter(x[chosen], y[chosen], s=8, label=str(value))
        ax.legend(markerscale=2, fontsize="small")
    else:
        ax.scatter(x, y, s=8)
    ax.set_xlabel(f"latent dim {dims[0]}")
    ax.set_ylabel(f"latent dim {dims[1]}")
    ax.set_title(
        f"{type(model).__name__}: latent means" + (" with 1 sd" if np.any(variance) else "")
    )
    ax.autoscale_view()
    return figure


def plot_ard(model: SVIGPLVM, ax=None) -> Figure:
    """Bars of the ARD relevance 1 / lengthscale_q of each latent dimension."""
    relevance = model.ard_relevance()
    figure, ax = _axes(ax, (5, 3))
    ax.bar(np.arange(len(relevance)), relevance)
    ax.set_xticks(np.arange(len(relevance)))
    ax.set_xlabel("latent dimension")
    ax.set_ylabel("1 / lengthscale")
    ax.set_title("ARD relevance")
    return figure


def plot_elbo(history: History, window: int = 50, ax=None) -> Figure:
    """The minibatch ELBO per step and its running mean over ``window`` steps."""
    elbo = np.asarray(history.elbo)
    figure, ax = _axes(ax, (6, 3))
    ax.plot(elbo, alpha=0.3, label="minibatch ELBO")
    if len(elbo) >= window:
        smooth = np.convolve(elbo, np.ones(window) / window, mode="valid")
        ax.plot(np.arange(window - 1, len(elbo)), smooth, label=f"mean of {window}")
    ax.set_xlabel("step")
    ax.set_ylabel("ELBO")
    ax.legend()
    return figure
