"""The cells of an AnnData (or of an ``.h5ad`` file, read from disk): the chosen genes' values
read a block of rows at a time and checked (their library sizes from the same pass)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...rows.facts import RowScan, scan_rows
from ...rows.sparse import RowReader, SparseRows

if TYPE_CHECKING:
    from ...rows.h5ad import DiskRows

__all__ = [
    "read_cells",
    "scan_cells",
    "opened",
    "CellsFile",
    "content_hash",
]


def read_cells(
    adata,
    layer: str | None,
    gene_names: list[str],
    counts: bool,
    columns: np.ndarray | None = None,
    cells: slice = slice(None),
) -> tuple[RowReader, np.ndarray]:
    """The values of genes ``gene_names`` (at ``columns`` of ``layer``, found by name when not
    given) of the ``cells`` (a range; default every cell), read in row blocks and checked
    (non-negative integers for ``counts``), and each cell's sum of them [n] (its library
    size), from that pass."""
    rows, check = _opened_cells(adata, layer, gene_names, counts, columns, cells)
    if check is None:  # in memory, checked as read
        return rows, rows.row_sums()
    return rows, scan_rows(rows, check).totals


def scan_cells(
    adata,
    layer: str | None,
    gene_names: list[str],
    counts: bool,
    cells: slice = slice(None),
    digest: bool = False,
) -> tuple[SparseRows | DiskRows, RowScan]:
    """:func:`read_cells`' rows, checked in the one pass that learns their facts
    (:func:`~gpflow_svi_gplvm.rows.facts.scan_rows`: the library sizes are its totals; with
    ``digest``, the hash a checkpoint records)."""
    rows, check = _opened_cells(adata, layer, gene_names, counts, None, cells)
    return rows, scan_rows(rows, check, digest)


def _opened_cells(
    adata,
    layer: str | None,
    gene_names: list[str],
    counts: bool,
    columns: np.ndarray | None,
    cells: slice,
) -> tuple[SparseRows | DiskRows, Callable[[np.ndarray, int], None] | None]:
    """The rows of :func:`read_cells` and the check of their blocks still to be made (None: the
    rows of an AnnData, checked as they were read into memory)."""
    if columns is None:
        position = {g: i for i, g in enumerate(map(str, genes_of(adata, layer).var_names))}
        columns = np.array([position[g] for g in gene_names])
    names = list(adata.obs_names[cells])

    def check(block: np.ndarray, first: int) -> None:
        _check_values(block, first, names, gene_names, counts, layer)

    if not isinstance(adata, CellsFile):
        matrix = _layer(adata, layer)
        whole = cells.indices(adata.n_obs)[:2] == (0, adata.n_obs)
        # All cells of a CSR matrix: read in place (SparseRows never writes), not copied.
        source = matrix if whole else _RowRange(matrix, cells)
        return SparseRows.from_matrix(source, columns, check), None
    from ...rows.h5ad import DiskRows

    disk = DiskRows.open(adata.path, layer, columns)
    start, stop, _ = cells.indices(adata.n_obs)
    # All cells on one worker stay on disk (out of core); a worker's share is loaded as CSR.
    if (start, stop) == (0, adata.n_obs):
        return disk, check
    with disk:  # closed once read
        return disk.load(start, stop), check


class _RowRange:
    """The rows ``cells`` (a range) of a row-sliceable matrix, sliced as a matrix of their own."""

    def __init__(self, source, cells: slice):
        self.source = source
        self.start, self.stop, _ = cells.indices(source.shape[0])
        self.shape = (max(self.stop - self.start, 0), source.shape[1])

    def __getitem__(self, rows: slice):
        first, last, _ = rows.indices(self.shape[0])
        return self.source[self.start + first : self.start + last]


class CellsFile:
    """The cells of an ``.h5ad`` file as :meth:`SingleCellGPLVM.fit` reads them: ``obs`` and
    ``var`` (and :attr:`raw`'s ``var``) in memory, the matrix (X, a layer or raw/X) left on disk
    for each worker to read its own cells (:class:`~gpflow_svi_gplvm.rows.h5ad.DiskRows`)."""

    def __init__(self, path: Path):
        import h5py

        from ...rows.h5ad import read_frames

        self.path = path
        self.obs, self.var, raw_var = read_frames(path, raw=True)
        self.raw = None if raw_var is None else _Genes(raw_var)
        with h5py.File(path, "r") as file:  # readable: read_frames has read it
            self.layers = tuple(file.get("layers", {}))

    @property
    def obs_names(self):
        return self.obs.index

    @property
    def var_names(self):
        return self.var.index

    @property
    def n_obs(self) -> int:
        return len(self.obs)


class _Genes:
    """The genes (``var``) of a file's raw matrix, as ``adata.raw`` shows them."""

    def __init__(self, var):
        self.var = var

    @property
    def var_names(self):
        return self.var.index


def opened(adata):
    """``adata``, or the cells of an ``.h5ad`` path (:class:`CellsFile`); a ``ValueError`` for
    anything else, or an AnnData without cells."""
    if not isinstance(adata, (str, Path)):
        check_anndata(adata, "or the path of an .h5ad file")
        if adata.n_obs == 0:
            raise ValueError("adata holds no cells: give at least one cell to fit.")
        return adata
    path = Path(adata)
    if not path.is_file():
        raise ValueError(f"{path} is not a file: give an AnnData or the path of an .h5ad file.")
    return CellsFile(path)  # a file h5py cannot read is a ValueError of read_frames


HASHED_PIECES, PIECE_BYTES = 64, 2**16
""":func:`content_hash` reads this many pieces of a file (of this many bytes), or rows of a
matrix, spread evenly over it: a few MB, however large the atlas."""


def content_hash(adata, layer: str | None) -> str:
    """A cheap hash of what ``adata`` holds, for workers to compare their copies: of an
    ``.h5ad`` file (:class:`CellsFile`), its size and :data:`HASHED_PIECES` pieces of its
    bytes; of an AnnData, its matrix's shape, stored entries and as many of its rows."""
    digest = hashlib.blake2b(digest_size=8)
    if isinstance(adata, CellsFile):
        size = adata.path.stat().st_size
        digest.update(str(size).encode())
        with adata.path.open("rb") as file:
            for piece in range(HASHED_PIECES):
                file.seek(piece * size // HASHED_PIECES)
                digest.update(file.read(PIECE_BYTES))
        return digest.hexdigest()
    matrix = _layer(adata, layer)
    digest.update(repr((matrix.shape, getattr(matrix, "nnz", None))).encode())
    rows = np.unique(np.linspace(0, adata.n_obs - 1, HASHED_PIECES).astype(int))
    for row in rows:
        values = matrix[row : row + 1]
        values = values.toarray() if hasattr(values, "toarray") else np.asarray(values)
        digest.update(np.asarray(values, np.float64).tobytes())
    return digest.hexdigest()


def check_anndata(adata, alternative: str = "") -> None:
    """A ``ValueError`` unless ``adata`` is an AnnData (or reads as one)."""
    if not all(hasattr(adata, name) for name in ("obs", "var_names", "n_obs")):
        raise ValueError(
            f"adata is a {type(adata).__name__}: give an AnnData (anndata.AnnData(X=counts, "
            f"obs=..., var=...)){' ' + alternative if alternative else ''}."
        )


def _layer(adata, layer: str | None):
    """The matrix ``layer`` names: None is ``X``; "raw" is ``adata.raw.X`` (where scanpy keeps
    the unprocessed values) unless ``adata.layers`` has a layer of that name."""
    if layer is None:
        return adata.X
    if _reads_raw(adata, layer):
        if adata.raw is None:
            raise ValueError(
                f"adata has no layer 'raw' and no adata.raw; its layers are {list(adata.layers)}. "
                "Pass one of them, or layer=None to read adata.X."
            )
        return adata.raw.X
    if layer not in adata.layers:
        raise ValueError(
            f"adata has no layer {layer!r}; its layers are {list(adata.layers)}. Pass "
            "layer=None to read adata.X."
        )
    return adata.layers[layer]


def _reads_raw(adata, layer: str | None) -> bool:
    return layer == "raw" and "raw" not in adata.layers


def genes_of(adata, layer: str | None):
    """What holds the genes (``var_names``, ``var``) of ``layer``: ``adata.raw``, whose genes
    are its own, for the raw matrix; else ``adata``."""
    return adata.raw if _reads_raw(adata, layer) and adata.raw is not None else adata


def unique_genes(var_names) -> list[str]:
    """The var names as text; a ``ValueError`` when one repeats (which column would it be?)."""
    names = list(map(str, var_names))
    if len(set(names)) < len(names):
        values, counts = np.unique(names, return_counts=True)
        repeated = list(values[counts > 1])
        raise ValueError(
            f"var_names repeat {repeated[:5]} ({len(repeated)} names in all), so a gene cannot "
            "be found by its name: make them unique first, e.g. adata.var_names_make_unique()."
        )
    return names


def gene_names(adata, genes: Sequence[str] | str | None) -> list[str]:
    """The var names to fit: all, those listed, or those a boolean ``var`` column marks."""
    names = unique_genes(adata.var_names)
    if genes is None:
        return names
    if isinstance(genes, str):
        if genes not in adata.var.columns:
            raise ValueError(
                f"var has no column {genes!r} to choose genes by; its columns are "
                f"{list(adata.var.columns)}. Pass a list of gene names instead."
            )
        marks = adata.var[genes]
        if str(marks.dtype) == "boolean":  # pandas' nullable booleans: no value may be missing
            if marks.isna().any():
                raise ValueError(
                    f"var column {genes!r} has no value (NA) for {int(marks.isna().sum())} "
                    f"gene(s), e.g. {list(marks.index[marks.isna()][:3])}: fill them, e.g. "
                    f"adata.var[{genes!r}] = adata.var[{genes!r}].fillna(False)."
                )
            marks = marks.astype(bool)
        if marks.dtype != bool:
            raise ValueError(
                f"var column {genes!r} holds {marks.dtype} values, not True/False: choose genes "
                "by a boolean column (e.g. 'highly_variable') or pass a list of gene names."
            )
        chosen = [n for n, keep in zip(names, marks.to_numpy()) if keep]
        if not chosen:
            raise ValueError(f"var column {genes!r} marks no gene: nothing would be fitted.")
        return chosen
    if len(genes) == 0:
        raise ValueError("genes= is empty: name at least one gene, or pass None for all.")
    if np.asarray(genes).dtype == bool:  # read as names, True and False would be two genes
        raise ValueError(
            f"genes= is a boolean mask ({len(genes)} values): pass the name of the var column "
            "that holds it (e.g. genes='highly_variable'), or the names it marks, "
            "list(adata.var_names[mask])."
        )
    repeated = sorted(str(g) for g, times in Counter(genes).items() if times > 1)
    if repeated:
        raise ValueError(
            f"genes= names {repeated[:5]} more than once: each gene is one output of the model "
            "(and counts once in a cell's library size). Name each gene once."
        )
    known = set(names)
    unknown = [g for g in genes if g not in known]
    if unknown:
        raise ValueError(f"genes not in adata.var_names: {unknown[:5]} ({len(unknown)} in all).")
    return list(map(str, genes))


def _check_values(
    block: np.ndarray,
    first: int,
    cells: list,
    genes: list[str],
    counts: bool,
    layer: str | None,
) -> None:
    """A ``ValueError`` naming the cell and gene of the first entry of ``block`` (rows from
    ``first`` on) that is not finite or, for a count likelihood, not a non-negative integer."""
    bad = ~np.isfinite(block)
    if counts:
        bad |= (block < 0) | (block != np.round(block))
    if not bad.any():
        return
    row, column = np.argwhere(bad)[0]
    where = f"layer {layer!r}" if layer else "adata.X"
    advice = (
        "Give the raw counts (e.g. layer='counts'), or likelihood='gaussian' for normalised values."
        if counts
        else "Replace infinite or missing values."
    )
    raise ValueError(
        f"{where} holds {block[row, column]!r} for cell {cells[first + row]!r}, gene "
        f"{genes[column]!r}: a count likelihood needs non-negative integers. {advice}"
        if counts
        else f"{where} holds {block[row, column]!r} for cell {cells[first + row]!r}, gene "
        f"{genes[column]!r}. {advice}"
    )
