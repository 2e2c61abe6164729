"""The command line (``gpflow-svi-gplvm`` or ``python -m gpflow_svi_gplvm``): its arguments,
read before TensorFlow loads (:mod:`.arguments`), and the runs it starts (:mod:`.main`).

Importing this package imports nothing but the standard library.
"""
