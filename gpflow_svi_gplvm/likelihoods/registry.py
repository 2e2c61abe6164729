r"""What differs between likelihoods, in one place: a record per likelihood type,
:class:`LikelihoodFacts`, dispatched by type as GPflow dispatches its conditionals and KL
divergences (``gpflow.utilities.Dispatcher``), and what the package reads from it: data checked
against the likelihood's support, its link, its expectation derivatives in closed form, the
likelihoods by name, and whether a likelihood is masked.

Facts are those of the likelihood of one entry: a :class:`~.masked.MaskedLikelihood` has its
base's. A likelihood of your own (e.g. GPflow's ``StudentT``) needs no entry: the generic facts
say that it takes any real data through a link the package does not read, that its derivatives
come by automatic differentiation and its predictive density by its own quadrature rule.
Registering facts for its class tells the package more, e.g. that it models counts with a log
link (so that size factors enter as an offset of f)::

    @likelihood_facts.register(MyCounts)
    def _(likelihood):
        return generic_facts(likelihood)._replace(support="counts", inverse_link="exp")
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from gpflow.base import Parameter
from gpflow.likelihoods import Bernoulli, Gaussian, Likelihood, MonteCarloLikelihood, Poisson
from gpflow.utilities import Dispatcher

from ..defaults import LIKELIHOOD_NAMES
from ..rows.sparse import row_blocks
from .derivatives import (
    ExpectationDerivatives,
    automatic_derivatives,
    gaussian_derivatives,
    negative_binomial_derivatives,
    poisson_derivatives,
)
from .masked import MaskedLikelihood, base_likelihood
from .negative_binomial import GAUSS_HERMITE_POINTS, NegativeBinomial

__all__ = [
    "LikelihoodFacts",
    "likelihood_facts",
    "generic_facts",
    "NAMED_LIKELIHOODS",
    "likelihood_by_name",
    "log_link",
    "is_masked",
    "masked",
    "check_likelihood_support",
    "check_support",
    "expectation_derivatives",
]

Derivatives = Callable[[tf.Tensor, tf.Tensor, tf.Tensor], ExpectationDerivatives]


class LikelihoodFacts(NamedTuple):
    """What the package needs to know of the likelihood of one entry."""

    support: str | None = None
    """The data it takes: "counts" (non-negative integers), "binary" (0 or 1), or None (any
    real number)."""
    inverse_link: str | None = None
    """How :math:`E[y \\mid f]` follows from f: "exp" (a log link: counts, whose size factors
    enter as an offset of f), "identity" (f on the data's scale), or None (a link the package
    does not read)."""
    exposure: float = 1.0
    """The rate's factor under a log link (a Poisson's ``binsize``): :math:`b\\, e^f`."""
    noise_variance: Parameter | None = None
    """A Gaussian's one noise variance [] (None where it varies with the input): the closed-form
    data term and the exact posterior check need it."""
    conjugate: bool = False
    """Whether q(u)'s natural-gradient step is exact (a Gaussian likelihood): training then
    takes natural-gradient steps on q(u) unless told otherwise."""
    deterministic: bool = True
    """Whether its variational expectation is deterministic (closed form or quadrature), not a
    Monte Carlo estimate (a posterior check by HMC needs a deterministic density)."""
    predictive_nodes: int = GAUSS_HERMITE_POINTS
    """The nodes at which each entry's predictive density is evaluated (1 in closed form): the
    held-out likelihood scores rows in chunks by them."""
    outputs: int | None = None
    """The outputs D it holds parameters for (a dispersion per output), None if shared."""
    derivatives: Derivatives | None = None
    """Its :func:`expectation_derivatives` in closed form, ``(Y, mean, variance)`` with Y's
    missing entries filled; None: by automatic differentiation."""


likelihood_facts = Dispatcher("likelihood_facts")
"""``likelihood_facts(likelihood)``: the :class:`LikelihoodFacts` of ``likelihood``'s type (its
base's for a :class:`~.masked.MaskedLikelihood`); register a function of the likelihood for a
type of your own."""


@likelihood_facts.register(Likelihood)
def generic_facts(likelihood: Likelihood) -> LikelihoodFacts:
    """Any likelihood's: what it tells of itself (its quadrature rule's nodes, its outputs), the
    defaults of :class:`LikelihoodFacts` otherwise; each registered type starts from these."""
    quadrature = getattr(likelihood, "quadrature", None)
    return LikelihoodFacts(
        predictive_nodes=int(getattr(quadrature, "n_gh", GAUSS_HERMITE_POINTS)),
        outputs=getattr(likelihood, "num_outputs", None),
    )


@likelihood_facts.register(MaskedLikelihood)
def _masked_facts(likelihood: MaskedLikelihood) -> LikelihoodFacts:
    return likelihood_facts(likelihood.base)


@likelihood_facts.register(MonteCarloLikelihood)
def _monte_carlo_facts(likelihood: MonteCarloLikelihood) -> LikelihoodFacts:
    return generic_facts(likelihood)._replace(deterministic=False)


@likelihood_facts.register(Gaussian)
def _gaussian_facts(likelihood: Gaussian) -> LikelihoodFacts:
    variance = likelihood.variance  # None, a Parameter, or a function of the input
    one_variance = isinstance(variance, Parameter) and variance.shape.rank == 0
    return generic_facts(likelihood)._replace(
        inverse_link="identity",
        noise_variance=variance if one_variance else None,
        conjugate=True,
        predictive_nodes=1,
        derivatives=partial(gaussian_derivatives, likelihood),
    )


@likelihood_facts.register(Poisson)
def _poisson_facts(likelihood: Poisson) -> LikelihoodFacts:
    facts = generic_facts(likelihood)._replace(support="counts")
    if likelihood.invlink is not tf.exp:
        return facts
    return facts._replace(
        inverse_link="exp",
        exposure=float(likelihood.binsize),
        derivatives=partial(poisson_derivatives, likelihood),
    )


@likelihood_facts.register(NegativeBinomial)
def _negative_binomial_facts(likelihood: NegativeBinomial) -> LikelihoodFacts:
    return generic_facts(likelihood)._replace(
        support="counts",
        inverse_link="exp",
        predictive_nodes=GAUSS_HERMITE_POINTS,
        derivatives=partial(negative_binomial_derivatives, likelihood),
    )


@likelihood_facts.register(Bernoulli)
def _bernoulli_facts(likelihood: Bernoulli) -> LikelihoodFacts:
    return generic_facts(likelihood)._replace(support="binary")


NAMED_LIKELIHOODS: dict[str, Callable[[int], Likelihood | None]] = {
    "bernoulli": lambda num_outputs: Bernoulli(),
    "gaussian": lambda num_outputs: None,
    "negative_binomial": lambda num_outputs: NegativeBinomial(num_outputs=num_outputs),
    "poisson": lambda num_outputs: Poisson(),
}
"""The likelihoods by name (the keys: :data:`~gpflow_svi_gplvm.defaults.LIKELIHOOD_NAMES`, which
the command line reads before TensorFlow loads), each a function of the number of outputs."""


def likelihood_by_name(name: str, num_outputs: int) -> Likelihood | None:
    """The likelihood ``name`` (one of :data:`~gpflow_svi_gplvm.defaults.LIKELIHOOD_NAMES`) of
    ``num_outputs`` outputs: GPflow's defaults, the package's negative binomial with a dispersion
    per output; None for "gaussian", the model's default Gaussian (which starts from the data's
    variance)."""
    if name not in NAMED_LIKELIHOODS:
        raise ValueError(f"likelihood must be one of {LIKELIHOOD_NAMES}, got {name!r}.")
    return NAMED_LIKELIHOODS[name](num_outputs)


def log_link(likelihood: Likelihood) -> bool:
    """Whether ``likelihood`` (masked or not) models counts with a log link (a Poisson with the
    exp inverse link, or :class:`~.negative_binomial.NegativeBinomial`), so that a size factor
    is an offset of f."""
    return likelihood_facts(likelihood).inverse_link == "exp"


def is_masked(likelihood: Likelihood) -> bool:
    """Whether ``likelihood`` counts only observed entries (a :class:`~.masked.MaskedLikelihood`),
    as data with missing entries need."""
    return isinstance(likelihood, MaskedLikelihood)


def masked(likelihood: Likelihood) -> MaskedLikelihood:
    """``likelihood`` as a :class:`~.masked.MaskedLikelihood`: itself if it is one, else
    wrapped."""
    return likelihood if isinstance(likelihood, MaskedLikelihood) else MaskedLikelihood(likelihood)


def check_likelihood_support(likelihood: Likelihood, Y: np.ndarray) -> None:
    """Raise ``ValueError`` when observed entries of Y lie outside the likelihood's support."""
    support = likelihood_facts(likelihood).support
    counts = support == "counts" and all(_counts(block) for block in row_blocks(Y))
    binary = support == "binary" and all(
        np.isin(block[~np.isnan(block)], (0.0, 1.0)).all() for block in row_blocks(Y)
    )
    check_support(likelihood, counts, binary)


