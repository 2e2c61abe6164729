"""``python -m gpflow_svi_gplvm embed --model DIR --data query.h5ad --output DIR``: the cells of an
``.h5ad`` embedded by a saved :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM`.

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

import numpy as np
from tqdm.auto import tqdm

from ..validation import check_integer, check_writable_folder

__all__ = ["EMBED_OUTPUTS", "embed_outputs", "run_embed"]

EMBED_OUTPUTS = ("X_{key}.npy", "X_{key}_var.npy", "{key}_novelty.npy", "embed.json")
"""What ``embed`` writes to ``--output``, with the model's ``key_added`` for ``{key}``."""


def embed_outputs(key: str) -> list[str]:
    """The names of ``embed``'s outputs for a model whose ``key_added`` is ``key``."""
    return [name.format(key=key) for name in EMBED_OUTPUTS]


def run_embed(args: argparse.Namespace) -> int:
    """The ``embed`` verb (see the module); its exit status."""
    import anndata

    from ..singlecell import SingleCellGPLVM

    block = check_integer(args.block, "--block", hint="e.g. 4096 cells")
    if args.data.suffix != ".h5ad" or not args.data.is_file():
        raise ValueError(f"--data {args.data} is not an .h5ad file: give the cells' .h5ad.")
    face = SingleCellGPLVM.load(args.model)
    names = embed_outputs(face.key_added)
    check_writable_folder(args.output, "--output")
    earlier = [name for name in names if (args.output / name).exists()]
    if earlier and not args.overwrite:
        raise ValueError(
            f"--output {args.output} holds an earlier embedding ({', '.join(earlier)}): pass "
            "--overwrite to replace it, or choose another --output."
        )
    staged = {name: args.output / f".{name}.partial" for name in names}
    try:
        adata = anndata.read_h5ad(args.data, backed="r")
    except OSError as error:
        raise ValueError(
            f"--data {args.data} cannot be read as an .h5ad ({error}): give a whole .h5ad file "
            "(one truncated, or still being written, cannot be read)."
        ) from error
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
        }
        staged[names[-1]].write_text(json.dumps(record, indent=2))
        for name in names:
            os.replace(staged[name], args.output / name)
    finally:
        adata.file.close()
        for path in staged.values():  # left only by a run that failed
            path.unlink(missing_ok=True)
    print(f"embedded {cells} cells in {seconds:.1f} s ({cells / max(seconds, 1e-9):.0f} a second)")
    print(f"wrote {', '.join(names)} to {args.output}/")
    return 0
