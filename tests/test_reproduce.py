"""Smoke test of benchmarks/reproduce_paper.py (the paper's reconstruction tables)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce_paper.py"
NEEDED = ("oilflow", "qpcr", "taxi", "mnist", "mocap")


def _data_available() -> bool:
    home = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    return bool(home) and all((Path(home) / name).exists() for name in NEEDED)


@pytest.mark.slow
@pytest.mark.skipif(
    not _data_available(),
    reason="GPFLOW_SVI_GPLVM_DATA unset or lacks oilflow / qpcr / taxi / mnist / mocap",
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
    assert "| upper_body | nearest complete pose |" in text and "| upper_body | AEB-SVI" in text


def _reproduce_module():
    spec = importlib.util.spec_from_file_location("reproduce_paper", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_partial_run_replaces_its_tables_and_keeps_the_others_and_the_notes():
    merge = _reproduce_module().merge_results
    first = merge("", "# first header", {"oilflow": "oil table 1", "mnist": "mnist table 1"})
    first += "\n## Notes\n\nwritten by hand\n"
    second = merge(first, "# second header", {"mnist": "mnist table 2", "qpcr": "qpcr table 2"})
    assert second.startswith("# second header") and "first header" not in second
    assert "mnist table 1" not in second
    positions = [second.index(t) for t in ("oil table 1", "qpcr table 2", "mnist table 2")]
    assert positions == sorted(positions)  # the tables' fixed order, not the order of the runs
    assert second.endswith("\n## Notes\n\nwritten by hand\n")
    assert merge(second, "# second header", {}) == second


def test_a_run_of_some_models_replaces_only_their_rows():
    module = _reproduce_module()
    header = "| model | RMSE |\n|---|---|"

    def block(rows: dict[str, str], provenance: list[str]) -> str:
        lines = ["**oilflow**", "", header, *(f"| {m} | {v} |" for m, v in rows.items()), ""]
        return "\n".join(lines + "\n\n".join(provenance).splitlines())

    full = module.merge_results(
        "", "# h", {"oilflow": block(dict.fromkeys(module.MODELS, "old"), ["_`all`: 5 steps._"])}
    )
    aeb = block({"AEB-SVI": "new"}, ["_AEB-SVI: `aeb`: 5 steps._"])
    once = module.merge_results(full, "# h", {"oilflow": aeb}, ["AEB-SVI"])
    expected = block(
        {"Point": "old", "MAP": "old", "B-SVI": "old", "AEB-SVI": "new"},
        ["_Point, MAP, B-SVI: `all`: 5 steps._", "_AEB-SVI: `aeb`: 5 steps._"],
    )
    assert once == module.merge_results("", "# h", {"oilflow": expected})

    point = block({"Point": "newer"}, ["_Point: `point`: 5 steps._"])
    twice = module.merge_results(once, "# h", {"oilflow": point}, ["Point"])
    assert "| Point | newer |\n| MAP | old |\n| B-SVI | old |\n| AEB-SVI | new |" in twice
    provenance = [line for line in twice.splitlines() if line.startswith("_")]
    assert provenance == [
        "_MAP, B-SVI: `all`: 5 steps._",
        "_AEB-SVI: `aeb`: 5 steps._",
        "_Point: `point`: 5 steps._",
    ]
    # A run of all four models replaces the whole block.
    assert module.merge_results(twice, "# h", {"oilflow": block({}, ["_`x`._"])}).endswith(
        "_`x`._\n"
    )
