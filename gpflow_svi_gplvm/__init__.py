"""Generalised GPLVMs trained with stochastic variational inference, on GPflow."""

# First, before TensorFlow is imported: quiets its start-up log for the command line only.
from . import _command_line  # noqa: F401  isort: skip
from .distributed import RowShard, WorkerLostError
from .export import export_saved_model
from .inference import LatentInference, log_predictive_density
from .latents import (
    EncoderLatent,
    GaussianLatent,
    LatentBatch,
    LatentVariables,
    MAPLatent,
    PointLatent,
    RowLatentVariables,
)
from .likelihoods import MaskedLikelihood, NegativeBinomial
from .models import (
    MAPGPLVM,
    SVIGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    PointGPLVM,
)
from .training import History, NonFiniteLossError, Trainer, fit

__version__ = "0.1.0"

__all__ = [
    "SVIGPLVM",
    "PointGPLVM",
    "MAPGPLVM",
    "BayesianSVIGPLVM",
    "AmortisedBayesianGPLVM",
    "LatentVariables",
    "RowLatentVariables",
    "LatentBatch",
    "PointLatent",
    "MAPLatent",
    "GaussianLatent",
    "EncoderLatent",
    "MaskedLikelihood",
    "NegativeBinomial",
    "fit",
    "Trainer",
    "RowShard",
    "WorkerLostError",
    "LatentInference",
    "log_predictive_density",
    "export_saved_model",
    "History",
    "NonFiniteLossError",
]
