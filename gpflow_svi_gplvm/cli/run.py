"""A run of the command line, once :func:`~gpflow_svi_gplvm.cli.main.main` has read its options:
the data read (the digits, a table of your own, or an ``.h5ad`` handed to
:mod:`~gpflow_svi_gplvm.cli.single_cell`), the model built and trained, on one process or
several workers, and the outputs written (:mod:`~gpflow_svi_gplvm.cli.report`).

A mistake in the data or the options is one line on stderr (``error: ...``) and exit status 2,
with the traceback only under ``--debug``; warnings are one plain line each (``warning: ...``).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
import warnings
from typing import Any

import matplotlib
import numpy as np
import tensorflow as tf

from .. import datasets, defaults
from ..components.initialisation import column_location_and_scale
from ..distributed.cluster import multi_worker_strategy
from ..distributed.workers import WorkerLostError, Workers
from ..export.saved_model import export_saved_model
from ..likelihoods import likelihood_by_name
from ..models import SVIGPLVM, lookup_model
from ..rows.shard import RowShard, worker_rows
from ..training.refusals import ResumeRefusedError
from ..training.run_folder import RunFolder
from ..training.trainer import History, fit
from ..validation import check_observations, check_writable_folder
from .embed import run_embed
from .map_query import run_map_query
from .outputs import OUTPUTS, finish_outputs
from .report import described, print_summary, run_metrics, save_figures, standardised
from .single_cell import check_cell_options, run_single_cell

__all__ = ["run"]


def run(args: argparse.Namespace, verb: str | None = None) -> int:
    """The run ``args`` (the parsed options) ask for (a ``verb``'s: ``"embed"``,
    :mod:`~gpflow_svi_gplvm.cli.embed`, or ``"map-query"``, :mod:`~gpflow_svi_gplvm.cli.map_query`;
    None, a training run); its exit status."""
    original = warnings.formatwarning
    warnings.formatwarning = _plain_warning
    try:
        return _VERBS[verb](args) if verb else _run(args)
    except (ValueError, OSError, WorkerLostError) as error:
        if args.debug:
            raise
        print(f"error: {_in_flags(error, args)}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = original


_VERBS = {"embed": run_embed, "map-query": run_map_query}


def _in_flags(error: BaseException, args: argparse.Namespace) -> str:
    """``error``'s message, a lost worker's or a refused resume's advice given in the command
    line's flags (those of ``args``) rather than ``fit``'s arguments."""
    if isinstance(error, ResumeRefusedError):

        def flag(name: str, value: str | None) -> str | None:
            if name not in vars(args):  # no flag sets it (allow_new_data, q_u_optimizer)
                return None
            option = name.replace("_", "-")
            if value in ("True", "False"):  # a switch: --shared-covariance, --no-shared-covariance
                return f"--{option}" if value == "True" else f"--no-{option}"
            return f"--{option}" if value is None else f"--{option} {value}"

        afresh = "--overwrite in place of --resume"
        return error.advice(flag, f"give another --output (or start afresh there: {afresh})")
    if not isinstance(error, WorkerLostError) or error.lost is None:
        return str(error)
    every = defaults.CHECKPOINT_EVERY
    where = (
        error.last_checkpoint or f"no checkpoint was written (--save keeps one every {every} steps)"
    )
    return f"{error.lost}; {where}. Start every worker again with the same command plus --resume."


def _plain_warning(message: Warning | str, *args: object, **kwargs: object) -> str:
    """A warning as the command line shows it: one line, without its class or source file."""
    return f"warning: {message}\n"


def _fill_defaults(args: argparse.Namespace, cells: bool) -> None:
    """The options left unset take the defaults of the data's kind (an ``.h5ad``'s cells or a
    table), from :mod:`gpflow_svi_gplvm.defaults`."""
    args.likelihood = args.likelihood or ("negative_binomial" if cells else "gaussian")
    if args.num_inducing is None:
        args.num_inducing = defaults.CELL_NUM_INDUCING if cells else defaults.NUM_INDUCING
    if args.latent_dim is None:
        args.latent_dim = defaults.CELL_LATENT_DIM if cells else defaults.LATENT_DIM
    if args.batch_size is None:
        args.batch_size = defaults.CELL_BATCH_SIZE if cells else defaults.BATCH_SIZE
    if args.iterations is None:
        args.iterations = defaults.CELL_ITERATIONS if cells else defaults.ITERATIONS


def _run(args: argparse.Namespace) -> int:
    matplotlib.use("Agg")
    # Before any other TensorFlow operation.
    strategy = _strategy(args.distributed, args.startup_timeout)
    cells = args.data is not None and args.data.suffix == ".h5ad"
    check_cell_options(args, cells)
    _fill_defaults(args, cells)
    if strategy is not None and args.export:
        raise ValueError(
            "--export is for a run on one machine: train with --distributed --save, then export "
            "the checkpoint from one process (tf.train.Checkpoint(model=model).restore(...), "
            "then export_saved_model)."
        )
    workers = Workers.of(strategy)
    with workers.agreeing():  # a folder that cannot be written is found now, not after training
        if workers.chief:
            check_writable_folder(args.output, "--output")
            _check_earlier_outputs(args)
    if cells:
        return run_single_cell(args, strategy, workers)
    with workers.agreeing():  # a file one worker cannot read is named on every worker
        data = _load_data(args)
    Y = data.Y
    _check_same_call(args, workers, Y)
    if workers.chief:
        missing = f"{np.isnan(Y).mean():.1%} missing"
        print(f"data: {described(data, args.labels) or args.data} -> Y {Y.shape}, {missing}")
    model, history, seconds = _train(args, Y, strategy, workers)
    workers.finish()
    if not workers.chief:
        rows = worker_rows(len(Y), workers.index, workers.count)
        print(
            f"{workers.name} of {workers.count}: trained on rows {rows[0]}-{rows[-1]}; the chief "
            "(worker 0) writes the outputs."
        )
        return 0
    _write_outputs(args, data, model, history, seconds)
    return 0


def _write_outputs(
    args: argparse.Namespace,
    data: datasets.DataSet,
    model: SVIGPLVM,
    history: History,
    seconds: float,
) -> None:
    """The chief's outputs of a run on a table: ``metrics.json``, the figures, the export when
    asked; then the run's summary."""
    metrics = run_metrics(args, data, model, history, seconds)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    written = ["metrics.json"]
    amortised_rows = data.Y if model.latent.amortised else None
    written += save_figures(args.output, model, history, amortised_rows, data)
    if args.export:
        location, scale = data.metadata.get("location"), data.metadata.get("scale")
        export_saved_model(
            model, args.output / "saved_model", overwrite=True, location=location, scale=scale
        )
        written.append("saved_model/")
    if args.save:
        written.append("checkpoints/")
    print_summary(args, metrics, seconds, len(history.elbo))
    finish_outputs(args, written)


