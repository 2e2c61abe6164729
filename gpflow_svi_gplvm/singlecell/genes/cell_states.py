"""The state of cells that genes are read at: each cell's q(x), its ``obs`` row and its size
factor, a block of cells at a time, from an AnnData or an ``.h5ad`` file.

q(x) is the one ``fit`` or ``transform`` stored (``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``,
in memory or in the file) where there is one for every cell; otherwise it is inferred from the
cells' counts a block at a time, as ``transform`` embeds them. A cell without counts in the
fitted genes whose size factor is its library size (0) tells nothing of its latent: its q(x) is
the prior, N(0, I) (a point at 0 for point and MAP latents).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ...components.covariates import new_row_inputs
from ..cells.reading import CellsFile, opened
from ..fitting.fitted import FittedCells
from ..mapping.cell_mapper import INFERENCE_STEPS

__all__ = ["CellStates", "cell_states", "cell_size_factors", "latent_moments"]


@dataclass
class CellStates:
    """A block of cells: their rows ``cells`` among the AnnData's, q(x) (``mean``, ``variance``
    [b, Q]), their ``obs`` rows and their own size factors [b] (None for a model without size
    factors)."""

    cells: slice
    mean: np.ndarray
    variance: np.ndarray
    obs: pd.DataFrame
    size_factors: np.ndarray | None


def cell_states(
    fitted: FittedCells, adata, block_size: int = 4096, own_size_factors: bool = True
) -> Iterator[CellStates]:
    """The states of the cells of ``adata`` (an AnnData or the path of an ``.h5ad`` file),
    ``block_size`` cells at a time. Their own size factors are read only with
    ``own_size_factors`` (a pass over the counts, for size factors of the library) or where
    q(x) is inferred."""
    adata = opened(adata)
    with contextlib.ExitStack() as stack:
        stored = _stored_moments(adata, fitted, stack)
        counts = None
        if stored is None or (own_size_factors and fitted.size_factors == "library"):
            counts = fitted.registration.read_new(adata)
        for start in range(0, adata.n_obs, block_size):
            block = slice(start, min(start + block_size, adata.n_obs))
            obs = adata.obs.iloc[block]
            sizes = cell_size_factors(fitted, obs, None if counts is None else counts[1][block])
            if stored is not None:
                mean, variance = (np.asarray(m[block], dtype=np.float64) for m in stored)
                fitted.check_moments(mean, variance, obs.index)
            else:
                assert counts is not None
                mean, variance = _inferred(fitted, counts[0][block], obs, sizes)
            yield CellStates(block, mean, variance, obs, sizes if own_size_factors else None)


def latent_moments(fitted: FittedCells, adata) -> tuple[np.ndarray, np.ndarray]:
    """q(x) of every cell of ``adata``: means and variances [N, Q] (stored or inferred)."""
    blocks = list(cell_states(fitted, adata, own_size_factors=False))
    return np.concatenate([b.mean for b in blocks]), np.concatenate([b.variance for b in blocks])


def _stored_moments(adata, fitted: FittedCells, stack: contextlib.ExitStack) -> list | None:
    """q(x) of every cell as stored by ``fit`` or ``transform`` (arrays or, in a file, HDF5
    datasets [N, Q], the file kept open by ``stack``; checked as they are read), or None where
    there is none for every cell."""
    names = (f"X_{fitted.key}", f"X_{fitted.key}_var")
    if isinstance(adata, CellsFile):
        import h5py

        file = stack.enter_context(h5py.File(Path(adata.path), "r"))
        found = [file.get(f"obsm/{name}") for name in names]
    else:
        found = [adata.obsm.get(name) for name in names] if hasattr(adata, "obsm") else []
    if len(found) == 2 and all(m is not None and m.shape[0] == adata.n_obs for m in found):
        return found
    return None


def cell_size_factors(fitted: FittedCells, obs, library: np.ndarray | None) -> np.ndarray | None:
    """The cells' own size factors [b]: library size over the model's reference (0 for a cell
    without counts), an ``obs`` column's, or None without size factors (or library sizes)."""
    if fitted.size_factors is None:
        return None
    if fitted.size_factors == "library":
        if library is None:
            return None
        reference = fitted.model.size_factor_reference
        assert reference is not None
        return library / float(reference.numpy())
    return fitted.registration.new_size_factors(obs, np.zeros(len(obs)))


def _inferred(
    fitted: FittedCells, Y: np.ndarray, obs, sizes: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """q(x) [b, Q] of cells with counts Y [b, D] embedded as ``transform`` embeds them (with
    their batch's offsets where a query mapping learnt it); the prior for a cell whose size
    factor is 0 (no counts)."""
    model = fitted.model
    covariates, offsets = fitted.covariates(obs), fitted.batch_offsets(obs)
    mean = np.zeros((len(Y), model.latent_dim))
    variance = np.full_like(mean, 1.0 if model.latent.gaussian else 0.0)
    informed = np.ones(len(Y), bool) if sizes is None else sizes > 0
    if informed.any():
        inputs = new_row_inputs(
            model,
            Y[informed],
            None if covariates is None else covariates[informed],
            None if sizes is None else sizes[informed],
        )
        shift = None if offsets is None else offsets[informed]
        found = fitted.mapper(INFERENCE_STEPS).embed(Y[informed], inputs, shift)
        mean[informed], variance[informed] = found
    return mean, variance
