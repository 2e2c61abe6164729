"""Generalised GPLVMs trained with stochastic variational inference, on GPflow."""

# First, before TensorFlow is imported: quiets its start-up log for the command line only.
from .cli import arguments  # noqa: F401  isort: skip
from .distances import mmd, sliced_wasserstein
from .distributed.cluster import multi_worker_strategy
from .distributed.workers import WorkerLostError
from .export.saved_model import export_saved_model
from .latents import (
    EncoderLatent,
    FlowLatent,
    GaussianLatent,
    JointFlowLatent,
    LatentBatch,
    LatentVariables,
    MAPLatent,
    Planar,
    PointLatent,
    RowLatentVariables,
)
from .likelihoods import MaskedLikelihood, NegativeBinomial
from .models import (
    MAPGPLVM,
    SVIGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    FlowBayesianGPLVM,
    PointGPLVM,
)
from .posterior_check import latent_draws, posterior_draws
from .prediction.functions import log_predictive_density
from .prediction.latent_inference import LatentInference
from .prediction.marginal_likelihood import marginal_log_likelihood
from .rows.shard import RowShard
from .training.schedules import WarmUp
from .training.trainer import History, NonFiniteLossError, Trainer, fit

__version__ = "0.1.0"

__all__ = [
    "SVIGPLVM",
    "PointGPLVM",
    "MAPGPLVM",
    "BayesianSVIGPLVM",
    "AmortisedBayesianGPLVM",
    "FlowBayesianGPLVM",
    "LatentVariables",
    "RowLatentVariables",
    "LatentBatch",
    "PointLatent",
    "MAPLatent",
    "GaussianLatent",
    "EncoderLatent",
    "FlowLatent",
    "JointFlowLatent",
    "Planar",
    "MaskedLikelihood",
    "NegativeBinomial",
    "fit",
    "Trainer",
    "WarmUp",
    "RowShard",
    "WorkerLostError",
    "multi_worker_strategy",
    "LatentInference",
    "log_predictive_density",
    "marginal_log_likelihood",
    "export_saved_model",
    "posterior_draws",
    "latent_draws",
    "mmd",
    "sliced_wasserstein",
    "History",
    "NonFiniteLossError",
]
