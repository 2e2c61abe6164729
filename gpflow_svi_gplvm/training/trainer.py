"""Compiled minibatch training: shuffled row indices, rows gathered in the step, Adam, guards."""

from __future__ import annotations

import os
import re
import time
import warnings
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from gpflow.keras import tf_keras
from numpy.typing import ArrayLike
from tqdm.auto import tqdm

from ..components.importance import check_draws_fit_in_memory
from ..defaults import BATCH_SIZE, CHECKPOINT_EVERY
from ..distributed.replicas import check_strategy
from ..distributed.workers import LOST_WORKER_ERRORS, Workers, lost_worker_error
from ..likelihoods import base_likelihood
from ..models import SVIGPLVM
from ..options import takes_options_of
from ..rows.shard import RowShard
from ..rows.sparse import RowStream
from ..validation import check_bools, check_device, check_integer, check_seed
from .batches import BAD_BATCH, TrainingRows, make_dataset, minibatch_indices
from .checkpoints import Checkpoints, TrainingData
from .schedules import StepSize
from .step import TrainingStep, check_row_updates

__all__ = ["fit", "Trainer", "History", "NonFiniteLossError", "make_dataset", "minibatch_indices"]


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite; ``history`` holds the ELBO up to that step."""

    def __init__(self, message: str, history: History) -> None:
        super().__init__(message)
        self.history = history


@dataclass
class History:
    """What a training run returns."""

    elbo: np.ndarray
    """[iterations] the minibatch ELBO estimate at every step (noisy; smooth it to plot)."""
    seconds: float
    """Wall-clock time of the run, compilation included."""
    tracing_count: int
    """How often the compiled step was traced (1 for a healthy run)."""


_AGREED_SETTINGS = ("batch_size", "seed", "q_u_optimizer", "row_updates", "checkpoint_every")
"""Trainer's options that every worker must be given alike (besides its step sizes)."""


