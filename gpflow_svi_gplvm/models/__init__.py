r"""GPLVMs trained by stochastic variational inference: SVGP with latent inputs.

:class:`SVIGPLVM` (the bound, :mod:`~gpflow_svi_gplvm.models.base`) with a latent module; the
named models (:mod:`~gpflow_svi_gplvm.models.gplvms`) fix the module: the paper's four and a
normalising-flow one, with the registry of their names (:data:`MODELS`).
"""

from .base import DEFAULT_NUM_INDUCING, SHARED_COVARIANCE_MIN_OUTPUTS, SVIGPLVM, covariance_layout
from .gplvms import (
    MAPGPLVM,
    MODELS,
    PAPER_MODELS,
    PAPER_NAMES,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    FlowBayesianGPLVM,
    PointGPLVM,
    lookup_model,
)

__all__ = [
    "DEFAULT_NUM_INDUCING",
    "SVIGPLVM",
    "PointGPLVM",
    "MAPGPLVM",
    "BayesianSVIGPLVM",
    "AmortisedBayesianGPLVM",
    "FlowBayesianGPLVM",
    "SHARED_COVARIANCE_MIN_OUTPUTS",
    "MODELS",
    "PAPER_NAMES",
    "PAPER_MODELS",
    "lookup_model",
    "covariance_layout",
]
