"""The benchmark scripts run end to end in their quick settings (numbers are not checked)."""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _run(*args: str) -> str:
    result = subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=900, cwd=BENCHMARKS.parent
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.processes
@pytest.mark.slow
def test_speed_benchmark_quick():
    out = _run(str(BENCHMARKS / "speed.py"), "--quick")
    assert "SVGP" in out and "B-SVI" in out and "infer_latents" in out


@pytest.mark.processes
@pytest.mark.slow
def test_mapping_speed_benchmark_quick():
    pytest.importorskip("anndata")
    settings = ["--reference", "300", "--cells", "200", "--iterations", "20", "--compare", "20"]
    out = _run(str(BENCHMARKS / "mapping.py"), "speed", *settings)
    assert "ms CPU a cell" in out and "infer_latents (300 Adam steps)" in out
    assert "transform: ARI" in out and "infer_latents: ARI" in out


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
def test_multiworker_benchmark_quick():
    out = _run(str(BENCHMARKS / "multiworker.py"), "--quick", "--repeats", "1")
    assert "| 40 |" in out and "two over one" in out and "| 32 |" in out
    assert "worker 1 of 2: holding its rows" in out


@pytest.mark.processes
@pytest.mark.slow
def test_atlas_scale_benchmark_quick():
    # Its several-worker part launches workers as its one-process parts do (the fits on two
    # workers are tested in test_multiworker.py).
    out = _run(str(BENCHMARKS / "atlas_scale.py"), "out-of-core", "--quick")
    assert "| out of core | 800 |" in out and "| in memory | 400 |" in out
    out = _run(str(BENCHMARKS / "atlas_scale.py"), "model", "--all-reduced", "150000")
    assert "10^8 cells on 64 workers" in out


@pytest.mark.processes
@pytest.mark.slow
def test_build_passes_benchmark_quick(tmp_path):
    out = _run(str(BENCHMARKS / "build_passes.py"), "--quick", "--folder", str(tmp_path))
    row = next(line for line in out.splitlines() if line.startswith("| . |"))
    rows_read, passes = row.split(" | ")[1:3]
    assert int(rows_read.replace(",", "")) == round(float(passes) * 3000) > 0


@pytest.mark.processes
@pytest.mark.slow
def test_high_dimensional_speed_benchmark_quick():
    # One process per contender: four of the seven keep the smoke run short.
    contenders = ["SVGP floor", "B-SVI per-output", "AEB-SVI shared", "B-SVI shared, float32"]
    args = ["--high-d", "single-cell", "--quick", "--levers", "--contenders", *contenders]
    out = _run(str(BENCHMARKS / "speed.py"), *args)
    for contender in contenders:
        assert f"| {contender} |" in out
    assert "failed" not in out and "| B-SVI shared |" not in out


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.skipif(
    not os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    or not (Path(os.environ["GPFLOW_SVI_GPLVM_DATA"]) / "mnist").exists(),
    reason="needs the data folder in GPFLOW_SVI_GPLVM_DATA",
)
def test_missing_data_benchmark_quick():
    # The MNIST, MovieLens, Brendan faces and motion-capture tables run in test_reproduce's
    # `all --quick`; the encoder comparison is this script's own.
    out = _run(str(BENCHMARKS / "missing_data.py"), "encoders", "--quick")
    assert "values + mask, 20% hidden" in out


@pytest.mark.processes
@pytest.mark.slow
def test_flows_benchmark_demo_quick():
    # The demo alone (the Gaussian and the joint flow, both targets of NUTS, the figure): its
    # oil-flow and speed parts reuse reproduce_paper's protocol and speed.py's measure, and
    # tripled the run's time; every flow family's bound and gradients are tests/test_flows.py's.
    out = _run(str(BENCHMARKS / "flows.py"), "demo", "--quick", "--families", "gaussian", "joint")
    assert "| flow, joint | to the exact posterior |" in out and "R-hat max" in out
    assert "| flow, joint | SVI bound with q(u) |" in out and "flow, per-row" not in out
    assert "--families gaussian joint --quick`" in out