class Trainer:
    """Holds a model, its optimiser and a data iterator, and runs compiled training steps.

    ``data`` is Y [N, D] (NaN = missing, or ``mask`` [N, D] with True = observed), held once in a
    tensor on the CPU from which each step gathers its batch of shuffled rows
    (:func:`minibatch_indices`); or, on each of several workers, a
    :class:`~gpflow_svi_gplvm.rows.shard.RowShard` of its own rows (dense, or CSR densified
    a minibatch at a time); or rows too many for memory, streamed from disk in shuffled blocks (a
    :class:`~gpflow_svi_gplvm.rows.sparse.RowStream` such as
    :class:`~gpflow_svi_gplvm.rows.h5ad.DiskRows`, one worker; its batches follow from the seed and
    the step, so checkpoints need no iterator); or a ``tf.data.Dataset`` of ``(idx [B] int64, Y [B,
    D])`` (one worker). One compiled step with the iterator's ``element_spec`` as input signature
    (so it traces once), run ``k`` times inside one compiled loop per Python call to keep dispatch
    cost off each step. A step whose loss is not finite applies no update, so the model keeps its
    last good state.

    ``strategy``: train under a ``tf.distribute.Strategy`` (build the model in its scope):
    ``MirroredStrategy`` over the devices of one machine, or ``MultiWorkerMirroredStrategy`` over
    the workers of ``TF_CONFIG``. ``batch_size`` is the global batch, split evenly over the
    replicas; each worker draws its replicas' batches from its own rows. The loss and gradients are
    summed over every replica of every worker inside the step, by one all-reduce (the latent tables'
    rows each in their replica's block), so that every worker applies the same update and all hold
    the same parameters (a model built from all of Y on every worker holds its latent tables whole
    on each: every replica's batch rows are gathered to all of them). A worker that stops makes the
    others raise :class:`~gpflow_svi_gplvm.distributed.workers.WorkerLostError`; with checkpoints,
    restarting every worker with ``resume=True`` continues the run exactly.

    ``q_u_optimizer="natgrad"`` trains q(u) by natural-gradient steps of size ``natgrad_gamma``
    (:class:`~gpflow_svi_gplvm.training.natural_gradients.InducingNaturalGradient`) and everything
    else with Adam, from one gradient pass in the same compiled step; ``"adam"`` trains q(u) with
    the rest. The default (None) is "natgrad" for a Gaussian likelihood and "adam" otherwise. With a
    constant step size, the minibatch noise in q(u) grows with gamma (the default 0.03 is measured
    against Adam by ``benchmarks/convergence.py``). The step itself is a
    :class:`~gpflow_svi_gplvm.training.step.TrainingStep` (:attr:`steps`); its rows a
    :class:`~gpflow_svi_gplvm.training.batches.TrainingRows` (:attr:`rows`).

    ``learning_rate`` (Adam's) and ``natgrad_gamma`` are numbers or schedules: functions of the step
    count t (0 at the first step), such as a ``tf_keras`` ``LearningRateSchedule`` or a
    :class:`~gpflow_svi_gplvm.training.schedules.WarmUp`, checked before training
    (:class:`~gpflow_svi_gplvm.training.schedules.StepSize`) and read from Adam's step count, so a
    resumed run continues them. ``row_updates`` chooses how the package's Adam moves the per-row
    latent tables: "sparse" moves only the batch's rows (a step's cost does not grow with N),
    "dense" every row every step (the rows' moments keep moving them between their batches, as
    tf_keras' Adam does), "auto" (default) dense for tables of at most
    :data:`~gpflow_svi_gplvm.training.step.DENSE_ENTRIES` entries.

    ``workers``: the :class:`~gpflow_svi_gplvm.distributed.workers.Workers` of ``strategy``, when
    the caller has made them (else made here).

    ``device`` runs the compiled steps on that device ("/CPU:0", "/GPU:1"; a device this process
    lacks is a ``ValueError``); None (default) lets TensorFlow place them, on the first GPU when
    it sees one. The model's variables stay where they were built.

    With ``checkpoint_dir``, a :class:`~gpflow_svi_gplvm.training.checkpoints.Checkpoints` folder
    keeps the model, the optimiser, the latent module's random generator and the step count (from
    which the batches follow; a user's dataset's iterator besides) every ``checkpoint_every`` steps
    and at the end of each :meth:`train`, beside the ELBO history; :meth:`restore` resumes exactly
    where the latest checkpoint left off. Under several workers only the chief (worker 0) writes to
    the folder, which every worker must be able to read. The checkpoints record the rows' values and
    gaps, the model's observed inputs, ``data_names`` (e.g. ``{"genes": [...], "covariates":
    [...]}``), the model's class and likelihood: a resume on others is refused naming them."""

    def __init__(
        self,
        model: SVIGPLVM,
        data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
        *,
        batch_size: int = BATCH_SIZE,
        learning_rate: float | Callable[[tf.Tensor], tf.Tensor] = 1e-2,
        optimizer: tf_keras.optimizers.Optimizer | None = None,
        seed: int = 0,
        jit_compile: bool = False,
        mask: ArrayLike | None = None,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = CHECKPOINT_EVERY,
        max_to_keep: int = 3,
        strategy: tf.distribute.Strategy | None = None,
        allow_new_data: bool = False,
        q_u_optimizer: str | None = None,
        natgrad_gamma: float | Callable[[tf.Tensor], tf.Tensor] = 0.03,
        overwrite: bool = False,
        row_updates: str = "auto",
        device: str | None = None,
        data_names: dict[str, list[str]] | None = None,
        workers: Workers | None = None,
    ) -> None:
        _check_kinds(model, optimizer, strategy)
        check_bools(jit_compile=jit_compile, allow_new_data=allow_new_data, overwrite=overwrite)
        seed, self.device = check_seed(seed), check_device(device)
        learning_rate = StepSize.of(learning_rate)
        natgrad_gamma = StepSize.of(natgrad_gamma, gamma=True)
        dense_entries = check_row_updates(row_updates, optimizer)
        self.strategy = strategy or tf.distribute.get_strategy()
        self.workers = workers or (Workers.of(strategy) if strategy is not None else Workers())
        if strategy is not None:
            check_strategy(model.variables, strategy, jit_compile, device, self.workers)
        settings = {name: v for name, v in locals().items() if name in _AGREED_SETTINGS}
        settings |= {"learning_rate": learning_rate.values, "natgrad_gamma": natgrad_gamma.values}
        settings["checkpoints"] = checkpoint_dir is not None
        self.workers.agree("called fit with other settings", settings)
        model.latent.generator.reset_from_seed(seed)
        self.model = model
        self.step_count = tf.Variable(0, dtype=tf.int64, trainable=False, name="step_count")
        self.rows = TrainingRows(model, data, mask, batch_size, seed, self.strategy, self.workers)
        sizes = (model.num_samples, model.num_importance, self.rows.replica_batch)
        check_draws_fit_in_memory(*sizes, model.data_dim, model.latent_dim)
        step_sizes = (learning_rate, natgrad_gamma, q_u_optimizer, dense_entries)
        self.steps = TrainingStep(model, self.rows, optimizer, *step_sizes, jit_compile)
        self.elbo: list[np.ndarray] = []
        self.checkpoints: Checkpoints | None = None
        if checkpoint_dir is not None:
            record = self.rows.record(batch_size, data_names)
            kept = (checkpoint_every, max_to_keep, allow_new_data, overwrite)
            self.checkpoints = _open_checkpoints(self, checkpoint_dir, record, *kept)

    closed: bool = False
    """Whether :meth:`close` was called: a closed Trainer neither trains nor saves."""

    def close(self) -> None:
        """Release the checkpoint folder to other processes (``fit`` does this at its end; a
        Trainer also releases it when garbage collected or used in a ``with`` block). The
        Trainer is then done: :meth:`train` and :meth:`save` are a ``ValueError``, and its
        optimiser's state (the Adam moments of the latent tables, 4 N Q numbers) is freed."""
        if not self.closed:
            self.steps.release()
        self.closed = True
        if self.checkpoints is not None:
            self.checkpoints.close()

    def _check_open(self, action: str) -> None:
        if self.closed:
            raise ValueError(
                f"This Trainer was closed (its checkpoint folder released, perhaps now another "
                f"run's), so it cannot {action}: build a new Trainer (resume=True continues "
                "from the folder's latest checkpoint)."
            )

    def __enter__(self) -> Trainer:
        return self

    def __exit__(self, *error: object) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "checkpoints", None) is not None:
            self.close()

    @property
    def num_steps(self) -> int:
        """Steps taken so far, restored ones included."""
        return int(self.step_count.numpy())

    @property
    def tracing_count(self) -> int:
        """How often the compiled step was traced (1 for a healthy run)."""
        return self.steps.tracing_count

    def restore(self) -> bool:
        """Load the latest readable checkpoint, if any; True when one was restored.

        A checkpoint of a model with other shapes or another q(u) covariance layout, or written
        while training on other data or with another batch size (unless ``allow_new_data``), is
        a ``ValueError`` that names the difference; the checkpoint files are left as they are. A
        checkpoint that cannot be read (truncated, missing or damaged files) is passed over for
        the newest older one, with a warning naming both (see :meth:`Checkpoints.restore`).
        """
        if self.checkpoints is None:
            return False
        elbo = self.checkpoints.restore(self.model)
        if elbo is None:
            return False
        self.elbo = [elbo]
        if self.rows.follow_from_step:
            self.steps.start(self.rows.batches(self.num_steps))
        return True

    def save(self) -> None:
        """Write a checkpoint now (history first, so it always covers the checkpoint's steps),
        once the folder is checked to be still this run's."""
        self._check_open("save")
        if self.checkpoints is None:
            raise ValueError(
                "save() needs a checkpoint folder: build the Trainer with checkpoint_dir."
            )
        self.checkpoints.folder.check_held()
        self.checkpoints.save(self._elbo_array())

    def train(
        self,
        iterations: int,
        steps_per_call: int = 100,
        progress: bool = True,
        callback: Callable[[int], None] | None = None,
        callback_every: int = 100,
    ) -> History:
        """Run ``iterations`` more steps; ``callback(step)`` runs every ``callback_every`` steps.

        A ``gpflow.monitor.Monitor`` is a valid callback (e.g. for TensorBoard). Returns the
        history of every step taken so far (restored ones included).
        """
        self._check_open("train")
        iterations = check_integer(iterations, "iterations", minimum=0)
        steps_per_call = check_integer(steps_per_call, "steps_per_call")
        callback_every = check_integer(callback_every, "callback_every")
        _check_callback(callback)
        if self.checkpoints is not None:
            self.checkpoints.check_owner()  # before the first step, on every worker alike
        start = time.perf_counter()
        target = self.num_steps + iterations
        # Workers step together: each must stop at the same step, with checkpoints between.
        calls: dict[str, object] = {"iterations": target, "steps_per_call": steps_per_call}
        calls |= {"callback_every": callback_every, "callback": callback is not None}
        self.workers.agree("called train with other iterations", calls)
        rejected = self.steps.rejected_natural_steps()
        # The rates a step will use, each checked before the step (a user's optimizer has its own).
        step_sizes = [getattr(self.steps.optimizer, "learning_rate", None)]
        step_sizes += [getattr(self.steps.natural_gradient, "gamma", None)]
        with tqdm(total=iterations, disable=not progress, desc="fit", unit="step") as bar:
            while self.num_steps < target:
                chunk = min(steps_per_call, target - self.num_steps)
                if callback is not None:
                    chunk = min(chunk, callback_every - self.num_steps % callback_every)
                values = self._advance(self._checked_chunk(chunk, step_sizes), start)
                bar.update(len(values))
                bar.set_postfix(elbo=f"{values.mean():.4g}")
                if self.checkpoints is not None and self.num_steps % self.checkpoints.every == 0:
                    self.save()
                if callback is not None and self.num_steps % callback_every == 0:
                    callback(self.num_steps)
        if self.checkpoints is not None and self.checkpoints.saved_at != self.num_steps:
            self.save()
        self._warn_of_rejected_steps(self.steps.rejected_natural_steps() - rejected, iterations)
        self.workers.finish()
        return self._history(start)

    def _checked_chunk(self, chunk: int, step_sizes: list) -> int:
        """At most ``chunk`` steps, up to the next checkpoint and through steps at which every
        schedule in ``step_sizes`` gives a valid size."""
        if self.checkpoints is not None:
            chunk = min(chunk, self.checkpoints.steps_to_next())
        for size in step_sizes:
            if isinstance(size, StepSize):
                chunk = size.valid_steps(self.num_steps, chunk)
        return chunk

    def _advance(self, num_steps: int, start: float) -> np.ndarray:
        """Run ``num_steps`` compiled steps and record their ELBOs [num_steps]; a
        :class:`NonFiniteLossError` after a non-finite one (the model keeps its last good
        state, and no checkpoint is written)."""
        try:
            with nullcontext() if self.device is None else tf.device(self.device):
                values = self.steps.run(num_steps).numpy()
        except LOST_WORKER_ERRORS as error:
            if self.workers.count == 1:
                raise
            saved, last = self.checkpoints, None
            if saved is not None and saved.saved_at is not None:
                last = f"the last checkpoint is step {saved.saved_at} in {saved.directory}"
            raise lost_worker_error(self.workers, error, self.num_steps, last) from error
        except tf.errors.InvalidArgumentError as error:
            plain = _plain_step_error(error, self.rows.on_disk is not None)
            if plain is None:
                raise
            raise plain from error
        self.elbo.append(values)
        self.step_count.assign_add(len(values))
        if not np.all(np.isfinite(values)):
            raise NonFiniteLossError(
                f"The training loss or its gradient stopped being finite at step {self.num_steps}. "
                "This is usually a failed Cholesky factorisation: raise the jitter "
                "(gpflow.config.set_default_jitter(1e-4)), train in float64, or lower the "
                "learning rate. The model keeps its parameters from the last finite step.",
                self._history(start),
            )
        return values

    @staticmethod
    def _warn_of_rejected_steps(rejected: int, iterations: int) -> None:
        if rejected:
            warnings.warn(
                f"{rejected} of {iterations} natural-gradient steps on q(u) were rejected (the new "
                "q(u) covariance was not positive definite, usually from a badly conditioned "
                "Kuu with data on a large scale), so q(u) did not move in them. Standardise the "
                "data, lower natgrad_gamma, or pass q_u_optimizer='adam'.",
                stacklevel=3,
            )

    def _elbo_array(self) -> np.ndarray:
        return np.concatenate(self.elbo) if self.elbo else np.zeros(0)

    def _history(self, start: float) -> History:
        return History(self._elbo_array(), time.perf_counter() - start, self.tracing_count)


