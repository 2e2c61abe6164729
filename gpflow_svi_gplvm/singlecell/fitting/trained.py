"""How :meth:`SingleCellGPLVM.fit <gpflow_svi_gplvm.singlecell.SingleCellGPLVM.fit>` trains its
model and records the run: :func:`~gpflow_svi_gplvm.fit`, or B-SVI distilled into an encoder
(:mod:`~.distilled`); Adam's step size by the latents trained; what ``uns[key_added]`` holds."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import tensorflow as tf

from ...defaults import CELL_ENCODER_LEARNING_RATE, CELL_TABLE_LEARNING_RATE
from ...distributed.workers import Workers
from ...models import SVIGPLVM
from ...training.trainer import fit
from ..cells.registration import CellRegistration
from .distilled import fit_distilled
from .fitted import CellModelOptions, FittedCells

if TYPE_CHECKING:
    from .built_model import BuiltModel

__all__ = ["train", "summary_of", "final_elbo", "distils", "step_size"]


def train(
    options: CellModelOptions,
    registration: CellRegistration,
    built: BuiltModel,
    iterations: int,
    strategy: tf.distribute.Strategy | None,
    workers: Workers,
    training: dict[str, Any],
    checkpoint_dir: str | Path | None,
    overwrite: bool,
) -> tuple[FittedCells, dict]:
    """Train the ``built`` model (:func:`~.built_model.build_model`'s: the model, its rows,
    what to train on and the model's inputs) for ``iterations`` steps, by
    :func:`~gpflow_svi_gplvm.fit` with ``training``'s options or, for an encoder distilled from
    B-SVI, by :func:`~.distilled.fit_distilled`. Returns the fitted state (with how it was
    trained: the summary's settings and the ELBO the run ended at) and what ``uns[key_added]``
    holds (:func:`summary_of`). Checkpoints record the ``registration``'s genes and covariates,
    so that a resume on others is refused naming them."""
    rows, data, inputs, model = built.rows, built.data, built.inputs, built.model
    if checkpoint_dir is not None:
        names = {"genes": registration.gene_names, "covariates": registration.encoding.names}
        training = dict(training, checkpoint_dir=checkpoint_dir, data_names=names)
        training["overwrite"] = overwrite  # an earlier run's checkpoints replaced alike
    if distils(options, strategy):
        cells = options.distil_cells
        history = fit_distilled(model, rows, inputs, cells, iterations, **training)
    else:
        history = fit(model, data, iterations, strategy=strategy, workers=workers, **training)
    fitted = FittedCells(model, registration, options, history=history)
    steps = training["batch_size"], training["learning_rate"]
    summary = summary_of(fitted, iterations, *steps)
    record = summary["settings"] | {"elbo_final": final_elbo(summary["elbo"])}
    return replace(fitted, training_record=record), summary


def summary_of(fitted: FittedCells, iterations: int, batch_size: int, learning_rate: float) -> dict:
    """What ``uns[key_added]`` holds of the ``fitted`` state: settings, ELBO trace, ARD
    lengthscales, covariates."""
    model, options, registration = fitted.model, fitted.options, fitted.registration
    assert fitted.history is not None
    kernel = getattr(model.kernel, "covariate_kernel", None)
    variance = getattr(kernel, "variance", None)
    settings = {
        "model": options.model,
        "likelihood": options.likelihood,
        "latent_dim": options.latent_dim,
        "num_inducing": int(model.inducing_variable.num_inducing),
        "layer": registration.layer or "X",
        "size_factors": registration.size_factors or "none",
        "iterations": iterations,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "seed": options.seed,
        "refine_latents": options.refine_latents,
    }
    if options.model == "aeb":
        settings.update(
            encoder_training=options.encoder_training, distil_cells=options.distil_cells
        )
    return {
        "settings": settings,
        "genes": np.array(registration.gene_names, dtype=object),
        "elbo": np.asarray(fitted.history.elbo),
        "ard_lengthscales": 1.0 / model.ard_relevance(),
        "covariates": np.array(registration.encoding.names, dtype=object),
        "covariate_variances": (
            np.zeros(0) if variance is None else np.atleast_1d(variance.numpy())
        ),
    }


def final_elbo(elbo: np.ndarray) -> float | None:
    """The ELBO a run ends at: the mean of its last 100 steps (None for no step)."""
    return float(np.mean(elbo[-100:])) if len(elbo) else None


def distils(options: CellModelOptions, strategy: tf.distribute.Strategy | None) -> bool:
    """Whether a fit with ``options`` distils an encoder from B-SVI; a ``ValueError`` where it
    would with a ``strategy`` (it fits B-SVI to the cells of one process)."""
    distils = options.model == "aeb" and options.encoder_training == "distilled"
    if distils and strategy is not None:
        raise ValueError(
            "encoder_training='distilled' fits B-SVI to cells of one process, without a "
            "strategy: with a strategy pass encoder_training='joint', or fit model='bsvi' (on "
            "the command line: --model bsvi)."
        )
    return distils


def step_size(model: SVIGPLVM, given: float | None, distils: bool) -> float:
    """``given``, or Adam's default step for the latents trained: a table's (``model``'s, or the
    B-SVI fit that an encoder is distilled from) or an encoder's."""
    if given is not None:
        return given
    encoder = model.latent.amortised and not distils
    return CELL_ENCODER_LEARNING_RATE if encoder else CELL_TABLE_LEARNING_RATE
