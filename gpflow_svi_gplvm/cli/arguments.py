"""The command line's arguments, read before TensorFlow is imported, and a quiet TensorFlow.

This module imports nothing but the standard library, so that ``python -m gpflow_svi_gplvm
--help`` (or ``gpflow-svi-gplvm --help``) prints and exits, and a mistyped option is refused, in
a fraction of a second, before TensorFlow loads; importing it does nothing else.

When the process is the command line, :func:`~gpflow_svi_gplvm.cli.main.main` then calls
:func:`quiet_tensorflow`: ``TF_CPP_MIN_LOG_LEVEL=3`` unless the environment sets it
(TensorFlow's C++ log then keeps only fatal lines: its error lines, such as ``failed call to
cuInit`` on a machine without a GPU driver, describe the machine, and a failed computation raises
a Python exception of its own), and TensorFlow and GPflow imported with the process's standard
error sent to the null device, since TensorFlow writes a block of start-up lines before it reads
that variable. A library user's process is left as it is: importing the package sets nothing,
and TensorFlow's own start-up lines (information, not errors, on a CPU machine) show, whatever
the user's ``TF_CPP_MIN_LOG_LEVEL``, as the README says.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

from ..defaults import (
    BATCH_SIZE,
    CELL_BATCH_SIZE,
    CELL_ITERATIONS,
    CELL_LATENT_DIM,
    CELL_NUM_INDUCING,
    CHECKPOINT_EVERY,
    FIT_CELLS,
    ITERATIONS,
    LATENT_DIM,
    LIKELIHOOD_NAMES,
    MODEL_NAMES,
    NUM_INDUCING,
)

__all__ = [
    "running_the_command_line",
    "quiet_standard_error",
    "quiet_tensorflow",
    "build_parser",
    "build_embed_parser",
    "build_map_query_parser",
    "VERBS",
]

INDUCING_HELP = f"M (default: {NUM_INDUCING}; {CELL_NUM_INDUCING} for an .h5ad)"

LATENT_HELP = f"Q (default: {LATENT_DIM}; {CELL_LATENT_DIM} for an .h5ad)"

BATCH_HELP = f"rows per step (default: {BATCH_SIZE}; {CELL_BATCH_SIZE} for an .h5ad)"

MODEL_HELP = """models (--model):
  point  the paper's Point: a free latent point per row (a sparse GPLVM)
  map    MAP: a free point per row under the prior N(0, I)
  bsvi   B-SVI: a Gaussian q(x_n) per row, the Bayesian GPLVM (the default)
  aeb    AEB-SVI: q(x_n) from an encoder network reading y_n (new rows start from one pass)
  flow   B-SVI (flow): a Gaussian q(x_n) pushed through 10 shared planar flow layers

