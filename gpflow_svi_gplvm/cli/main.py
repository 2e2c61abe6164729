"""The command line: train a GPLVM on the embedded digits or on a data file of your own.

    python -m gpflow_svi_gplvm                       # B-SVI on scikit-learn's digits
    python -m gpflow_svi_gplvm --model aeb --data my.csv --latent-dim 3 --output runs/mine

It prints a short summary and writes ``latent_space.png``, ``ard.png``, ``elbo.png`` and
``metrics.json`` (every setting, the results and the package's version) to the output folder;
``--save`` keeps the trained model as a checkpoint there (``--resume`` continues it) and
``--export`` writes a SavedModel that serves with TensorFlow alone.

Units: for a Gaussian likelihood the data file's columns are standardised, the model trained on
:math:`(y_{nd} - m_d) / s_d`. ``metrics.json`` records each column's location :math:`m_d` and
scale :math:`s_d` (``standardisation``); the export takes and returns the data's own units (the
map is applied inside its graph); a checkpoint holds the model in the standardised units.
The options are read before TensorFlow is imported, so ``--help`` prints at once.

On several workers, start the same command on each with its ``TF_CONFIG`` (``--distributed``
says so explicitly): each trains on its block of the rows under a
``MultiWorkerMirroredStrategy``, and only the chief (worker 0) writes the outputs.
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
from pathlib import Path
from typing import Any, cast

import gpflow
import matplotlib
import numpy as np
import tensorflow as tf

from .. import __version__, datasets, defaults, plotting
from ..components.initialisation import column_location_and_scale
from ..distributed.cluster import multi_worker_strategy
from ..distributed.workers import WorkerLostError, Workers
from ..export.folder import check_destination, is_export
from ..export.saved_model import export_saved_model
from ..likelihoods import likelihood_by_name
from ..metrics import rmse
from ..models import SVIGPLVM, lookup_model
from ..rows.shard import RowShard, worker_rows
from ..training.run_folder import RunFolder
from ..training.trainer import History, fit
from ..validation import check_observations, check_writable_folder
from .arguments import build_parser

__all__ = ["LIKELIHOODS", "RELEVANCE_KEPT", "build_parser", "main"]

RELEVANCE_KEPT = 0.1
"""A latent dimension is reported as kept when its latent relevance (the spread of the latent
means in lengthscales, ``SVIGPLVM.latent_relevance``) is >= 10% of the largest."""


LIKELIHOODS = defaults.LIKELIHOOD_NAMES
"""The likelihoods ``--likelihood`` names (:func:`~gpflow_svi_gplvm.likelihoods.likelihood_by_name`
builds them)."""


def main(argv: list[str] | None = None) -> int:
    """Run the command line; a mistake in the data or the options is one line on stderr
    (``error: ...``) and exit status 2, with the traceback only under ``--debug``. Warnings are
    one plain line each (``warning: ...``)."""
    args = build_parser().parse_args(argv)
    original = warnings.formatwarning
    warnings.formatwarning = _plain_warning
    try:
        return _run(args)
    except (ValueError, OSError, WorkerLostError) as error:
        if args.debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        warnings.formatwarning = original


def _plain_warning(message: Warning | str, *args: object, **kwargs: object) -> str:
    """A warning as the command line shows it: one line, without its class or source file."""
    return f"warning: {message}\n"


def _run(args: argparse.Namespace) -> int:
    matplotlib.use("Agg")
    # Before any other TensorFlow operation.
    strategy = _strategy(args.distributed, args.startup_timeout)
    cells = args.data is not None and args.data.suffix == ".h5ad"
    _check_cell_options(args, cells)
    args.likelihood = args.likelihood or ("negative_binomial" if cells else "gaussian")
    if args.num_inducing is None:
        args.num_inducing = defaults.CELL_NUM_INDUCING if cells else defaults.NUM_INDUCING
    if args.latent_dim is None:
        args.latent_dim = defaults.CELL_LATENT_DIM if cells else defaults.LATENT_DIM
    if args.batch_size is None:
        args.batch_size = defaults.CELL_BATCH_SIZE if cells else defaults.BATCH_SIZE
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
        return _run_single_cell(args, strategy)
    with workers.agreeing():  # a file one worker cannot read is named on every worker
        data = _load_data(args)
    Y = data.Y
    _check_same_call(args, workers, Y)
    if workers.chief:
        missing = f"{np.isnan(Y).mean():.1%} missing"
        print(f"data: {_described(data, args.labels) or args.data} -> Y {Y.shape}, {missing}")
    model, history, seconds = _train(args, Y, strategy)
    workers.finish()
    if not workers.chief:
        rows = worker_rows(len(Y), workers.index, workers.count)
        print(
            f"{workers.name} of {workers.count}: trained on rows {rows[0]}-{rows[-1]}; the chief "
            "(worker 0) writes the outputs."
        )
        return 0
    amortised_rows = Y if model.latent.amortised else None
    metrics = _metrics(args, data, model, history, seconds)
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    written = ["metrics.json"]
    written += _save_figures(args.output, model, history, amortised_rows, data)
    if args.export:
        location, scale = data.metadata.get("location"), data.metadata.get("scale")
        export_saved_model(
            model, args.output / "saved_model", overwrite=True, location=location, scale=scale
        )
        written.append("saved_model/")
    if args.save:
        written.append("checkpoints/")
    _print_summary(args, metrics, seconds, len(history.elbo))
    print(f"wrote {', '.join(written)} to {args.output}/")
    return 0


OUTPUTS = ("metrics.json", "latent_space.png", "ard.png", "elbo.png", "X_gplvm.npy")
"""What a run writes to ``--output`` (and ``X_gplvm_var.npy`` beside the embedding)."""


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


def _check_cell_options(args: argparse.Namespace, cells: bool) -> None:
    """A ``ValueError`` for single-cell options given with other data, which would ignore them."""
    given = [
        option
        for option, value in (
            ("--layer", args.layer),
            ("--batch-key", args.batch_key),
            ("--covariate-keys", args.covariate_keys),
            ("--genes", args.genes),
        )
        if value
    ]
    if given and not cells:
        raise ValueError(
            f"{', '.join(given)} choose what to read of an .h5ad file of single cells, but --data "
            f"is {args.data.name if args.data else 'the digits'}: drop them, or give an .h5ad."
        )


def _run_single_cell(args: argparse.Namespace, strategy: tf.distribute.Strategy | None) -> int:
    """An ``.h5ad`` of single cells: ``SingleCellGPLVM`` (out of core on one worker, each worker
    reading its own cells on several), the embedding of every cell, ``metrics.json`` and the
    ELBO's figure in ``--output``, written by the chief."""
    from ..singlecell import SingleCellGPLVM
    from ..singlecell.likelihoods import COUNT_LIKELIHOODS

    if args.labels or args.likelihood not in COUNT_LIKELIHOODS:
        raise ValueError(
            "An .h5ad is fitted as single cells' counts: --likelihood negative_binomial or "
            "poisson, and no --labels (the cells' obs hold their labels)."
        )
    workers = Workers.of(strategy)
    saved = args.output / "model"
    with workers.agreeing():  # found now, not after training
        if args.save and workers.chief:
            _check_saved_model(args, saved)
    face = SingleCellGPLVM(
        args.latent_dim,
        **{name: getattr(args, name) for name in CELL_OPTIONS},
        shared_covariance=args.shared_covariance,
    )
    start = time.perf_counter()
    face.fit(
        args.data,
        args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,  # None: SingleCellGPLVM.fit's for the model
        progress=not args.no_progress and workers.chief,
        strategy=strategy,
        output=args.output,
        checkpoint_dir=args.output / "checkpoints" if args.save or args.resume else None,
        resume=args.resume,
        overwrite=args.overwrite,
    )
    seconds = time.perf_counter() - start
    if not workers.chief:
        print(f"{workers.name} of {workers.count}: trained on its cells; the chief writes.")
        return 0
    history, model = cast(History, face.history), cast(SVIGPLVM, face.model)
    cells, genes = int(model.num_data or 0), len(face.gene_names)
    metrics = {"cells": cells, "genes": genes, "settings": _settings(args, model)}
    metrics.update(versions=_versions(), seconds=round(seconds, 2), steps=len(history.elbo))
    metrics["elbo_final"] = float(np.mean(history.elbo[-100:])) if len(history.elbo) else None
    (args.output / "metrics.json").write_text(json.dumps(metrics, indent=2))
    plotting.plot_elbo(history).savefig(args.output / "elbo.png", dpi=120, bbox_inches="tight")
    written = ["X_gplvm.npy", "X_gplvm_var.npy", "metrics.json", "elbo.png"]
    if args.save:
        face.save(saved, overwrite=args.resume or args.overwrite)
        written += ["checkpoints/", "model/"]
    if args.export:
        face.export_saved_model(args.output / "saved_model", overwrite=True)
        written.append("saved_model/1/")
    print(
        f"{cells} cells x {genes} genes, {len(history.elbo)} steps in {seconds:.1f} s; wrote "
        f"{', '.join(written)} to {args.output}/"
    )
    return 0


