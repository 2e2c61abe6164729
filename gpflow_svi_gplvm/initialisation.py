"""Initial values: latents from NaN-aware PCA (or the prior), inducing inputs from the latents."""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf
from gpflow.likelihoods import Gaussian, Likelihood, Poisson

from .likelihoods import MaskedLikelihood

__all__ = ["pca_latents", "random_latents", "inducing_inputs", "initial_offset"]


def pca_latents(Y: np.ndarray, latent_dim: int, seed: int = 0) -> np.ndarray:
    """Principal-component scores [N, Q] of Y [N, D] with NaNs imputed by their column means.

    X = (Y_imputed - mean) V_Q / sd_1, where V_Q holds the leading Q right singular vectors and sd_1
    is the standard deviation of the first score, so the first dimension has unit variance like
    the N(0, I) prior and the others keep their relative scale. Dimensions beyond the rank of Y
    are filled with small noise (sd 0.01), so that no two latent dimensions start identical.
    """
    Y = np.asarray(Y, dtype=float)
    # A column with nothing observed has no mean: centre it at 0 (it carries no information).
    observed_counts = np.sum(~np.isnan(Y), axis=0)
    column_means = np.nansum(Y, axis=0) / np.maximum(observed_counts, 1)
    centred = np.where(np.isnan(Y), column_means, Y) - column_means
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    scores = centred @ vt[:latent_dim].T
    scale = scores[:, 0].std()
    scores = scores / (scale if scale > 0 else 1.0)
    missing = latent_dim - scores.shape[1]
    if missing > 0:
        noise = 0.01 * np.random.default_rng(seed).standard_normal((Y.shape[0], missing))
        scores = np.concatenate([scores, noise], axis=1)
    return scores


def random_latents(num_data: int, latent_dim: int, seed: int = 0) -> np.ndarray:
    """Draws [N, Q] from the prior N(0, I), as the paper initialises."""
    return np.random.default_rng(seed).standard_normal((num_data, latent_dim))


def inducing_inputs(latents: np.ndarray, num_inducing: int, seed: int = 0) -> np.ndarray:
    """M distinct rows of the initial latents [N, Q], chosen at random, as inducing inputs Z."""
    rng = np.random.default_rng(seed)
    rows = rng.choice(latents.shape[0], size=num_inducing, replace=False)
    return np.array(latents[rows], dtype=float)


def initial_offset(likelihood: Likelihood, Y: np.ndarray) -> np.ndarray:
    """A per-output constant [D] for the mean function so that f starts at the data's level.

    Gaussian: the observed column means. Poisson with the exp link: their logs. Other
    likelihoods: zeros (the offset is trained either way; this only shortens the start).
    """
    base = likelihood.base if isinstance(likelihood, MaskedLikelihood) else likelihood
    with warnings.catch_warnings():
        # A column with no observed entry has no mean (and gets 0); the model warns about it.
        warnings.simplefilter("ignore", RuntimeWarning)
        means = np.nan_to_num(np.nanmean(Y, axis=0))
    if isinstance(base, Gaussian):
        return means
    if isinstance(base, Poisson) and base.invlink is tf.exp:
        return np.log(np.maximum(means, 1e-3) / float(base.binsize))
    return np.zeros_like(means)
