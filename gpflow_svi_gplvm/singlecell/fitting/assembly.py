"""The embedding a fit writes: its ``output`` folder checked on every worker before training; the
q(x) of the training cells, a block at a time, written to ``obsm`` or, every worker's rows
assembled by the chief, into ``X_<key>.npy`` and ``X_<key>_var.npy`` [N, Q], copied in pieces,
never held whole."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import tensorflow as tf

from ...distributed.workers import Workers
from ...rows.sparse import RowReader
from ...validation import check_path, check_writable_folder
from ..cells.reading import CellsFile
from ..mapping.cell_mapper import BLOCK, INFERENCE_STEPS
from .fitted import FittedCells
from .spread import EmbeddingSpread

__all__ = ["check_output", "write_embedding", "training_moments", "assembled"]


def check_output(
    output: str | Path | None, key: str, workers: Workers, replace: bool, needed: bool
) -> None:
    """A ``ValueError`` on every worker, before training, for an ``output`` folder that is
    ``needed`` but not given (on several workers, or for cells read from a path), cannot be
    written, is not one folder every worker sees (the same path, shared), or holds an earlier
    run's embedding ``X_<key>.npy`` (unless ``replace``). On several workers the chief makes
    the folder, for the others to see."""
    if output is None and needed:
        raise ValueError(
            "Pass output=, a folder (one every worker writes, on several workers): the "
            f"embedding of every cell is written there (X_{key}.npy); a file given by its path "
            "is never changed."
        )
    if output is None:
        return
    folder = check_path(output, "output").absolute()
    workers.agree("were given other inputs than the chief", {"output": str(folder)})
    # By the chief alone (the others learn its verdict): a worker's try could otherwise find
    # the folder another's try made and is removing.
    made = False
    with workers.agreeing():
        if workers.chief:
            check_writable_folder(folder, "output")
            earlier = [name for name in _embedding_files(key) if (folder / name).exists()]
            if earlier and not replace:
                raise ValueError(
                    f"output {folder} holds an earlier run's embedding ({', '.join(earlier)}): "
                    "pass overwrite=True to replace it, or choose another output."
                )
            made = workers.count > 1 and not folder.exists()
            if made:
                folder.mkdir(parents=True)
    try:  # every worker writes its cells' rows there
        workers.check_shared_folder(folder, "output")
    except ValueError:
        if made:
            folder.rmdir()
        raise


def write_embedding(
    fitted: FittedCells,
    adata,
    rows: RowReader,
    cells: np.ndarray,
    workers: Workers,
    output: str | Path | None,
    summary: dict,
    progress: bool = False,
) -> None:
    """q(x) of this worker's training ``cells`` (their ``rows``) under the ``fitted`` model to
    ``output`` (the chief assembling every worker's) or to ``adata.obsm``, and ``summary`` to
    ``adata.uns``, with a warning when the embedding collapsed; a progress bar of the cells
    refined with ``progress``."""
    spread = EmbeddingSpread(fitted.options.latent_dim)
    blocks = spread.tracked(training_moments(fitted, rows, progress))
    if output is not None:
        moments = assembled(Path(output), fitted.key, blocks, cells, workers)
    else:
        means, variances = zip(*blocks)
        moments = np.concatenate(means), np.concatenate(variances)
    summary["collapsed"] = spread.warn_if_collapsed(workers)
    if moments is not None and not isinstance(adata, CellsFile):
        adata.obsm[f"X_{fitted.key}"], adata.obsm[f"X_{fitted.key}_var"] = moments
        adata.uns[fitted.key] = summary


def training_moments(
    fitted: FittedCells, rows: RowReader, progress: bool = False
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Means and variances [b, Q] of q(x_n) of the training cells, a block of ``rows`` at a time
    (an encoder reads their values, and with ``refine_latents`` each cell's q(x) is then refined
    as ``transform`` embeds new cells; a latent table is read a block of its rows at a time)."""
    model = fitted.model
    if fitted.refines:
        inputs = None if model.row_inputs is None else model.row_inputs.numpy()
        mapper = fitted.mapper(INFERENCE_STEPS)
        yield from mapper.blocks(rows, inputs, progress=progress, desc="refine q(x)")
        return
    for start in range(0, rows.shape[0], BLOCK):
        stop = min(start + BLOCK, rows.shape[0])
        idx = tf.range(start, stop, dtype=tf.int64)
        values = tf.constant(rows[start:stop]) if model.latent.amortised else None
        mean, variance = model.latent.moments(idx, values)
        yield mean.numpy(), variance.numpy()


def _embedding_files(key: str) -> list[str]:
    """The files of an embedding: the means and the variances of q(x)."""
    return [f"X_{key}.npy", f"X_{key}_var.npy"]


def assembled(
    folder: Path,
    key: str,
    blocks: Iterable[tuple[np.ndarray, np.ndarray]],
    cells: np.ndarray,
    workers: Workers,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Write this worker's rows of q(x) (``blocks`` of means and variances [b, Q] of ``cells``
    [n], in order) to ``folder`` a block at a time; the chief then assembles ``X_<key>.npy`` and
    ``X_<key>_var.npy`` [N, Q] of every cell from the workers' files (copied in pieces, never
    held whole) and returns them, memory-mapped; the other workers return None."""
    folder.mkdir(parents=True, exist_ok=True)
    names = (f"X_{key}", f"X_{key}_var")
    parts = [folder / f".{name}-worker{workers.index}.npy" for name in names]
    with parts[0].open("wb") as means, parts[1].open("wb") as variances:
        written = 0
        for block in blocks:
            for file, values in zip((means, variances), block):
                if written == 0:
                    _write_header(file, (len(cells), values.shape[1]))
                file.write(np.ascontiguousarray(values, np.float64).tobytes())
            written += len(block[0])
    # Every worker's rows are on disk once these sums return.
    starts = workers.stack(int(cells[0]) if len(cells) else 0)
    sizes = workers.stack(written)
    if workers.chief:
        order = [w for w in np.argsort(starts, kind="stable") if sizes[w] > 0]
        staged = [
            _concatenate(folder, name, [folder / f".{name}-worker{w}.npy" for w in order])
            for name in names
        ]
        _replace_pair(folder, names, staged)
        for part in folder.glob(f".X_{key}*-worker*.npy"):
            part.unlink()
    workers.sum(0)  # the chief has assembled them
    if not workers.chief:
        return None
    mean, variance = (np.load(folder / f"{name}.npy", mmap_mode="r") for name in names)
    return mean, variance


def _write_header(file: BinaryIO, shape: tuple[int, int]) -> None:
    header = {"descr": "<f8", "fortran_order": False, "shape": shape}  # float64, C order
    np.lib.format.write_array_header_1_0(file, header)


def _replace_pair(folder: Path, names: tuple[str, str], staged: list[Path]) -> None:
    """Move the ``staged`` means and variances into place as ``<name>.npy``, an earlier pair
    removed first: a run stopped between the two moves leaves a pair missing a file, never one
    run's means beside another's variances."""
    for name in reversed(names):
        (folder / f"{name}.npy").unlink(missing_ok=True)
    for name, path in zip(names, staged):
        path.replace(folder / f"{name}.npy")


def _concatenate(folder: Path, name: str, parts: list[Path]) -> Path:
    """``.<name>.partial.npy`` beside ``<name>.npy``, from the rows of the ``.npy`` files
    ``parts`` [n_w, Q] in order; returns its path."""
    staging = folder / f".{name}.partial.npy"
    with contextlib.ExitStack() as stack:
        sources = [stack.enter_context(part.open("rb")) for part in parts]
        shapes = []
        for source in sources:  # each left at its first row
            np.lib.format.read_magic(source)
            shapes.append(np.lib.format.read_array_header_1_0(source)[0])
        with staging.open("wb") as table:
            _write_header(table, (sum(shape[0] for shape in shapes), shapes[0][1]))
            for source in sources:
                shutil.copyfileobj(source, table, 2**24)
    return staging
