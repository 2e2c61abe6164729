"""The benchmark scripts' quick runs as the tests run them, and readers of what they print.

Each test file's quick runs run once, one after another in one process (benchmark_runs.py:
TensorFlow imported once for all), when the first of its tests asks for them (the ``quick_runs``
fixture, tests/conftest.py); the two files that hold them (test_benchmarks.py and
test_benchmarks_data.py) go to the two workers side by side.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
RUNNER = Path(__file__).with_name("benchmark_runs.py")

# Each test's quick runs (a name, then the script and its arguments), and what they need: modules
# and folders of the data folder ($GPFLOW_SVI_GPLVM_DATA). Each script still starts the processes
# it starts on its own.
SINGLE_CELL = ("anndata", "scanpy")
QUICK_RUNS: dict[str, dict[str, list[str]]] = {
    "test_speed_benchmark_quick": {"speed": ["speed.py", "--quick"]},
    "test_mapping_speed_benchmark_quick": {
        "mapping": ["mapping.py", "speed", "--reference", "300", "--cells", "200"]
        + ["--iterations", "20", "--compare", "20"]
    },
    "test_multiworker_benchmark_quick": {
        "multiworker": ["multiworker.py", "--quick", "--repeats", "1"]
    },
    # Its several-worker part launches workers as its one-process parts do (the fits on two
    # workers are tested in test_multiworker.py).
    "test_atlas_scale_benchmark_quick": {
        "atlas out of core": ["atlas_scale.py", "out-of-core", "--quick"],
        "atlas model": ["atlas_scale.py", "model", "--all-reduced", "150000"],
    },
    "test_build_passes_benchmark_quick": {"build passes": ["build_passes.py", "--quick"]},
    # Four of the seven contenders (--quick times them one after another in one process).
    "test_high_dimensional_speed_benchmark_quick": {
        "high-d": ["speed.py", "--high-d", "single-cell", "--quick", "--levers", "--contenders"]
        + ["SVGP floor", "B-SVI per-output", "AEB-SVI shared", "B-SVI shared, float32"]
    },
    # The MNIST, MovieLens, Brendan faces and motion-capture tables run in test_reproduce's
    # `all --quick`; the encoder comparison is this script's own.
    "test_missing_data_benchmark_quick": {
        "missing data": ["missing_data.py", "encoders", "--quick"]
    },
    # The demo alone (the Gaussian and the joint flow, both targets of NUTS, the figure): its
    # oil-flow and speed parts reuse reproduce_paper's protocol and speed.py's measure, and
    # tripled the run's time; every flow family's bound and gradients are tests/test_flows.py's.
    "test_flows_benchmark_demo_quick": {
        "flows": ["flows.py", "demo", "--quick", "--families", "gaussian", "joint"]
    },
    # Two of the five contenders, one process each, on the hard atlas, whose rare types are
    # scored too: the scoring and table of every one. Its --scib table is test_metrics.py's, in
    # the process that has compiled scib-metrics' numba functions already.
    "test_single_cell_benchmark_quick": {
        "single cell": ["single_cell.py", "atlas", "--quick", "--hard", "--contenders", "PCA"]
        + ["B-SVI NB + batch"]
    },
    # The package against the Wilcoxon test (scVI runs where $SCVI_PYTHON is set): each table.
    "test_expression_benchmark_quick": {
        "expression atlas": ["expression.py", "atlas", "--quick", "--contenders", "gplvm"],
        "expression memory": ["expression.py", "memory", "--quick"],
    },
    "test_held_out_cells_benchmark_quick": {
        "held-out cells": ["held_out_cells.py", "atlas", "--quick"]
    },
    "test_importance_benchmark_quick": {
        "importance": ["importance.py", "step", "heldout", "oilflow", "--quick"]
    },
    "test_movielens_benchmark_quick": {
        "movielens": ["movielens.py", "--folds", "1", "--iterations", "30", "--latent-dim", "2"]
        + ["--num-inducing", "5", "--mf-sweeps", "1", "--mf-rank", "2"]
    },
    "test_row_update_and_count_likelihood_step_benchmarks_quick": {
        "row updates": ["row_updates.py", "--quick"],
        "count step": ["count_step.py", "--quick", "--points", "3"],
        "closed-form step": ["closed_form_step.py", "--quick", "--gaps", "--xla", "--baseline"]
        + [str(BENCHMARKS.parent)],
        "first call": ["first_call.py", "--quick"],
    },
    "test_default_settings_benchmark_quick": {
        "defaults": ["amortised_defaults.py", "--quick", "--models", "AEB-SVI"]
    },
}
# The runs that measure peak memory by ru_maxrss in the processes they start: a child begins
# with its parent's peak (Linux keeps it across fork and exec), so each runs from a small
# process of its own, as it did alone, and not from the shared one that has run the others.
OWN_PROCESS = {"multiworker", "atlas out of core", "high-d"}
NEEDS = {
    "test_mapping_speed_benchmark_quick": ("anndata",),
    "test_missing_data_benchmark_quick": ("data:mnist",),
    "test_single_cell_benchmark_quick": SINGLE_CELL,
    "test_expression_benchmark_quick": SINGLE_CELL,
    "test_held_out_cells_benchmark_quick": SINGLE_CELL,
    "test_importance_benchmark_quick": ("data:oilflow",),
    "test_movielens_benchmark_quick": ("data:movielens100k",),
}


def missing(test: str) -> list[str]:
    """What ``test``'s runs need that this machine lacks."""
    root = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    lacking = []
    for need in NEEDS.get(test, ()):
        if need.startswith("data:"):
            if not root or not (Path(root) / need[5:]).exists():
                lacking.append(f"{need[5:]} in the data folder (GPFLOW_SVI_GPLVM_DATA)")
        elif importlib.util.find_spec(need) is None:
            lacking.append(need)
    return lacking