def _open_checkpoints(
    trainer: Trainer,
    directory: str | Path,
    record: TrainingData,
    every: int,
    max_to_keep: int,
    allow_new_data: bool,
    overwrite: bool,
) -> Checkpoints:
    """The checkpoint folder of ``trainer``'s model, optimiser, generator and steps (and the
    iterator of a user's dataset: the batches of rows held here follow from the step)."""
    if not isinstance(directory, (str, os.PathLike)) or not str(directory).strip():
        raise ValueError(
            f"checkpoint_dir must name a folder (a str or path), got {directory!r}: e.g. "
            "checkpoint_dir='checkpoints/'."
        )
    # Adam's state lives under a key of its own per q_u_optimizer (its variables differ),
    # so a checkpoint of the other choice is refused, not restored into the wrong slots.
    steps, model = trainer.steps, trainer.model
    optimizer_key = "optimizer" if steps.natural_gradient is None else "optimizer_natgrad"
    objects = {"model": model, optimizer_key: steps.optimizer, "generator": model.latent.generator}
    if not trainer.rows.follow_from_step:
        objects["iterator"] = steps.iterator
    return Checkpoints(
        directory,
        objects,
        trainer.step_count,
        record,
        steps.q_u_optimizer,
        every=every,
        max_to_keep=max_to_keep,
        allow_new_data=allow_new_data,
        workers=trainer.workers,
        overwrite=overwrite,
        model=_description(model, steps.q_u_optimizer),
        own_tables=model.table_rows is not None,
    )


