"""Builders the test files share: small data sets of each likelihood's kind, the likelihoods by
name, tiny models with q(u) away from its prior, and the checks of loss and gradients that the
masked-data tests (likelihoods, latents) make.

Every builder is deterministic in its ``seed``: the same call gives the same arrays.
"""

from __future__ import annotations

import contextlib
import re
import warnings

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from gpflow.config import default_float

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM, MaskedLikelihood

# The masked-data tests' sizes: rows, columns, latent dimensions, inducing points.
N, D, Q, M = 10, 4, 2, 3
TOL = 1e-12
# Arbitrary values hidden behind a False in the mask. The boundary turns all of them into NaN,
# so even values outside a likelihood's support (-3.7 for Poisson) are legal there.
JUNK = (0.0, 1e6, -3.7, 7.0)

MISSING_NOTICE = r"of the entries of data are missing \(NaN\): the likelihood is wrapped"
EMPTY_ROW = r"1 row\(s\) of data have no observed entry: .*latents stay at the prior"
EMPTY_COLUMN = r"1 column\(s\) of data have no observed entry"


def smooth_data(num_data: int, data_dim: int, latent_dim: int = 2, seed: int = 0) -> np.ndarray:
    """tanh(X W) [num_data, data_dim], X [num_data, latent_dim] and W with N(0, 1) entries."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, latent_dim))
    return np.tanh(X @ rng.standard_normal((latent_dim, data_dim)))


def observations(
    kind: str, f: np.ndarray, rng: np.random.Generator, noise: float = 0.1, log_rate: float = 0.0
) -> np.ndarray:
    """Draws of ``kind`` given function values ``f``: f + noise N(0, 1) (gaussian), Poisson of
    rate exp(log_rate + f) (poisson), or 1[f + 0.3 N(0, 1) > 0] (bernoulli); the shape of f."""
    if kind == "gaussian":
        return f + noise * rng.standard_normal(f.shape)
    if kind == "poisson":
        return rng.poisson(np.exp(log_rate + f)).astype(float)
    if kind == "bernoulli":
        return (f + 0.3 * rng.standard_normal(f.shape) > 0).astype(float)
    raise ValueError(kind)


def complete_data(kind: str, seed: int = 0, num_data: int = N, num_columns: int = D):
    """Data [num_data, num_columns] in the support of ``kind``, from a smooth 2-D latent map."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((num_data, Q))
    W = 1.5 * rng.standard_normal((Q, num_columns))
    return observations(kind, np.tanh(X @ W), rng, log_rate=0.5)


def likelihood_of(kind: str, variance: float = 0.3) -> gpflow.likelihoods.ScalarLikelihood:
    """A fresh likelihood of ``kind``; ``variance`` is the Gaussian one's noise variance."""
    if kind == "gaussian":
        return gpflow.likelihoods.Gaussian(variance=variance)
    if kind == "poisson":
        return gpflow.likelihoods.Poisson()
    if kind == "bernoulli":
        return gpflow.likelihoods.Bernoulli()
    raise ValueError(kind)


def move_q_u(model, rng: np.random.Generator, mean: float, off_diagonal: float, diagonal: float):
    """q(u) away from its prior: q_mu ~ mean N(0, 1), q_sqrt = off_diagonal tril(N(0, 1), -1)
    + diagonal I, so that f (and every gradient) depends on the latents."""
    model.q_mu.assign(mean * rng.standard_normal(model.q_mu.shape))
    lower = np.tril(off_diagonal * rng.standard_normal(model.q_sqrt.shape), -1)
    model.q_sqrt.assign(lower + diagonal * np.eye(model.q_sqrt.shape[-1]))


def make_model(model_class, kind: str, Y: np.ndarray, seed: int = 0, **kwargs):
    """A tiny model (Q = 2, M = 3) with an explicit MaskedLikelihood and q(u) moved away from
    its prior."""
    if model_class in (BayesianSVIGPLVM, AmortisedBayesianGPLVM):
        kwargs.setdefault("num_samples", 2)
    model = model_class(Y, Q, M, likelihood=MaskedLikelihood(likelihood_of(kind)), **kwargs)
    move_q_u(model, np.random.default_rng(100 + seed), 0.7, 0.2, 0.5)
    return model


def explicit_mask(seed: int = 7) -> np.ndarray:
    """[N, D] True = observed: ~40% missing, row 2 fully missing, column 1 fully missing."""
    rng = np.random.default_rng(seed)
    mask = rng.random((N, D)) > 0.4
    mask[2] = False
    mask[:, 1] = False
    mask[[0, 5, 8], 3] = True  # keep some of every other row observed
    mask[[0, 5, 8], 0] = True
    assert mask.any(axis=1).sum() == N - 1
    return mask


