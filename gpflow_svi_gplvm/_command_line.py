"""Quiets TensorFlow's start-up log when this package runs as the command line.

TensorFlow writes a block of log lines while it is imported (twice: once for each of its
libraries that loads), before it reads ``TF_CPP_MIN_LOG_LEVEL`` for some of them and ignoring it
for others. So the command line (``python -m gpflow_svi_gplvm`` or ``gpflow-svi-gplvm``) sets
that variable and imports TensorFlow and GPflow here, before the package does, with the
process's standard error sent to the null device for the length of the import. A library
user's process is left as it is, and a value already set in the environment wins.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

__all__ = ["running_the_command_line", "quiet_standard_error"]


def running_the_command_line() -> bool:
    """Whether this process is ``python -m gpflow_svi_gplvm`` or the ``gpflow-svi-gplvm`` script."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv:
        return argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["gpflow_svi_gplvm"]
    return bool(sys.argv) and Path(sys.argv[0]).stem == "gpflow-svi-gplvm"


@contextlib.contextmanager
def quiet_standard_error() -> Iterator[None]:
    """Send what this process writes to file descriptor 2 to the null device, then restore it
    (an exception raised inside still prints after, to the restored standard error)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


if running_the_command_line():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # errors still show
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] != "0":
        with quiet_standard_error():
            importlib.import_module("gpflow")  # TensorFlow, TensorFlow Probability, tf_keras
