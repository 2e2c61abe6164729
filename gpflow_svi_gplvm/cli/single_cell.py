"""A command-line run on an ``.h5ad`` of single cells: ``SingleCellGPLVM`` fitted, its embedding,
metrics and figure written by the chief, the model saved and exported when asked."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, cast

import numpy as np
import tensorflow as tf

from .. import plotting
from ..defaults import COUNT_LIKELIHOOD_NAMES
from ..distributed.workers import Workers
from ..export.folder import check_destination, is_export
from ..models import SVIGPLVM
from ..training.trainer import History
from .outputs import finish_outputs
from .report import settings, versions

if TYPE_CHECKING:
    from ..singlecell import SingleCellGPLVM

__all__ = ["check_cell_options", "run_single_cell", "CELL_OPTIONS", "check_saved_model"]


def check_cell_options(args: argparse.Namespace, cells: bool) -> None:
    """A ``ValueError`` for single-cell options given with other data, which would ignore them."""
    given = [
        option
        for option, value in (
            ("--layer", args.layer),
            ("--batch-key", args.batch_key),
            ("--covariate-keys", args.covariate_keys),
            ("--genes", args.genes),
        )
        if value
    ]
    if given and not cells:
        raise ValueError(
            f"{', '.join(given)} choose what to read of an .h5ad file of single cells, but --data "
            f"is {args.data.name if args.data else 'the digits'}: drop them, or give an .h5ad."
        )


def run_single_cell(
    args: argparse.Namespace, strategy: tf.distribute.Strategy | None, workers: Workers
) -> int:
    """An ``.h5ad`` of single cells: ``SingleCellGPLVM`` (out of core on one worker, each worker
    reading its own cells on several), the embedding of every cell, ``metrics.json`` and the
    ELBO's figure in ``--output``, written by the chief."""
    from ..singlecell import SingleCellGPLVM

    if args.labels or args.likelihood not in COUNT_LIKELIHOOD_NAMES:
        raise ValueError(
            "An .h5ad is fitted as single cells' counts: --likelihood negative_binomial or "
            "poisson, and no --labels (the cells' obs hold their labels)."
        )
    saved = args.output / "model"
    with workers.agreeing():  # found now, not after training
        if args.save and workers.chief:
            check_saved_model(args, saved)
    options = {name: getattr(args, name) for name in CELL_OPTIONS}
    face = SingleCellGPLVM(args.latent_dim, **options, shared_covariance=args.shared_covariance)
    start = time.perf_counter()
    face.fit(
        args.data,
        args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,  # None: SingleCellGPLVM.fit's for the model
        progress=not args.no_progress and workers.chief,
        strategy=strategy,
        workers=workers,
        output=args.output,
        checkpoint_dir=args.output / "checkpoints" if args.save or args.resume else None,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    seconds = time.perf_counter() - start
    if not workers.chief:
        print(f"{workers.name} of {workers.count}: trained on its cells; the chief writes.")
        return 0
    written, metrics = _write_cell_outputs(args, face, seconds)
    if args.save:
        face.save(saved, overwrite=args.resume or args.overwrite)
        written += ["checkpoints/", "model/"]
    if args.export:
        face.export_saved_model(args.output / "saved_model", overwrite=True)
        written.append("saved_model/1/")
    steps = f"{metrics['steps']} steps in {seconds:.1f} s"
    print(f"{metrics['cells']} cells x {metrics['genes']} genes, {steps}")
    finish_outputs(args, written)
    return 0


def _write_cell_outputs(
    args: argparse.Namespace, face: SingleCellGPLVM, seconds: float
) -> tuple[list[str], dict]:
    """The chief's ``metrics.json`` and ELBO figure of a fitted ``face``: the files written (the
    embedding's, which the fit wrote, with them) and the metrics."""
    history, model = cast(History, face.history), cast(SVIGPLVM, face.model)
    cells, genes = int(model.num_data or 0), len(face.gene_names)
    metrics = {"cells": cells, "genes": genes, "settings": settings(args, model)}
    metrics.update(versions=versions(), seconds=round(seconds, 2), steps=len(history.elbo))
    metrics["elbo_final"] = float(np.mean(history.elbo[-100:])) if len(history.elbo) else None
    (args.output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plotting.plot_elbo(history).savefig(args.output / "elbo.png", dpi=120, bbox_inches="tight")
    return ["X_gplvm.npy", "X_gplvm_var.npy", "metrics.json", "elbo.png"], metrics


CELL_OPTIONS = (
    "layer",
    "genes",
    "batch_key",
    "covariate_keys",
    "likelihood",
    "model",
    "num_inducing",
    "seed",
)
"""The options the command line hands ``SingleCellGPLVM`` by their names."""


def check_saved_model(args: argparse.Namespace, saved: Path) -> None:
    """A ``ValueError`` when the folder ``saved`` of an ``.h5ad`` run's model cannot be written
    or holds an earlier run's model (unless ``--resume`` or ``--overwrite``)."""
    from ..singlecell.storage.saving import SAVED_MODEL

    if is_export(saved, SAVED_MODEL) and not (args.resume or args.overwrite):
        raise ValueError(
            f"--output {args.output} holds a saved model (model/): pass --resume to continue its "
            "run, --overwrite to start afresh, or choose another --output."
        )
    check_destination(saved, overwrite=True, kind=SAVED_MODEL)
