"""Quiets TensorFlow's C++ start-up log when this package runs as the command line.

TensorFlow reads ``TF_CPP_MIN_LOG_LEVEL`` once, at its first log line, which it writes while it
is imported; so the command line (``python -m gpflow_svi_gplvm`` or ``gpflow-svi-gplvm``) must
set it before the package imports TensorFlow, here. A library user's process is left as it is,
and a value already set in the environment wins.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["running_the_command_line"]


def running_the_command_line() -> bool:
    """Whether this process is ``python -m gpflow_svi_gplvm`` or the ``gpflow-svi-gplvm`` script."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv:
        return argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["gpflow_svi_gplvm"]
    return bool(sys.argv) and Path(sys.argv[0]).stem == "gpflow-svi-gplvm"


if running_the_command_line():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # errors still show
