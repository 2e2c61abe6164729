"""Matplotlib figures: the latent space with the uncertainty of q(x), ARD relevances, ELBO trace,
grids of images (originals, gaps, reconstructions), predictive variance against a covariate and
reliability diagrams; and :func:`keep_figures`, which saves a notebook's figures when it runs as a
script."""

from __future__ import annotations

import atexit
import re
import sys
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


__all__ = [
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


def axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
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
