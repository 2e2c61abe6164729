"""Cells as the model reads them: ``obs`` columns as covariates (:mod:`.encoding`), the counts of
an AnnData or an ``.h5ad`` file read a block at a time and checked (:mod:`.reading`), and what an
AnnData means to a model (:mod:`.registration`: layer, genes, ``obs`` columns, size factors, the
cells it was fitted to).

This room imports no other room of the wing; its ``__init__`` imports none of its modules."""
