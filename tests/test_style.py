"""The code base stays ruff-clean, ruff-formatted (100 columns) and mypy-clean (pyproject.toml)."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("ruff") is None, reason="ruff is installed by the [test] extra")
@pytest.mark.parametrize("command", [["ruff", "check", "."], ["ruff", "format", "--check", "."]])
def test_ruff(command):
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.skipif(shutil.which("mypy") is None, reason="mypy is installed by the [test] extra")
def test_mypy():
    result = subprocess.run(["mypy"], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
