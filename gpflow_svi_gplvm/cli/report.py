"""What a command-line run writes and prints: its metrics (reconstruction errors on the original
scale, settings, versions), its figures, and its summary."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import gpflow
import numpy as np
import tensorflow as tf

from .. import datasets, plotting
from ..metrics import rmse, rmse_per_column
from ..models import SVIGPLVM
from ..training.trainer import History
from ..version import __version__

__all__ = [
    "RELEVANCE_KEPT",
    "described",
    "standardised",
    "run_metrics",
    "settings",
    "standardisation",
    "reconstruction_errors",
    "model_units",
    "versions",
    "save_figures",
    "print_summary",
]

RELEVANCE_KEPT = 0.1
"""A latent dimension is reported as kept when its latent relevance (the spread of the latent
means in lengthscales, ``SVIGPLVM.latent_relevance``) is >= 10% of the largest."""


def described(data: datasets.DataSet, labels: str | None) -> str | None:
    """The data's description, the ``--labels`` column named as the labels, not as dropped."""
    dropped = data.metadata.get("dropped", [])
    if labels not in dropped:
        return data.description
    listed = f" (dropped non-numeric columns: {', '.join(dropped)})"
    others = [name for name in dropped if name != labels]
    kept = f" (dropped non-numeric columns: {', '.join(others)})" if others else ""
    return (data.description or "").replace(listed, kept) + f" (labels: {labels})"


def standardised(args: argparse.Namespace) -> bool:
    """Whether a data file's columns are standardised: for a Gaussian likelihood, unless asked
    not to (counts and binary data must stay as they are)."""
    return args.data is not None and args.likelihood == "gaussian" and not args.no_standardise


def run_metrics(
    args: argparse.Namespace,
    data: datasets.DataSet,
    model: SVIGPLVM,
    history: History,
    seconds: float,
) -> dict:
    """What ``metrics.json`` holds: every setting of the run and the versions it ran with, its
    final ELBO (the mean of the last 100 steps), the reconstruction errors at the latent means
    (:func:`reconstruction_errors`), the relevances of the latents and, for a standardised run,
    each column's location and scale."""
    Y = data.Y
    amortised_rows = Y if model.latent.amortised else None
    relevance = model.latent_relevance(amortised_rows)
    kept = [int(q) for q in np.flatnonzero(relevance >= RELEVANCE_KEPT * relevance.max())]
    tail = history.elbo[-min(100, len(history.elbo)) :]
    return {
        "model": type(model).__name__,
        "data": described(data, args.labels) or str(args.data),
        "N": int(Y.shape[0]),
        "D": int(Y.shape[1]),
        "settings": settings(args, model),
        "standardised": standardised(args),
        "standardisation": standardisation(data),
        "shared_covariance": model.shared_covariance,
        "versions": versions(),
        "seconds": round(seconds, 2),
        "steps": len(history.elbo),
        "elbo_final": float(np.mean(tail)) if len(tail) else None,
        **reconstruction_errors(args, data, model),
        "ard_relevance": [float(r) for r in model.ard_relevance()],
        "latent_relevance": [float(r) for r in relevance],
        "kept_latent_dims": kept,
    }


def settings(args: argparse.Namespace, model: SVIGPLVM) -> dict:
    """Every option of the run, as ``metrics.json`` records them: as given, or as ``model``
    took it (M, at most one inducing point per row)."""
    settings = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in vars(args).items()
        if name not in ("debug", "no_progress")
    }
    settings["num_inducing"] = int(model.inducing_variable.num_inducing)
    return settings


def standardisation(data: datasets.DataSet) -> dict | None:
    """Each column's name, location m_d and scale s_d for a standardised run (the model was
    trained on (y - m) / s; y = m + s * the model's y), else None."""
    if "location" not in data.metadata:
        return None
    D = data.Y.shape[1]
    return {
        "columns": list(data.metadata.get("columns") or map(str, range(D))),
        "location": [float(m) for m in data.metadata["location"]],
        "scale": [float(s) for s in data.metadata["scale"]],
        "meaning": "the model was trained on (y - location) / scale, column by column",
    }


def reconstruction_errors(
    args: argparse.Namespace, data: datasets.DataSet, model: SVIGPLVM
) -> dict:
    """The RMSE of the reconstruction at the latent means over the observed entries: pooled in
    the units the model was trained in (standardised, where every column weighs alike), and per
    column in the data's own units (a pooled RMSE in those would be ruled by the widest column)."""
    Y = data.Y
    amortised_rows = Y if model.latent.amortised else None
    reconstruction = model.predict_y(model.latent_mean(amortised_rows))[0].numpy()
    scale = data.metadata.get("scale", np.ones(Y.shape[1]))
    observed = np.sum(~np.isnan(Y), axis=0)
    per_column = rmse_per_column(Y * scale, reconstruction * scale)
    columns = data.metadata.get("columns") or [str(d) for d in range(Y.shape[1])]
    return {
        "reconstruction_rmse": rmse(Y, reconstruction),
        "reconstruction_rmse_units": model_units(args),
        "reconstruction_rmse_per_column": {
            name: (float(value) if observed[d] else None)
            for d, (name, value) in enumerate(zip(columns, per_column))
        },
        "reconstruction_rmse_per_column_units": (
            "the data's own" if args.data is not None else "grey levels in [0, 1]"
        ),
    }


def model_units(args: argparse.Namespace) -> str:
    """The units the model was trained in, as ``metrics.json`` names them."""
    if args.data is None:
        return "grey levels in [0, 1]"
    return "standardised columns" if standardised(args) else "the data's own"


def versions() -> dict[str, str]:
    """The versions of this package and of the libraries whose numbers it depends on."""
    return {
        "gpflow_svi_gplvm": __version__,
        "gpflow": gpflow.__version__,
        "tensorflow": tf.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }


def save_figures(
    folder: Path,
    model: SVIGPLVM,
    history: History,
    amortised_rows: np.ndarray | None,
    data: datasets.DataSet,
) -> list[str]:
    """Write the latent space, ARD and ELBO figures to ``folder``; returns their file names.
    ``amortised_rows`` [N, D] are the training rows for an amortised model, else None."""
    legend = data.metadata.get("labels_column") or ("digit" if data.labels is not None else None)
    figures = {
        "latent_space.png": plotting.plot_latent_space(
            model, amortised_rows, data.labels, legend_title=legend
        ),
        "ard.png": plotting.plot_ard(model, amortised_rows),
        "elbo.png": plotting.plot_elbo(history),
    }
    for name, figure in figures.items():
        figure.savefig(folder / name, dpi=120, bbox_inches="tight")
    return list(figures)


def print_summary(args: argparse.Namespace, metrics: dict, seconds: float, steps: int) -> None:
    """The run in a few lines; ``steps`` is the length of the ELBO trace."""
    print(f"model: {metrics['model']}  Q={args.latent_dim}  M={args.num_inducing}")
    print(f"trained {args.iterations} steps in {seconds:.1f} s")
    if steps:
        print(f"ELBO (mean of last {min(100, steps)} steps): {metrics['elbo_final']:.2f}")
    error, units = metrics["reconstruction_rmse"], metrics["reconstruction_rmse_units"]
    print(f"reconstruction RMSE at the latent means ({units}): {error:.4f}")
    if metrics["standardised"]:
        print("  per column in the data's own units: metrics.json (reconstruction_rmse_per_column)")
    print(
        f"latent dims kept by ARD (latent means spread >= {RELEVANCE_KEPT:.0%} of the widest, "
        f"in lengthscales): {metrics['kept_latent_dims']} of {args.latent_dim}"
    )
