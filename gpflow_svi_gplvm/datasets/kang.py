"""Real single-cell counts of two conditions: peripheral blood mononuclear cells of Kang et al.
(2018, GEO GSE96583), control and interferon-beta stimulated (the "ifnb" data set).

The files are not shipped (see :data:`~gpflow_svi_gplvm.datasets.files.REGISTRY` for where they
come from); :func:`load_kang_pbmc` reads them from the data folder (``kang_pbmc/``) or the
per-user cache. They hold no cell-type labels: :func:`marker_cell_types` labels cells by a rule
fixed in advance, canonical PBMC markers, leaving unclear cells unlabelled.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .files import fetch

__all__ = ["load_kang_pbmc", "marker_cell_types", "PBMC_MARKERS", "CONDITIONS"]

CONDITIONS = {"control": "kang_pbmc/pbmc_ctrl.h5ad", "stimulated": "kang_pbmc/pbmc_stim.h5ad"}
"""The conditions and their files (6,548 and 7,451 cells of the same 14,053 genes)."""

PBMC_MARKERS: dict[str, tuple[str, ...]] = {
    "T": ("CD3D", "CD3E", "IL7R"),
    "NK": ("GNLY", "NKG7"),
    "B": ("MS4A1", "CD79A"),
    "CD14 monocyte": ("LYZ", "S100A8", "S100A9"),
    "FCGR3A monocyte": ("FCGR3A", "MS4A7", "CDKN1C", "VMO1"),
    "dendritic": ("FCER1A", "CLEC10A", "HLA-DQA1"),
    "megakaryocyte": ("PPBP", "PF4"),
}
"""Canonical markers of the PBMC types, for :func:`marker_cell_types` (CD14 itself is left out of
the CD14 monocytes' markers: interferon-beta lowers it, and with it the stimulated monocytes
would be labelled otherwise than the control ones)."""


def load_kang_pbmc(
    conditions: tuple[str, ...] = ("control", "stimulated"),
    data_home: str | Path | None = None,
    *,
    verify: bool = True,
):
    """An AnnData [cells, 14,053 genes] of the raw UMI counts (CSR, float32) of the chosen
    ``conditions`` in that order, with ``obs["condition"]`` (categorical) and cell names made
    unique by their condition. Needs ``anndata``."""
    import anndata
    import pandas as pd

    unknown = [c for c in conditions if c not in CONDITIONS]
    if unknown or not conditions:
        raise ValueError(f"conditions must be among {list(CONDITIONS)}, got {list(conditions)}.")
    parts = []
    for condition in conditions:
        cells = anndata.read_h5ad(fetch(CONDITIONS[condition], data_home, verify=verify))
        cells.obs = pd.DataFrame(index=[f"{name}-{condition}" for name in cells.obs_names])
        cells.obs["condition"] = condition
        parts.append(cells)
    joined = anndata.concat(parts, join="outer") if len(parts) > 1 else parts[0]
    joined.X = joined.X.astype(np.float32)
    joined.obs["condition"] = pd.Categorical(joined.obs["condition"], categories=list(conditions))
    return joined


def marker_cell_types(adata, margin: float = 0.5, layer: str | None = None) -> np.ndarray:
    """Each cell's type [N] by :data:`PBMC_MARKERS`, fixed before any embedding is scored: the
    mean of the markers' :math:`\\log(1 + 10^4 y / l)` (l the cell's total count) per type; the
    best type where it leads the second by at least ``margin``, else "unlabelled"."""
    import scipy.sparse as sp

    counts = adata.X if layer is None else adata.layers[layer]
    library = np.asarray(counts.sum(axis=1)).ravel()
    names = list(adata.var_names)
    scores = []
    for markers in PBMC_MARKERS.values():
        columns = counts[:, [names.index(g) for g in markers]]
        columns = columns.toarray() if sp.issparse(columns) else np.asarray(columns)
        scores.append(np.log1p(1e4 * columns / np.maximum(library, 1)[:, None]).mean(axis=1))
    table = np.stack(scores, axis=1)
    ranked = np.sort(table, axis=1)
    best = np.array(list(PBMC_MARKERS))[np.argmax(table, axis=1)]
    return np.where(ranked[:, -1] - ranked[:, -2] >= margin, best, "unlabelled")
