"""``python -m gpflow_svi_gplvm map-query --model DIR --data query.h5ad --output DIR``: the cells
of an ``.h5ad`` mapped onto a saved :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM`, new
batches and all.

The query's batches that the model does not know (by the model's own batch key) are learnt
first, as ``SingleCellGPLVM.map_query`` learns them: an offset per gene of each new batch fitted
from up to ``--fit-cells`` of its cells, the very cells ``map_query`` on the whole query would
draw (:func:`~gpflow_svi_gplvm.singlecell.mapping.query.offset_fitting_cells`), read from the
backed file alone. Every cell is then embedded a block at a time as ``embed`` does
(:func:`~.embed.write_embedding`: memory constant in the cells, nothing half-written), so its
means are ``map_query``'s on the whole query but for ``transform``'s round-off between blocks.
``--save-model DIR2`` saves the reference with the learnt batches to a new folder, for a later
``embed`` to map those batches' cells as known ones; the reference folder and the ``.h5ad`` are
never written. A query without cells of a new batch is embedded as ``embed`` does, and the
summary says so.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..validation import check_integer, check_writable_folder
from .embed import backed_h5ad, checked_embedding_inputs, print_embedded, write_embedding

if TYPE_CHECKING:  # the single-cell face imports TensorFlow: loaded with a run, not with --help
    from ..singlecell import SingleCellGPLVM

__all__ = ["run_map_query"]


def run_map_query(args: argparse.Namespace) -> int:
    """The ``map-query`` verb (see the module); its exit status."""
    fit_cells = check_integer(args.fit_cells, "--fit-cells", hint="e.g. 2000 cells of each batch")
    face, block, names = checked_embedding_inputs(args, "map_query.json")
    _check_save_folder(args)
    with backed_h5ad(args.data) as adata:
        new, learnt_from, learning = _learn_new_batches(face, adata, fit_cells, args)
        record: dict[str, Any] = {
            "new_batches": [str(batch) for batch in new],
            "fit_cells": fit_cells,
            "cells_learnt_from": learnt_from,
            "saved_model": None if args.save_model is None else str(args.save_model),
        }

        saved = args.save_model
        keep = None if saved is None else lambda: _save_model(face, saved, args.overwrite)
        seconds = write_embedding(face, adata, args, block, names, record, keep)
        print(learning)
        print_embedded(adata.n_obs, seconds, names, args.output)
    if saved is not None and new:
        print(
            f"saved the model with the new batches to {saved}/: embed --model {saved} maps their "
            "cells as known batches"
        )
    elif saved is not None:
        print(f"saved the model, no batch learnt, to {saved}/")
    return 0


def _save_model(face: SingleCellGPLVM, folder: Path, overwrite: bool) -> None:
    """``face`` saved to ``folder`` (an empty folder there is taken, and left as it was if the
    save fails: the save moves a whole folder into its place)."""
    empty = folder.is_dir() and not any(folder.iterdir())
    if empty:
        folder.rmdir()
    try:
        face.save(folder, overwrite=overwrite)
    except BaseException:
        if empty:
            folder.mkdir(exist_ok=True)
        raise


def _learn_new_batches(
    face: SingleCellGPLVM, adata, fit_cells: int, args: argparse.Namespace
) -> tuple[list, int, str]:
    """Learn the offsets of the backed ``adata``'s batches that ``face`` does not know, from up
    to ``fit_cells`` cells of each (read alone: ``map_query`` of those cells draws them all);
    the batches learnt, the cells read, and a line saying so."""
    from ..singlecell.mapping.query import batch_categories, offset_fitting_cells

    registration = face.registration
    nothing = "so nothing was learnt: the cells were embedded as embed does"
    if registration.batch_key is None:
        return [], 0, f"the model was fitted without a batch (no batch key), {nothing}"
    batches, new = batch_categories(registration, face.batch_offsets, adata.obs)
    if not new:
        key = registration.batch_key
        return [], 0, f"no cell of a batch the model does not know (obs {key!r}), {nothing}"
    cells = offset_fitting_cells(batches, new, fit_cells, face.options.seed)
    face.map_query(
        adata[cells].to_memory(),
        fit_cells=fit_cells,
        progress=not args.no_progress,
        missing_genes=args.missing_genes,
    )
    shown = ", ".join(map(str, new[:10])) + (", ..." if len(new) > 10 else "")
    batch_or_batches = "batch" if len(new) == 1 else "batches"
    learnt = f"learnt {len(new)} new {batch_or_batches} ({shown}) from {len(cells)} of their cells"
    return new, len(cells), f"{learnt} (up to {fit_cells} of each)"


def _check_save_folder(args: argparse.Namespace) -> None:
    """A ``ValueError`` saying what to do unless ``--save-model`` (when given) is a new folder,
    or an empty one, or with ``--overwrite`` a saved model of the package holding nothing else,
    apart from ``--model`` (never written) and ``--output``."""
    target = args.save_model
    if target is None:
        return
    mine = target.resolve()
    reference = args.model.resolve()
    if mine == reference or mine.is_relative_to(reference) or reference.is_relative_to(mine):
        raise ValueError(
            f"--save-model {target} is, or lies in or holds, the reference folder --model "
            f"{args.model}, which is never written: name a new folder for the model with the "
            "learnt batches."
        )
    output = args.output.resolve()
    if mine == output or output.is_relative_to(mine):
        raise ValueError(
            f"--save-model {target} is, or holds, --output {args.output}: name another folder "
            "for the model (a new folder inside --output will do)."
        )
    if target.is_dir() and not any(target.iterdir()):
        return
    if target.exists() or target.is_symlink():
        if not args.overwrite:
            raise ValueError(
                f"--save-model {target} holds something already: pass --overwrite to replace a "
                "saved model there, or name a new folder."
            )
        from ..export.folder import check_destination
        from ..singlecell.storage.saving import SAVED_MODEL

        check_destination(target, True, SAVED_MODEL)
    check_writable_folder(target.parent, "--save-model's parent folder")