def _check_same_call(args: argparse.Namespace, workers: Workers, Y: np.ndarray) -> None:
    """A ``ValueError`` on every worker, naming what differs, when they were started with other
    flags that the model's and fit's own agreement does not see, or read copies of ``--data``
    that differ: each worker reads the whole file and trains on its block of rows, so copies
    that differ would each train on other numbers without a word."""
    if workers.count == 1:  # nothing to agree on: no pass over the rows for the hash
        return
    content = hashlib.blake2b(np.ascontiguousarray(Y).tobytes(), digest_size=8).hexdigest()
    flags = ("resume", "save", "overwrite", "no_standardise")
    inputs: dict[str, object] = {
        f"--{flag.replace('_', '-')}": bool(getattr(args, flag)) for flag in flags
    }
    inputs.update({"--data's rows and columns": Y.shape, "what --data holds (a hash)": content})
    workers.agree("were given other inputs than the chief", inputs)


def _check_earlier_outputs(args: argparse.Namespace) -> None:
    """A ``ValueError`` when ``--output`` holds an earlier run's outputs, unless ``--overwrite``
    replaces them or ``--resume`` continues that run."""
    earlier = [name for name in OUTPUTS if (args.output / name).exists()]
    if earlier and not (args.overwrite or args.resume):
        raise ValueError(
            f"--output {args.output} holds an earlier run's outputs ({', '.join(earlier)}): pass "
            "--resume to continue that run (with --save), --overwrite to replace them, or "
            "choose another --output."
        )


