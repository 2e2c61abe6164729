"""Latent-variable modules: the swappable treatments of the GPLVM inputs X [N, Q].

A latent module takes a minibatch of row indices ``idx`` [B] and the rows ``Y`` [B, D] and returns
a :class:`LatentBatch`: samples of x_n, the per-row term of the bound and the moments of q(x_n).
The model never needs to know which treatment it holds. A new family is a new module here with a
subclass of :class:`LatentVariables` (or of :class:`RowLatentVariables`, for parameters per row,
which also fits new rows); a model class that builds it (a thin subclass of
:class:`~gpflow_svi_gplvm.models.base.SVIGPLVM`) and its entry in
:func:`~gpflow_svi_gplvm.models.gplvms.lookup_model` make it a model by name.

The families: :mod:`~gpflow_svi_gplvm.latents.point` (point and MAP),
:mod:`~gpflow_svi_gplvm.latents.gaussian` (B-SVI), :mod:`~gpflow_svi_gplvm.latents.encoder`
(AEB-SVI; its networks in :mod:`~gpflow_svi_gplvm.latents.networks`) and
:mod:`~gpflow_svi_gplvm.latents.flows`; the base classes in :mod:`~gpflow_svi_gplvm.latents.base`,
and the fit of new rows' q(x*) in :mod:`~gpflow_svi_gplvm.latents.new_rows`.

Per-row parameters are read with :func:`gather_rows`, which gathers the *unconstrained* table and
then applies the transform, so the gradient is a sparse ``IndexedSlices`` over the batch rows and
the cost of a step does not grow with N.
"""

from .base import LatentVariables, RowLatentVariables, checked_variance, gather_rows, row_table
from .batch import LatentBatch, NewRowFit
from .encoder import EncoderLatent, default_encoder_sizes, paper_encoder_options
from .flow_layers import Planar
from .flows import FlowLatent, JointFlowLatent
from .gaussian import GaussianLatent, diagonal_gaussian_batch
from .point import MAPLatent, PointLatent

__all__ = [
    "LatentBatch",
    "NewRowFit",
    "LatentVariables",
    "RowLatentVariables",
    "PointLatent",
    "MAPLatent",
    "GaussianLatent",
    "EncoderLatent",
    "FlowLatent",
    "JointFlowLatent",
    "Planar",
    "gather_rows",
    "row_table",
    "checked_variance",
    "diagonal_gaussian_batch",
    "default_encoder_sizes",
    "paper_encoder_options",
]
