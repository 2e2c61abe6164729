r"""Single-cell data as its users hold it: fit from an AnnData, embeddings written back to it.

``pip install "gpflow_svi_gplvm[singlecell]"`` brings ``anndata`` (and ``scanpy`` for neighbours and
UMAP). :class:`SingleCellGPLVM` reads counts from a layer (or ``X``), batch and technical covariates
from ``obs`` (categories one-hot, numbers standardised: the covariate part of the GP input [x_n,
c_n], :mod:`~gpflow_svi_gplvm.components.covariates`), and library-size factors; it models counts as
counts (negative binomial with a dispersion per gene, or Poisson, rate :math:`s_n e^{f}`) and writes

- ``obsm["X_gplvm"]`` [N, Q]: the means of q(x_n), for ``scanpy.pp.neighbors(adata,
  use_rep="X_gplvm")``; ``obsm["X_gplvm_var"]`` [N, Q]: their variances;
- ``uns["gplvm"]``: the settings, the ELBO trace, the ARD lengthscales [Q] and the covariate
  kernel's variance per covariate column (how much each covariate moves expression).

Sparse (CSR) and backed (on-disk) matrices are read a block of rows at a time into CSR
(:class:`~gpflow_svi_gplvm.rows.sparse.SparseRows`), and every minibatch is densified on its own:
the dense N x D matrix never exists. New cells (another AnnData with the fitted genes and the
covariate columns) are embedded by :meth:`SingleCellGPLVM.transform`.
"""

from ..defaults import CELL_LIKELIHOOD_NAMES as LIKELIHOODS
from .cells.encoding import CovariateEncoding
from .face import SingleCellGPLVM

__all__ = ["SingleCellGPLVM", "CovariateEncoding", "LIKELIHOODS"]
