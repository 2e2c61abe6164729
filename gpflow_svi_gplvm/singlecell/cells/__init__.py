"""Cells as the model reads them: ``obs`` columns as covariates (:mod:`.encoding`), the counts of
an AnnData or an ``.h5ad`` file read a block at a time and checked, with their size factors
(:mod:`.reading`), and what an AnnData means to a model (:mod:`.registration`: layer, genes,
``obs`` columns, size factors).

This room imports no other room of the wing; its ``__init__`` imports none of its modules."""
