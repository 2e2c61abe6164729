"""Scores of an embedding of labelled cells against what they mean on made-up embeddings."""

import numpy as np

from gpflow_svi_gplvm.metrics import embedding_scores


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
