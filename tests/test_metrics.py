"""Scores of an embedding of labelled cells against what they mean on made-up embeddings."""

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpflow_svi_gplvm.metrics import (
    embedding_scores,
    leiden_clusterings,
    rare_type_f1,
    rmse,
    rmse_per_column,
    scib_scores,
)


def _cells(batch_apart: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Three types far apart, each cell in one of two batches, the batches mixed within each type
    or split to either side of it."""
    rng = np.random.default_rng(0)
    cell_type, batch = np.repeat(np.arange(3), 100), np.tile(np.arange(2), 150)
    embedding = 20.0 * cell_type[:, None] * np.array([1.0, 0.0]) + rng.normal(size=(300, 2))
    if batch_apart:
        embedding[:, 1] += 8.0 * batch
    return embedding, cell_type, batch


def test_types_kept_apart_and_batches_mixed_score_one():
    scores = embedding_scores(*_cells(batch_apart=False))
    assert scores["ARI"] == scores["NMI"] == 1.0 == scores["graph connectivity"]
    assert scores["cell-type ASW"] > 0.9 and scores["batch ASW"] > 0.85


def test_batches_split_apart_score_a_low_batch_asw():
    embedding, cell_type, batch = _cells(batch_apart=True)
    assert embedding_scores(embedding, cell_type, batch)["batch ASW"] < 0.3
    assert "batch ASW" not in embedding_scores(embedding, cell_type)


def test_rare_type_f1_takes_each_rare_type_s_best_cluster_over_the_clusterings():
    cell_type = np.repeat([0, 1, 2, 3], [100, 100, 3, 2])  # types 2 and 3 are rare (< 2%)
    merged = np.repeat([0, 1, 1, 1], [100, 100, 3, 2])  # both rare types inside type 1's cluster
    apart = np.repeat([0, 1, 2, 2], [100, 100, 3, 2])  # the rare types together in one cluster
    # Type 3 against cluster 1 of `merged`: 2 * 2 / (105 + 2); against cluster 2 of `apart`:
    # 2 * 2 / (5 + 2). The score is the worse rare type's best.
    assert rare_type_f1(cell_type, [merged]) == pytest.approx(4 / 107)
    assert rare_type_f1(cell_type, [merged, apart]) == pytest.approx(4 / 7)
    assert rare_type_f1(cell_type, [cell_type]) == 1.0
    assert np.isnan(rare_type_f1(np.repeat([0, 1], 50), [np.zeros(100)]))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=60, max_size=200), st.integers(0, 2**31 - 1))
def test_rare_type_f1_lies_in_zero_one_and_grows_with_more_clusterings(labels, seed):
    cell_type = np.array(labels)
    clusters = np.random.default_rng(seed).integers(0, 4, len(cell_type))
    alone = rare_type_f1(cell_type, [clusters], share=0.1)
    both = rare_type_f1(cell_type, [clusters, cell_type], share=0.1)
    if np.isnan(alone):
        assert np.isnan(both)
        return
    assert 0.0 <= alone <= both == 1.0


def test_embedding_scores_score_rare_types_only_where_there_are_some():
    embedding, cell_type, batch = _cells(batch_apart=False)
    assert "rare-type F1" not in embedding_scores(embedding, cell_type, batch)
    rare = np.vstack([embedding, [[100.0, 50.0]] * 4])  # 4 of 304 cells, far from the rest
    scores = embedding_scores(rare, np.append(cell_type, [3] * 4), np.append(batch, [0, 1] * 2))
    assert scores["rare-type F1"] == 1.0


def test_leiden_scores_take_the_resolution_that_best_matches_the_types():
    pytest.importorskip("igraph")
    embedding, cell_type, batch = _cells(batch_apart=False)
    scores = embedding_scores(embedding, cell_type, batch, leiden=True)
    assert scores["Leiden NMI"] == scores["Leiden ARI"] == 1.0
    from sklearn.neighbors import kneighbors_graph

    graph = kneighbors_graph(embedding, 15, include_self=False)
    found = leiden_clusterings(graph, np.array([0.1, 2.0]))
    # A higher resolution splits the three far-apart groups further, never merges them.
    assert len(np.unique(found[0])) <= len(np.unique(found[1]))
    assert all(len(np.unique(cell_type[c == k])) == 1 for c in found for k in np.unique(c))


def test_leiden_without_igraph_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "igraph", None)
    embedding, cell_type, _ = _cells(batch_apart=False)
    with pytest.raises(ValueError, match=r"python-igraph: pip install"):
        embedding_scores(embedding, cell_type, leiden=True)


@pytest.fixture(scope="module")
def scib_table():
    """scIB's scores of the mixed and the split embedding of the same cells, in one call."""
    pytest.importorskip("scib_metrics")
    mixed, cell_type, batch = _cells(batch_apart=False)
    split, _, _ = _cells(batch_apart=True)
    embeddings = {"mixed": mixed, "split": split}
    return scib_scores(embeddings, cell_type, batch, unintegrated=split), embeddings


def test_scib_scores_agree_with_the_package_s_where_they_define_the_same_score(scib_table):
    table, embeddings = scib_table
    _, cell_type, batch = _cells(batch_apart=False)
    assert list(table.index) == ["mixed", "split"]
    for name, embedding in embeddings.items():
        ours = embedding_scores(embedding, cell_type, batch)  # 300 cells: no subsample
        assert table.loc[name, "Silhouette label"] == pytest.approx(ours["cell-type ASW"], abs=1e-5)
        assert table.loc[name, "KMeans ARI"] == pytest.approx(ours["ARI"])
    bio = table[
        [
            "Isolated labels",
            "Leiden NMI",
            "Leiden ARI",
            "KMeans NMI",
            "KMeans ARI",
            "Silhouette label",
            "cLISI",
        ]
    ].mean(axis=1)
    batch_scores = table[["BRAS", "iLISI", "KBET", "Graph connectivity", "PCR comparison"]]
    assert np.allclose(table["Bio conservation"], bio)
    assert np.allclose(table["Batch correction"], batch_scores.mean(axis=1))
    assert np.allclose(table["Total"], 0.4 * table["Batch correction"] + 0.6 * bio)


def test_scib_scores_rank_mixed_batches_above_split_ones(scib_table):
    table, _ = scib_table
    for score in ["iLISI", "BRAS", "PCR comparison", "Batch correction"]:
        assert table.loc["mixed", score] > table.loc["split", score] + 0.1, score
    # Batches split to either side of each type are clusters of their own at some resolutions.
    assert table.loc["mixed", "Leiden ARI"] == 1.0 > table.loc["split", "Leiden ARI"]


def test_the_single_cell_benchmark_prints_scib_metrics_table(
    scib_table, tmp_path, monkeypatch, capsys
):
    """benchmarks/single_cell.py's --scib table, run here, where scib-metrics has compiled its
    numba functions for the fixture (about 60 CPU s a process), not in the benchmark's quick run:
    a row per contender, scIB's Total of each in [0, 1]."""
    anndata = pytest.importorskip("anndata")
    pytest.importorskip("scanpy")
    import pandas as pd
    from benchmark_quick import benchmark_module, table

    _, embeddings = scib_table
    _, cell_type, batch = _cells(batch_apart=False)
    rng = np.random.default_rng(1)
    counts = rng.poisson(np.exp(1.0 + (cell_type[:, None] == np.arange(20) % 3))).astype(float)
    obs = pd.DataFrame({"cell_type": cell_type.astype(str), "batch": batch.astype(str)})
    cells = anndata.AnnData(X=counts, obs=obs, layers={"counts": counts})
    cells.write_h5ad(tmp_path / "cells.h5ad")
    single_cell = benchmark_module("single_cell", monkeypatch)
    single_cell._scib_table(embeddings, obs, tmp_path / "cells.h5ad")
    rows = table(capsys.readouterr().out, "| contender |")
    assert [row["contender"] for row in rows] == list(embeddings)
    for row in rows:
        assert 0.0 <= float(row["Total"]) <= 1.0, row


def test_labels_that_cannot_be_scored_are_refused_or_warned_of():
    embedding, cell_type, batch = _cells(batch_apart=False)
    unlabelled = cell_type.astype(object)
    unlabelled[[7, 9]] = [None, np.nan]
    for scores in (embedding_scores, lambda e, t, b: scib_scores({"e": e}, t, b, e)):
        with pytest.raises(ValueError, match=r"cell_type has no label \(None or NaN\) for 2 "):
            scores(embedding, unlabelled, batch)
        with pytest.raises(ValueError, match=r"cell_type holds 1 label\(s\): .* 2 or more"):
            scores(embedding, np.zeros(300), batch)
    with pytest.raises(ValueError, match="one or more clusterings"):
        rare_type_f1(cell_type, [])
    with pytest.raises(ValueError, match=r"share must be a share of the cells in \(0, 1\]"):
        rare_type_f1(cell_type, [cell_type], share=-1)
    # Each type's cells each in a batch of their own, or one batch per type: no type's batches
    # can be compared; the other scores stand.
    for own in (np.arange(300), cell_type):
        with pytest.warns(UserWarning, match="batch ASW is NaN: no cell type has cells of two"):
            scores = embedding_scores(embedding, cell_type, own)
        assert np.isnan(scores["batch ASW"]) and scores["ARI"] == 1.0


def test_scib_scores_refuse_what_they_cannot_score(monkeypatch):
    embedding, cell_type, batch = _cells(batch_apart=False)
    with pytest.raises(ValueError, match=r"N = 300 rows.*'unintegrated': \(299, 2\)"):
        scib_scores({"mixed": embedding}, cell_type, batch, unintegrated=embedding[1:])
    with pytest.raises(ValueError, match=r"two or more batches.*300 cells in 1 batch"):
        scib_scores({"mixed": embedding}, cell_type, np.zeros(300), unintegrated=embedding)
    monkeypatch.setitem(sys.modules, "scib_metrics.benchmark", None)
    with pytest.raises(ValueError, match=r"scib-metrics: pip install"):
        scib_scores({"mixed": embedding}, cell_type, batch, unintegrated=embedding)


def test_rmse_per_column_is_each_column_s_rmse_over_its_scored_entries():
    rng = np.random.default_rng(0)
    Y, predicted = rng.normal(size=(30, 4)), rng.normal(size=(30, 4))
    Y[rng.random(Y.shape) < 0.3] = np.nan
    Y[:, 2] = np.nan  # a column with no observed entry
    mask = rng.random(Y.shape) < 0.8
    found = rmse_per_column(Y, predicted, mask)
    for d in range(4):
        scored = mask[:, d] & ~np.isnan(Y[:, d])
        if not scored.any():
            assert np.isnan(found[d])
            continue
        errors = [(Y[n, d] - predicted[n, d]) ** 2 for n in range(30) if scored[n]]
        assert found[d] == pytest.approx(np.sqrt(sum(errors) / len(errors)), rel=1e-12)
        assert found[d] == pytest.approx(rmse(Y[:, [d]], predicted[:, [d]], mask[:, [d]]))
    with pytest.raises(ValueError, match="shape of Y_true"):
        rmse_per_column(Y, predicted[:, :3])


# --------------------------------------------------------------------------------------------
# The scanpy steps the single-cell docs show, on an embedding of 12,000 cells, as the
# ``singlecell`` extra installs them: neighbours (scanpy searches with pynndescent from 8,192
# cells), UMAP and Leiden. A version of a dependency that breaks one of them fails here. In this
# file, so in the process of scib-metrics' scores above: pynndescent compiles its search (numba)
# once for both, 40 CPU seconds fewer than in a file of its own.


@pytest.mark.slow
def test_neighbours_umap_and_leiden_run_on_an_embedding_of_12000_cells():
    anndata = pytest.importorskip("anndata")
    sc = pytest.importorskip("scanpy")
    pytest.importorskip("igraph")
    from sklearn.metrics import adjusted_rand_score

    cells, Q, types = 12_000, 10, 6
    rng = np.random.default_rng(0)
    kind = rng.integers(0, types, cells)
    centres = 6.0 * rng.standard_normal((types, Q))
    adata = anndata.AnnData(obs={"cell_type": kind.astype(str)}, shape=(cells, 0))
    adata.obsm["X_gplvm"] = centres[kind] + rng.standard_normal((cells, Q))

    sc.pp.neighbors(adata, use_rep="X_gplvm", random_state=0)
    sc.tl.umap(adata, random_state=0)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False, random_state=0)

    assert adata.obsp["connectivities"].shape == (cells, cells)
    assert adata.obsm["X_umap"].shape == (cells, 2) and np.isfinite(adata.obsm["X_umap"]).all()
    # Types far apart in the embedding: Leiden finds them (a cluster may split in two).
    assert adjusted_rand_score(kind, adata.obs["leiden"]) > 0.8
