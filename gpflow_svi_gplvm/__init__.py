"""Generalised GPLVMs trained with stochastic variational inference, on GPflow.

``import gpflow_svi_gplvm`` imports neither TensorFlow nor the command line: each public name
below loads its module when first used (a module ``__getattr__``, PEP 562), so that
``python -m gpflow_svi_gplvm``, which imports the package before its ``__main__``, reads its
options and prints ``--help`` before TensorFlow loads. The imports under ``TYPE_CHECKING`` say
where each name lives; type checkers read them, and so does :func:`_homes`.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .version import __version__ as __version__

if TYPE_CHECKING:
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


def __getattr__(name: str) -> Any:
    """A public name, imported from its module on first use (and kept), or a sub-package or
    module of the package (``gpflow_svi_gplvm.datasets``)."""
    home = _homes().get(name)
    if home is not None:
        value = getattr(importlib.import_module(home, __name__), name)
        globals()[name] = value
        return value
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


@cache
def _homes() -> dict[str, str]:
    """Each public name's module (relative, e.g. ``".models"``), read from the imports under
    ``TYPE_CHECKING`` above: one list of where the names live, for readers, type checkers and
    the loader alike."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    (block,) = [
        node
        for node in tree.body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
    ]
    return {
        alias.asname or alias.name: "." * statement.level + (statement.module or "")
        for statement in block.body
        if isinstance(statement, ast.ImportFrom)
        for alias in statement.names
    }
