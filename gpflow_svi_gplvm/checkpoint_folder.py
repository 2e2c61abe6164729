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
from pathlib import Path

from .validation import check_writable_folder

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
        self._descriptor: int | None = None

    def check_writable(self) -> None:
        """A ``ValueError`` now, before any training, when the folder cannot be written."""
        check_writable_folder(self.path, "checkpoint_dir")

    def lock(self) -> None:
        """Take the folder for this process until :meth:`unlock` or the process's end, however
        it ends; a ``ValueError`` naming the holder while another process (or another trainer of
        this one) holds it.

        The lock is the operating system's (``flock``) on :data:`LOCK_FILE`, so a process that
        is killed releases it at once; its lock file, which names it, is then merely stale."""
        lock = self.path / LOCK_FILE
        self.path.mkdir(parents=True, exist_ok=True)
        collected = False
        for _ in range(10):
            descriptor = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(descriptor)
                holder = _read_json(lock) or {}
                if _is_this_process(holder) and not collected:
                    # A Trainer of this process that nothing refers to any more still holds
                    # the folder until the garbage collector finalises it (which closes it).
                    gc.collect()
                    collected = True
                    continue
                raise ValueError(_held_by(self.path, holder)) from None
            # The holder before us may have removed the file as we opened it: the lock counts
            # only on the file that is at the path now.
            if _same_file(descriptor, lock):
                os.ftruncate(descriptor, 0)
                os.write(descriptor, json.dumps(_this_process()).encode())
                self._descriptor = descriptor
                return
            os.close(descriptor)
        raise ValueError(f"Could not take {lock}: other processes keep taking it. Try again.")

    def unlock(self) -> None:
        """Release the folder (if this process holds it), removing its lock file."""
        if self._descriptor is not None:
            (self.path / LOCK_FILE).unlink(missing_ok=True)  # while still holding it
            os.close(self._descriptor)
            self._descriptor = None

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


def _this_process() -> dict:
    return {"pid": os.getpid(), "host": socket.gethostname(), "since": _now()}


def _is_this_process(holder: dict) -> bool:
    return holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()


def _held_by(folder: Path, holder: dict) -> str:
    if _is_this_process(holder):
        return (
            f"{folder} is held by another Trainer of this process (since {holder.get('since')}): "
            "call its close() first (fit does so itself), or use another checkpoint_dir."
        )
    return (
        f"{folder} is being written by another process (process {holder.get('pid', '?')} on "
        f"{holder.get('host', '?')}, since {holder.get('since', '?')}): wait for it to finish, "
        "or use another checkpoint_dir."
    )
