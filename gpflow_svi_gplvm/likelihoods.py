r"""Likelihoods for data with missing entries, counts with overdispersion, and checks that data
lie in a likelihood's support.

Counts are modelled on the log scale: the rate of entry (n, d) is :math:`\exp(f_d(x_n))`, and a
per-row size factor :math:`s_n` (library size) enters as the offset :math:`\log s_n` of f (see
:class:`~gpflow_svi_gplvm.components.covariates.SizeFactorOffset`), so that the rate is
:math:`s_n \exp(f)`. GPflow's :class:`~gpflow.likelihoods.Poisson` (log link, closed-form
variational expectations) and :class:`NegativeBinomial` both take that offset.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import inherit_check_shapes
from gpflow.base import Parameter
from gpflow.config import default_float
from gpflow.likelihoods import Bernoulli, Gaussian, Likelihood, Poisson, ScalarLikelihood
from gpflow.utilities import positive

from .defaults import LIKELIHOOD_NAMES
from .rows.sparse import row_blocks
from .validation import check_integer

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
]

GAUSS_HERMITE_POINTS = 20
"""Points of the Gauss-Hermite rule of :class:`NegativeBinomial`'s predictive density."""
TRAINING_GAUSS_HERMITE_POINTS = 4
"""Points of :class:`NegativeBinomial`'s variational expectation by default: the fewest whose
minibatch ELBO stays close to a 100-point rule's on single-cell counts, from initialisation
(where q(f) is widest) on (measured by ``benchmarks/count_step.py``)."""


def likelihood_by_name(name: str, num_outputs: int) -> Likelihood | None:
    """The likelihood ``name`` (one of :data:`~gpflow_svi_gplvm.defaults.LIKELIHOOD_NAMES`) of
    ``num_outputs`` outputs: GPflow's defaults, the package's negative binomial with a dispersion
    per output; None for "gaussian", the model's default Gaussian (which starts from the data's
    variance)."""
    if name not in LIKELIHOOD_NAMES:
        raise ValueError(f"likelihood must be one of {LIKELIHOOD_NAMES}, got {name!r}.")
    if name == "negative_binomial":
        return NegativeBinomial(num_outputs=num_outputs)
    if name == "poisson":
        return Poisson()
    return Bernoulli() if name == "bernoulli" else None


