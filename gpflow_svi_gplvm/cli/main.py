"""The command line: train a GPLVM on the embedded digits or on a data file of your own.

    python -m gpflow_svi_gplvm                       # B-SVI on scikit-learn's digits
    python -m gpflow_svi_gplvm --model aeb --data my.csv --latent-dim 3 --output runs/mine
    python -m gpflow_svi_gplvm embed --model DIR --data query.h5ad --output DIR
    python -m gpflow_svi_gplvm map-query --model DIR --data query.h5ad --output DIR

It prints a short summary and writes ``latent_space.png``, ``ard.png``, ``elbo.png`` and
``metrics.json`` (every setting, the results and the package's version) to the output folder;
``--save`` keeps the trained model as a checkpoint there (``--resume`` continues it) and
``--export`` writes a SavedModel that serves with TensorFlow alone. ``embed`` embeds the cells of an
``.h5ad`` with a model ``SingleCellGPLVM.save`` wrote (:mod:`.embed`); ``map-query`` maps them
onto it, first learning the batches it does not know (:mod:`.map_query`).

Units: for a Gaussian likelihood the data file's columns are standardised, the model trained on
:math:`(y_{nd} - m_d) / s_d`. ``metrics.json`` records each column's location :math:`m_d` and
scale :math:`s_d` (``standardisation``); the export takes and returns the data's own units (the
map is applied inside its graph); a checkpoint holds the model in the standardised units.

On several workers, start the same command on each with its ``TF_CONFIG`` (``--distributed``
says so explicitly): each trains on its block of the rows under a
``MultiWorkerMirroredStrategy``, and only the chief (worker 0) writes the outputs.

This module imports nothing but the standard library and :mod:`.arguments`: :func:`main` reads
the options, so that ``--help`` prints at once, before TensorFlow loads with the run
(:mod:`.run`). It is the ``gpflow-svi-gplvm`` script's entry point, and ``python -m
gpflow_svi_gplvm``'s.
"""

from __future__ import annotations

import sys

from .. import defaults
from .arguments import VERBS, build_parser, quiet_tensorflow, running_the_command_line

__all__ = ["LIKELIHOODS", "build_parser", "main"]


LIKELIHOODS = defaults.LIKELIHOOD_NAMES
"""The likelihoods ``--likelihood`` names
(:func:`~gpflow_svi_gplvm.likelihoods.registry.likelihood_by_name` builds them)."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line with the options ``argv`` (the process's own when None); its exit
    status (2 for a mistake in the data or the options: :mod:`.run`). ``--help``, or a mistyped
    option, exits while reading them, before TensorFlow loads; in the command line's own process
    TensorFlow's log is then quieted (:func:`~.arguments.quiet_tensorflow`)."""
    argv = sys.argv[1:] if argv is None else list(argv)
    verb = argv[0] if argv[:1] and argv[0] in VERBS else None
    args = VERBS[verb]().parse_args(argv[1:]) if verb else build_parser().parse_args(argv)
    if running_the_command_line():
        quiet_tensorflow()
    from .run import run  # TensorFlow loads here, after the options are read

    return run(args, verb)
