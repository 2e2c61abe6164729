"""Smoke test of benchmarks/reproduce_paper.py (the paper's reconstruction tables)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from benchmark_quick import benchmark_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "reproduce_paper.py"
NEEDED = ("oilflow", "qpcr", "taxi", "mnist", "mocap", "brendan_faces", "movielens100k")


def _data_available() -> bool:
    home = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    if not home:
        return False
    return all((Path(home) / name).exists() for name in NEEDED)


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.skipif(
    not _data_available(),
    reason="GPFLOW_SVI_GPLVM_DATA unset or lacks one of " + " / ".join(NEEDED),
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
    for name in ("oilflow", "qpcr", "taxi", "mnist", "brendan", "movielens", "mocap"):
        assert f"**{name}**" in text
    assert "| predictor | RMSE on held-out ratings | NLPD per held-out rating |" in text
    assert "| predictor | RMSE on hidden pixels | NLPD per hidden pixel |" in text
    assert "| upper_body | nearest complete pose |" in text and "| upper_body | AEB-SVI" in text


@pytest.fixture
def reproduce(monkeypatch):
    return benchmark_module("reproduce_paper", monkeypatch)


def test_a_partial_run_replaces_its_tables_and_keeps_the_others_and_the_notes(reproduce):
    merge = reproduce.merge_results
    first = merge("", "# first header", {"oilflow": "oil table 1", "mnist": "mnist table 1"})
    first += "\n## Notes\n\nwritten by hand\n"
    second = merge(first, "# second header", {"mnist": "mnist table 2", "qpcr": "qpcr table 2"})
    assert second.startswith("# second header") and "first header" not in second
    assert "mnist table 1" not in second
    positions = [second.index(t) for t in ("oil table 1", "qpcr table 2", "mnist table 2")]
    assert positions == sorted(positions)  # the tables' fixed order, not the order of the runs
    assert second.endswith("\n## Notes\n\nwritten by hand\n")
    assert merge(second, "# second header", {}) == second


def test_a_run_of_some_models_replaces_only_their_rows(reproduce):
    module = reproduce
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


@pytest.mark.parametrize(
    "argv",
    [["table1", "--config", "paper", "--learning-rate", "0.01"], ["table4", "--config", "paper"]],
)
def test_the_papers_configuration_takes_no_other_settings(argv, reproduce):
    with pytest.raises(SystemExit) as stop:
        reproduce.main(argv)
    assert stop.value.code == 2


def test_the_papers_configuration_reaches_the_model_and_the_optimiser(monkeypatch, reproduce):
    module = reproduce
    Y = np.random.default_rng(0).standard_normal((30, 4))
    monkeypatch.setitem(module.DATASETS, "taxi", (lambda: SimpleNamespace(Y=Y), 2, 5, lambda: None))
    seen = {}

    class Trained(Exception):
        """Stops the run once the model and its training options are known: what follows (the
        test rows' inference) is the same under every configuration and takes minutes of
        tracing."""

    def record(model, Y, **options):
        seen.update(options, model=model)
        raise Trained

    monkeypatch.setattr(module, "fit", record)
    args = SimpleNamespace(config="paper", max_rows=None, iterations=3, inference_iterations=2)
    with pytest.raises(Trained):
        module.run_one("taxi", "AEB-SVI", 0, args)
    # The configuration table's taxi row: lr 5e-3, batch 500 (here all 24 training rows), and
    # 10 samples of x; the encoder's covariance network (D, (D + Q^2)/2 twice, Q^2), dense.
    assert (seen["learning_rate"], seen["batch_size"], seen["q_u_optimizer"]) == (5e-3, 24, "adam")
    model = seen["model"]
    assert model.num_samples == 10 and model.latent.covariance == "dense"
    assert [int(w.shape[1]) for w in model.latent.factor_network.weights] == [4, 4, 4]
    assert [int(w.shape[1]) for w in model.latent.mean_network.weights] == [10, 5, 2]
