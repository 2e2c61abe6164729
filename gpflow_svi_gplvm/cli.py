"""The command line: train a GPLVM on the embedded digits or on a data file of your own.

    python -m gpflow_svi_gplvm                       # B-SVI on scikit-learn's digits
    python -m gpflow_svi_gplvm --model aeb --data my.csv --latent-dim 3 --output runs/mine

It prints a short summary and writes ``latent_space.png``, ``ard.png``, ``elbo.png`` and
``metrics.json`` to the output folder.

On several workers, start the same command on each with its ``TF_CONFIG`` (``--distributed``
says so explicitly): each trains on its block of the rows under a
``MultiWorkerMirroredStrategy``, and only the chief (worker 0) writes the outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import matplotlib
import numpy as np
import tensorflow as tf

from . import datasets, plotting
from .distributed import (
    RowShard,
    WorkerLostError,
    Workers,
    cluster_from_environment,
    worker_rows,
)
from .initialisation import column_location_and_scale
from .metrics import rmse
from .models import MODELS, SVIGPLVM, lookup_model
from .training import History, fit
from .validation import check_observations, check_writable_folder

__all__ = ["RELEVANCE_KEPT", "build_parser", "main"]

RELEVANCE_KEPT = 0.1
"""A latent dimension is reported as kept when its latent relevance (the spread of the latent
means in lengthscales, ``SVIGPLVM.latent_relevance``) is >= 10% of the largest."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m gpflow_svi_gplvm",
        description="Train a GPLVM with stochastic variational inference and summarise it.",
    )
    parser.add_argument("--model", choices=sorted(MODELS), default="bsvi", help="latent treatment")
    parser.add_argument("--data", type=Path, help="your own .csv/.npy/.npz (default: digits)")
    parser.add_argument("--latent-dim", type=int, default=5, help="Q (default 5)")
    parser.add_argument("--num-inducing", type=int, default=50, help="M (default 50)")
    parser.add_argument("--iterations", type=int, default=3000)
    parser.add_argument("--batch-size", type=int, default=100)
    parser.add_argument("--learning-rate", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--shared-covariance",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="one q(u) covariance for all outputs (fast at large D; default: shared when D >= 100)",
    )
    parser.add_argument(
        "--no-standardise",
        action="store_true",
        help="keep a data file's columns as they are (default: centre and scale each column)",
    )
    parser.add_argument("--output", type=Path, default=Path("runs/latest"), help="output folder")
    parser.add_argument(
        "--distributed",
        action="store_true",
        help="train on the workers of TF_CONFIG (implied when TF_CONFIG is set): start the same "
        "command on every worker; each trains on its block of rows, the chief writes the outputs",
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--debug", action="store_true", help="show the Python traceback of an error"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; a mistake in the data or the options is one line on stderr
    (``error: ...``) and exit status 2, with the traceback only under ``--debug``."""
    args = build_parser().parse_args(argv)
    try:
        return _run(args)
    except (ValueError, OSError, WorkerLostError) as error:
        if args.debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    matplotlib.use("Agg")
    strategy = _strategy(args.distributed)  # before any other TensorFlow operation
    workers = Workers.of(strategy)
    with workers.agreeing():  # a folder that cannot be written is found now, not after training
        if workers.chief:
            check_writable_folder(args.output, "--output")
    data = _load_data(args.data, standardise=not args.no_standardise)
    Y = data.Y
    if workers.chief:
        missing = f"{np.isnan(Y).mean():.1%} missing"
        print(f"data: {data.description or args.data} -> Y {Y.shape}, {missing}")
    model, history, seconds = _train(args, Y, strategy)
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
    figures = _save_figures(args.output, model, history, amortised_rows, data.labels)
    _print_summary(args, metrics, seconds, len(history.elbo))
    print(f"wrote {', '.join(['metrics.json', *figures])} to {args.output}/")
    return 0


def _load_data(path: Path | None, standardise: bool) -> datasets.DataSet:
    """The digits (``path`` None) or the data file at ``path``, checked and, with
    ``standardise``, each column centred and scaled; ``Y`` [N, D], NaN = missing."""
    if path is None:
        return datasets.load_digits()
    data = datasets.load_array_file(path)
    # Checked before standardising, which would turn an infinity into a column of NaN.
    data.Y = check_observations(data.Y, f"the data in {path}")
    if standardise:
        location, scale = column_location_and_scale(data.Y)
        data.Y = (data.Y - location) / scale
    return data


def _strategy(distributed: bool) -> tf.distribute.Strategy | None:
    """A ``MultiWorkerMirroredStrategy`` over the workers of ``TF_CONFIG`` when it is set (or
    ``--distributed`` asks for one), else None."""
    if not (distributed or os.environ.get("TF_CONFIG")):
        return None
    config = cluster_from_environment()
    if not config.get("cluster"):
        raise ValueError(
            "--distributed needs TF_CONFIG naming the cluster and this worker, e.g. "
            '\'{"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", '
            '"index": 0}}\' on the first machine and "index": 1 on the second.'
        )
    return tf.distribute.MultiWorkerMirroredStrategy()


def _train(
    args: argparse.Namespace, Y: np.ndarray, strategy: tf.distribute.Strategy | None
) -> tuple[SVIGPLVM, History, float]:
    """The model that ``--model`` names, built on Y [N, D] (this worker's block of its rows under
    a ``strategy``) and trained; with the seconds taken."""
    data = Y if strategy is None else RowShard.for_worker(Y, strategy)
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        model = lookup_model(args.model)(
            data,
            args.latent_dim,
            num_inducing=args.num_inducing,
            seed=args.seed,
            shared_covariance=args.shared_covariance,
        )
    start = time.perf_counter()
    history = fit(
        model,
        data,
        iterations=args.iterations,
        batch_size=args.batch_size,
        learning_rate=args.learning_rate,
        seed=args.seed,
        progress=not args.no_progress,
        strategy=strategy,
    )
    return model, history, time.perf_counter() - start


def _metrics(
    args: argparse.Namespace,
    data: datasets.DataSet,
    model: SVIGPLVM,
    history: History,
    seconds: float,
) -> dict:
    """What ``metrics.json`` holds: the run's settings, its final ELBO (the mean of the last 100
    steps), the reconstruction RMSE at the latent means and the relevances of the latents."""
    Y = data.Y
    amortised_rows = Y if model.latent.amortised else None
    reconstruction, _ = model.predict_y(model.latent_mean(amortised_rows))
    relevance = model.latent_relevance(amortised_rows)
    kept = [int(q) for q in np.flatnonzero(relevance >= RELEVANCE_KEPT * relevance.max())]
    tail = history.elbo[-min(100, len(history.elbo)) :]
    return {
        "model": type(model).__name__,
        "data": data.description or str(args.data),
        "N": int(Y.shape[0]),
        "D": int(Y.shape[1]),
        "latent_dim": args.latent_dim,
        "num_inducing": args.num_inducing,
        "shared_covariance": model.shared_covariance,
        "iterations": args.iterations,
        "seconds": round(seconds, 2),
        "elbo_final": float(np.mean(tail)) if len(tail) else None,
        "reconstruction_rmse": rmse(Y, reconstruction.numpy()),
        "ard_relevance": [float(r) for r in model.ard_relevance()],
        "latent_relevance": [float(r) for r in relevance],
        "kept_latent_dims": kept,
    }


def _save_figures(
    folder: Path,
    model: SVIGPLVM,
    history: History,
    amortised_rows: np.ndarray | None,
    labels: np.ndarray | None,
) -> list[str]:
    """Write the latent space, ARD and ELBO figures to ``folder``; returns their file names.
    ``amortised_rows`` [N, D] are the training rows for an amortised model, else None."""
    figures = {
        "latent_space.png": plotting.plot_latent_space(model, amortised_rows, labels),
        "ard.png": plotting.plot_ard(model),
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
    print(f"reconstruction RMSE at the latent means: {metrics['reconstruction_rmse']:.4f}")
    print(
        f"latent dims kept by ARD (latent means spread >= {RELEVANCE_KEPT:.0%} of the widest, "
        f"in lengthscales): {metrics['kept_latent_dims']} of {args.latent_dim}"
    )


if __name__ == "__main__":
    sys.exit(main())