class MaskedLikelihood(Likelihood):
    r"""Wraps a scalar likelihood so that only observed entries of Y count; NaN marks "missing".

    For a row y [..., D] with observed set O the variational expectation is

    .. math::

        \sum_{d \in O} E_{q(f_d)}[\log p(y_d \mid f_d)]

    and likewise for ``log_prob`` and ``predict_log_density``. Missing entries are replaced by
    ``fill_value`` *before* any arithmetic, then their per-entry terms are masked out, so
    gradients stay finite. ``fill_value`` must lie in the support of the base likelihood (0 suits
    Gaussian, Poisson, Bernoulli, StudentT). Predictions of Y delegate to ``base``.
    """

    def __init__(self, base: Likelihood, fill_value: float = 0.0):
        unwrapped = base_likelihood(base)
        if not isinstance(unwrapped, ScalarLikelihood):
            raise ValueError(
                f"MaskedLikelihood wraps a gpflow ScalarLikelihood (one output per f), got "
                f"{type(unwrapped).__name__}."
            )
        super().__init__(input_dim=None, latent_dim=None, observation_dim=None)
        self.base: ScalarLikelihood = unwrapped
        self.fill_value = fill_value

    def _masked_terms(self, method, X, F1, F2, Y) -> tf.Tensor:
        """method(X, F1_d, F2_d, y_d) per entry [..., D] (via a trailing axis), zero where y_d is
        missing."""
        observed = tf.logical_not(tf.math.is_nan(Y))
        filled = tf.where(observed, Y, tf.cast(self.fill_value, Y.dtype))
        args = [X[..., None, :], F1[..., None]]
        if F2 is not None:
            args.append(F2[..., None])
        terms = method(*args, filled[..., None])  # [..., D]
        return tf.where(observed, terms, tf.zeros_like(terms))

    def _masked_sum(self, method, X, F1, F2, Y) -> tf.Tensor:
        """sum over observed d of method(X, F1_d, F2_d, y_d)."""
        return tf.reduce_sum(self._masked_terms(method, X, F1, F2, Y), axis=-1)

    def entry_log_densities(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        """log int p(y_d | f_d) N(f_d | Fmu_d, Fvar_d) df_d per entry [..., D], zero where y_d
        is missing: the base likelihood's ``predict_log_density`` (closed form where it has one,
        Gauss-Hermite quadrature otherwise), one entry at a time."""
        return self._masked_terms(self.base.predict_log_density, X, Fmu, Fvar, Y)

    def entry_expectations(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        r""":math:`E_{N(f_d \mid Fmu_d, Fvar_d)} \log p(y_d \mid f_d)` per entry [..., D], zero
        where y_d is missing."""
        return self._masked_terms(self.base.variational_expectations, X, Fmu, Fvar, Y)

    def _log_prob(self, X, F, Y) -> tf.Tensor:
        return self._masked_sum(self.base.log_prob, X, F, None, Y)

    def _variational_expectations(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        return self._masked_sum(self.base.variational_expectations, X, Fmu, Fvar, Y)

    def _predict_log_density(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        return self._masked_sum(self.base.predict_log_density, X, Fmu, Fvar, Y)

    def _predict_mean_and_var(self, X, Fmu, Fvar) -> tuple[tf.Tensor, tf.Tensor]:
        return self.base.predict_mean_and_var(X, Fmu, Fvar)

    def _conditional_mean(self, X, F) -> tf.Tensor:
        return self.base.conditional_mean(X, F)

    def _conditional_variance(self, X, F) -> tf.Tensor:
        return self.base.conditional_variance(X, F)


class NegativeBinomial(ScalarLikelihood):
    r"""Negative binomial counts with mean :math:`\mu = e^f` and a dispersion :math:`\phi_d` per
    output (gene): :math:`\mathrm{Var}[y] = \mu + \phi_d \mu^2` (:math:`\phi \to 0` is Poisson),

    .. math::

        \log p(y \mid f) = \log\Gamma(y + r) - \log\Gamma(r) - \log\Gamma(y + 1)
        + y\, l - (y + r)\, \mathrm{softplus}(l), \qquad r = 1 / \phi_d,\ l = f - \log r,

    TFP's ``NegativeBinomial(total_count=r, logits=l)``. Its variational expectation is closed
    form except :math:`E_{q(f)}[\mathrm{softplus}(l)]`, a smooth one-dimensional integral taken by
    Gauss-Hermite quadrature of ``num_gauss_hermite_points`` points (:func:`expected_softplus`;
    the training step's cost grows with them); the log-gamma terms are taken at the non-zero
    counts only. ``predict_log_density`` integrates the whole density by a rule of
    :data:`GAUSS_HERMITE_POINTS` points, and the predictive moments are closed form:
    :math:`E[y] = e^{m + v/2}`, :math:`\mathrm{Var}[y] = E[y] + (1 + \phi) e^{2m + 2v} - E[y]^2`.

    ``dispersion``: the starting :math:`\phi` (trained, positive); ``num_outputs`` D gives one
    per output ([D]), None one for all. Inside :class:`MaskedLikelihood` the outputs come with a
    trailing axis of one, which the per-output dispersion follows.
    """

    def __init__(
        self,
        dispersion: float = 0.1,
        num_outputs: int | None = None,
        num_gauss_hermite_points: int = TRAINING_GAUSS_HERMITE_POINTS,
    ) -> None:
        super().__init__()
        if not (np.isfinite(dispersion) and dispersion > 0):
            raise ValueError(f"dispersion must be a positive number, got {dispersion!r}.")
        self.num_gauss_hermite_points = check_integer(
            num_gauss_hermite_points, "num_gauss_hermite_points"
        )
        shape = () if num_outputs is None else (int(num_outputs),)
        self.num_outputs = num_outputs
        self.dispersion = Parameter(
            np.full(shape, dispersion), transform=positive(), dtype=default_float()
        )

    def _total_count(self, F: tf.Tensor) -> tf.Tensor:
        """r = 1 / phi, shaped to broadcast against F: [D] for F [..., D], [D, 1] for the
        per-entry F [..., D, 1] of a masked likelihood."""
        r = 1.0 / tf.convert_to_tensor(self.dispersion)
        if self.num_outputs is None or self.num_outputs == 1 or F.shape[-1] == self.num_outputs:
            return r
        return r[:, None]

    def _distribution(self, F: tf.Tensor) -> tfp.distributions.NegativeBinomial:
        r = self._total_count(F)
        return tfp.distributions.NegativeBinomial(total_count=r, logits=F - tf.math.log(r))

    @inherit_check_shapes
    def _scalar_log_prob(self, X, F, Y) -> tf.Tensor:
        return self._distribution(F).log_prob(Y)

    @inherit_check_shapes
    def _conditional_mean(self, X, F) -> tf.Tensor:
        return tf.exp(F)

    @inherit_check_shapes
    def _conditional_variance(self, X, F) -> tf.Tensor:
        return tf.exp(F) + tf.exp(2.0 * F) / self._total_count(F)

    @inherit_check_shapes
    def _variational_expectations(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        r = self._total_count(Fmu)
        logits = Fmu - tf.math.log(r)
        softplus = expected_softplus(logits, Fvar, self.num_gauss_hermite_points)
        terms = Y * logits - (Y + r) * softplus
        return tf.reduce_sum(terms, axis=-1) + _log_binomial_coefficients(Y, r)

    @inherit_check_shapes
    def _predict_log_density(self, X, Fmu, Fvar, Y) -> tf.Tensor:
        points, log_weights = _hermite_rule(Fmu.dtype, GAUSS_HERMITE_POINTS)
        f = _nodes(points, Fmu, Fvar)
        log_probs = self._distribution(f).log_prob(Y) + _expand(log_weights, Fmu)
        return tf.reduce_sum(tf.reduce_logsumexp(log_probs, axis=0), axis=-1)

    @inherit_check_shapes
    def _predict_mean_and_var(self, X, Fmu, Fvar) -> tuple[tf.Tensor, tf.Tensor]:
        mean = tf.exp(Fmu + Fvar / 2.0)
        second = tf.exp(2.0 * Fmu + 2.0 * Fvar) * (1.0 + 1.0 / self._total_count(Fmu))
        return mean, mean + second - tf.square(mean)


def _hermite_rule(dtype: tf.DType, num_points: int) -> tuple[tf.Tensor, tf.Tensor]:
    """Gauss-Hermite points t_k [K] and log weights [K] for E_{N(0,1)}: t = sqrt(2) x_k,
    w = w_k / sqrt(pi)."""
    points, weights = np.polynomial.hermite.hermgauss(num_points)
    return (
        tf.constant(np.sqrt(2.0) * points, dtype),
        tf.constant(np.log(weights / np.sqrt(np.pi)), dtype),
    )


def _expand(values: tf.Tensor, like: tf.Tensor) -> tf.Tensor:
    """values [K] as [K, 1, ..., 1], to broadcast against [K, *like.shape]."""
    return tf.reshape(values, tf.concat([[-1], tf.ones_like(tf.shape(like))], axis=0))


def _nodes(points: tf.Tensor, Fmu: tf.Tensor, Fvar: tf.Tensor) -> tf.Tensor:
    """The quadrature nodes of q(f) = N(Fmu, Fvar): [K, ...Fmu's shape]."""
    return Fmu[None] + tf.sqrt(Fvar)[None] * _expand(points, Fmu)


def expected_softplus(mean: tf.Tensor, variance: tf.Tensor, num_points: int) -> tf.Tensor:
    r""":math:`E_{N(f \mid m, v)}[\mathrm{softplus}(f)]` elementwise (``mean`` and ``variance`` of
    one shape) by a ``num_points`` Gauss-Hermite rule, its symmetric nodes :math:`m \pm o_k` in
    pairs: with :math:`A = e^{-|m|}` and :math:`c_k = 2\cosh o_k` (an odd rule's middle node a
    half-weight pair at :math:`o = 0`),

    .. math::

        \mathrm{softplus}(m + o) + \mathrm{softplus}(m - o)
        = 2\,\mathrm{relu}(m) + \log(1 + A (c + A)),

    one logarithm per pair instead of two softplus (about 2/3 the step's time at 4 points).

    The gradients are the same rule's values of the expectation's own derivatives (Bonnet's and
    Price's theorems): :math:`\partial_m = E[\sigma(f)]`,
    :math:`\partial_v = E[\sigma'(f)] / 2`, finite at v = 0 where the rule's derivative in v is
    not; they differ from the rule's derivatives by the rule's error. The backward pass
    recomputes the pairs from the inputs, so that second derivatives (Newton steps) are right.
    """

    @tf.custom_gradient
    def expectation(mean: tf.Tensor, variance: tf.Tensor):
        pairs, A = _hermite_pairs(mean, variance, num_points)
        logs = [w * tf.math.log1p(A * (c + A)) for w, c in pairs]
        value = tf.nn.relu(mean) + tf.add_n(logs)

        def gradient(upstream: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
            pairs, A = _hermite_pairs(mean, variance, num_points)
            below, slope = [], []  # sigma(m + o) + sigma(m - o) at m < 0; sigma' of the pair
            for w, c in pairs:
                q = 1.0 + A * (c + A)
                below.append(w * A * (c + 2.0 * A) / q)
                slope.append(w * A * (c * (1.0 + A * A) + 4.0 * A) / q / q)  # q^2 may overflow
            below_sum = tf.add_n(below)  # sigma is odd about 1/2: 1 - that sum at m >= 0
            d_mean = tf.where(mean >= 0.0, 1.0 - below_sum, below_sum)
            return upstream * d_mean, 0.5 * upstream * tf.add_n(slope)

        return value, gradient

    return expectation(mean, variance)


def _hermite_pairs(
    mean: tf.Tensor, variance: tf.Tensor, num_points: int
) -> tuple[list[tuple[float, tf.Tensor | float]], tf.Tensor]:
    """The pairs (w_k, 2 cosh(sqrt(v) t_k)) of a Gauss-Hermite rule's symmetric nodes for
    E_{N(m, v)}, an odd rule's middle node as (w / 2, 2), and A = exp(-|m|); each tensor of m's
    shape (separate tensors: a stacked [K, ...] one costs a broadcast in every operation)."""
    points, weights = np.polynomial.hermite.hermgauss(num_points)
    points, weights = np.sqrt(2.0) * points, weights / np.sqrt(np.pi)
    half = num_points // 2  # the points are sorted and symmetric about 0
    pairs: list[tuple[float, tf.Tensor | float]] = [
        (float(w) / 2.0, 2.0) for w in weights[half : num_points - half]
    ]
    scale = tf.sqrt(variance)
    for t, w in zip(points[num_points - half :], weights[num_points - half :]):
        growth = tf.exp(scale * float(t))  # overflows only where v t^2 > 709^2
        pairs.append((float(w), growth + 1.0 / growth))
    return pairs, tf.exp(-tf.abs(mean))


def _log_binomial_coefficients(Y: tf.Tensor, r: tf.Tensor) -> tf.Tensor:
    r""":math:`\sum_d \log\Gamma(y_d + r_d) - \log\Gamma(r_d) - \log\Gamma(y_d + 1)` over the
    last axis of Y [..., D] (r broadcasting against it: [], [D] or [D, 1] for Y [..., D, 1]),
    taken at the non-zero counts only: the term is 0 at y = 0, and most counts of single-cell
    data are zeros, while log-gamma and its gradient cost several times a softplus."""
    shape = tf.shape(Y, out_type=tf.int64)
    counts = tf.reshape(Y, [-1])  # flat: a 1-D gather is cheaper than gather_nd
    at = tf.where(counts > 0.0)[:, 0]  # [E]
    counts = tf.gather(counts, at)
    r = tf.reshape(r, [-1])  # the output axis has stride 1 in Y, whose last axis is D or 1
    r_at = r[0] if r.shape[0] == 1 else tf.gather(r, at % tf.size(r, out_type=tf.int64))
    terms = tf.math.lgamma(counts + r_at) - tf.math.lgamma(r_at) - tf.math.lgamma(counts + 1.0)
    sums = tf.math.unsorted_segment_sum(terms, at // shape[-1], tf.reduce_prod(shape[:-1]))
    return tf.reshape(sums, shape[:-1])


class ExpectationDerivatives(NamedTuple):
    r""":math:`\ell = E_{N(f \mid m, v)} \log p(y \mid f)` per entry [..., D] up to a term of y
    alone (``value``) and its derivatives in the mean m and variance v: first (``mean``,
    ``variance``) and second (``mean_mean``, ``mean_variance``, ``variance_variance``)."""

    value: tf.Tensor
    mean: tf.Tensor
    variance: tf.Tensor
    mean_mean: tf.Tensor
    mean_variance: tf.Tensor
    variance_variance: tf.Tensor


def expectation_derivatives(
    likelihood: Likelihood, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    r"""Each entry's variational expectation under :math:`q(f) = N(m, v)` (``mean``,
    ``variance`` [..., D]) and its first and second derivatives, zero where Y is NaN.

    In closed form for a Gaussian, a Poisson with the exp link (with :math:`e = b\, e^{m + v/2}`:
    :math:`\ell = y m - e`, :math:`\ell_m = y - e`, :math:`\ell_v = \ell_{mv} = -e/2`,
    :math:`\ell_{mm} = -e`, :math:`\ell_{vv} = -e/4`) and :class:`NegativeBinomial` (by its own
    Gauss-Hermite rule, with :math:`\sigma` the logistic function at its nodes and Price's
    theorem, :math:`\partial_v E g = E g'' / 2`: :math:`\ell = y l - (y + r) E\,\mathrm{softplus}`,
    :math:`\ell_m = y - (y + r) E\sigma`, :math:`\ell_{mm} = 2 \ell_v = -(y + r) E\sigma'`,
    :math:`\ell_{mv} = -(y + r) E\sigma'' / 2`, :math:`\ell_{vv} = -(y + r) E\sigma^{(3)} / 4`),
    each ``value`` without its terms of y alone (log-gamma, normalising constants); other
    likelihoods by automatic differentiation, with the whole value."""
    observed = tf.logical_not(tf.math.is_nan(Y))
    base = base_likelihood(likelihood)
    filled = tf.where(observed, Y, tf.zeros_like(Y))
    if isinstance(base, NegativeBinomial):
        found = _negative_binomial_derivatives(base, filled, mean, variance)
    elif isinstance(base, Poisson) and base.invlink is tf.exp:
        rate = tf.exp(mean + variance / 2.0) * tf.cast(base.binsize, mean.dtype)
        found = ExpectationDerivatives(
            filled * mean - rate, filled - rate, -rate / 2, -rate, -rate / 2, -rate / 4
        )
    elif isinstance(base, Gaussian):
        precision = tf.ones_like(mean) / tf.cast(base.variance, mean.dtype)
        zeros = tf.zeros_like(mean)
        residual = filled - mean
        found = ExpectationDerivatives(
            -0.5 * (tf.square(residual) + variance) * precision,
            residual * precision,
            -precision / 2,
            -precision,
            zeros,
            zeros,
        )
    else:
        found = _automatic_derivatives(MaskedLikelihood(base), Y, mean, variance)
    mask = tf.cast(observed, mean.dtype)
    return ExpectationDerivatives(*(d * mask for d in found))


def _negative_binomial_derivatives(
    likelihood: NegativeBinomial, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    r = tf.cast(likelihood._total_count(mean), mean.dtype)
    logits = mean - tf.math.log(r)
    points, weights = np.polynomial.hermite.hermgauss(likelihood.num_gauss_hermite_points)
    scale = tf.sqrt(variance)
    # E of softplus, sigma and sigma's three derivatives at the nodes
    moments = [tf.zeros_like(mean) for _ in range(5)]
    for t, w in zip(np.sqrt(2.0) * points, weights / np.sqrt(np.pi)):
        node = logits + scale * float(t)
        small = tf.exp(-tf.abs(node))  # e^{-|z|}: neither overflows
        s = tf.where(node >= 0.0, tf.ones_like(small), small) / (1.0 + small)
        slope = s * (1.0 - s)
        terms = (
            tf.nn.relu(node) + tf.math.log1p(small),
            s,
            slope,
            slope * (1.0 - 2.0 * s),
            slope * (1.0 - 6.0 * s * (1.0 - s)),
        )
        moments = [m + float(w) * term for m, term in zip(moments, terms)]
    total = Y + r
    return ExpectationDerivatives(
        Y * logits - total * moments[0],
        Y - total * moments[1],
        -total * moments[2] / 2,
        -total * moments[2],
        -total * moments[3] / 2,
        -total * moments[4] / 4,
    )


def _automatic_derivatives(
    likelihood: MaskedLikelihood, Y: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
) -> ExpectationDerivatives:
    """:func:`expectation_derivatives` by differentiating the masked expectation's sum twice
    (each entry depends on its own mean and variance alone), in the model's precision."""
    low, high = mean.dtype, default_float()
    Y, mean, variance = (tf.cast(t, high) for t in (Y, mean, variance))
    X = tf.zeros_like(mean[..., :1])
    zero = tf.UnconnectedGradients.ZERO  # e.g. a Gaussian's value is linear in the variance
    with tf.GradientTape(persistent=True) as outer:
        outer.watch([mean, variance])
        with tf.GradientTape() as inner:
            inner.watch([mean, variance])
            value = likelihood.entry_expectations(X, mean, variance, Y)
            total = tf.reduce_sum(value)
        d_mean, d_var = inner.gradient(total, [mean, variance], unconnected_gradients=zero)
        first, second = tf.reduce_sum(d_mean), tf.reduce_sum(d_var)
    d_mm, d_mv = outer.gradient(first, [mean, variance], unconnected_gradients=zero)
    d_vv = outer.gradient(second, variance, unconnected_gradients=zero)
    del outer
    found = (value, d_mean, d_var, d_mm, d_mv, d_vv)
    return ExpectationDerivatives(*(tf.cast(t, low) for t in found))


def log_link(likelihood: Likelihood) -> bool:
    """Whether ``likelihood`` (masked or not) models counts with a log link (a Poisson with the
    exp inverse link, or :class:`NegativeBinomial`), so that a size factor is an offset of f."""
    base = base_likelihood(likelihood)
    return isinstance(base, NegativeBinomial) or (
        isinstance(base, Poisson) and base.invlink is tf.exp
    )


def base_likelihood(likelihood: Likelihood) -> Likelihood:
    """The likelihood of one entry: the wrapped one of a :class:`MaskedLikelihood`, else
    ``likelihood`` itself."""
    return likelihood.base if isinstance(likelihood, MaskedLikelihood) else likelihood


def check_likelihood_support(likelihood: Likelihood, Y: np.ndarray) -> None:
    """Raise ``ValueError`` when observed entries of Y lie outside the likelihood's support."""
    base = base_likelihood(likelihood)
    counts = isinstance(base, (Poisson, NegativeBinomial)) and all(
        _counts(block) for block in row_blocks(Y)
    )
    binary = isinstance(base, Bernoulli) and all(
        np.isin(block[~np.isnan(block)], (0.0, 1.0)).all() for block in row_blocks(Y)
    )
    check_support(likelihood, counts, binary)


def check_support(likelihood: Likelihood, counts: bool, binary: bool) -> None:
    """Raise ``ValueError`` when the data's observed entries, non-negative integers (``counts``)
    or not, 0 or 1 (``binary``) or not, lie outside the likelihood's support."""
    base = base_likelihood(likelihood)
    if isinstance(base, (Poisson, NegativeBinomial)) and not counts:
        raise ValueError(
            f"A {type(base).__name__} likelihood needs non-negative integer counts, but Y has "
            "negative or non-integer entries. Pass raw counts, or use a Gaussian likelihood "
            "for continuous data."
        )
    if isinstance(base, Bernoulli) and not binary:
        raise ValueError(
            "A Bernoulli likelihood needs binary data with entries 0 or 1, but Y has other "
            "values. Binarise Y first (e.g. Y > threshold), or use another likelihood."
        )


def _counts(block: np.ndarray) -> bool:
    """Are the observed entries of ``block`` non-negative integers?"""
    observed = block[~np.isnan(block)]
    return bool(np.all(observed >= 0) and np.all(observed == np.round(observed)))
