r"""Negative binomial counts with a dispersion per output (gene), and the Gauss-Hermite rules
their expectations take."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import inherit_check_shapes
from gpflow.base import Parameter
from gpflow.config import default_float
from gpflow.likelihoods import ScalarLikelihood
from gpflow.utilities import positive

from ..validation import check_integer

__all__ = [
    "GAUSS_HERMITE_POINTS",
    "TRAINING_GAUSS_HERMITE_POINTS",
    "NegativeBinomial",
    "expected_softplus",
]

GAUSS_HERMITE_POINTS = 20
"""Points of the Gauss-Hermite rule of :class:`NegativeBinomial`'s predictive density."""
TRAINING_GAUSS_HERMITE_POINTS = 4
"""Points of :class:`NegativeBinomial`'s variational expectation by default: the fewest whose
minibatch ELBO stays close to a 100-point rule's on single-cell counts, from initialisation
(where q(f) is widest) on (measured by ``benchmarks/count_step.py``)."""


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
