"""Genes read from a fitted model (its state:
:class:`~gpflow_svi_gplvm.singlecell.fitting.fitted.FittedCells`): cells' q(x), ``obs`` rows and
size factors a block at a time (:mod:`.cell_states`), normalised, batch-corrected expression
(:mod:`.expression`), differential expression with a posterior FDR (:mod:`.differential`: the
groups compared, :mod:`.comparisons`; its estimators, :mod:`.group_expression` with
:mod:`.observed_counts` and :mod:`.latent_weights`, and :mod:`.cell_pairs`; the decision,
:mod:`.decision`), label transfer with calibrated probabilities (:mod:`.labels`), each cell's
held-out likelihood (:mod:`.held_out`), and the face's methods that read them (:mod:`.mixin`).

This room imports only rooms below it (``cells``, ``mapping``, ``fitting``); its ``__init__``
imports none of its modules."""
