"""The folder of a training run: it belongs to one run, and one process writes it at a time.

A run's folder holds its checkpoints (``ckpt-<step>.*`` and TensorFlow's index ``checkpoint``),
the ELBO history, :data:`RUN_FILE` (which run owns the folder: its id, model and data) and
:data:`LOCK_FILE` while a process trains into it (locked by it). A new run into a folder that holds
another run's checkpoints is refused unless it resumes them or overwrites them, and a second
process is refused while the first holds the lock (which dies with it). Only the files named
here are ever deleted (``overwrite``); anything else in the folder is left.
"""

from __future__ import annotations

import fcntl
import gc
import json
import os
import re
import socket
import time
import uuid
from collections.abc import Callable
from pathlib import Path

from ..validation import check_writable_folder

__all__ = ["RUN_FILE", "LOCK_FILE", "INDEX_FILE", "RunFolder", "checkpoint_steps"]

RUN_FILE = "run.json"
"""Which run owns a checkpoint folder: ``{"run", "model", "data", "started"}``."""
LOCK_FILE = ".lock"
"""Locked by the process writing a checkpoint folder, which it names: ``{"pid", "host", "since"}``.
"""
INDEX_FILE = "checkpoint"
"""TensorFlow's index of a folder's checkpoints."""
HISTORY_FILE = "elbo_history.npy"
"""The ELBO history's file name in a checkpoint folder."""
_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")
_CHECKPOINT_FILE = re.compile(r"^ckpt-\d+\.(index|data-\d+-of-\d+)$")


def checkpoint_steps(folder: Path) -> list[int]:
    """The steps of the checkpoints whose index files are in ``folder``, in order."""
    if not folder.is_dir():
        return []
    found = (_CHECKPOINT.match(entry.name) for entry in folder.iterdir())
    return sorted(int(match.group(1)) for match in found if match)