def _plain_step_error(error: tf.errors.InvalidArgumentError, on_disk: bool) -> ValueError | None:
    """A ``ValueError`` for a step's failed check that says what to give for a bad batch of a
    user's dataset, or for rows on disk that could not be read (e.g. their file changed) the
    reader's own message, not the graph's trace around it; None for any other failure."""
    if BAD_BATCH in error.message:
        # The check's own message, without what TensorFlow adds after it.
        found = re.split(r"[\]\n]", error.message[error.message.index(BAD_BATCH) :])[0]
        return ValueError(
            f"{found}: give (idx, Y) with idx the rows' numbers in the data the model was built "
            "from and Y finite (NaN where missing), as make_dataset(model, Y, batch_size) does."
        )
    if not on_disk:
        return None
    return ValueError(f"Reading the rows on disk failed: {_raised_in_python(error.message)}")


def _raised_in_python(message: str) -> str:
    """The message of the Python exception that a compiled function's ``message`` reports
    (TensorFlow wraps it in the graph's trace and the Python traceback), else its first line."""
    found = re.search(r"\b(\w+(?:Error|Exception)): (.+?)(?:\nTraceback|\Z)", message, re.S)
    if found is None:
        return _first_line(message)
    return found.group(2).strip().splitlines()[0]


def _first_line(message: str) -> str:
    return (message.strip().splitlines() or [""])[0]