likelihoods (--likelihood):
  gaussian           real values (a table's columns are standardised unless --no-standardise)
  poisson            counts (0, 1, 2, ...; never standardised)
  negative_binomial  overdispersed counts, a dispersion per column (an .h5ad's default)
  bernoulli          binary data (0 or 1; never standardised)

single cells (--data atlas.h5ad): the counts of X or --layer, size factors from each cell's
total, --batch-key and --covariate-keys from obs in the kernel (SingleCellGPLVM). One process
reads the file from disk in shuffled blocks; with --distributed each worker reads its own
cells. OUTPUT/X_gplvm.npy and X_gplvm_var.npy hold q(x) of every cell, in the file's order
(adata.obsm["X_gplvm"] = np.load(...)); the file itself is never written.

units: a standardised run trains on (y - location) / scale, column by column; metrics.json
records each column's location and scale, the export (--export) takes and returns the data's
own units, and a checkpoint (--save) holds the model in the standardised units.
"""


def build_parser() -> argparse.ArgumentParser:
    """The command line's options, each with its default in ``--help``."""
    parser = argparse.ArgumentParser(
        prog="python -m gpflow_svi_gplvm",
        description="Train a GPLVM with stochastic variational inference and summarise it "
        "(python -m gpflow_svi_gplvm embed --help: embed an .h5ad with a saved single-cell "
        "model; python -m gpflow_svi_gplvm map-query --help: map an .h5ad of new batches onto "
        "one).",
        epilog=MODEL_HELP,
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--model", choices=MODEL_NAMES, default="bsvi", help="latent treatment")
    parser.add_argument(
        "--data",
        type=Path,
        help="your own .csv/.npy/.npz, or single cells' .h5ad (default: digits)",
    )
    parser.add_argument(
        "--labels",
        metavar="COLUMN",
        help="the data file's column (text or numbers) that colours the latent-space picture; "
        "it is not trained on (an .npz's 'labels' array is used without it)",
    )
    parser.add_argument(
        "--likelihood",
        choices=LIKELIHOOD_NAMES,
        help="the likelihood of each entry (below; default: gaussian, negative_binomial for an "
        ".h5ad)",
    )
    _add_model_options(parser)
    parser.add_argument(
        "--no-standardise",
        action="store_true",
        help="keep a data file's columns as they are (default: centre and scale each column "
        "for a Gaussian likelihood; see 'units' below)",
    )
    parser.add_argument("--output", type=Path, default=Path("runs/latest"), help="output folder")
    _add_single_cell_options(parser)
    _add_keeping_options(parser)
    _add_cluster_options(parser)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    return parser


EMBEDDING_HELP = """X_<key>.npy and X_<key>_var.npy [N, Q], the means and variances of q(x)
of every cell in the file's order (adata.obsm["X_gplvm"] = np.load(...)); <key>_novelty.npy [N],
each cell's novelty in [0, 1] (the share of the model's reference cells less isolated among the
others than the cell is among them: above 0.99, more than 99% of them; NaN for an amortised
model)"""

STAGED_HELP = """Each file is written under a hidden name and renamed once whole; the .h5ad is
read a block of cells at a time and never written."""


def _paragraphs(*texts: str) -> str:
    """Help text of ``texts``, each a paragraph wrapped to 96 columns."""
    return "\n\n".join(textwrap.fill(" ".join(text.split()), 96) for text in texts) + "\n"


EMBED_HELP = _paragraphs(
    f"outputs (--output): {EMBEDDING_HELP}; embed.json (cells, genes, seconds, the model). "
    + STAGED_HELP
)

MAP_QUERY_HELP = _paragraphs(
    f"outputs (--output): {EMBEDDING_HELP}; map_query.json (cells, genes, seconds, the model, "
    f"the new batches learnt, --fit-cells). {STAGED_HELP}",
    """new batches: the query's batches (in the model's batch column of obs) that the model does
    not know each get an offset per gene, learnt from up to --fit-cells of their cells as
    SingleCellGPLVM.map_query learns it; every cell is then embedded as embed does. A query
    without cells of a new batch is embedded as embed does. --save-model DIR2 saves the model
    with the new batches to a new folder (the --model folder is never written), so that embed
    --model DIR2 maps their cells as known batches.""",
)


def build_embed_parser() -> argparse.ArgumentParser:
    """``embed``'s options: new cells embedded by a saved single-cell model."""
    parser = argparse.ArgumentParser(
        prog="python -m gpflow_svi_gplvm embed",
        description="Embed the cells of an .h5ad with a saved SingleCellGPLVM (its transform: "
        "q(x*) of each cell with the model frozen), reading a block of cells at a time.",
        epilog=EMBED_HELP,
        formatter_class=_HelpFormatter,
    )
    _add_embedding_options(parser, "replace an earlier embedding in OUTPUT")
    return parser


def build_map_query_parser() -> argparse.ArgumentParser:
    """``map-query``'s options: new cells, of batches the saved single-cell model may not know,
    mapped onto it."""
    parser = argparse.ArgumentParser(
        prog="python -m gpflow_svi_gplvm map-query",
        description="Map the cells of an .h5ad onto a saved SingleCellGPLVM, learning the "
        "batches it does not know (SingleCellGPLVM.map_query), then embedding every cell a "
        "block at a time as embed does.",
        epilog=MAP_QUERY_HELP,
        formatter_class=_HelpFormatter,
    )
    _add_embedding_options(
        parser, "replace an earlier embedding in OUTPUT, and a saved model at --save-model"
    )
    parser.add_argument(
        "--fit-cells",
        type=int,
        default=FIT_CELLS,
        help="cells of each new batch (drawn at random) its offsets are learnt from, at most",
    )
    parser.add_argument(
        "--save-model",
        type=Path,
        metavar="DIR2",
        help="save the model with the new batches learnt to this new folder",
    )
    return parser


VERBS = {"embed": build_embed_parser, "map-query": build_map_query_parser}
"""The verbs of the command line (``python -m gpflow_svi_gplvm VERB``) and their options."""


def _add_embedding_options(parser: argparse.ArgumentParser, overwrite: str) -> None:
    """The options of the verbs that embed an .h5ad with a saved model; ``overwrite``: what
    ``--overwrite`` replaces."""
    parser.add_argument(
        "--model", type=Path, required=True, help="the folder SingleCellGPLVM.save wrote"
    )
    parser.add_argument(
        "--data", type=Path, required=True, help="the cells' .h5ad (counts of the model's genes)"
    )
    parser.add_argument("--output", type=Path, required=True, help="output folder")
    parser.add_argument("--block", type=int, default=4096, help="cells read and embedded at a time")
    parser.add_argument(
        "--missing-genes",
        choices=["marginalise"],
        help="cells lacking some of the model's genes: leave those out of each cell's "
        "likelihood (default: refuse them, naming the genes)",
    )
    parser.add_argument("--overwrite", action="store_true", help=overwrite)
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )


def _add_model_options(parser: argparse.ArgumentParser) -> None:
    """The model's sizes and how it is trained."""
    parser.add_argument("--latent-dim", type=int, help=LATENT_HELP)
    parser.add_argument("--num-inducing", type=int, help=INDUCING_HELP)
    parser.add_argument(
        "--iterations",
        type=int,
        help=f"training steps (default {ITERATIONS} for a table, {CELL_ITERATIONS} for an .h5ad, "
        "as SingleCellGPLVM.fit)",
    )
    parser.add_argument("--batch-size", type=int, help=BATCH_HELP)
    parser.add_argument(
        "--learning-rate",
        type=float,
        help="Adam's (default: fit's, 0.01; for an .h5ad, SingleCellGPLVM.fit's for the model)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seeds initialisation and batches")
    parser.add_argument(
        "--shared-covariance",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one q(u) covariance for all outputs (fast at large D; default: shared when D >= 100)",
    )


def _add_cluster_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="train on the workers of TF_CONFIG (implied when TF_CONFIG is set): start the same "
        "command on every worker; each trains on its block of rows, the chief writes the outputs",
    )
    parser.add_argument(
        "--startup-timeout",
        type=_seconds,
        default=90.0,
        metavar="SECONDS",
        help="with several workers, give up (naming the workers not reached) when some worker "
        "has not started within this time",
    )


def _seconds(text: str) -> float:
    """``--startup-timeout``'s value: a positive, finite number of seconds (else argparse says
    so, naming the option)."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = math.nan
    if not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a positive, finite number of seconds (e.g. 90)"
        )
    return seconds


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """``--help`` with each option's default (those that are a value, not None or a switch's
    False) and the epilog's tables kept as written."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        # By identity: a default of 0 (--seed) equals False and must still be shown.
        if any(action.default is no_value for no_value in (None, False, argparse.SUPPRESS)):
            return text
        if "%(default)" in text:
            return text
        return f"{text} (default: %(default)s)"