@pytest.mark.processes
@pytest.mark.slow
def test_single_cell_benchmark_quick():
    pytest.importorskip("anndata")
    pytest.importorskip("scanpy")
    # Two of the five contenders, one process each, on the hard atlas, whose rare types are
    # scored too: the scoring and table of every one; scib-metrics' table where it is installed.
    contenders = ["PCA", "B-SVI NB + batch"]
    scib = importlib.util.find_spec("scib_metrics") is not None
    command = ["atlas", "--quick", "--hard", "--contenders", *contenders] + ["--scib"] * scib
    out = _run(str(BENCHMARKS / "single_cell.py"), *command)
    assert "| B-SVI NB + batch |" in out and "| PCA |" in out and "failed" not in out
    headers = [line for line in out.splitlines() if line.startswith("| contender |")]
    pcas = [line for line in out.splitlines() if line.startswith("| PCA |")]
    assert len(headers) == len(pcas) == 1 + scib
    for header, pca, column in zip(headers, pcas, ["rare-type F1", "Total"]):
        index = header.strip(" |").split(" | ").index(column)
        assert 0.0 <= float(pca.strip(" |").split(" | ")[index]) <= 1.0


@pytest.mark.processes
@pytest.mark.slow
def test_expression_benchmark_quick():
    pytest.importorskip("anndata")
    pytest.importorskip("scanpy")
    # The package against the Wilcoxon test (scVI runs where $SCVI_PYTHON is set): each table.
    out = _run(str(BENCHMARKS / "expression.py"), "atlas", "--quick", "--contenders", "gplvm")
    assert "| gplvm |" in out and "| Wilcoxon (scanpy) |" in out and "failed" not in out
    assert "truth 'designed'" in out and "Label transfer to batch batch1" in out
    out = _run(str(BENCHMARKS / "expression.py"), "memory", "--quick")
    assert "| 6,000 | obsm of the file |" in out and "| 100 | inferred |" in out


@pytest.mark.processes
@pytest.mark.slow
def test_held_out_cells_benchmark_quick():
    pytest.importorskip("anndata")
    pytest.importorskip("scanpy")
    out = _run(str(BENCHMARKS / "held_out_cells.py"), "atlas", "--quick")
    assert "| SingleCellGPLVM (B-SVI NB + batch) |" in out and "failed" not in out


def _needs_data(*folders: str):
    """Skip unless GPFLOW_SVI_GPLVM_DATA holds each of ``folders``."""
    root = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    present = root and all((Path(root) / folder).exists() for folder in folders)
    return pytest.mark.skipif(not present, reason="needs the data folder in GPFLOW_SVI_GPLVM_DATA")


@pytest.mark.processes
@pytest.mark.slow
@_needs_data("oilflow")
def test_importance_benchmark_quick():
    out = _run(str(BENCHMARKS / "importance.py"), "step", "heldout", "oilflow", "--quick")
    assert "| B-SVI |" in out and "K = 5 step / K = 1 step" in out
    assert "| 20, equal seconds |" in out and "held-out log p(y*) per row" in out


@pytest.mark.processes
@pytest.mark.slow
@_needs_data("movielens100k")
def test_movielens_benchmark_quick():
    settings = ["--folds", "1", "--iterations", "30", "--latent-dim", "2", "--num-inducing", "5"]
    out = _run(str(BENCHMARKS / "movielens.py"), *settings, "--mf-sweeps", "1", "--mf-rank", "2")
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
def test_row_update_and_count_likelihood_step_benchmarks_quick():
    out = _run(str(BENCHMARKS / "row_updates.py"), "--quick")
    assert "| 200 |" in out and "| 400 |" in out
    out = _run(str(BENCHMARKS / "count_step.py"), "--quick", "--points", "3")
    assert "| NB, 3 points |" in out and "| 3 |" in out
    root = str(BENCHMARKS.parent)
    out = _run(
        str(BENCHMARKS / "closed_form_step.py"), "--quick", "--gaps", "--xla", "--baseline", root
    )
    assert "gaps (30%), masked" in out
    assert all(f"| {name} |" in out for name in ("as built", "baseline", "XLA island"))
    out = _run(str(BENCHMARKS / "first_call.py"), "--quick")
    assert "| this checkout |" in out and "first new row" in out


@pytest.mark.processes
@pytest.mark.slow
def test_default_settings_benchmark_quick():
    out = _run(str(BENCHMARKS / "amortised_defaults.py"), "--quick", "--models", "AEB-SVI")
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
