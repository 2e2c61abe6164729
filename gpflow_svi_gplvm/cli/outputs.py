"""What a command-line run writes to ``--output``, and how ``--overwrite`` leaves none of an
earlier run's outputs beside a new run's: once the new run has written its own, the earlier
run's outputs it did not write again are removed (only what the package itself wrote)."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

from ..export.folder import EXPORT, FolderKind, holds_only_its_own
from ..training.run_folder import RunFolder

__all__ = ["OUTPUTS", "finish_outputs", "remove_earlier_outputs"]

OUTPUTS = ("metrics.json", "latent_space.png", "ard.png", "elbo.png", "X_gplvm.npy")
"""The files a run writes to ``--output`` (and ``X_gplvm_var.npy`` beside the embedding), which
refuse a second run there without ``--resume`` or ``--overwrite``."""

FILES = (*OUTPUTS, "X_gplvm_var.npy")
FOLDERS = ("checkpoints", "model", "saved_model")


def finish_outputs(args: argparse.Namespace, written: list[str]) -> None:
    """Say what the run ``written`` to ``--output``; with ``--overwrite`` (not ``--resume``),
    first remove the earlier run's outputs it did not write again, and say so."""
    print(f"wrote {', '.join(written)} to {args.output}/")
    if args.overwrite and not args.resume:
        removed = remove_earlier_outputs(args.output, written)
        if removed:
            print(f"removed an earlier run's {', '.join(removed)} (--overwrite)")


def remove_earlier_outputs(output: Path, written: list[str]) -> list[str]:
    """Delete what an earlier run left in ``output`` that this run, whose outputs are
    ``written`` (names as ``"saved_model/1/"``), did not write again: its files, its checkpoints,
    its saved model (``model/``) and its export (``saved_model/``), each only when the package
    wrote it and it holds nothing else; the names deleted."""
    from ..singlecell.storage.saving import SAVED_MODEL  # the single-cell wing imports TF

    kept = {name.split("/")[0] for name in written}
    deleted = []
    for name in FILES:
        if name not in kept and (output / name).is_file():
            (output / name).unlink()
            deleted.append(name)
    checkpoints = RunFolder(output / "checkpoints")
    if "checkpoints" not in kept and checkpoints.holds_checkpoints():
        checkpoints.clear()
        _remove_if_empty(checkpoints.path)
        deleted.append("checkpoints/")
    if "model" not in kept and _remove_folder(output / "model", SAVED_MODEL):
        deleted.append("model/")
    if "saved_model" not in kept and _remove_export(output / "saved_model"):
        deleted.append("saved_model/")
    return deleted


def _remove_export(path: Path) -> bool:
    """Remove an export at ``path``: a table run's (the folder itself) or a single-cell run's
    (its numbered versions); whether anything was removed."""
    if _remove_folder(path, EXPORT):
        return True
    versions = [v for v in path.glob("*") if v.name.isdigit()] if path.is_dir() else []
    removed = [v for v in versions if _remove_folder(v, EXPORT)]
    _remove_if_empty(path)
    return bool(removed)


def _remove_folder(path: Path, kind: FolderKind) -> bool:
    """Remove the folder of ``kind`` at ``path`` if the package wrote it and it holds nothing
    else (a folder with a user's file in it is kept); whether it was removed."""
    if not holds_only_its_own(path, kind):
        return False
    shutil.rmtree(path)
    return True


def _remove_if_empty(path: Path) -> None:
    if path.is_dir() and not any(path.iterdir()):
        path.rmdir()
