"""The likelihoods a single-cell model takes, by name (their one registry is
:mod:`gpflow_svi_gplvm.defaults`)."""

from __future__ import annotations

from ..defaults import CELL_LIKELIHOOD_NAMES as LIKELIHOODS
from ..defaults import COUNT_LIKELIHOOD_NAMES as COUNT_LIKELIHOODS
from ..likelihoods import likelihood_by_name as model_likelihood

__all__ = ["LIKELIHOODS", "COUNT_LIKELIHOODS", "model_likelihood"]
