"""Error metrics on the observed entries of Y (NaN in ``Y_true`` = not scored), and scores of
an embedding of labelled cells."""

from __future__ import annotations

import numbers
import random
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import anndata
    import pandas as pd

__all__ = [
    "rmse",
    "rmse_per_column",
    "nlpd",
    "embedding_scores",
    "leiden_clusterings",
    "rare_type_f1",
    "scib_scores",
    "expected_calibration_error",
    "reliability_table",
    "RARE_SHARE",
    "NEIGHBOURS",
    "check_labels",
    "unlabelled_texts",
]

RARE_SHARE = 0.02
"""Cell types holding fewer than this share of the cells are rare (:func:`rare_type_f1`)."""


def rmse(Y_true: np.ndarray, Y_pred: np.ndarray, mask: np.ndarray | None = None) -> float:
    r"""Root mean squared error over the scored entries S:

    .. math::

        \sqrt{\frac{1}{|S|} \sum_{(n, d) \in S} (y_{nd} - \hat y_{nd})^2}.

    Scored entries are those where ``mask`` is True (default: everywhere) and ``Y_true`` is not NaN.
    """
    Y_true, scored = _scored(Y_true, mask, Y_pred)
    Y_pred = np.asarray(Y_pred, dtype=float)
    return float(np.sqrt(np.mean((Y_true[scored] - Y_pred[scored]) ** 2)))