def _check_callback(callback: Callable[[int], None] | None) -> None:
    if callback is not None and not callable(callback):
        raise ValueError(
            f"callback must be a function of the step number (or a gpflow.monitor.Monitor), "
            f"got {callback!r}."
        )


def _check_kinds(model: object, optimizer: object, strategy: object) -> None:
    """A ``ValueError`` for a model, optimizer or strategy that is not one (e.g. a name)."""
    if not isinstance(model, SVIGPLVM):
        raise ValueError(
            f"fit trains the GPLVMs of this package (SVIGPLVM and its subclasses), got a "
            f"{type(model).__name__}: build one, e.g. BayesianSVIGPLVM(Y, latent_dim=2)."
        )
    if optimizer is not None and not isinstance(optimizer, tf_keras.optimizers.Optimizer):
        raise ValueError(
            f"optimizer must be a tf_keras optimizer object or None (Adam), got {optimizer!r}: "
            "e.g. from gpflow.keras import tf_keras; tf_keras.optimizers.Adam(0.01)."
        )
    if strategy is not None and not isinstance(strategy, tf.distribute.Strategy):
        raise ValueError(
            f"strategy must be a tf.distribute strategy or None, got {strategy!r}: e.g. "
            "tf.distribute.MirroredStrategy(), or multi_worker_strategy() on several machines."
        )