def run_quick(module, items: list, tmp_path_factory) -> dict:
    """Each run of ``module``'s selected tests among ``items``: its exit status and output."""
    selected = {item.originalname for item in items if getattr(item, "module", None) is module}
    runs = {
        name: args
        for test, test_runs in QUICK_RUNS.items()
        if test in selected and not missing(test)
        for name, args in test_runs.items()
    }
    if "build passes" in runs:
        runs["build passes"] += ["--folder", str(tmp_path_factory.mktemp("build_passes"))]
    shared = {name: args for name, args in runs.items() if name not in OWN_PROCESS}
    groups = [shared] + [{name: args} for name, args in runs.items() if name in OWN_PROCESS]
    folder = tmp_path_factory.mktemp("quick_runs")
    done: dict = {}
    for number, group in enumerate(group for group in groups if group):
        done.update(_run_in_one_process(group, folder / f"runs_{number}.json"))
    return done


def _run_in_one_process(runs: dict[str, list[str]], output: Path) -> dict:
    """``runs`` one after another in one runner process: each one's exit status and output."""
    runner = [sys.executable, str(RUNNER), json.dumps(runs), str(output)]
    # The runner stops a run after 900 s itself; this is for a runner that hangs.
    try:
        result = subprocess.run(runner, capture_output=True, text=True, timeout=1000 * len(runs))
        lost = {"returncode": result.returncode, "stdout": "", "stderr": result.stderr[-3000:]}
    except subprocess.TimeoutExpired as timeout:
        lost = {"returncode": -9, "stdout": "", "stderr": f"the runner hung: {timeout}"}
    done = json.loads(output.read_text()) if output.exists() else {}
    return {name: done.get(name, lost) for name in runs}


def quick_output(quick_runs: dict, test: str, name: str) -> str:
    """What run ``name`` of ``test`` printed (it exited with status 0); ``test`` is skipped where
    its runs cannot run."""
    lacking = missing(test)
    if lacking:
        pytest.skip(f"needs {', '.join(lacking)}")
    run = quick_runs[name]
    if "seconds" in run:  # shown with the test's output (pytest -rP, or on failure)
        print(f"{name}: {run['seconds']:.0f} s wall, {run['cpu_seconds']:.0f} s CPU")
    assert run["returncode"] == 0, run["stdout"][-2000:] + run["stderr"][-3000:]
    return run["stdout"]


def table(out: str, header: str) -> list[dict[str, str]]:
    """The rows of the first Markdown table in ``out`` whose header line starts with
    ``header``, each a dict of column name to cell."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    names = [cell.strip() for cell in lines[start].strip(" |").split(" | ")]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append(dict(zip(names, (cell.strip() for cell in line.strip(" |").split(" | ")))))
    return rows


def number(cell: str) -> float:
    """The first number in a table's cell ("1,234", "0.52x", "3.1 ± 0.2", "45%", "1e-05")."""
    found = re.search(r"-?\d[\d,]*\.?\d*(?:[eE][-+]?\d+)?", cell)
    assert found, f"no number in {cell!r}"
    return float(found[0].replace(",", ""))


def positive(*cells: str) -> None:
    """Each cell holds a finite number above 0 (a time, a size, a rate, a ratio)."""
    for cell in cells:
        value = number(cell)
        assert math.isfinite(value) and value > 0, cell


def within(cell: str, low: float, high: float) -> None:
    """The cell's number lies in [low, high] (a score, a share, an error of values in a range)."""
    assert low <= number(cell) <= high, (cell, low, high)


def interval(cell: str) -> tuple[float, float, float]:
    """A cell "value [low, high]" as (low, value, high)."""
    value, low, high = (float(x) for x in re.findall(r"-?\d+\.?\d*(?:e-?\d+)?", cell)[:3])
    return low, value, high


def benchmark_module(name: str, monkeypatch):
    """The script ``benchmarks/<name>.py`` imported as a module, its folder on the path (the
    scripts import their siblings and ``common``) for the test's duration."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # scripts import their siblings
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)  # dataclasses look themselves up
    spec.loader.exec_module(module)
    return module
