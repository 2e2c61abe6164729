"""Smoke test of benchmarks/reproduce_paper.py (the paper's reconstruction tables)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce_paper.py"
NEEDED = ("oilflow", "qpcr", "taxi", "mnist")


def _data_available() -> bool:
    home = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    return bool(home) and all((Path(home) / name).exists() for name in NEEDED)


@pytest.mark.slow
@pytest.mark.skipif(
    not _data_available(),
    reason="GPFLOW_SVI_GPLVM_DATA unset or lacks oilflow / qpcr / taxi / mnist",
)
def test_reproduce_all_quick(tmp_path):
    output = tmp_path / "R.md"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "all", "--quick", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = output.read_text()
    for model in ("Point", "MAP", "B-SVI", "AEB-SVI"):
        assert f"| {model} |" in text
        assert f"| {model} |" in result.stdout
    for name in NEEDED:
        assert f"**{name}**" in text
