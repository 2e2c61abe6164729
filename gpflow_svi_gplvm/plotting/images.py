"""Grids of images: originals, their gaps and reconstructions side by side."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from matplotlib.figure import Figure

__all__ = ["plot_image_grid"]


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
    size = (0.6 + num_columns * panel_height * width / height, num_rows * panel_height)
    figure, axes = plt.subplots(
        num_rows, num_columns, figsize=size, squeeze=False, layout="constrained"
    )
    for k, (row_axes, images) in enumerate(zip(axes, grid)):
        low, high = shared if same_scale else _finite_range([images])
        for ax, image in zip(row_axes, images):
            shown = ax.imshow(np.ma.masked_invalid(image), cmap=colours, vmin=low, vmax=high)
            ax.set(xticks=[], yticks=[])
        if titles is not None:
            row_axes[0].set_ylabel(titles[k])
        if not same_scale:  # each grid row's own scale, beside it
            figure.colorbar(shown, ax=list(row_axes), label=value_label, aspect=8, pad=0.01)
    if same_scale:  # one scale for every panel
        figure.colorbar(shown, ax=list(axes.ravel()), label=value_label, pad=0.01)
    if any(np.isnan(images).any() for images in grid):
        missing = [Patch(color=missing_colour, label="missing")]
        figure.legend(handles=missing, loc="outside lower right", fontsize=8)
    return figure
