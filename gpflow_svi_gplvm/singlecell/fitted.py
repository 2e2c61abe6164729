"""What reading genes from a fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` needs
of it, read in this one place: the model, how ``obs`` becomes covariates, the genes, where the
counts and the embedding live, and the inference of new cells' q(x)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..inference import LatentInference
from ..models import SVIGPLVM
from .encoding import CovariateEncoding

__all__ = ["FittedCells", "fitted_cells"]


@dataclass(frozen=True)
class FittedCells:
    """A fitted single-cell model as the readers of genes see it."""

    model: SVIGPLVM
    encoding: CovariateEncoding
    gene_names: list[str]
    """The genes the model was fitted to: its outputs, in order."""
    layer: str | None
    """Where the counts are (None: ``X``)."""
    size_factors: str | None
    """"library", an ``obs`` column, or None (see ``SingleCellGPLVM``)."""
    key: str
    """q(x) of cells is stored as ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``."""
    seed: int
    inference: Callable[[int], LatentInference]
    """The inference of new cells' q(x) in at most so many steps (as ``transform``'s)."""

    @property
    def batch_key(self) -> str | None:
        """The ``obs`` column of the batch, or None."""
        return self.encoding.categorical[0] if self.encoding.categorical else None


def fitted_cells(face) -> FittedCells:
    """What ``face`` (a fitted ``SingleCellGPLVM``) holds for reading genes; a ``ValueError``
    before it is fitted."""
    if face.model is None:
        raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
    return FittedCells(
        model=face.model,
        encoding=face.encoding,
        gene_names=list(face.gene_names),
        layer=face.layer,
        size_factors=face.size_factors,
        key=face.key_added,
        seed=face.seed,
        inference=face._latent_inference,
    )