def _description(model: SVIGPLVM, q_u_optimizer: str) -> dict:
    """A model in a few numbers, for the run record of a checkpoint folder."""
    return {
        "class": type(model).__name__,
        "likelihood": type(base_likelihood(model.likelihood)).__name__,
        "N": model.num_data,
        "D": model.data_dim,
        "Q": model.latent_dim,
        "M": int(model.inducing_variable.num_inducing),
        "shared_covariance": model.shared_covariance,
        "q_u_optimizer": q_u_optimizer,
    }


@takes_options_of(Trainer.__init__)
def fit(
    model: SVIGPLVM,
    data: ArrayLike | RowShard | RowStream | tf.data.Dataset,
    iterations: int = 1000,
    *,
    progress: bool = True,
    steps_per_call: int = 100,
    callback: Callable[[int], None] | None = None,
    callback_every: int = 100,
    resume: bool = False,
    **options: Any,
) -> History:
    """Maximise the minibatch ELBO of ``model`` on ``data`` with Adam; returns the ELBO history.

    ``data`` and the ``options`` after ``resume`` are :class:`Trainer`'s; ``progress``,
    ``steps_per_call``, ``callback`` and ``callback_every`` those of :meth:`Trainer.train`.
    ``checkpoint_dir``: this run's own folder, saved every ``checkpoint_every`` steps;
    ``resume=True`` continues its run up to ``iterations`` steps in all, as if never
    interrupted, refusing one written on other data (values, gaps, row order) or with another
    ``batch_size`` unless ``allow_new_data``; ``overwrite=True`` deletes them and starts afresh;
    without either, a folder holding a run's checkpoints is a ``ValueError``."""
    iterations = check_integer(iterations, "iterations", minimum=0)
    check_bools(progress=progress, resume=resume)
    _check_resume(resume, bool(options.get("overwrite")), options.get("checkpoint_dir"))
    trainer = Trainer(model, data, **options)
    with trainer:  # agreed first: a worker restoring alone would wait for the others forever
        trainer.workers.agree("called fit with other settings", {"resume": resume})
        if resume:
            trainer.restore()
        remaining = max(iterations - trainer.num_steps, 0)
        return trainer.train(remaining, steps_per_call, progress, callback, callback_every)


def _check_resume(resume: bool, overwrite: bool, checkpoint_dir: str | Path | None) -> None:
    if (resume or overwrite) and checkpoint_dir is None:
        raise ValueError("resume=True and overwrite=True need the checkpoint_dir of the run.")
    if resume and overwrite:
        raise ValueError("Pass resume=True (continue the run) or overwrite=True, not both.")