CELL_OPTIONS = (
    "layer",
    "genes",
    "batch_key",
    "covariate_keys",
    "likelihood",
    "model",
    "num_inducing",
    "seed",
)
"""The options the command line hands ``SingleCellGPLVM`` by their names."""


def _check_saved_model(args: argparse.Namespace, saved: Path) -> None:
    """A ``ValueError`` when the folder ``saved`` of an ``.h5ad`` run's model cannot be written
    or holds an earlier run's model (unless ``--resume`` or ``--overwrite``)."""
    from ..singlecell.saving import SAVED_MODEL

    if is_export(saved, SAVED_MODEL) and not (args.resume or args.overwrite):
        raise ValueError(
            f"--output {args.output} holds a saved model (model/): pass --resume to continue its "
            "run, --overwrite to start afresh, or choose another --output."
        )
    check_destination(saved, overwrite=True, kind=SAVED_MODEL)


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
    if _standardised(args):
        location, scale = column_location_and_scale(data.Y)
        data.Y = (data.Y - location) / scale
        data.metadata.update(location=location, scale=scale)
    return data


def _described(data: datasets.DataSet, labels: str | None) -> str | None:
    """The data's description, the ``--labels`` column named as the labels, not as dropped."""
    dropped = data.metadata.get("dropped", [])
    if labels not in dropped:
        return data.description
    listed = f" (dropped non-numeric columns: {', '.join(dropped)})"
    others = [name for name in dropped if name != labels]
    kept = f" (dropped non-numeric columns: {', '.join(others)})" if others else ""
    return (data.description or "").replace(listed, kept) + f" (labels: {labels})"


