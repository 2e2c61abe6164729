"""A fitted single-cell model kept: one folder saved and loaded back (:mod:`.saving`), and a
TensorFlow SavedModel that embeds cells from their raw counts, served by TensorFlow alone
(:mod:`.serving`).

This room imports only rooms below it (``cells``, ``mapping``, ``fitting``); its ``__init__``
imports none of its modules."""