def _load_data(args: argparse.Namespace) -> datasets.DataSet:
    """The digits (no ``--data``) or the data file, checked, its ``--labels`` column split off
    and, for a Gaussian likelihood without ``--no-standardise``, each column centred and scaled
    (``metadata["location"]``, ``metadata["scale"]`` [D] undo it); ``Y`` [N, D], NaN = missing."""
    if args.data is None:
        if args.labels is not None:
            raise ValueError("--labels names a column of your --data file; the digits have none.")
        return datasets.load_digits()
    data = datasets.load_array_file(args.data)
    if args.labels is not None:
        data = datasets.split_labels(data, args.labels)
    # Checked before standardising, which would turn an infinity into a column of NaN.
    data.Y = check_observations(data.Y, f"the data in {args.data}")
    if standardised(args):
        location, scale = column_location_and_scale(data.Y)
        data.Y = (data.Y - location) / scale
        data.metadata.update(location=location, scale=scale)
    return data


def _strategy(distributed: bool, timeout: float) -> tf.distribute.Strategy | None:
    """A ``MultiWorkerMirroredStrategy`` over the workers of ``TF_CONFIG`` when it is set (or
    ``--distributed`` asks for one), made once every worker is reached within ``timeout``
    seconds; else None."""
    if not (distributed or os.environ.get("TF_CONFIG")):
        return None
    return multi_worker_strategy(timeout)


def _train(
    args: argparse.Namespace,
    Y: np.ndarray,
    strategy: tf.distribute.Strategy | None,
    workers: Workers,
) -> tuple[SVIGPLVM, History, float]:
    """The model that ``--model`` names, built on Y [N, D] (this worker's block of its rows under
    a ``strategy``) and trained, keeping checkpoints with ``--save``; with the seconds taken."""
    saved = RunFolder(args.output / "checkpoints")
    if args.save and not (args.resume or args.overwrite) and saved.holds_checkpoints():
        raise ValueError(
            f"--output {args.output} holds a saved run ({saved.describe()}): pass --resume to "
            "continue it, --overwrite to start afresh, or choose another --output."
        )
    data = Y if strategy is None else RowShard.for_worker(Y, strategy)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = _built(args, data, Y.shape[1])
    keep = args.save or args.resume
    start = time.perf_counter()
    history = fit(
        model,
        data,
        iterations=args.iterations,
        batch_size=args.batch_size,
        **_learning_rate(args),
        seed=args.seed,
        progress=not args.no_progress,
        strategy=strategy,
        workers=workers,
        checkpoint_dir=args.output / "checkpoints" if keep else None,
        resume=args.resume,
        overwrite=bool(args.overwrite and keep and not args.resume),
    )
    return _whole(args, Y, model, workers), history, time.perf_counter() - start


def _built(args: argparse.Namespace, data: np.ndarray | RowShard, num_columns: int) -> SVIGPLVM:
    """The model ``--model`` names, with the run's options, built from ``data``."""
    likelihood = likelihood_by_name(args.likelihood, num_columns)
    return lookup_model(args.model)(
        data,
        args.latent_dim,
        num_inducing=args.num_inducing,
        likelihood=likelihood,
        seed=args.seed,
        shared_covariance=args.shared_covariance,
    )


def _whole(args: argparse.Namespace, Y: np.ndarray, model: SVIGPLVM, workers: Workers) -> SVIGPLVM:
    """The trained ``model`` as one process holds it, for the chief's metrics and figures: on
    several workers, whose latent tables each hold their own rows, a copy built on all of Y with
    the global parameters and every worker's table rows (gathered; every worker takes part)."""
    tables = model.table_variables
    if model.table_rows is None or not tables:  # all rows here, or an encoder and no rows
        return model
    gathered = []
    for table in tables:
        whole_table = np.zeros((len(Y), *table.shape[1:]))
        whole_table[model.table_rows] = table.numpy()
        gathered.append(workers.sum(whole_table))
    if not workers.chief:
        return model
    whole = _built(args, Y, Y.shape[1])
    whole_tables = whole.table_variables
    for ours, trained in zip(_global_variables(whole), _global_variables(model)):
        ours.assign(trained.numpy())
    for ours, rows in zip(whole_tables, gathered):
        ours.assign(rows)
    return whole


def _global_variables(model: SVIGPLVM) -> list[tf.Variable]:
    tables = {variable.ref() for variable in model.table_variables}
    return [variable for variable in model.trainable_variables if variable.ref() not in tables]


def _learning_rate(args: argparse.Namespace) -> dict[str, Any]:
    """--learning-rate as fit's option where given; else fit's own default."""
    return {} if args.learning_rate is None else {"learning_rate": args.learning_rate}
