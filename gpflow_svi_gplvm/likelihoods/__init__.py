r"""Likelihoods for data with missing entries and counts with overdispersion, and what differs
between likelihoods, in one registry.

Counts are modelled on the log scale: the rate of entry (n, d) is :math:`\exp(f_d(x_n))`, and a
per-row size factor :math:`s_n` (library size) enters as the offset :math:`\log s_n` of f (see
:class:`~gpflow_svi_gplvm.components.covariates.SizeFactorOffset`), so that the rate is
:math:`s_n \exp(f)`. GPflow's :class:`~gpflow.likelihoods.Poisson` (log link, closed-form
variational expectations) and :class:`NegativeBinomial` both take that offset.

The rooms: :mod:`.masked` (:class:`MaskedLikelihood`), :mod:`.negative_binomial`,
:mod:`.derivatives` (each entry's expectation and its derivatives, in closed form where there is
one) and :mod:`.registry` (:func:`likelihood_facts`: what the package knows of each likelihood
type, and the checks and choices read from it).
"""

from .derivatives import ExpectationDerivatives
from .masked import MaskedLikelihood, base_likelihood
from .negative_binomial import (
    GAUSS_HERMITE_POINTS,
    TRAINING_GAUSS_HERMITE_POINTS,
    NegativeBinomial,
    expected_softplus,
)
from .registry import (
    NAMED_LIKELIHOODS,
    LikelihoodFacts,
    check_likelihood_support,
    check_support,
    expectation_derivatives,
    generic_facts,
    is_masked,
    likelihood_by_name,
    likelihood_facts,
    log_link,
    masked,
)

__all__ = [
    "ExpectationDerivatives",
    "MaskedLikelihood",
    "NegativeBinomial",
    "base_likelihood",
    "check_likelihood_support",
    "check_support",
    "expectation_derivatives",
    "likelihood_by_name",
    "log_link",
    "LikelihoodFacts",
    "likelihood_facts",
    "generic_facts",
    "NAMED_LIKELIHOODS",
    "is_masked",
    "masked",
    "expected_softplus",
    "GAUSS_HERMITE_POINTS",
    "TRAINING_GAUSS_HERMITE_POINTS",
]
