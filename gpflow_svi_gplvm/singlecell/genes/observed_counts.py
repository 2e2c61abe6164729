r"""The counts term: a group's observed counts entering the posterior of its expression, with the
GP as the baseline, so that a change the embedding does not carry is still seen.

The GP gives each cell n of a group g its expected count :math:`\lambda_n` and its normalised
expression :math:`h_n` (:mod:`.group_expression`); the group's expression is
:math:`\theta_g = H_g \kappa_g`, with :math:`H_g` the mean of :math:`h_n` over the group's cells
(its Bayesian bootstrap draws) and :math:`\kappa_g` the group's departure from the GP, the same
for every cell of the group: the counts are

.. math::

    y_n \sim \text{quasi-Poisson}\big(\text{mean } \kappa_g \lambda_n,\
    \text{variance } \phi\, \kappa_g \lambda_n\big),

whose likelihood in :math:`\kappa_g` is, up to a constant, the Gamma kernel
:math:`\kappa^{Y_g/\phi} e^{-\kappa \Lambda_g / \phi}` (:math:`Y_g = \sum_n y_n`,
:math:`\Lambda_g = \sum_n \lambda_n`). :math:`\phi \ge 1` is the genes' overdispersion beyond
the GP, pooled over the two groups (under no change both groups are one population) and robust
to a few cells with many counts:

.. math::

    \phi = \max\Big(1,\ \frac{\sum_{g} \sum_{n \in g} (y_n - \hat\kappa_g \lambda_n)^2}
    {\sum_g Y_g}\Big), \qquad \hat\kappa_g = Y_g / \Lambda_g,

the sandwich variance of the groups' totals over the Poisson variance (a count is worth
:math:`1/\phi` of a Poisson count). The prior of :math:`\theta_g` is worth ``prior_counts``
:math:`a` Poisson counts at the two groups' pooled expression
:math:`\theta_0 = (Y_1 + Y_2) / (\Lambda_1 / \bar H_1 + \Lambda_2 / \bar H_2)`, the value
under no change: this is the low-expression rule, a gene of a few counts is pulled towards no
change (edgeR's prior count, and scVI's pseudocounts, do the same). The posterior, conjugate,
is

.. math::

    \kappa_g \mid y \sim \mathrm{Gamma}\Big(a + \frac{Y_g}{\phi},\
    \frac{a H_g}{\theta_0} + \frac{\Lambda_g}{\phi}\Big), \qquad \theta_g = H_g \kappa_g,

drawn once for each bootstrap draw of :math:`H_g`. With many counts
:math:`\theta_g \approx H_g Y_g / \Lambda_g`: the GP's batch-corrected expression times the
group's observed over its expected counts (a model-assisted ratio estimator); with few,
:math:`\theta_g \to \theta_0` whatever the GP extrapolates. A gene without a count in either
group has no change (both :math:`\theta` equal).
"""

from __future__ import annotations

import numpy as np

from .group_expression import GroupSums

__all__ = ["PRIOR_COUNTS", "expression_draws", "pooled_dispersion"]

PRIOR_COUNTS = 2.0
"""The counts the prior of a group's expression is worth, at the two groups' pooled expression
(edgeR's default ``prior.count`` for log counts per million is 2)."""


def pooled_dispersion(first: GroupSums, second: GroupSums) -> np.ndarray:
    """:math:`\\phi` [G] of the two groups (see the module)."""
    squares = np.zeros(np.shape(first.counts))
    for group in (first, second):
        ratio = group.counts / np.maximum(group.expected, 1e-300)
        squares += (
            group.counts_squared - 2.0 * ratio * group.cross + ratio**2 * group.expected_squared
        )  # sum of (y - ratio * lambda)^2 over the group's cells
    total = first.counts + second.counts
    return np.maximum(np.where(total > 0, squares / np.maximum(total, 1e-300), 1.0), 1.0)


def expression_draws(
    first: GroupSums,
    second: GroupSums,
    counts: bool,
    prior_counts: float,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Draws [S, G] of the two groups' expression :math:`\\theta_1, \\theta_2`: the bootstrap
    draws of :math:`H_g` alone without ``counts``, else with the counts term (see the module)."""
    draws = [first.resampled_means(), second.resampled_means()]
    if not counts:
        return draws[0], draws[1]
    dispersion = pooled_dispersion(first, second)
    groups = (first, second)
    exposure = sum(g.expected / np.maximum(g.mean_normalised, 1e-300) for g in groups)
    pooled = (first.counts + second.counts) / exposure
    counted = pooled > 0
    safe = np.where(counted, pooled, 1.0)
    out = []
    for group, H in zip(groups, draws):
        shape = prior_counts + group.counts / dispersion
        rate = prior_counts * H / safe + group.expected / dispersion
        theta = H * rng.gamma(np.broadcast_to(shape, H.shape)) / rate
        out.append(np.where(counted, theta, 1.0))  # no count in either group: no change
    return out[0], out[1]