class RunFolder:
    """A training run's folder ``path``: who writes it (:meth:`lock`) and whose it is."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._descriptor: int | None = None  # of the locked lock file
        self._folder_descriptor: int | None = None  # of the locked folder
        self._identity: dict | None = None  # what this process wrote into the lock file

    def check_writable(self) -> None:
        """A ``ValueError`` now, before any training, when the folder cannot be written."""
        check_writable_folder(self.path, "checkpoint_dir")

    def lock(self) -> None:
        """Take the folder for this process until :meth:`unlock` or the process's end, however
        it ends; a ``ValueError`` naming the holder while another process (or another trainer of
        this one) holds it.

        The locks are the operating system's (``flock``), so a process that is killed releases
        them at once (its lock file, which names it, is then merely stale): one on the folder
        itself, which no one can delete from under its holder, and one on :data:`LOCK_FILE`
        for file systems that lock no folders (some network file systems). :meth:`check_held`
        finds a lock file removed or replaced by hand while the folder was held."""
        self.path.mkdir(parents=True, exist_ok=True)
        self._folder_descriptor = self._take(lambda: _lock_folder(self.path))
        try:
            self._descriptor = self._take(self._lock_file)
        except BaseException:
            self._release_folder()
            raise
        self._identity = _read_json(self.path / LOCK_FILE)

    def _take(self, attempt: Callable[[], int | None]) -> int | None:
        """``attempt()``'s descriptor, collecting this process's garbage once when the folder
        is held by this process; a ``ValueError`` naming the holder otherwise."""
        try:
            return attempt()
        except BlockingIOError:
            holder = _read_json(self.path / LOCK_FILE) or {}
            if not _is_this_process(holder):
                raise ValueError(_held_by(self.path, holder)) from None
        # A Trainer of this process that nothing refers to any more still holds the folder
        # until the garbage collector finalises it (which closes it).
        gc.collect()
        try:
            return attempt()
        except BlockingIOError:
            raise ValueError(_held_by(self.path, _read_json(self.path / LOCK_FILE) or {})) from None

    def _lock_file(self) -> int:
        """A descriptor of :data:`LOCK_FILE`, locked and naming this process."""
        lock = self.path / LOCK_FILE
        for _ in range(10):
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                raise
            # The holder before us may have removed the file as we opened it: the lock counts
            # only on the file that is at the path now.
            if _same_file(descriptor, lock):
                os.ftruncate(descriptor, 0)
                os.write(descriptor, json.dumps(_this_process()).encode())
                return descriptor
            os.close(descriptor)
        raise ValueError(f"Could not take {lock}: other processes keep taking it. Try again.")

    def check_held(self) -> None:
        """Before a write: a ``ValueError`` when this process took the folder and its lock file
        is no longer the one it wrote (removed, or replaced by another process's), so that two
        runs never write the folder at once. Nothing to check where this process took none."""
        if self._descriptor is None:
            return
        lock = self.path / LOCK_FILE
        now = _read_json(lock)
        if _same_file(self._descriptor, lock) and now == self._identity:
            return
        found = "was removed" if now is None else f"now names {_holder(now)}"
        raise ValueError(
            f"The lock file {lock} of this run's checkpoint folder {found}, while this run held "
            "the folder: stopped before writing to it, so that two runs do not interleave their "
            "checkpoints. Make sure no other process writes the folder, then start again with "
            "resume=True (or use another checkpoint_dir). Never delete a lock file by hand."
        )

    def unlock(self) -> None:
        """Release the folder (if this process holds it), removing its lock file."""
        if self._descriptor is not None:
            if _same_file(self._descriptor, self.path / LOCK_FILE):  # only our own
                (self.path / LOCK_FILE).unlink(missing_ok=True)  # while still holding it
            os.close(self._descriptor)
            self._descriptor = None
        self._release_folder()

    def _release_folder(self) -> None:
        if self._folder_descriptor is not None:
            os.close(self._folder_descriptor)
            self._folder_descriptor = None

    @property
    def locked(self) -> bool:
        return self._descriptor is not None

    # ------------------------------------------------------------------------- whose run it is

    def holds_checkpoints(self) -> bool:
        """Whether the folder holds a run's checkpoints (or their index, or its history)."""
        names = (INDEX_FILE, HISTORY_FILE)
        return bool(checkpoint_steps(self.path)) or any((self.path / n).exists() for n in names)

    def run(self) -> dict | None:
        """The record of the run that owns the folder (None when it has none or it is damaged)."""
        return _read_json(self.path / RUN_FILE)

    def start_run(self, model: dict, data: dict) -> str:
        """Make the folder a new run's, recorded with its ``model`` and ``data``; its id."""
        run = uuid.uuid4().hex
        record = {"run": run, "model": model, "data": data, "started": _now()}
        staging = self.path / f".{RUN_FILE}.{os.getpid()}"
        staging.write_text(json.dumps(record, indent=1))
        os.replace(staging, self.path / RUN_FILE)
        return run

    def describe(self) -> str:
        """The run that owns the folder, in words, for error messages."""
        run = self.run()
        steps = checkpoint_steps(self.path)
        latest = f"checkpoints up to step {steps[-1]}" if steps else "a checkpoint index or history"
        if run is None:
            return latest
        model = run.get("model", {})
        shape = ", ".join(f"{k}={v}" for k, v in model.items() if k != "class")
        return f"{latest} of a run started {run.get('started', '?')} ({model.get('class')} {shape})"

    def clear(self) -> list[str]:
        """Delete the folder's checkpoints, index, history and run record (``overwrite``), and
        nothing else; the names deleted."""
        ours = [INDEX_FILE, HISTORY_FILE, RUN_FILE]
        deleted = []
        for entry in sorted(self.path.iterdir()):
            mine = entry.name in ours or re.match(
                r"^ckpt-\d+\.(index|data-\d+-of-\d+)$", entry.name
            )
            if mine and entry.is_file():
                entry.unlink()
                deleted.append(entry.name)
        return deleted


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())


def _read_json(path: Path) -> dict | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _same_file(descriptor: int, path: Path) -> bool:
    try:
        return os.fstat(descriptor).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _lock_folder(folder: Path) -> int | None:
    """A descriptor of ``folder``, locked; None where the file system locks no folders."""
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise
    except OSError:  # e.g. NFS, which locks only files opened for writing: the lock file's
        os.close(descriptor)
        return None
    return descriptor


def _this_process() -> dict:
    # The token tells this lock file from one a restarted process of the same id writes.
    record = {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}
    return {**record, "token": uuid.uuid4().hex}


def _holder(holder: dict) -> str:
    return (
        f"process {holder.get('pid', '?')} on {holder.get('host', '?')}, since "
        f"{holder.get('since', '?')}"
    )


def _is_this_process(holder: dict) -> bool:
    return holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()


def _held_by(folder: Path, holder: dict) -> str:
    if _is_this_process(holder):
        return (
            f"{folder} is held by another Trainer of this process (since {holder.get('since')}): "
            "call its close() first (fit does so itself), or use another checkpoint_dir."
        )
    if not holder:  # its lock file was removed by hand: the folder's own lock still holds
        return (
            f"{folder} is being written by another process (its lock file {LOCK_FILE}, which "
            "would name it, was removed): wait for it to finish, or use another checkpoint_dir."
        )
    return (
        f"{folder} is being written by another process ({_holder(holder)}): wait for it to "
        "finish, or use another checkpoint_dir."
    )
