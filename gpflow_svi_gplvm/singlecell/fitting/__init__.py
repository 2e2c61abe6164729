"""How :meth:`SingleCellGPLVM.fit <gpflow_svi_gplvm.singlecell.SingleCellGPLVM.fit>` fits and what
it produces: the state of a fitted model and the options that shape it (:mod:`.fitted`), the model
and rows built from the cells (:mod:`.built_model`), where the latents start (:mod:`.start`: a PCA
with the covariates taken out), the training and the run's record (:mod:`.trained`), the amortised
model fitted by distillation (:mod:`.distilled`), whether the embedding collapsed (:mod:`.spread`),
and the fit's output checked and every worker's embedding assembled there (:mod:`.assembly`).

This room imports only rooms below it (``cells``, ``mapping``); its ``__init__`` imports none of
its modules."""