def _standardised(args: argparse.Namespace) -> bool:
    """Whether a data file's columns are standardised: for a Gaussian likelihood, unless asked
    not to (counts and binary data must stay as they are)."""
    return args.data is not None and args.likelihood == "gaussian" and not args.no_standardise


def _strategy(distributed: bool, timeout: float) -> tf.distribute.Strategy | None:
    """A ``MultiWorkerMirroredStrategy`` over the workers of ``TF_CONFIG`` when it is set (or
    ``--distributed`` asks for one), made once every worker is reached within ``timeout``
    seconds; else None."""
    if not (distributed or os.environ.get("TF_CONFIG")):
        return None
    return multi_worker_strategy(timeout)


def _train(
    args: argparse.Namespace, Y: np.ndarray, strategy: tf.distribute.Strategy | None
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
        checkpoint_dir=args.output / "checkpoints" if keep else None,
        resume=args.resume,
        overwrite=bool(args.overwrite and keep and not args.resume),
    )
    return _whole(args, Y, model, Workers.of(strategy)), history, time.perf_counter() - start


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


def _metrics(
    args: argparse.Namespace,
    data: datasets.DataSet,
    model: SVIGPLVM,
    history: History,
    seconds: float,
) -> dict:
    """What ``metrics.json`` holds: every setting of the run and the versions it ran with, its
    final ELBO (the mean of the last 100 steps), the reconstruction errors at the latent means
    (:func:`_reconstruction_errors`), the relevances of the latents and, for a standardised run,
    each column's location and scale."""
    Y = data.Y
    amortised_rows = Y if model.latent.amortised else None
    relevance = model.latent_relevance(amortised_rows)
    kept = [int(q) for q in np.flatnonzero(relevance >= RELEVANCE_KEPT * relevance.max())]
    tail = history.elbo[-min(100, len(history.elbo)) :]
    return {
        "model": type(model).__name__,
        "data": _described(data, args.labels) or str(args.data),
        "N": int(Y.shape[0]),
        "D": int(Y.shape[1]),
        "settings": _settings(args, model),
        "standardised": _standardised(args),
        "standardisation": _standardisation(data),
        "shared_covariance": model.shared_covariance,
        "versions": _versions(),
        "seconds": round(seconds, 2),
        "steps": len(history.elbo),
        "elbo_final": float(np.mean(tail)) if len(tail) else None,
        **_reconstruction_errors(args, data, model),
        "ard_relevance": [float(r) for r in model.ard_relevance()],
        "latent_relevance": [float(r) for r in relevance],
        "kept_latent_dims": kept,
    }


def _settings(args: argparse.Namespace, model: SVIGPLVM) -> dict:
    """Every option of the run, as ``metrics.json`` records them: as given, or as ``model``
    took it (M, at most one inducing point per row)."""
    settings = {
        name: str(value) if isinstance(value, Path) else value
        for name, value in vars(args).items()
        if name not in ("debug", "no_progress")
    }
    settings["num_inducing"] = int(model.inducing_variable.num_inducing)
    return settings