def check_support(likelihood: Likelihood, counts: bool, binary: bool) -> None:
    """Raise ``ValueError`` when the data's observed entries, non-negative integers (``counts``)
    or not, 0 or 1 (``binary``) or not, lie outside the likelihood's support."""
    support = likelihood_facts(likelihood).support
    name = type(base_likelihood(likelihood)).__name__
    if support == "counts" and not counts:
        raise ValueError(
            f"A {name} likelihood needs non-negative integer counts, but Y has negative or "
            "non-integer entries. Pass raw counts, or use a Gaussian likelihood for continuous "
            "data."
        )
    if support == "binary" and not binary:
        raise ValueError(
            f"A {name} likelihood needs binary data with entries 0 or 1, but Y has other "
            "values. Binarise Y first (e.g. Y > threshold), or use another likelihood."
        )


def _counts(block: np.ndarray) -> bool:
    """Are the observed entries of ``block`` non-negative integers?"""
    observed = block[~np.isnan(block)]
    return bool(np.all(observed >= 0) and np.all(observed == np.round(observed)))


def expectation_derivatives(
    likelihood: Likelihood, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    r"""Each entry's variational expectation under :math:`q(f) = N(m, v)` (``mean``,
    ``variance`` [..., D]) and its first and second derivatives, zero where Y is NaN: in closed
    form for a Gaussian, a Poisson with the exp link and
    :class:`~.negative_binomial.NegativeBinomial` (:mod:`~.derivatives`; each ``value`` without
    its terms of y alone), by automatic differentiation for other likelihoods (the whole
    value)."""
    observed = tf.logical_not(tf.math.is_nan(Y))
    closed_form = likelihood_facts(likelihood).derivatives
    if closed_form is None:
        found = automatic_derivatives(
            MaskedLikelihood(base_likelihood(likelihood)), Y, mean, variance
        )
    else:
        found = closed_form(tf.where(observed, Y, tf.zeros_like(Y)), mean, variance)
    mask = tf.cast(observed, mean.dtype)
    return ExpectationDerivatives(*(d * mask for d in found))
