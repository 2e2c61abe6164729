"""What reading genes from a fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` needs
of it, read in this one place: the model, what an AnnData means to it (its
:class:`~gpflow_svi_gplvm.singlecell.registration.CellRegistration`), where the embedding lives,
and the inference of new cells' q(x)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..inference import LatentInference
from ..models import SVIGPLVM
from .registration import CellRegistration

__all__ = ["FittedCells", "fitted_cells"]


@dataclass(frozen=True)
class FittedCells:
    """A fitted single-cell model as the readers of genes see it."""

    model: SVIGPLVM
    registration: CellRegistration
    key: str
    """q(x) of cells is stored as ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``."""
    seed: int
    inference: Callable[[int], LatentInference]
    """The inference of new cells' q(x) in at most so many steps (as ``transform``'s)."""

    @property
    def size_factors(self) -> str | None:
        """ "library", an ``obs`` column, or None (see ``SingleCellGPLVM``)."""
        return self.registration.size_factors

    @property
    def batch_key(self) -> str | None:
        """The ``obs`` column of the batch, or None."""
        return self.registration.batch_key


def fitted_cells(face) -> FittedCells:
    """What ``face`` (a fitted ``SingleCellGPLVM``) holds for reading genes; a ``ValueError``
    before it is fitted."""
    if face.model is None:
        raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
    return FittedCells(
        model=face.model,
        registration=face.registration,
        key=face.key_added,
        seed=face.seed,
        inference=face._latent_inference,
    )