def _standardisation(data: datasets.DataSet) -> dict | None:
    """Each column's name, location m_d and scale s_d for a standardised run (the model was
    trained on (y - m) / s; y = m + s * the model's y), else None."""
    if "location" not in data.metadata:
        return None
    D = data.Y.shape[1]
    return {
        "columns": list(data.metadata.get("columns") or map(str, range(D))),
        "location": [float(m) for m in data.metadata["location"]],
        "scale": [float(s) for s in data.metadata["scale"]],
        "meaning": "the model was trained on (y - location) / scale, column by column",
    }


def _reconstruction_errors(
    args: argparse.Namespace, data: datasets.DataSet, model: SVIGPLVM
) -> dict:
    """The RMSE of the reconstruction at the latent means over the observed entries: pooled in
    the units the model was trained in (standardised, where every column weighs alike), and per
    column in the data's own units (a pooled RMSE in those would be ruled by the widest column)."""
    Y = data.Y
    amortised_rows = Y if model.latent.amortised else None
    reconstruction = model.predict_y(model.latent_mean(amortised_rows))[0].numpy()
    scale = data.metadata.get("scale", np.ones(Y.shape[1]))
    errors = (Y - reconstruction) * scale  # NaN where an entry is missing
    observed = np.sum(~np.isnan(Y), axis=0)
    squares = np.nansum(errors**2, axis=0)
    per_column = np.where(observed > 0, np.sqrt(squares / np.maximum(observed, 1)), np.nan)
    columns = data.metadata.get("columns") or [str(d) for d in range(Y.shape[1])]
    return {
        "reconstruction_rmse": rmse(Y, reconstruction),
        "reconstruction_rmse_units": _model_units(args),
        "reconstruction_rmse_per_column": {
            name: (float(value) if observed[d] else None)
            for d, (name, value) in enumerate(zip(columns, per_column))
        },
        "reconstruction_rmse_per_column_units": (
            "the data's own" if args.data is not None else "grey levels in [0, 1]"
        ),
    }


def _model_units(args: argparse.Namespace) -> str:
    """The units the model was trained in, as ``metrics.json`` names them."""
    if args.data is None:
        return "grey levels in [0, 1]"
    return "standardised columns" if _standardised(args) else "the data's own"


def _versions() -> dict[str, str]:
    """The versions of this package and of the libraries whose numbers it depends on."""
    return {
        "gpflow_svi_gplvm": __version__,
        "gpflow": gpflow.__version__,
        "tensorflow": tf.__version__,
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }


def _save_figures(
    folder: Path,
    model: SVIGPLVM,
    history: History,
    amortised_rows: np.ndarray | None,
    data: datasets.DataSet,
) -> list[str]:
    """Write the latent space, ARD and ELBO figures to ``folder``; returns their file names.
    ``amortised_rows`` [N, D] are the training rows for an amortised model, else None."""
    legend = data.metadata.get("labels_column") or ("digit" if data.labels is not None else None)
    figures = {
        "latent_space.png": plotting.plot_latent_space(
            model, amortised_rows, data.labels, legend_title=legend
        ),
        "ard.png": plotting.plot_ard(model, amortised_rows),
        "elbo.png": plotting.plot_elbo(history),
    }
    for name, figure in figures.items():
        figure.savefig(folder / name, dpi=120, bbox_inches="tight")
    return list(figures)


def _print_summary(args: argparse.Namespace, metrics: dict, seconds: float, steps: int) -> None:
    """The run in a few lines; ``steps`` is the length of the ELBO trace."""
    print(f"model: {metrics['model']}  Q={args.latent_dim}  M={args.num_inducing}")
    print(f"trained {args.iterations} steps in {seconds:.1f} s")
    if steps:
        print(f"ELBO (mean of last {min(100, steps)} steps): {metrics['elbo_final']:.2f}")
    error, units = metrics["reconstruction_rmse"], metrics["reconstruction_rmse_units"]
    print(f"reconstruction RMSE at the latent means ({units}): {error:.4f}")
    if metrics["standardised"]:
        print("  per column in the data's own units: metrics.json (reconstruction_rmse_per_column)")
    print(
        f"latent dims kept by ARD (latent means spread >= {RELEVANCE_KEPT:.0%} of the widest, "
        f"in lengthscales): {metrics['kept_latent_dims']} of {args.latent_dim}"
    )


def _learning_rate(args: argparse.Namespace) -> dict[str, Any]:
    """--learning-rate as fit's option where given; else fit's own default."""
    return {} if args.learning_rate is None else {"learning_rate": args.learning_rate}


if __name__ == "__main__":
    sys.exit(main())
