"""The command line (``gpflow-svi-gplvm`` or ``python -m gpflow_svi_gplvm``): its arguments,
read before TensorFlow loads (:mod:`.arguments`), the command (:mod:`.main`) and the runs it
starts (:mod:`.run`; an ``.h5ad``'s in :mod:`.single_cell`).

Importing this package imports nothing but the standard library.
"""
