"""The benchmark scripts that fit and score data sets and atlases (single cell, expression,
held-out cells, mapping, atlas scale, missing data, importance weighting, MovieLens) run end to
end in their quick settings, and the numbers they print are sane (times and sizes positive,
scores in their ranges). Their quick runs run once, in one process (tests/benchmark_quick.py),
beside test_benchmarks.py's on the other worker."""

import math
import re

import pytest
from benchmark_quick import number, positive, quick_output, table, within


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
def test_single_cell_benchmark_quick(quick_runs):
    out = quick_output(quick_runs, "test_single_cell_benchmark_quick", "single cell")
    assert "| B-SVI NB + batch |" in out and "| PCA |" in out and "failed" not in out
    rows = table(out, "| contender |")
    assert [row["contender"] for row in rows] == ["PCA", "B-SVI NB + batch"]
    for row in rows:
        for score in ("NMI", "ARI", "Leiden NMI", "graph connectivity", "rare-type F1"):
            within(row[score], 0.0, 1.0)
        positive(row["seconds"])


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
