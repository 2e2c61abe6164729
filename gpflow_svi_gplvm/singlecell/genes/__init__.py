"""Genes read from a fitted model (its state:
:class:`~gpflow_svi_gplvm.singlecell.fitting.fitted.FittedCells`): cells' q(x), ``obs`` rows and
size factors a block at a time (:mod:`.cell_states`), normalised, batch-corrected expression
(:mod:`.expression`), change-mode differential expression with a posterior FDR
(:mod:`.differential`), label transfer with calibrated probabilities (:mod:`.labels`), each cell's
held-out likelihood (:mod:`.held_out`), and the face's methods that read them (:mod:`.mixin`).

This room imports only rooms below it (``cells``, ``mapping``, ``fitting``); its ``__init__``
imports none of its modules."""