@contextlib.contextmanager
def expect_user_warnings(*patterns: str, empty_column: bool = False):
    """Exactly the expected UserWarnings: each pattern matches one, and no other one is raised.
    (``pytest.warns(match=...)`` would re-emit the others; construction with gaps and no
    explicit MaskedLikelihood always adds the notice that the likelihood was wrapped.)

    ``empty_column``: also silence numpy's RuntimeWarnings ("Mean of empty slice" and the like),
    which reductions over a column with nothing observed may raise: not the subject of these
    tests."""
    with pytest.warns(UserWarning) as record, warnings.catch_warnings():
        if empty_column:
            warnings.simplefilter("ignore", RuntimeWarning)
        yield
    messages = [str(w.message) for w in record if issubclass(w.category, UserWarning)]
    for pattern in patterns:
        assert any(re.search(pattern, m) for m in messages), (pattern, messages)
    assert all(any(re.search(p, m) for p in patterns) for m in messages), messages


def dense(gradient) -> np.ndarray:
    """A gradient (dense or IndexedSlices) as a dense array."""
    return tf.convert_to_tensor(gradient).numpy()


def eager_loss_and_gradients(model, idx, Y, training: bool = True, seed: int = 5):
    """Loss and dense gradients w.r.t. every trainable variable, eagerly. The latent module's
    generator (the source of the latent draws and of the encoder's hidden inputs) is reset first,
    so repeated evaluations use common random numbers."""
    model.latent.generator.reset_from_seed(seed)
    data = (tf.constant(idx, dtype=tf.int64), tf.constant(Y, dtype=default_float()))
    with tf.GradientTape() as tape:
        loss = model.training_loss(data, training=training)
    gradients = tape.gradient(loss, model.trainable_variables)
    assert all(g is not None for g in gradients)
    return loss.numpy(), [dense(g) for g in gradients]


def assert_same(result, reference, tol: float = TOL, what: str = ""):
    """Two (loss, gradients) results agree to ``tol``, and the reference is finite."""
    (loss, gradients), (loss_ref, gradients_ref) = result, reference
    assert np.isfinite(loss_ref), what
    np.testing.assert_allclose(loss, loss_ref, rtol=tol, atol=tol, err_msg=f"loss {what}")
    assert len(gradients) == len(gradients_ref)
    for k, (g, g_ref) in enumerate(zip(gradients, gradients_ref)):
        assert np.all(np.isfinite(g_ref)), f"gradient {k} {what}"
        np.testing.assert_allclose(g, g_ref, rtol=tol, atol=tol, err_msg=f"gradient {k} {what}")


N_CELLS, D_GENES = 48, 10


def count_cells(seed: int = 0):
    """An AnnData of negative binomial counts [N_CELLS, D_GENES] of two cell types in two batches
    (obs "batch"), with library sizes (obs "depth"): log1p in X, counts in layer "counts"."""
    import anndata
    import pandas as pd
    import scipy.sparse as sp

    N, D = N_CELLS, D_GENES
    rng = np.random.default_rng(seed)
    kind, batch = rng.integers(0, 2, N), np.arange(N) % 2
    rate = rng.uniform(0.5, 2.0, N)[:, None] * np.exp(
        1.0 + 1.5 * kind[:, None] * (np.arange(D) < 4) + 0.8 * batch[:, None] * (np.arange(D) >= 6)
    )
    counts = rng.negative_binomial(5, 5 / (5 + rate)).astype(np.float32)
    counts[:, 0] += 1  # no cell without counts
    obs = pd.DataFrame(
        {"batch": pd.Categorical(np.array(["a", "b"])[batch]), "depth": rate[:, 0]},
        index=[f"cell{i}" for i in range(N)],
    )
    cells = anndata.AnnData(X=sp.csr_matrix(np.log1p(counts)), obs=obs)
    cells.var_names = [f"gene{j}" for j in range(D)]
    cells.layers["counts"] = sp.csr_matrix(counts)
    return cells


def spoiled_embedding(cells, kind: str, cell: int, key: str = "gplvm"):
    """A copy of ``cells`` whose q(x) in ``obsm`` is not a Q = 2 model's: another model's of 5
    columns ("wide"), a NaN mean of ``cell`` ("nan") or a negative variance of it ("negative")."""
    spoiled = cells.copy()
    if kind == "wide":
        spoiled.obsm[f"X_{key}"] = np.zeros((cells.n_obs, 5))
        spoiled.obsm[f"X_{key}_var"] = np.ones((cells.n_obs, 5))
    elif kind == "nan":
        spoiled.obsm[f"X_{key}"][cell, 0] = np.nan
    else:
        spoiled.obsm[f"X_{key}_var"][cell, 1] = -1.0
    return spoiled