def _add_single_cell_options(parser: argparse.ArgumentParser) -> None:
    """Where an ``.h5ad``'s counts, genes and covariates are (see 'single cells' below)."""
    cells = parser.add_argument_group("single cells (--data file.h5ad)")
    cells.add_argument("--layer", help="the layer holding the counts (default: X; raw: .raw)")
    cells.add_argument("--batch-key", metavar="COLUMN", help="obs column of each cell's batch")
    cells.add_argument(
        "--covariate-keys", metavar="COLUMN", nargs="+", default=[], help="more obs columns"
    )
    cells.add_argument(
        "--genes", metavar="COLUMN", help="a boolean var column choosing the genes (default: all)"
    )


def _add_keeping_options(parser: argparse.ArgumentParser) -> None:
    """``--save``, ``--resume`` and ``--export``: what the run keeps of the trained model."""
    parser.add_argument(
        "--save",
        action="store_true",
        help="keep the trained model as a checkpoint in OUTPUT/checkpoints (written every "
        f"{CHECKPOINT_EVERY} steps and at the end; load it with "
        "tf.train.Checkpoint(model=model).restore; the model "
        "there works in the standardised units that metrics.json's 'standardisation' undoes); "
        "for an .h5ad, also the model folder OUTPUT/model (SingleCellGPLVM.load)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run saved in OUTPUT/checkpoints (same options, up to --iterations)",
    )
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an earlier run's outputs in OUTPUT: this run's outputs replace theirs, and "
        "once they are written the earlier run's others (figures, embedding, checkpoints/, "
        "model/, saved_model/ that this run did not write) are removed, if the package wrote "
        "them and they hold nothing else; without it a folder holding them is refused before "
        "training",
    )
    parser.add_argument(
        "--export",
        action="store_true",
        help="write the trained model to OUTPUT/saved_model, a SavedModel that serves with "
        "TensorFlow alone and takes and returns the data's own units (replacing an earlier "
        "export there); for an .h5ad, to OUTPUT/saved_model/1, whose signature embed takes "
        "cells' counts and obs columns",
    )


def running_the_command_line() -> bool:
    """Whether this process is ``python -m gpflow_svi_gplvm`` or the ``gpflow-svi-gplvm`` script."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" in argv:
        return argv[argv.index("-m") + 1 : argv.index("-m") + 2] == ["gpflow_svi_gplvm"]
    return bool(sys.argv) and Path(sys.argv[0]).stem == "gpflow-svi-gplvm"


@contextlib.contextmanager
def quiet_standard_error() -> Iterator[None]:
    """Send what this process writes to file descriptor 2 to the null device, then restore it
    (an exception raised inside still prints after, to the restored standard error)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def quiet_tensorflow() -> None:
    """For the command line's process: ``TF_CPP_MIN_LOG_LEVEL=3`` unless the environment sets
    it, then TensorFlow, TensorFlow Probability and GPflow imported with standard error sent to
    the null device (unless the level is "0", which asks for every line)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if os.environ["TF_CPP_MIN_LOG_LEVEL"] != "0":
        with quiet_standard_error():
            importlib.import_module("gpflow")
