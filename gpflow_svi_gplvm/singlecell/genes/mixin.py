"""The methods of :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` that read genes once it
is fitted (as scvi-tools' ``RNASeqMixin`` gives its models): normalised, batch-corrected
expression, change-mode differential expression, label transfer and the held-out likelihood of
cells, each a few lines handing the fitted state
(:class:`~gpflow_svi_gplvm.singlecell.fitting.fitted.FittedCells`) to its module."""

from __future__ import annotations

from typing import Any

from ...options import takes_options_of
from ..fitting.fitted import FittedCells, fitted_state
from . import differential, expression, held_out, labels
from .cell_states import latent_moments

__all__ = ["GenesMixin"]


class GenesMixin:
    """Reading genes from a fitted single-cell model. Cells' q(x) is the one ``fit`` or
    ``transform`` stored in ``obsm`` where there is one for every cell, else inferred as
    ``transform`` infers it; an AnnData or the path of an ``.h5ad`` file."""

    fitted: FittedCells | None
    """The state of the fitted model (None before it is fitted)."""

    @takes_options_of(expression.normalized_expression, omit=("fitted",))
    def normalized_expression(self, adata, *args: Any, **options: Any):
        """The expected rate of each gene at each cell's q(x), its batch set to a reference
        (:mod:`~gpflow_svi_gplvm.singlecell.genes.expression`): a DataFrame [N, G], with
        ``return_variance`` a pair, with ``output`` arrays written to that folder."""
        return expression.normalized_expression(fitted_state(self.fitted), adata, *args, **options)

    @takes_options_of(differential.differential_expression, omit=("fitted",))
    def differential_expression(self, adata, *args: Any, **options: Any):
        """Change-mode DE between groups of ``obs[groupby]`` with a posterior expected FDR
        (:mod:`~gpflow_svi_gplvm.singlecell.genes.differential`): a DataFrame, a row a gene."""
        return differential.differential_expression(
            fitted_state(self.fitted), adata, *args, **options
        )

    @takes_options_of(labels.transfer_labels, omit=("moments", "key"))
    def transfer_labels(self, reference, query, labels_key: str, **options: Any):
        """Carry ``reference.obs[labels_key]`` to the ``query`` cells as probabilities
        (:mod:`~gpflow_svi_gplvm.singlecell.genes.labels`); the reference's batches are held out in
        turn to calibrate them unless ``groups_key`` says otherwise."""
        fitted = fitted_state(self.fitted)
        options.setdefault("groups_key", fitted.batch_key)
        return labels.transfer_labels(
            reference,
            query,
            labels_key,
            moments=lambda adata: latent_moments(fitted, adata),
            key=fitted.key,
            **options,
        )

    @takes_options_of(held_out.marginal_log_likelihood, omit=("fitted",))
    def marginal_log_likelihood(self, adata, *args: Any, **options: Any):
        """The held-out log likelihood log p(y_n) of each cell's counts of the fitted genes,
        importance-sampled, and its Monte Carlo standard error
        (:mod:`~gpflow_svi_gplvm.singlecell.genes.held_out`): a DataFrame, a row a cell,
        columns ``log_likelihood`` and ``standard_error``; their mean over the cells is scVI's
        ``get_marginal_ll``."""
        return held_out.marginal_log_likelihood(fitted_state(self.fitted), adata, *args, **options)
