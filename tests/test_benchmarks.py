"""The benchmark scripts of speed, steps and workers run end to end in their quick settings, and the
numbers they print are sane (finite, positive times and sizes, scores in their ranges); the
benchmarks' own claims are measured at full size, not here. The quick runs that fit and score data
sets and atlases are test_benchmarks_data.py's (a file each worker runs beside this one); both
run their quick runs as tests/benchmark_quick.py says."""

import os
import re
import subprocess
import sys

import numpy as np
import pytest
from benchmark_quick import (
    BENCHMARKS,
    QUICK_RUNS,
    benchmark_module,
    interval,
    number,
    positive,
    quick_output,
    table,
    within,
)


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
