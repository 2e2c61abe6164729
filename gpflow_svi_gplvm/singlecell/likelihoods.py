"""The likelihoods a single-cell model takes, by name: the one registry of them."""

from __future__ import annotations

import gpflow

from ..likelihoods import NegativeBinomial

__all__ = ["LIKELIHOODS", "COUNT_LIKELIHOODS", "model_likelihood"]

LIKELIHOODS = ("negative_binomial", "poisson", "gaussian")
"""The values of ``likelihood``: counts (with or without overdispersion) or continuous values."""

COUNT_LIKELIHOODS = ("negative_binomial", "poisson")
"""The names of :data:`LIKELIHOODS` that model counts (with size factors)."""


def model_likelihood(name: str, num_genes: int) -> gpflow.likelihoods.Likelihood | None:
    """The likelihood ``name`` (one of :data:`LIKELIHOODS`) of ``num_genes`` genes; None for the
    model's default, a Gaussian."""
    if name == "negative_binomial":
        return NegativeBinomial(num_outputs=num_genes)
    if name == "poisson":
        return gpflow.likelihoods.Poisson()
    return None
