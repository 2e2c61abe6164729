"""``python -m gpflow_svi_gplvm embed --model DIR --data query.h5ad --output DIR``: the cells of an
``.h5ad`` embedded by a saved :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM`, and the
block-wise writing that ``map-query`` (:mod:`.map_query`) shares.

The file is opened backed (``anndata.read_h5ad(..., backed="r")``) and read ``--block`` cells at
a time, each block embedded by the model's ``transform`` (q(x*) with the model frozen, cells of
the fitted batches and of batches ``map_query`` learnt before the save) and its means, variances
and novelty written into arrays on disk (``numpy.lib.format.open_memmap``): memory stays that of
one block whatever the number of cells. The outputs (:data:`EMBED_OUTPUTS`, named by the model's
``key_added``) are written under hidden names and renamed into place once whole, so a failed or
killed run leaves no half-written output and an earlier run's outputs as they were; an earlier
run's are replaced only with ``--overwrite``. The ``.h5ad`` is never written.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm.auto import tqdm

from ..validation import check_integer, check_writable_folder

if TYPE_CHECKING:  # the single-cell face imports TensorFlow: loaded with a run, not with --help
    from ..singlecell import SingleCellGPLVM

__all__ = [
    "EMBED_OUTPUTS",
    "EMBEDDING",
    "backed_h5ad",
    "checked_embedding_inputs",
    "embed_outputs",
    "print_embedded",
    "run_embed",
    "write_embedding",
]

EMBEDDING = ("X_{key}.npy", "X_{key}_var.npy", "{key}_novelty.npy")
"""The arrays ``embed`` and ``map-query`` write to ``--output``, with the model's ``key_added``
for ``{key}``: the means and variances of q(x) [N, Q] and the novelty [N] of every cell."""

EMBED_OUTPUTS = (*EMBEDDING, "embed.json")
"""What ``embed`` writes to ``--output``: :data:`EMBEDDING` and its record."""


def embed_outputs(key: str, record: str = "embed.json") -> list[str]:
    """The names of the outputs for a model whose ``key_added`` is ``key``: :data:`EMBEDDING`'s
    and the run's ``record``."""
    return [name.format(key=key) for name in EMBEDDING] + [record]


def run_embed(args: argparse.Namespace) -> int:
    """The ``embed`` verb (see the module); its exit status."""
    face, block, names = checked_embedding_inputs(args, "embed.json")
    with backed_h5ad(args.data) as adata:
        seconds = write_embedding(face, adata, args, block, names, {})
        print_embedded(adata.n_obs, seconds, names, args.output)
    return 0


def checked_embedding_inputs(
    args: argparse.Namespace, record: str
) -> tuple[SingleCellGPLVM, int, list[str]]:
    """The saved model ``--model`` loaded, ``--block`` checked, and the outputs' names (with the
    run's ``record``), once ``--data`` is found to be an ``.h5ad`` and ``--output`` to be
    writable and to hold no earlier run's outputs (unless ``--overwrite``); a ``ValueError``
    saying what to do otherwise."""
    from ..singlecell import SingleCellGPLVM

    block = check_integer(args.block, "--block", hint="e.g. 4096 cells")
    if args.data.suffix != ".h5ad" or not args.data.is_file():
        raise ValueError(f"--data {args.data} is not an .h5ad file: give the cells' .h5ad.")
    face = SingleCellGPLVM.load(args.model)
    names = embed_outputs(face.key_added, record)
    check_writable_folder(args.output, "--output")
    earlier = [name for name in names if (args.output / name).exists()]
    if earlier and not args.overwrite:
        raise ValueError(
            f"--output {args.output} holds an earlier embedding ({', '.join(earlier)}): pass "
            "--overwrite to replace it, or choose another --output."
        )
    return face, block, names


@contextmanager
def backed_h5ad(path: Path) -> Iterator[Any]:
    """The AnnData of the ``.h5ad`` at ``path`` opened backed (read only, its counts left on
    disk), closed on leaving; a ``ValueError`` for a file that cannot be read or holds no cells
    (``transform`` embeds none)."""
    import anndata

    try:
        adata = anndata.read_h5ad(path, backed="r")
    except OSError as error:
        raise ValueError(
            f"--data {path} cannot be read as an .h5ad ({error}): give a whole .h5ad file "
            "(one truncated, or still being written, cannot be read)."
        ) from error
    try:
        if adata.n_obs == 0:
            raise ValueError(
                f"--data {path} holds no cells (0 rows of obs): give an .h5ad of the cells to "
                "embed."
            )
        yield adata
    finally:
        adata.file.close()


def write_embedding(
    face: SingleCellGPLVM,
    adata,
    args: argparse.Namespace,
    block: int,
    names: list[str],
    record: dict[str, Any],
    keep: Callable[[], None] | None = None,
) -> float:
    """Write the embedding of the backed ``adata``'s cells by ``face.transform``, ``block`` cells
    at a time, to ``args.output`` as ``names`` (:func:`embed_outputs`): the arrays, and the run's
    ``record`` with the cells, genes, Q, seconds, model and data; each under a hidden name,
    ``keep`` called (to write what else the run keeps) once they are whole, then renamed into
    place, so a run failing anywhere leaves none of them. Returns the seconds the embedding
    took."""
    staged = {name: args.output / f".{name}.partial" for name in names}
    try:
        args.output.mkdir(parents=True, exist_ok=True)
        cells, Q = adata.n_obs, face.latent_dim
        means, variances, novelty = (
            np.lib.format.open_memmap(staged[name], mode="w+", shape=shape)
            for name, shape in zip(names, [(cells, Q), (cells, Q), (cells,)])
        )
        start = time.perf_counter()
        with tqdm(total=cells, disable=args.no_progress, desc="embed", unit="cell") as bar:
            for first in range(0, cells, block):
                part = slice(first, min(first + block, cells))
                cells_read = adata[part].to_memory()
                means[part] = face.transform(cells_read, missing_genes=args.missing_genes)
                variances[part] = cells_read.obsm[f"X_{face.key_added}_var"]
                column = cells_read.obs.get(f"{face.key_added}_novelty")
                novelty[part] = np.nan if column is None else column.to_numpy()
                bar.update(part.stop - part.start)
        seconds = time.perf_counter() - start
        for array in (means, variances, novelty):
            array.flush()
        del means, variances, novelty
        record = {
            "cells": cells,
            "genes": len(face.gene_names),
            "latent_dim": Q,
            "seconds": round(seconds, 2),
            "model": str(args.model),
            "data": str(args.data),
            **record,
        }
        staged[names[-1]].write_text(json.dumps(record, indent=2))
        if keep is not None:
            keep()
        for name in names:
            os.replace(staged[name], args.output / name)
    finally:
        for path in staged.values():  # left only by a run that failed
            path.unlink(missing_ok=True)
    return seconds


def print_embedded(cells: int, seconds: float, names: list[str], output: Path) -> None:
    """The summary of an embedding of ``cells`` in ``seconds`` written to ``output`` as
    ``names``."""
    print(f"embedded {cells} cells in {seconds:.1f} s ({cells / max(seconds, 1e-9):.0f} a second)")
    print(f"wrote {', '.join(names)} to {output}/")