def rmse_per_column(
    Y_true: np.ndarray, Y_pred: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """:func:`rmse` of each column [D] over its scored entries, NaN for a column with none (a
    pooled RMSE of columns on different scales would be ruled by the widest)."""
    Y_true, scored = _scored(Y_true, mask, Y_pred)
    squares = np.where(scored, (Y_true - np.asarray(Y_pred, dtype=float)) ** 2, 0.0)
    counts = scored.sum(axis=0)
    return np.where(counts > 0, np.sqrt(squares.sum(axis=0) / np.maximum(counts, 1)), np.nan)


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


def expected_calibration_error(
    probabilities: np.ndarray, labels: np.ndarray, num_bins: int = 15
) -> float:
    r"""The expected calibration error of class probabilities [N, T] against the true classes
    ``labels`` [N] (column indices): with the cells binned by the probability of their most
    probable class (their confidence) into ``num_bins`` equal bins of [0, 1],

    .. math::

        \mathrm{ECE} = \sum_b \frac{|B_b|}{N}\, \big|\mathrm{acc}(B_b) - \mathrm{conf}(B_b)\big|,

    accuracy and mean confidence within each bin (Guo et al. 2017): 0 when the confidences are
    the frequencies with which the predictions come true. The sum of :func:`reliability_table`'s
    "weighted gap", the bins a reliability diagram draws
    (:func:`~gpflow_svi_gplvm.plotting.calibration.plot_reliability`); probabilities outside
    [0, 1] or NaN are a ``ValueError``."""
    probabilities = np.asarray(probabilities, dtype=float)
    labels = np.asarray(labels)
    if probabilities.ndim != 2 or labels.shape != (len(probabilities),) or not len(labels):
        raise ValueError(
            f"probabilities must be [N, T] and labels [N] (N >= 1), got {probabilities.shape} "
            f"and {labels.shape}."
        )
    correct = probabilities.argmax(axis=1) == labels
    table = reliability_table(probabilities.max(axis=1), correct, num_bins)
    return float(table["weighted gap"].sum())


def reliability_table(
    probability: np.ndarray, correct: np.ndarray, num_bins: int = 15
) -> pd.DataFrame:
    r"""A reliability diagram's bins: N predictions binned by the ``probability`` [N] of their
    predicted class into ``num_bins`` equal bins of [0, 1] (bin b holds
    :math:`b / K \le p < (b + 1) / K`, the last one 1 too), one row per bin: its edges "from"
    and "to"; "cells", :math:`|B_b|`; "mean probability", :math:`\mathrm{conf}(B_b)`; "share
    right", :math:`\mathrm{acc}(B_b)`, the share of its predictions ``correct`` [N] (bool); and
    "weighted gap", :math:`|B_b| / N\, |\mathrm{acc}(B_b) - \mathrm{conf}(B_b)|`, whose sum is
    the expected calibration error (:func:`expected_calibration_error`). An empty bin has NaN
    means and a weighted gap of 0."""
    import pandas as pd

    probability, correct = _checked_predictions(probability, correct)
    if isinstance(num_bins, bool) or not isinstance(num_bins, numbers.Integral) or num_bins < 1:
        raise ValueError(f"num_bins must be a positive integer (15 is usual), got {num_bins!r}.")
    bins = np.minimum((probability * num_bins).astype(int), num_bins - 1)
    cells = np.bincount(bins, minlength=num_bins)
    filled = np.maximum(cells, 1)
    confidence = np.where(cells > 0, np.bincount(bins, probability, num_bins) / filled, np.nan)
    share = np.where(cells > 0, np.bincount(bins, correct, num_bins) / filled, np.nan)
    gap = np.where(cells > 0, cells / len(bins) * np.abs(share - confidence), 0.0)
    edges = np.arange(num_bins + 1) / num_bins
    return pd.DataFrame(
        {
            "from": edges[:-1],
            "to": edges[1:],
            "cells": cells,
            "mean probability": confidence,
            "share right": share,
            "weighted gap": gap,
        }
    )


_ROUND_OFF = 1e-9
"""How far outside [0, 1] a probability may lie by round-off (a softmax's largest can be
1 + 2e-16) and still be taken as one."""


def _checked_predictions(probability, correct) -> tuple[np.ndarray, np.ndarray]:
    """``probability`` [N] (floats in [0, 1]) and ``correct`` [N] (bool) checked, or a
    ``ValueError`` that says what to pass."""
    import pandas as pd

    try:
        probability = np.asarray(probability, dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(f"probability must be numbers in [0, 1]: {error}") from None
    correct = np.asarray(correct)
    if probability.ndim != 1 or correct.shape != probability.shape or not len(probability):
        raise ValueError(
            "probability and correct must hold one value per prediction, [N] each with N >= 1, "
            f"got shapes {probability.shape} and {correct.shape}: pass the predicted class's "
            "probability (e.g. probabilities.max(axis=1)) and whether it is right "
            "(predicted == truth)."
        )
    bad = np.flatnonzero(~np.isfinite(probability))
    if len(bad):
        raise ValueError(
            f"probability has {len(bad)} NaN or infinite values, e.g. prediction {bad[0]}: leave "
            "those predictions out of both probability and correct."
        )
    low, high = probability.min(), probability.max()
    if low < -_ROUND_OFF or high > 1 + _ROUND_OFF:
        raise ValueError(
            f"probability must be probabilities in [0, 1], got values from {low:.3g} to "
            f"{high:.3g}: pass the probability of the predicted class (e.g. a softmax's "
            "largest), not a score or a log-probability."
        )
    missing = pd.isna(correct)
    if correct.dtype != bool and (missing.any() or not np.isin(correct, (0, 1)).all()):
        raise ValueError(
            f"correct must say of each prediction whether it is right, True or False (or 1 or "
            f"0), got {'missing values' if missing.any() else f'dtype {correct.dtype}'}: e.g. "
            "pass predicted == truth, with the predictions whose truth is unknown left out."
        )
    return probability, correct.astype(bool)


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
    embedding: np.ndarray,
    cell_type: np.ndarray,
    batch: np.ndarray | None = None,
    leiden: bool = False,
) -> dict[str, float]:
    """How an embedding [N, Q] keeps cell types [N] apart and mixes batches [N], as single-cell
    benchmarks score it: NMI and ARI of k-means (k = the number of types) against the types;
    cell-type ASW, (silhouette + 1) / 2 of the types (on 5,000 cells at most); graph
    connectivity, the mean over types of the largest connected share of the type's cells in the
    15-nearest-neighbour graph; with ``batch``, batch ASW, the mean over types (with two or
    more batches) of :math:`1 - |s|`, s the silhouette of the batches within the type (1: mixed);
    with ``leiden``, "Leiden NMI" and "Leiden ARI" at the resolution whose clusters best match
    the types by NMI, as scIB scores (:func:`leiden_clusterings`); where some types hold under
    :data:`RARE_SHARE` of the cells, :func:`rare_type_f1` over k-means with k and 2k clusters
    (and the Leiden clusterings)."""
    from sklearn.cluster import KMeans
    from sklearn.metrics import normalized_mutual_info_score, silhouette_score
    from sklearn.neighbors import kneighbors_graph

    cell_type = check_labels(cell_type, "cell_type", len(embedding), kinds=2)
    if batch is not None:
        batch = check_labels(batch, "batch", len(embedding))
    types = np.unique(cell_type)
    clusters = KMeans(len(types), n_init=10, random_state=0).fit_predict(embedding)
    sample = np.random.default_rng(0).permutation(len(embedding))[:5000]
    graph = kneighbors_graph(embedding, NEIGHBOURS, include_self=False)
    result = {
        **_clustering_scores(cell_type, clusters),
        "cell-type ASW": (silhouette_score(embedding[sample], cell_type[sample]) + 1) / 2,
        "graph connectivity": _graph_connectivity(graph, cell_type),
    }
    clusterings = [clusters]
    if leiden:
        found = leiden_clusterings(graph)
        best = max(found, key=lambda c: normalized_mutual_info_score(cell_type, c))
        result.update(_clustering_scores(cell_type, best, "Leiden "))
        clusterings += found
    if any(np.mean(cell_type == t) < RARE_SHARE for t in types):
        clusterings.append(KMeans(2 * len(types), n_init=10, random_state=0).fit_predict(embedding))
        result["rare-type F1"] = rare_type_f1(cell_type, clusterings)
    if batch is not None:
        result["batch ASW"] = _batch_asw(embedding[sample], cell_type[sample], batch[sample])
    return {k: float(v) for k, v in result.items()}


NEIGHBOURS = 15
"""The neighbours of each cell in the graphs that :func:`embedding_scores` builds."""


def _clustering_scores(cell_type: np.ndarray, clusters: np.ndarray, name: str = "") -> dict:
    from sklearn.metrics import adjusted_rand_score, normalized_mutual_info_score

    return {
        f"{name}NMI": normalized_mutual_info_score(cell_type, clusters),
        f"{name}ARI": adjusted_rand_score(cell_type, clusters),
    }


def _graph_connectivity(graph, cell_type: np.ndarray) -> float:
    """The mean over types of the share of the type's cells in the largest connected component
    of ``graph`` [N, N] restricted to them."""
    from scipy.sparse.csgraph import connected_components

    shares = []
    for t in np.unique(cell_type):
        cells = np.flatnonzero(cell_type == t)
        _, labels = connected_components(graph[cells][:, cells], directed=False)
        shares.append(np.bincount(labels).max() / len(cells))
    return float(np.mean(shares))


def _batch_asw(embedding: np.ndarray, cell_type: np.ndarray, batch: np.ndarray) -> float:
    """The mean over types with two or more batches of :math:`1 - |s|`, s the batches'
    silhouette within the type (a silhouette needs fewer batches than cells: a type whose
    cells each sit in a batch of their own has none); NaN, with a warning, without such a
    type."""
    from sklearn.metrics import silhouette_samples

    per_type = []
    for t in np.unique(cell_type):
        cells = cell_type == t
        if 1 < len(np.unique(batch[cells])) < cells.sum():
            per_type.append(np.mean(1 - np.abs(silhouette_samples(embedding[cells], batch[cells]))))
    if not per_type:
        warnings.warn(
            "batch ASW is NaN: no cell type has cells of two or more batches (and fewer batches "
            "than cells), so no type's batches can be compared.",
            stacklevel=3,
        )
        return float("nan")
    return float(np.mean(per_type))


def check_labels(labels, name: str, N: int, kinds: int = 1) -> np.ndarray:
    """``labels`` [N] as an array, or a ``ValueError``: another length, a missing label (None,
    NaN), or fewer than ``kinds`` different labels."""
    import pandas as pd

    labels = np.asarray(labels)
    if labels.shape != (N,):
        raise ValueError(f"{name} must hold one label per cell, [N={N}], got shape {labels.shape}.")
    missing = np.flatnonzero(pd.isna(labels))
    if len(missing):
        raise ValueError(
            f"{name} has no label (None or NaN) for {len(missing)} cells, e.g. cell "
            f"{int(missing[0])}: label them, or leave those cells out of the scores."
        )
    if len(np.unique(labels.astype(str))) < kinds:
        raise ValueError(
            f"{name} holds {len(np.unique(labels.astype(str)))} label(s): the scores compare "
            f"{kinds} or more."
        )
    return labels


def leiden_clusterings(
    graph, resolutions: np.ndarray | None = None, seed: int = 0
) -> list[np.ndarray]:
    """Leiden clusterings [N] (modularity with a resolution, python-igraph's) of the symmetrised
    nearest-neighbour ``graph`` [N, N] (unweighted), one per resolution: 0.1, 0.2, ..., 2 by
    default, the sweep scIB makes. python-igraph is an optional dependency (the ``bench``
    extra)."""
    try:
        import igraph
    except ImportError as error:
        raise ValueError(
            "Leiden clusters need python-igraph: pip install 'gpflow-svi-gplvm[bench]', or score "
            "without leiden=True."
        ) from error
    resolutions = np.arange(1, 21) / 10 if resolutions is None else resolutions
    symmetric = (graph + graph.T).tocoo()
    upper = symmetric.row < symmetric.col
    network = igraph.Graph(
        n=graph.shape[0], edges=np.column_stack([symmetric.row[upper], symmetric.col[upper]])
    )
    found = []
    for resolution in resolutions:
        igraph.set_random_number_generator(random.Random(seed))
        partition = network.community_leiden(
            objective_function="modularity", resolution=float(resolution), n_iterations=2
        )
        found.append(np.asarray(partition.membership))
    igraph.set_random_number_generator(random)
    return found


def rare_type_f1(
    cell_type: np.ndarray, clusterings: list[np.ndarray], share: float = RARE_SHARE
) -> float:
    r"""The worst, over the cell types holding under ``share`` of the N cells, of the F1 of the
    cluster that best matches the type, :math:`\max_c 2 |c \cap t| / (|c| + |t|)`, taken over
    every clustering [N] given (as scIB's isolated-label F1 takes the clustering that best
    matches each label); NaN without such a type. 1: every rare type is a cluster of its own."""
    cell_type = check_labels(cell_type, "cell_type", len(np.asarray(cell_type)))
    if not clusterings or any(np.shape(c) != cell_type.shape for c in clusterings):
        raise ValueError(
            f"rare_type_f1 needs one or more clusterings, each a cluster per cell [N="
            f"{len(cell_type)}]: got {[np.shape(c) for c in clusterings]}."
        )
    if not 0 < share <= 1:
        raise ValueError(f"share must be a share of the cells in (0, 1], got {share}.")
    types, sizes = np.unique(cell_type, return_counts=True)
    scores = []
    for t in types[sizes < share * len(cell_type)]:
        members = cell_type == t
        best = 0.0
        for clusters in clusterings:
            for c in np.unique(clusters[members]):
                inside = clusters == c
                both = np.sum(inside & members)
                best = max(best, 2 * both / (inside.sum() + members.sum()))
        scores.append(best)
    return float(min(scores)) if scores else float("nan")


SCIB_NEIGHBOURS = 90
"""The neighbours scib-metrics' scores need at most (iLISI and cLISI take 90; Leiden 15)."""


def _scored_cells(
    embeddings: dict[str, np.ndarray],
    cell_type: np.ndarray,
    batch: np.ndarray,
    unintegrated: np.ndarray,
) -> anndata.AnnData:
    """An AnnData of N cells that holds only what the scIB benchmark reads: the types and
    batches in ``obs``, the embeddings and the unintegrated PCA in ``obsm``."""
    import anndata
    import pandas as pd

    N = len(cell_type)
    adata = anndata.AnnData(
        np.zeros((N, 1)),
        obs=pd.DataFrame({"cell_type": cell_type, "batch": batch}, index=np.arange(N).astype(str)),
        obsm={"unintegrated": np.asarray(unintegrated, dtype=np.float64)},
    )
    for key, embedding in embeddings.items():
        adata.obsm[key] = np.asarray(embedding, dtype=np.float64)
    return adata


def scib_scores(
    embeddings: Mapping[str, np.ndarray],
    cell_type: np.ndarray,
    batch: np.ndarray,
    unintegrated: np.ndarray,
) -> pd.DataFrame:
    """The scIB benchmark's scores of each embedding [N, Q_e], by scib-metrics' ``Benchmarker``
    (an optional dependency, the ``scib`` extra). Bio conservation: isolated labels, Leiden NMI
    and ARI at the resolution that best matches the types, k-means NMI and ARI, silhouette label,
    cLISI. Batch correction: BRAS, iLISI, kBET, graph connectivity and PCR comparison, the last
    against ``unintegrated`` [N, P] (PCA of the log-normalised counts, as scIB takes it). Columns
    add each group's mean and scIB's Total, 0.4 batch + 0.6 bio, of the raw scores: no min-max
    scaling across embeddings, so a row does not change with the others scored. Nearest
    neighbours are exact (scikit-learn) where scib-metrics defaults to pynndescent's approximate
    ones. One row per embedding, in the order given."""
    try:
        from scib_metrics.benchmark import Benchmarker, BioConservation
        from scib_metrics.nearest_neighbors import NeighborsResults
    except ImportError as error:
        raise ValueError(
            "scIB scores need scib-metrics: pip install 'gpflow-svi-gplvm[scib]'."
        ) from error
    from sklearn.neighbors import NearestNeighbors

    N = len(np.asarray(cell_type))
    cell_type = check_labels(cell_type, "cell_type", N, kinds=2).astype(str)
    batch = check_labels(batch, "batch", N).astype(str)
    _check_scib_inputs(embeddings, batch, unintegrated, N)

    def neighbours(X: np.ndarray, k: int) -> NeighborsResults:
        distances, indices = NearestNeighbors(n_neighbors=k).fit(X).kneighbors(X)
        return NeighborsResults(indices=indices, distances=distances)

    keys = [f"e{i}" for i in range(len(embeddings))]  # any names, whatever obsm allows
    adata = _scored_cells(dict(zip(keys, embeddings.values())), cell_type, batch, unintegrated)
    benchmark = Benchmarker(
        adata,
        "batch",
        "cell_type",
        keys,
        bio_conservation_metrics=BioConservation(nmi_ari_cluster_labels_leiden=True),
        pre_integrated_embedding_obsm_key="unintegrated",
        progress_bar=False,
    )
    benchmark.prepare(neighbor_computer=neighbours)
    benchmark.benchmark()
    table = benchmark.get_results(min_max_scale=False).drop(index="Metric Type")
    table.index = list(embeddings)
    return table.astype(float)


def _check_scib_inputs(
    embeddings: Mapping[str, np.ndarray], batch: np.ndarray, unintegrated: np.ndarray, N: int
) -> None:
    """A ``ValueError`` unless every embedding and ``unintegrated`` is [N, Q] and ``batch`` [N]
    holds two or more batches of more than :data:`SCIB_NEIGHBOURS` cells in all."""
    shapes = {name: np.shape(e) for name, e in {**embeddings, "unintegrated": unintegrated}.items()}
    wrong = {name: shape for name, shape in shapes.items() if len(shape) != 2 or shape[0] != N}
    if not embeddings or wrong or len(batch) != N:
        raise ValueError(
            f"scib_scores needs one or more embeddings and an unintegrated matrix, each [N, Q] "
            f"with the N = {N} rows of cell_type, and batch [N]: got {wrong or 'no embedding'} "
            f"and batch of {len(batch)}."
        )
    if N <= SCIB_NEIGHBOURS or len(np.unique(batch)) < 2:
        raise ValueError(
            f"scib_scores needs more than {SCIB_NEIGHBOURS} cells and two or more batches "
            f"(the batch-mixing scores compare batches among {SCIB_NEIGHBOURS} neighbours): got "
            f"{N} cells in {len(np.unique(batch))} batch(es)."
        )


def unlabelled_texts(unlabelled_category) -> list[str]:
    """The labels ``unlabelled_category`` names, as text (labels compare as text): one label of
    any type (integer cluster labels too), or several (a list, array, index or set of them)."""
    import pandas as pd

    several = isinstance(unlabelled_category, Sequence | np.ndarray | pd.Index | set)
    if not several or isinstance(unlabelled_category, str):
        return [str(unlabelled_category)]
    return [str(label) for label in unlabelled_category]
