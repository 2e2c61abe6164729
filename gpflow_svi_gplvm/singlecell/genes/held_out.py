r"""The held-out likelihood of cells: an importance-sampled estimate of :math:`\log p(y_n)`, the
counts of the fitted genes of each cell under a fitted single-cell model, with its Monte Carlo
standard error.

A cell is read as ``transform`` reads it: its counts of the fitted genes (found by name), its
covariates from ``obs`` (encoded as in training) and its size factor :math:`s_n` (its library
size over the model's reference, or the ``obs`` column the model was fitted with), which is
observed, not scored: the estimate is of

.. math::

    \log p(y_n \mid c_n, s_n) = \log \int N(x; 0, I) \prod_d p(y_{nd} \mid x, c_n, s_n)\, dx,

by :class:`~gpflow_svi_gplvm.prediction.marginal_likelihood.MarginalLikelihoodEstimator` (the
proposal made of the cell's q(x*) from new-row inference, half of its draws widened; ``n_samples``
draws; log-mean-exp), so that it equals
:func:`~gpflow_svi_gplvm.prediction.marginal_likelihood.marginal_log_likelihood` of the model called
with the same rows, covariates and size factors. scVI's ``get_marginal_ll`` with its default
observed library size is conditional on the library alike. A cell without counts whose size factor
is its library size (0) has a rate of 0 for every gene, so its counts (all zero) have probability
one: :math:`\log p = 0`, standard error 0, without draws. The scored cells are numbered in order
(their draws follow from the seed and their numbers), so a cell's estimate does not depend on the
block it is read in.

Cells of a batch whose effect :meth:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM.map_query`
learnt (an offset on f) are refused: the estimator scores the model's own GP inputs, without
offsets. Cells of a batch the model does not know are refused as ``transform`` refuses them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ...components.covariates import new_row_inputs
from ...likelihoods import check_likelihood_support
from ...prediction.functions import NewRowOptions
from ...prediction.marginal_likelihood import MarginalLikelihoodEstimator
from ...validation import check_integer, check_seed
from ..cells.encoding import obs_column
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import cell_size_factors

if TYPE_CHECKING:
    import pandas as pd
    import tensorflow as tf

__all__ = ["marginal_log_likelihood"]


def marginal_log_likelihood(
    fitted: FittedCells,
    adata,
    n_samples: int = 256,
    widening: float = 4.0,
    *,
    iterations: int = 300,
    seed: int = 0,
    block_size: int = 4096,
):
    """The held-out log likelihood of each cell of ``adata`` (an AnnData or the path of an
    ``.h5ad`` file, read ``block_size`` cells at a time) and its Monte Carlo standard error: a
    pandas DataFrame indexed by the cells, columns ``log_likelihood`` and ``standard_error``
    (see the module). ``n_samples``: draws of the proposal per cell; ``widening``: the factor on
    q(x*)'s variance of half of them; ``iterations``: the most steps of each cell's q(x*) fit;
    ``seed``: of the fit and the draws. The mean of ``log_likelihood`` over cells is what
    scVI's ``get_marginal_ll`` returns (its per-cell values with ``return_mean=False``)."""
    import pandas as pd

    model = fitted.model
    n_samples = check_integer(  # a standard error needs two draws at least
        n_samples, "n_samples", minimum=2, hint="draws of each cell's proposal, e.g. 256"
    )
    options = NewRowOptions(
        iterations=check_integer(iterations, "iterations", hint="e.g. 300"), seed=check_seed(seed)
    )
    block_size = check_integer(block_size, "block_size", hint="cells at a time, e.g. 4096")
    estimator = MarginalLikelihoodEstimator(
        options.inference(model), n_samples, options.seed, widening
    )
    adata = opened(adata)
    rows, library = fitted.registration.read_new(adata)
    estimates, errors = np.zeros(adata.n_obs), np.zeros(adata.n_obs)
    numbered = 0
    for start in range(0, adata.n_obs, block_size):
        block = slice(start, min(start + block_size, adata.n_obs))
        scored, Y, inputs = scored_cells(fitted, adata.obs.iloc[block], rows[block], library[block])
        if not scored.any():
            continue
        found = estimator(Y, inputs, first_row=numbered)
        numbered += len(Y)
        estimates[block][scored], errors[block][scored] = (t.numpy() for t in found)
    columns = {"log_likelihood": estimates, "standard_error": errors}
    return pd.DataFrame(columns, index=pd.Index(adata.obs.index))


def scored_cells(
    fitted: FittedCells, obs: pd.DataFrame, rows: np.ndarray, library: np.ndarray
) -> tuple[np.ndarray, np.ndarray, tf.Tensor | None]:
    """Of a block of cells (``obs``, their counts ``rows`` [B, G] and library sizes [B]), which
    are scored [B] (a cell of size factor 0 has no likelihood), their counts and their observed
    inputs."""
    _refuse_learnt_batches(fitted, obs)
    model = fitted.model
    covariates = fitted.covariates(obs)
    sizes = cell_size_factors(fitted, obs, library)
    scored = np.ones(len(obs), bool) if sizes is None else sizes > 0
    Y = rows[scored]
    if not scored.any():
        return scored, Y, None
    check_likelihood_support(model.likelihood, Y)
    inputs = new_row_inputs(
        model,
        Y,
        None if covariates is None else covariates[scored],
        None if sizes is None else sizes[scored],
    )
    return scored, Y, inputs


def _refuse_learnt_batches(fitted: FittedCells, obs) -> None:
    """A ``ValueError`` naming a cell of a batch whose effect a query mapping learnt."""
    if fitted.batch_key is None or not fitted.offsets.categories:
        return
    batches = obs_column(obs, fitted.batch_key)
    learnt = batches.isin(fitted.offsets.categories).to_numpy()
    if learnt.any():
        first = int(np.argmax(learnt))
        fitted_batches = fitted.registration.encoding.categories[fitted.batch_key]
        raise ValueError(
            f"Cell {obs.index[first]!r} ({int(learnt.sum())} in all) is of batch "
            f"{batches.iloc[first]!r}, whose effect map_query learnt as offsets on f: the "
            "held-out likelihood scores cells of the batches the model was fitted with "
            f"({fitted_batches}); leave those cells out."
        )
