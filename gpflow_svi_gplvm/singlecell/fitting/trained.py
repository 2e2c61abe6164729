"""How :meth:`SingleCellGPLVM.fit <gpflow_svi_gplvm.singlecell.SingleCellGPLVM.fit>` trains its
model and records the run: :func:`~gpflow_svi_gplvm.fit`, or B-SVI distilled into an encoder
(:mod:`~.distilled`); Adam's step size by the latents trained; what ``uns[key_added]`` holds."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import tensorflow as tf

from ...defaults import CELL_ENCODER_LEARNING_RATE, CELL_TABLE_LEARNING_RATE
from ...distributed.workers import Workers
from ...models import SVIGPLVM
from ...training.trainer import History, fit
from ..mapping.offsets import BatchOffsets
from .distilled import fit_distilled

if TYPE_CHECKING:
    from .built_model import BuiltModel

__all__ = ["train", "summary_of", "final_elbo", "distils", "step_size"]


def train(
    face: Any,
    built: BuiltModel,
    iterations: int,
    strategy: tf.distribute.Strategy | None,
    workers: Workers,
    training: dict[str, Any],
    checkpoint_dir: str | Path | None,
    overwrite: bool,
) -> History:
    """Train ``face``'s model for ``iterations`` steps on what :func:`~.built_model.build_model`
    made (its rows, what to train on and the model's inputs), by :func:`~gpflow_svi_gplvm.fit`
    with ``training``'s options or, for an encoder distilled from B-SVI, by
    :func:`~.distilled.fit_distilled`. Checkpoints record the genes and covariates, so that a
    resume on others is refused naming them."""
    rows, data, inputs = built.rows, built.data, built.inputs
    if checkpoint_dir is not None:
        names = {"genes": face.gene_names, "covariates": face.encoding.names}
        training = dict(training, checkpoint_dir=checkpoint_dir, data_names=names)
        training["overwrite"] = overwrite  # an earlier run's checkpoints replaced alike
    face.batch_offsets = BatchOffsets()
    model = cast(SVIGPLVM, face.model)
    if distils(face, strategy):
        return fit_distilled(model, rows, inputs, face.distil_cells, iterations, **training)
    return fit(model, data, iterations, strategy=strategy, workers=workers, **training)


def summary_of(face: Any, iterations: int, batch_size: int, learning_rate: float) -> dict:
    """What ``uns[key_added]`` holds: settings, ELBO trace, ARD lengthscales, covariates."""
    model = face.model
    assert model is not None and face.history is not None
    kernel = getattr(model.kernel, "covariate_kernel", None)
    variance = getattr(kernel, "variance", None)
    settings = {
        "model": face.model_name,
        "likelihood": face.likelihood,
        "latent_dim": face.latent_dim,
        "num_inducing": int(model.inducing_variable.num_inducing),
        "layer": face.registration.layer or "X",
        "size_factors": face.registration.size_factors or "none",
        "iterations": iterations,
        "batch_size": batch_size,
        "learning_rate": learning_rate,
        "seed": face.seed,
        "refine_latents": face.refine_latents,
    }
    if face.model_name == "aeb":
        settings.update(encoder_training=face.encoder_training, distil_cells=face.distil_cells)
    return {
        "settings": settings,
        "genes": np.array(face.gene_names, dtype=object),
        "elbo": np.asarray(face.history.elbo),
        "ard_lengthscales": 1.0 / model.ard_relevance(),
        "covariates": np.array(face.encoding.names, dtype=object),
        "covariate_variances": (
            np.zeros(0) if variance is None else np.atleast_1d(variance.numpy())
        ),
    }


def final_elbo(elbo: np.ndarray) -> float | None:
    """The ELBO a run ends at: the mean of its last 100 steps (None for no step)."""
    return float(np.mean(elbo[-100:])) if len(elbo) else None


def distils(face: Any, strategy: tf.distribute.Strategy | None) -> bool:
    """Whether ``face`` distils an encoder from B-SVI; a ``ValueError`` where it would with a
    ``strategy`` (it fits B-SVI to the cells of one process)."""
    distils = face.model_name == "aeb" and face.encoder_training == "distilled"
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
