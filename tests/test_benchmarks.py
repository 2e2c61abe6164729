"""The benchmark scripts run end to end in their quick settings (numbers are not checked)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=BENCHMARKS.parent
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_speed_benchmark_quick():
    out = _run(str(BENCHMARKS / "speed.py"), "--quick")
    assert "SVGP" in out and "B-SVI" in out and "infer_latents" in out


@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    or not all(
        (Path(os.environ.get("GPFLOW_SVI_GPLVM_DATA", ".")) / name).exists()
        for name in ("mnist", "movielens100k", "mocap")
    ),
    reason="needs the data folder in GPFLOW_SVI_GPLVM_DATA",
)
def test_missing_data_benchmark_quick():
    out = _run(str(BENCHMARKS / "missing_data.py"), "all", "--quick")
    assert "trained on 60% missing" in out and "held-out ratings" in out and "encoder" in out
    assert "| left_leg | nearest complete pose |" in out and "| upper_body | B-SVI" in out
