"""Error metrics on the observed entries of Y (NaN in ``Y_true`` = not scored), and scores of
an embedding of labelled cells."""

from __future__ import annotations

import numpy as np

__all__ = ["rmse", "nlpd", "embedding_scores"]


def rmse(Y_true: np.ndarray, Y_pred: np.ndarray, mask: np.ndarray | None = None) -> float:
    r"""Root mean squared error over the scored entries S:

    .. math::

        \sqrt{\frac{1}{|S|} \sum_{(n, d) \in S} (y_{nd} - \hat y_{nd})^2}.

    Scored entries are those where ``mask`` is True (default: everywhere) and ``Y_true`` is not NaN.
    """
    Y_true, scored = _scored(Y_true, mask, Y_pred)
    Y_pred = np.asarray(Y_pred, dtype=float)
    return float(np.sqrt(np.mean((Y_true[scored] - Y_pred[scored]) ** 2)))


def nlpd(
    Y_true: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    mask: np.ndarray | None = None,
    joint: bool = False,
) -> float:
    r"""Negative log predictive density under Gaussian predictives :math:`N(m_{nd}, v_{nd})`
    (``mean``, ``variance``).

    Pointwise (default): the mean over scored entries of

    .. math::

        \tfrac12 \log(2\pi v_{nd}) + \frac{(y_{nd} - m_{nd})^2}{2 v_{nd}}.

    ``joint=True``: per test row, the sum of those terms over a row's scored entries (the
    log density of a row under independent Gaussian marginals, not a joint predictive), averaged
    over rows with any scored entry. (The paper does not define its NLPD.)
    """
    Y_true, scored = _scored(Y_true, mask, mean, variance)
    mean, variance = np.asarray(mean, dtype=float), np.asarray(variance, dtype=float)
    if np.any(variance[scored] <= 0):
        raise ValueError("Predictive variances must be positive on the scored entries.")
    with np.errstate(invalid="ignore"):
        terms = 0.5 * np.log(2 * np.pi * variance) + (Y_true - mean) ** 2 / (2 * variance)
    if not joint:
        return float(np.mean(terms[scored]))
    per_row = np.where(scored, terms, 0.0).sum(axis=1)
    return float(np.mean(per_row[scored.any(axis=1)]))


def _scored(Y_true, mask, *predictions) -> tuple[np.ndarray, np.ndarray]:
    """Y_true as floats and the boolean array of entries to score; checks shapes."""
    Y_true = np.asarray(Y_true, dtype=float)
    for prediction in predictions:
        if np.shape(prediction) != Y_true.shape:
            raise ValueError(
                f"Predictions {np.shape(prediction)} must have the shape of Y_true {Y_true.shape}."
            )
    scored = ~np.isnan(Y_true)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != Y_true.shape:
            raise ValueError(f"mask {mask.shape} must have the shape of Y_true {Y_true.shape}.")
        scored &= mask
    if not scored.any():
        raise ValueError("No entry to score: every entry is masked out or missing.")
    return Y_true, scored


def embedding_scores(
    embedding: np.ndarray, cell_type: np.ndarray, batch: np.ndarray | None = None
) -> dict[str, float]:
    """How an embedding [N, Q] keeps cell types [N] apart and mixes batches [N], as single-cell
    benchmarks score it: NMI and ARI of k-means (k = the number of types) against the types;
    cell-type ASW, (silhouette + 1) / 2 of the types (on 5,000 cells at most); graph
    connectivity, the mean over types of the largest connected share of the type's cells in the
    15-nearest-neighbour graph; and with ``batch``, batch ASW, the mean over types (with two or
    more batches) of :math:`1 - |s|`, s the silhouette of the batches within the type (1: mixed)."""
    from scipy.sparse.csgraph import connected_components
    from sklearn.cluster import KMeans
    from sklearn.metrics import (
        adjusted_rand_score,
        normalized_mutual_info_score,
        silhouette_samples,
        silhouette_score,
    )
    from sklearn.neighbors import kneighbors_graph

    rng = np.random.default_rng(0)
    types = np.unique(cell_type)
    clusters = KMeans(len(types), n_init=10, random_state=0).fit_predict(embedding)
    sample = rng.permutation(len(embedding))[:5000]
    result = {
        "NMI": normalized_mutual_info_score(cell_type, clusters),
        "ARI": adjusted_rand_score(cell_type, clusters),
        "cell-type ASW": (silhouette_score(embedding[sample], cell_type[sample]) + 1) / 2,
    }
    graph = kneighbors_graph(embedding, 15, include_self=False)
    connectivity = []
    for t in types:
        cells = np.flatnonzero(cell_type == t)
        _, labels = connected_components(graph[cells][:, cells], directed=False)
        connectivity.append(np.bincount(labels).max() / len(cells))
    result["graph connectivity"] = float(np.mean(connectivity))
    if batch is not None:
        per_type = []
        for t in types:
            cells = sample[cell_type[sample] == t]
            if len(np.unique(batch[cells])) > 1:
                per_type.append(
                    np.mean(1 - np.abs(silhouette_samples(embedding[cells], batch[cells])))
                )
        result["batch ASW"] = float(np.mean(per_type))
    return {k: float(v) for k, v in result.items()}
