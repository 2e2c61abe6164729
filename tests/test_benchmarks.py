"""The benchmark scripts run end to end in their quick settings, and the numbers they print are
sane (finite, positive times and sizes, scores in their ranges); the benchmarks' own claims are
measured at full size, not here."""

import importlib.util
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
RUNNER = Path(__file__).with_name("benchmark_runs.py")

# Each test's quick runs (a name, then the script and its arguments), and what they need: modules
# and folders of the data folder ($GPFLOW_SVI_GPLVM_DATA). The runs of the selected tests run once,
# one after another in one process (tests/benchmark_runs.py: TensorFlow imported once for all),
# when the first of them asks; each script still starts the processes it starts on its own.
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
    # One process per contender: four of the seven keep the smoke run short.
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
    # scored too: the scoring and table of every one; scib-metrics' table where it is installed.
    "test_single_cell_benchmark_quick": {
        "single cell": ["single_cell.py", "atlas", "--quick", "--hard", "--contenders", "PCA"]
        + ["B-SVI NB + batch"]
        + ["--scib"] * (importlib.util.find_spec("scib_metrics") is not None)
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


def _missing(test: str) -> list[str]:
    """What ``test``'s runs need that this machine lacks."""
    root = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    missing = []
    for need in NEEDS.get(test, ()):
        if need.startswith("data:"):
            if not root or not (Path(root) / need[5:]).exists():
                missing.append(f"{need[5:]} in the data folder (GPFLOW_SVI_GPLVM_DATA)")
        elif importlib.util.find_spec(need) is None:
            missing.append(need)
    return missing


@pytest.fixture(scope="module")
def quick_runs(request, tmp_path_factory) -> dict:
    """Each run of the selected tests: its exit status and output."""
    selected = {item.originalname for item in request.session.items}
    runs = {
        name: args
        for test, test_runs in QUICK_RUNS.items()
        if test in selected and not _missing(test)
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
    missing = _missing(test)
    if missing:
        pytest.skip(f"needs {', '.join(missing)}")
    run = quick_runs[name]
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


@pytest.mark.processes
@pytest.mark.slow
def test_speed_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_speed_benchmark_quick", "speed")
    assert "SVGP" in out and "B-SVI" in out and "infer_latents" in out
    rows = table(out, "| model | graph steps/s")
    assert [row["model"] for row in rows] == [
        "SVGP floor (known X)",
        "Point",
        "MAP",
        "B-SVI",
        "AEB-SVI",
    ]
    for row in rows:
        steps, low_high = row["graph steps/s (median)"], row["graph range"].split("-")
        positive(steps, row["graph ms/step"], row["graph CPU ms/step"], row["compile s"])
        positive(row["graph floor/model"])
        assert float(low_high[0]) <= number(steps) <= float(low_high[1]), row
    assert number(rows[0]["graph floor/model"]) == 1.0  # the floor against itself
    for row in table(out, "| model | first call (traces) s"):  # a trace costs seconds
        positive(row["next call s"])
        assert number(row["first call (traces) s"]) > number(row["next call s"]), row


@pytest.mark.processes
@pytest.mark.slow
def test_mapping_speed_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_mapping_speed_benchmark_quick", "mapping")
    assert "ms CPU a cell" in out and "infer_latents (300 Adam steps)" in out
    assert "transform: ARI" in out and "infer_latents: ARI" in out
    speed = re.search(
        r"transform: 200 cells of 2000 genes in (\S+) s wall, (\S+) s CPU: (\S+) ", out
    )
    assert speed, out
    positive(*speed.groups())
    for method in ("transform", "infer_latents"):
        ari, asw = re.search(rf"{method}: ARI (\S+), batch ASW (\S+)", out).groups()
        within(ari, -1.0, 1.0)
        within(asw, 0.0, 1.0)


@pytest.mark.processes
@pytest.mark.slow
def test_gpu_check_runs_on_a_cpu_in_its_smoke_setting():
    result = subprocess.run(
        ["bash", str(BENCHMARKS / "gpu_check.sh"), "--smoke"],
        capture_output=True,
        text=True,
        timeout=900,
        env=dict(os.environ, PYTHON=sys.executable, CUDA_VISIBLE_DEVICES="-1"),
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert "No GPU visible" in result.stdout and "| single cell, float32 |" in result.stdout
    assert "hidden-entry RMSE" in result.stdout


@pytest.mark.processes
@pytest.mark.slow
def test_multiworker_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_multiworker_benchmark_quick", "multiworker")
    assert "| 40 |" in out and "two over one" in out and "| 32 |" in out
    assert "worker 1 of 2: holding its rows" in out
    for row in table(out, "| rows per worker and step |"):
        positive(*list(row.values())[1:])
    modelled = table(out, "| workers |")
    assert [row["workers"] for row in modelled] == ["1", "2", "8", "32"]
    for row in modelled:
        positive(row["step ms"], row["rows/s"], row["epoch"])


@pytest.mark.processes
@pytest.mark.slow
def test_atlas_scale_benchmark_quick(quick_runs):
    test = "test_atlas_scale_benchmark_quick"
    out = quick_output(quick_runs, test, "atlas out of core")
    assert "| out of core | 800 |" in out and "| in memory | 400 |" in out
    for row in table(out, "| run | cells |"):
        positive(row["peak MiB"], row["rows/s"], row["build s"], row["seconds in all"])
        assert math.isfinite(number(row["ELBO, last tenth"])), row
    out = quick_output(quick_runs, test, "atlas model")
    assert "10^8 cells on 64 workers" in out
    step, reduce, total = re.search(
        r"step (\S+) ms \+ all-reduce (\S+) ms = (\S+) ms", out
    ).groups()
    positive(step, reduce)
    assert float(step) + float(reduce) == pytest.approx(float(total), abs=0.1)


@pytest.mark.processes
@pytest.mark.slow
def test_build_passes_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_build_passes_benchmark_quick", "build passes")
    row = next(line for line in out.splitlines() if line.startswith("| . |"))
    rows_read, passes = row.split(" | ")[1:3]
    assert int(rows_read.replace(",", "")) == round(float(passes) * 3000) > 0
    positive(table(out, "| tree |")[0]["build s"])


@pytest.mark.processes
@pytest.mark.slow
def test_high_dimensional_speed_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_high_dimensional_speed_benchmark_quick", "high-d")
    contenders = QUICK_RUNS["test_high_dimensional_speed_benchmark_quick"]["high-d"][6:]
    for contender in contenders:
        assert f"| {contender} |" in out
    assert "failed" not in out and "| B-SVI shared |" not in out
    rows = table(out, "| contender | s/step |")
    assert [row["contender"] for row in rows] == contenders
    for row in rows:
        positive(row["s/step"], row["steps/s"], row["vs floor"], row["compile s"])
    assert rows[0]["vs floor"] == "1.000x"


@pytest.mark.processes
@pytest.mark.slow
def test_missing_data_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_missing_data_benchmark_quick", "missing data")
    assert "values + mask, 20% hidden" in out
    rows = table(out, "| encoder | test RMSE")
    assert len(rows) == 4
    for row in rows:  # pixels in [0, 1]
        within(row["test RMSE on hidden pixels"], 1e-3, 1.0)
        within(row["95% interval coverage"], 0.0, 1.0)
        positive(row["train s"])


@pytest.mark.processes
@pytest.mark.slow
def test_flows_benchmark_demo_quick(quick_runs):
    out = quick_output(quick_runs, "test_flows_benchmark_demo_quick", "flows")
    assert "| flow, joint | to the exact posterior |" in out and "R-hat max" in out
    assert "| flow, joint | SVI bound with q(u) |" in out and "flow, per-row" not in out
    assert "--families gaussian joint --quick`" in out
    nuts = re.search(r"acceptance (\S+), R-hat max (\S+), effective draws min (\S+) ", out)
    within(nuts[1].rstrip(","), 0.0, 1.0)
    assert number(nuts[2]) > 0.9 and number(nuts[3]) > 0, nuts[0]
    for row in table(out, "| q(X) | trained |"):
        positive(row["seconds"])
        for column in ("MMD^2 to HMC [95%]", "sliced W2 to HMC [95%]"):
            low, value, high = interval(row[column])
            assert low <= value <= high and high >= 0, row


@pytest.mark.processes
@pytest.mark.slow
def test_single_cell_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_single_cell_benchmark_quick", "single cell")
    scib = "--scib" in QUICK_RUNS["test_single_cell_benchmark_quick"]["single cell"]
    assert "| B-SVI NB + batch |" in out and "| PCA |" in out and "failed" not in out
    headers = [line for line in out.splitlines() if line.startswith("| contender |")]
    pcas = [line for line in out.splitlines() if line.startswith("| PCA |")]
    assert len(headers) == len(pcas) == 1 + scib
    for header, pca, column in zip(headers, pcas, ["rare-type F1", "Total"]):
        index = header.strip(" |").split(" | ").index(column)
        assert 0.0 <= float(pca.strip(" |").split(" | ")[index]) <= 1.0


@pytest.mark.processes
@pytest.mark.slow
def test_expression_benchmark_quick(quick_runs):
    test = "test_expression_benchmark_quick"
    out = quick_output(quick_runs, test, "expression atlas")
    assert "| gplvm |" in out and "| Wilcoxon (scanpy) |" in out and "failed" not in out
    assert "truth 'designed'" in out and "Label transfer to batch batch1" in out
    out = quick_output(quick_runs, test, "expression memory")
    assert "| 6,000 | obsm of the file |" in out and "| 100 | inferred |" in out


@pytest.mark.processes
@pytest.mark.slow
def test_held_out_cells_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_held_out_cells_benchmark_quick", "held-out cells")
    assert "| SingleCellGPLVM (B-SVI NB + batch) |" in out and "failed" not in out


@pytest.mark.processes
@pytest.mark.slow
def test_importance_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_importance_benchmark_quick", "importance")
    assert "| B-SVI |" in out and "K = 5 step / K = 1 step" in out
    assert "| 20, equal seconds |" in out and "held-out log p(y*) per row" in out


@pytest.mark.processes
@pytest.mark.slow
def test_movielens_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_movielens_benchmark_quick", "movielens")
    rows = {line.split(" | ")[0]: line for line in out.splitlines() if line.startswith("| ")}
    assert "| RMSE on u_i.test" in rows and "| matrix factorisation (rank 2)" in rows
    assert 0.5 < float(rows["| global mean"].split(" | ")[1].strip(" |")) < 1.5


def _anchor(heading: str) -> str:
    """A heading's anchor as MyST (``myst_heading_anchors``) and GitHub make it."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_index_links_every_results_page_and_each_headline_figure_to_its_section():
    index = (BENCHMARKS / "README.md").read_text()
    links = re.findall(r"\]\((results/[^)#\s]+)(?:#([^)\s]+))?\)", index)
    pages = {f"results/{page.name}" for page in (BENCHMARKS / "results").glob("*.md")}
    assert {page for page, _ in links} == pages
    for page, anchor in links:
        text = re.sub(r"^```.*?^```", "", (BENCHMARKS / page).read_text(), flags=re.M | re.S)
        headings = {_anchor(h) for h in re.findall(r"^#{1,3} (.+)$", text, flags=re.M)}
        assert not anchor or anchor in headings, (page, anchor)
    headline = index.split("\n## Headline figures\n")[1].split("\n## ")[0]
    rows = [line for line in headline.splitlines() if line.startswith("| ")][1:]
    assert len(rows) >= 6
    for row in rows:  # each figure links to its section, or says that no run holds it
        where = row.rstrip(" |").rsplit("| ", 1)[1]
        assert where == "none" or re.fullmatch(r"\[[^\]]+\]\(results/\w+\.md#[\w-]+\)", where), row


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


def _speed_module(monkeypatch):
    return benchmark_module("speed", monkeypatch)


def test_encoder_width_rules_and_paper_choices_build_their_models(monkeypatch):
    """Every width rule and every choice set back to the paper's builds its model (no training:
    the scripts' runs take minutes)."""
    from gpflow_svi_gplvm import AmortisedBayesianGPLVM

    Y = np.random.default_rng(0).standard_normal((30, 6))
    widths = benchmark_module("encoder_width", monkeypatch)
    for rule in widths.RULES.values():
        mean_sizes, covariance_sizes = rule(6, 3)
        model = AmortisedBayesianGPLVM(
            Y, 3, 5, mean_hidden_sizes=mean_sizes, covariance_hidden_sizes=covariance_sizes
        )
        assert [int(w.shape[1]) for w in model.latent.mean_network.weights][:-1] == list(mean_sizes)
    differences = benchmark_module("paper_differences", monkeypatch)
    models = benchmark_module("missing_data", monkeypatch).MODELS
    for model_name, options in differences.VARIANTS.values():
        model = models[model_name](Y, 3, 5, **differences._options(options))
        assert np.isfinite(model.elbo((np.arange(10), Y[:10])).numpy())


@pytest.mark.parametrize("name, shape", [("oilflow", (1000, 12)), ("mocap", (533, 62))])
def test_paper_runtime_data_has_the_configuration_tables_shapes(name, shape, monkeypatch, tmp_path):
    speed = _speed_module(monkeypatch)
    for folder in (tmp_path, os.environ.get("GPFLOW_SVI_GPLVM_DATA")):
        if folder is None:
            continue
        monkeypatch.setenv("GPFLOW_SVI_GPLVM_DATA", str(folder))  # empty: synthetic data
        Y, note = speed.paper_runtime_data(name)
        assert Y.shape == shape
        missing = np.isnan(Y).mean()
        expected = 0.445 if name == "mocap" else 0.0
        assert abs(missing - expected) < 0.01, note


@pytest.mark.processes
@pytest.mark.slow
def test_row_update_and_count_likelihood_step_benchmarks_quick(quick_runs):
    test = "test_row_update_and_count_likelihood_step_benchmarks_quick"
    out = quick_output(quick_runs, test, "row updates")
    assert "| 200 |" in out and "| 400 |" in out
    out = quick_output(quick_runs, test, "count step")
    assert "| NB, 3 points |" in out and "| 3 |" in out
    out = quick_output(quick_runs, test, "closed-form step")
    assert "gaps (30%), masked" in out
    assert all(f"| {name} |" in out for name in ("as built", "baseline", "XLA island"))
    out = quick_output(quick_runs, test, "first call")
    assert "| this checkout |" in out and "first new row" in out


@pytest.mark.processes
@pytest.mark.slow
def test_default_settings_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_default_settings_benchmark_quick", "defaults")
    assert "| AEB-SVI | defaults |" in out and "| AEB-SVI | Monte Carlo, Adam |" in out


def test_the_probe_classifies_an_outcome_by_what_was_raised_and_its_words(monkeypatch):
    """benchmarks/probe_kit.py: a refusal is clear only as a ValueError (or the command line's
    and the served model's answer) naming one of the case's words."""
    import time

    kit = benchmark_module("probe_kit", monkeypatch)

    def kind(run, names=("gene",), timeout=30.0):
        return kit.classify(kit.Case("surface", "case", run, names, timeout)).kind

    def raising(error):
        def run():
            raise error

        return run

    assert kind(lambda: 1) == kit.CORRECT
    assert kind(raising(ValueError("Gene3 is missing"))) == kit.REFUSED
    assert kind(raising(kit.Refusal("error: no gene"))) == kit.REFUSED
    assert kind(raising(TypeError("got an unexpected keyword argument 'gene'"))) == kit.REFUSED
    assert kind(raising(ValueError("bad input"))) == kit.RAW  # names nothing
    assert kind(raising(KeyError("gene"))) == kit.RAW
    assert kind(raising(ValueError("gene")), names=None) == kit.RAW  # a valid request refused
    assert kind(raising(kit.Wrong("NaN"))) == kit.WRONG
    assert kind(raising(kit.Lost("notes.txt"))) == kit.LOST
    assert kind(lambda: time.sleep(2), timeout=0.1) == kit.HANG
    assert kind(raising(kit.Hang("a worker still ran after 420 s"))) == kit.HANG


def test_the_probe_checks_what_the_de_rule_and_label_transfer_promise(monkeypatch):
    """benchmarks/probe_rules.py: a DE table declaring a gene past fdr_target or under
    min_detection, or a label written that is not the most probable, is silently wrong."""
    import pandas as pd

    rules = benchmark_module("probe_rules", monkeypatch)
    kit = sys.modules["probe_kit"]
    table = pd.DataFrame(
        {
            "proba_de": [0.99, 0.5],
            "proba_not_de": [0.01, 0.5],
            "lfc_mean": [2.0, 0.1],
            "non_zeros_proportion1": [0.9, 0.9],
            "non_zeros_proportion2": [0.01, 0.9],
            "is_de_fdr_0.05": [True, False],
            "comparison": ["a vs b"] * 2,
            "delta": [0.25] * 2,
            "batch_correction": [True] * 2,
        }
    )
    rules._check_de_table(table, {"fdr_target": 0.05}, 2)
    with pytest.raises(kit.Wrong, match="min_detection"):
        rules._check_de_table(table, {"fdr_target": 0.05, "min_detection": 0.95}, 2)
    with pytest.raises(kit.Wrong, match="fdr_target"):
        rules._check_de_table(table.assign(**{"is_de_fdr_0.05": True}), {"fdr_target": 0.05}, 2)
    with pytest.raises(kit.Wrong, match="batch_correction"):
        rules._check_de_table(table, {"batch_correction": False}, 2)

    class Cells:  # what the check reads of an AnnData
        def __init__(self, obs):
            self.obs, self.n_obs = obs, len(obs)

    probabilities = pd.DataFrame({"t0": [0.9, 0.4], "t1": [0.1, 0.6]})
    reference = Cells(pd.DataFrame({"kind": ["t0", "t1"]}))
    written = {"kind_transferred": ["t0", "unassigned"], "kind_transferred_probability": [0.9, 0.6]}
    query = Cells(pd.DataFrame(written))
    rules._check_transfer(probabilities, query, reference, {"unassigned_below": 0.7})
    with pytest.raises(kit.Wrong, match="most probable"):
        rules._check_transfer(probabilities, query, reference, {})
