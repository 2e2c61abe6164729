"""Matplotlib figures: the latent space with the uncertainty of q(x), ARD relevances, ELBO trace
(:mod:`.model`), grids of images (:mod:`.images`), predictive variance against a covariate
(:mod:`.variance`) and reliability diagrams of class probabilities (:mod:`.calibration`); and
:func:`keep_figures`, which saves a notebook's figures when it runs as a script
(:mod:`.figures`). Matplotlib is imported when a figure is drawn, not before."""

from .calibration import plot_label_reliability, plot_reliability
from .figures import keep_figures
from .images import plot_image_grid
from .model import plot_ard, plot_elbo, plot_latent_space
from .variance import plot_variance_against

__all__ = [
    "plot_latent_space",
    "plot_ard",
    "plot_elbo",
    "plot_image_grid",
    "plot_variance_against",
    "plot_reliability",
    "plot_label_reliability",
    "keep_figures",
]
