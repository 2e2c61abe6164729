"""Training: the compiled minibatch step (:mod:`.step`), the loop that runs it (:mod:`.trainer`:
:func:`~gpflow_svi_gplvm.fit`, :class:`~gpflow_svi_gplvm.Trainer`), the batches it draws
(:mod:`.batches`), its optimisers and step sizes, and its checkpoints in a run folder.

Like the other wings, this one imports none of its rooms: its public names are the package's.
"""
