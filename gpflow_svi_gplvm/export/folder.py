"""The folder of an export (or of a saved model): recognised by a marker file, and replaced so
that it is never lost.

Only folders that hold their kind's marker (:data:`MARKER` in every export, a saved model's
manifest in every saved model: :class:`FolderKind`) and nothing but what the package wrote there
are ever replaced or deleted; anything else at an export's path is left alone. An export is
written into a hidden staging folder beside its path, marked by :data:`STAGING_MARKER` with the
writing process until it is in place; a replaced folder is renamed to a hidden name ending in
:data:`DELETING` before it is deleted. The staging folders of processes that died (killed
mid-export) and the folders left half-deleted are removed by the next export into the same
parent folder.

A replacement swaps the new folder and the old one in one atomic step where the system can
(Linux' ``renameat2`` with ``RENAME_EXCHANGE``), so that a process killed at any moment leaves
the old or the new export at the path, never neither. Elsewhere it takes two renames, and a kill
between them leaves the old export in a hidden sibling folder, which the next export to that
path names in a warning.

Standard library only (the reliability tests run it in processes they kill).
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import shutil
import socket
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EXPORT",
    "FolderKind",
    "MARKER",
    "STAGING_MARKER",
    "DELETING",
    "is_export",
    "holds_only_its_own",
    "check_destination",
    "write_staged",
    "make_staging",
    "write_marker",
    "replace_folder",
]

MARKER = "gpflow_svi_gplvm_export.json"
"""A file in every export written by this package: what marks a folder as safe to replace."""

STAGING_MARKER = ".gpflow_svi_gplvm_staging"
"""A file in a staging folder while an export is written into it: which process writes it."""


DELETING = ".gpflow_svi_gplvm-deleting"
"""The end of the hidden name a replaced folder of the package is given while it is deleted."""


@dataclass(frozen=True)
class FolderKind:
    """A kind of folder the package writes whole: the ``marker`` file in every such folder (what
    marks it as safe to replace) and the ``noun`` that names one in messages."""

    marker: str
    noun: str


EXPORT = FolderKind(MARKER, "an export")
"""The folders of :func:`~gpflow_svi_gplvm.export_saved_model`."""

_RETIRED = "-replaced"
"""Suffix of the hidden sibling that holds an old export while two renames replace it."""


def is_export(path: Path, kind: FolderKind = EXPORT) -> bool:
    """Whether ``path`` is a folder (not a link) holding ``kind``'s folder written by this
    package (an export by default)."""
    return not path.is_symlink() and path.is_dir() and (path / kind.marker).is_file()


def holds_only_its_own(path: Path, kind: FolderKind = EXPORT) -> bool:
    """Whether ``path`` is ``kind``'s folder written by this package and holds nothing else, so
    that deleting it deletes nothing a user put there."""
    return is_export(path, kind) and not _foreign_files(path, kind)


def check_destination(path: Path, overwrite: bool, kind: FolderKind = EXPORT) -> None:
    """A ``ValueError`` unless a folder of ``kind`` may be written at ``path``: nothing is there,
    or one of this package that holds nothing else is there and ``overwrite`` is True."""
    noun = kind.noun
    if not (path.exists() or path.is_symlink()):
        for retired in sorted(path.parent.glob(f".{path.name}-*{_RETIRED}")):
            if is_export(retired, kind):
                warnings.warn(
                    f"An earlier replacement of {path} was interrupted; {noun} it was "
                    f"replacing is kept at {retired}. Move it back or delete it yourself.",
                    stacklevel=3,
                )
        return
    if not is_export(path, kind):  # said first: overwrite=True would not replace it either
        what = (
            "a symbolic link"
            if path.is_symlink()
            else f"a folder that is not {noun} written by gpflow_svi_gplvm (it has no "
            f"{kind.marker})"
            if path.is_dir()
            else "a file"
        )
        raise ValueError(
            f"{path} is {what}. overwrite=True replaces only this package's own folders of its "
            "kind and never deletes anything else: choose another path, or move it away yourself."
        )
    if not overwrite:
        raise ValueError(
            f"{path} holds {noun} of gpflow_svi_gplvm: pass overwrite=True to replace it, or "
            "choose a new path."
        )
    foreign = _foreign_files(path, kind)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(
            f"{path} is {noun} of gpflow_svi_gplvm, but it also holds files the package did not "
            f"write ({shown}); overwrite=True would delete them. Move them out of {path}, or "
            "write to another path."
        )


def _written(folder: Path) -> list[str]:
    """Every file and folder under ``folder``, as paths relative to it."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _foreign_files(path: Path, kind: FolderKind = EXPORT) -> list[str]:
    """What lies in the folder at ``path`` beyond what its marker says the package wrote (an
    export written before markers listed their files: beyond a SavedModel's own files) and a
    staging marker a kill left in it."""
    record = json.loads((path / kind.marker).read_text() or "{}")
    written = set(record.get("files", []))
    if not written:
        saved_model = ("saved_model.pb", "fingerprint.pb", "variables", "assets", MARKER)
        written = {p for p in _written(path) if p.split(os.sep)[0] in saved_model}
    return [p for p in _written(path) if p not in written and p != STAGING_MARKER]


