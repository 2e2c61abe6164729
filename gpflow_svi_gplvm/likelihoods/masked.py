r"""A likelihood that counts only the observed entries of Y (NaN marks "missing"), and the
likelihood of one entry inside it."""

from __future__ import annotations

import tensorflow as tf
from gpflow.likelihoods import Likelihood, ScalarLikelihood

__all__ = ["MaskedLikelihood", "base_likelihood"]


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


def base_likelihood(likelihood: Likelihood) -> Likelihood:
    """The likelihood of one entry: the wrapped one of a :class:`MaskedLikelihood`, else
    ``likelihood`` itself."""
    return likelihood.base if isinstance(likelihood, MaskedLikelihood) else likelihood
