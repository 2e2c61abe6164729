"""What reading genes from a fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` needs
of it, read in this one place: the model, what an AnnData means to it (its
:class:`~gpflow_svi_gplvm.singlecell.cells.registration.CellRegistration`), the effects of batches a
query mapping learnt, where the embedding lives, and the embedding of cells' q(x)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...models import SVIGPLVM
from ..cells.registration import CellRegistration
from ..mapping.cell_mapper import CellMapper
from ..mapping.offsets import BatchOffsets

__all__ = ["FittedCells", "fitted_cells"]


@dataclass(frozen=True)
class FittedCells:
    """A fitted single-cell model as the readers of genes see it."""

    model: SVIGPLVM
    registration: CellRegistration
    offsets: BatchOffsets
    """The offsets on f of batches ``map_query`` learnt (their one-hot part is zero)."""
    key: str
    """q(x) of cells is stored as ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``."""
    mapper: Callable[[int], CellMapper]
    """The embedding of cells' q(x) in at most so many steps, as ``transform``'s."""

    @property
    def size_factors(self) -> str | None:
        """ "library", an ``obs`` column, or None (see ``SingleCellGPLVM``)."""
        return self.registration.size_factors

    @property
    def batch_key(self) -> str | None:
        """The ``obs`` column of the batch, or None."""
        return self.registration.batch_key

    @property
    def batches(self) -> list:
        """The batch categories the model knows: those it was fitted with, then those a query
        mapping learnt."""
        if self.batch_key is None:
            return []
        return list(self.registration.encoding.categories[self.batch_key]) + list(
            self.offsets.categories
        )

    def covariates(self, obs) -> np.ndarray | None:
        """The covariates [n, P] of cells with ``obs`` rows (a learnt batch's one-hot zero)."""
        return self.registration.encoding.transform(obs, mapped=self.offsets.categories)

    def batch_offsets(self, obs) -> np.ndarray | None:
        """The offsets on f [n, D] of cells with ``obs`` rows, or None where no batch was
        learnt by a query mapping."""
        if self.batch_key is None or not self.offsets.categories:
            return None
        batches = obs[self.batch_key].to_numpy(dtype=object)
        return self.offsets.of(batches, self.model.data_dim)


def fitted_cells(face) -> FittedCells:
    """What ``face`` (a fitted ``SingleCellGPLVM``) holds for reading genes; a ``ValueError``
    before it is fitted."""
    if face.model is None:
        raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
    return FittedCells(
        model=face.model,
        registration=face.registration,
        offsets=face.batch_offsets,
        key=face.key_added,
        mapper=face._mapper,
    )