def write_staged(path: Path, fill: Callable[[Path], dict], kind: FolderKind = EXPORT) -> Path:
    """Write a folder of ``kind`` at ``path`` whole or not at all (see the module) and return
    ``path``: ``fill`` writes the folder's files into a new staging folder beside ``path`` and
    returns what its marker records; the folder is then marked (:func:`write_marker`) and moved
    into place (:func:`replace_folder`). The staging folder is removed whatever happens; one this
    process leaves behind when killed is removed by the next write into the same parent folder.
    ``path`` must have passed :func:`check_destination`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = make_staging(path)
    try:
        record = fill(staging)
        write_marker(staging, record, kind)
        replace_folder(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def make_staging(path: Path) -> Path:
    """A new hidden staging folder beside ``path`` for an export, marked with this process (after
    removing what killed exports left in the same parent: see the module docstring)."""
    for leftover in path.parent.glob(".*"):
        if leftover.is_symlink() or not leftover.is_dir():
            continue
        if leftover.name.endswith(DELETING) or _abandoned(leftover):
            shutil.rmtree(leftover, ignore_errors=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}-", dir=path.parent))
    _mark_staging(staging, staging.name)
    return staging


def _mark_staging(folder: Path, name: str) -> None:
    """Mark ``folder`` as this process's staging folder, to be found at ``name`` if it dies."""
    writer = {"pid": os.getpid(), "host": socket.gethostname(), "name": name}
    (folder / STAGING_MARKER).write_text(json.dumps(writer))


def _abandoned(folder: Path) -> bool:
    """Whether ``folder`` is a staging folder whose writer died (its marker names the folder's
    own name: a finished folder that still holds its staging marker has another name)."""
    marker = folder / STAGING_MARKER
    if not marker.is_file():
        return False
    try:
        name = json.loads(marker.read_text()).get("name", folder.name)
    except (OSError, ValueError, AttributeError):
        return False
    return name == folder.name and not _writer_alive(marker)


def _writer_alive(marker: Path) -> bool:
    """Whether the process that a staging marker names may still be writing (on another machine,
    or a marker we cannot read: assume so)."""
    try:
        writer = json.loads(marker.read_text())
    except (OSError, ValueError):
        return True
    if writer.get("host") != socket.gethostname() or not isinstance(writer.get("pid"), int):
        return True
    try:
        os.kill(writer["pid"], 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def write_marker(folder: Path, record: dict, kind: FolderKind = EXPORT) -> None:
    """Mark the staging ``folder`` as a finished folder of ``kind`` of this package, with
    ``record`` (what it holds) and the list of the files it holds (its staging marker stays until
    :func:`replace_folder` has moved it into place)."""
    files = [f for f in _written(folder) if f != STAGING_MARKER] + [kind.marker]
    (folder / kind.marker).write_text(
        json.dumps({"written_by": "gpflow_svi_gplvm", **record, "files": sorted(files)}, indent=1)
    )


def replace_folder(new: Path, path: Path) -> None:
    """Move the folder ``new`` to ``path``, replacing the export there if any; ``new`` is gone
    afterwards. ``path`` holds the old folder or the new one at every moment where the system
    has an atomic exchange (see the module docstring)."""
    if not (path.exists() or path.is_symlink()):
        new.rename(path)
    else:
        # Marked before the exchange moves it to new's name: a kill right after it is cleaned up.
        _mark_staging(path, new.name)
        if _exchange(new, path):
            _delete(new)  # the old export, now at new's name
        else:
            (path / STAGING_MARKER).unlink()
            retired = new.with_name(new.name + _RETIRED)
            path.rename(retired)
            new.rename(path)
            _delete(retired)
    (path / STAGING_MARKER).unlink(missing_ok=True)


def _delete(folder: Path) -> None:
    """Delete a replaced ``folder``, under a name that marks it for deletion should this process
    be killed on the way."""
    deleting = folder.with_name(folder.name + DELETING)
    folder.rename(deleting)
    shutil.rmtree(deleting, ignore_errors=True)  # another export may be deleting it too


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Swap the entries at ``a`` and ``b`` in one atomic step; False where the system cannot."""
    renameat2 = getattr(_libc(), "renameat2", None)
    if renameat2 is None:
        return False
    result = renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # kernel or file system lacks it
        return False
    raise OSError(code, os.strerror(code), str(b))


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
