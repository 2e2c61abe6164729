"""Checkpoints of a training run and the ELBO history file beside them.

A run's folder (:mod:`~gpflow_svi_gplvm.training.run_folder`: one run per folder, one writing
process at a time) holds ``tf.train.CheckpointManager`` checkpoints (``ckpt-<step>``) and
``elbo_history.npy``, the ELBO of every step taken so far. The history is written first, by an
atomic rename, so it always covers the latest checkpoint's steps, and a run that fails writes
nothing, so a good checkpoint is never replaced by a bad one. Each checkpoint records what the
run trained on (:class:`TrainingData`) and which run wrote it, so that resuming on other data is
noticed, and a damaged or missing index is rebuilt from the checkpoint files.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf
from gpflow.utilities import parameter_dict

from ..defaults import CHECKPOINT_EVERY
from ..distributed.workers import Workers
from ..models import SVIGPLVM, covariance_layout
from ..validation import check_integer
from .data_record import TrainingData
from .refusals import ResumeRefusedError
from .run_folder import HISTORY_FILE, RunFolder, checkpoint_steps

__all__ = ["Checkpoints", "TrainingData", "HISTORY_FILE", "read_history", "write_history"]


def write_history(directory: Path, elbo: np.ndarray) -> None:
    """Replace the folder's ELBO history by ``elbo`` [steps] in one atomic rename, so that a crash
    leaves the old file or the new one, never half of one."""
    staging = directory / (HISTORY_FILE + ".tmp.npy")
    np.save(staging, elbo)
    os.replace(staging, directory / HISTORY_FILE)


def read_history(directory: Path, num_steps: int) -> np.ndarray:
    """The ELBO [num_steps] of the first ``num_steps`` steps from the folder's history file, NaN
    where it has none (no file, a shorter one, or one that cannot be read: then a warning)."""
    elbo = np.full(num_steps, np.nan)
    history = directory / HISTORY_FILE
    try:
        stored = np.load(history, allow_pickle=False) if history.exists() else elbo[:0]
    except (OSError, ValueError) as error:
        warnings.warn(
            f"The ELBO history {history} cannot be read ({_first_line(error)}); the history "
            "of the restored steps is NaN.",
            stacklevel=4,
        )
        stored = elbo[:0]
    stored = np.asarray(stored, dtype=float).ravel()[:num_steps]
    elbo[: len(stored)] = stored
    return elbo


class Checkpoints:
    """A training run's checkpoint folder: saves ``objects`` (the model, the optimiser, the data
    iterator, ...) and the ELBO history every ``every`` steps, and restores the latest readable
    checkpoint exactly, refusing one written by another model, another ``q_u_optimizer`` or on
    other ``data`` (unless ``allow_new_data``).

    ``step_count`` (an int64 variable among ``objects``) numbers the checkpoints. The folder is
    checked for writing and locked for this process at once (:meth:`close` releases it), and it
    belongs to one run: a new run (no :meth:`restore`) into a folder that holds another run's
    checkpoints is a ``ValueError`` before its first step (:meth:`check_owner`) unless
    ``overwrite`` deletes them first. ``model`` describes the model in the folder's run record.

    Of several ``workers`` only the chief writes the folder and the history; the others take
    part in each save (as TensorFlow's multi-worker saving expects) into a temporary folder of
    their own that is deleted at once. With ``own_tables`` (each worker keeps the latent tables
    of its own rows) every worker writes its checkpoints, the global state and its table shard,
    into ``worker-<index>/`` beside the chief's (which holds the chief's shard): no worker ever
    gathers another's rows, and the global state costs little next to the tables. Every worker
    restores from the folder, so it must be one that all of them read (a shared file system); they
    resume at the latest step that every worker's checkpoints hold, and workers that restore
    different steps are a ``ValueError``.
    """

    def __init__(
        self,
        directory: str | Path,
        objects: dict[str, tf.Module | tf.data.Iterator | tf.Variable],
        step_count: tf.Variable,
        data: TrainingData,
        q_u_optimizer: str,
        every: int = CHECKPOINT_EVERY,
        max_to_keep: int = 3,
        allow_new_data: bool = False,
        workers: Workers | None = None,
        overwrite: bool = False,
        model: dict | None = None,
        own_tables: bool = False,
    ) -> None:
        self.workers = workers or Workers()
        self.own_tables = own_tables and self.workers.count > 1
        self.every = check_integer(every, "checkpoint_every")
        self.max_to_keep = check_integer(max_to_keep, "max_to_keep")
        self.folder = RunFolder(directory)
        self.checkpoint = tf.train.Checkpoint(**objects, step_count=step_count, data=data)
        self.step_count, self.data, self.model = step_count, data, model or {}
        self.q_u_optimizer = q_u_optimizer
        self.allow_new_data = allow_new_data
        self.saved_at: int | None = None
        self.run: str | None = None  # the id of the run this process continues or started
        with self.workers.agreeing():
            if self.workers.chief:
                self._take(overwrite)
        self.occupied = bool(self.workers.stack(int(self.folder.holds_checkpoints()))[0])
        self.own_folder = self.directory
        if self.own_tables and not self.workers.chief:
            self.own_folder = self.directory / f"worker-{self.workers.index}"
            self.own_folder.mkdir(exist_ok=True)
        self.manager = self._manager()

    def _take(self, overwrite: bool) -> None:
        """Check and lock the folder for this process; with ``overwrite``, delete the checkpoints
        of the run that held it."""
        self.folder.check_writable()
        self.folder.lock()
        if overwrite and self.folder.holds_checkpoints():
            deleted = self.folder.clear() + _clear_worker_folders(self.directory)
            shown = ", ".join(deleted[:4]) + (", ..." if len(deleted) > 4 else "")
            warnings.warn(
                f"overwrite=True: deleted {len(deleted)} files of the earlier run in "
                f"{self.directory} ({shown}).",
                stacklevel=5,
            )

    def _manager(self) -> tf.train.CheckpointManager:
        """TensorFlow's manager of the folder; a missing or damaged index that does not list
        every checkpoint file is rebuilt from the files first (by the chief, or by each worker in
        its own folder), with a warning."""
        folder = self.own_folder
        manager = tf.train.CheckpointManager(self.checkpoint, str(folder), self.max_to_keep)
        on_disk = [str(folder / f"ckpt-{step}") for step in checkpoint_steps(folder)]
        missing = sorted(set(on_disk) - set(manager.checkpoints), key=on_disk.index)
        if missing:
            listed = sorted(set(on_disk) | set(manager.checkpoints), key=_step_of)
            if self.workers.chief or folder != self.directory:
                # Listed with their files' times: the manager keeps (and later deletes, beyond
                # max_to_keep) only checkpoints newer than the index's "last preserved" time.
                times = [Path(path + ".index").stat().st_mtime for path in listed]
                tf.compat.v1.train.update_checkpoint_state(
                    str(folder),
                    listed[-1],
                    all_model_checkpoint_paths=listed,
                    all_model_checkpoint_timestamps=times,
                    last_preserved_timestamp=min(times) - 1.0,
                )
            warnings.warn(
                f"The checkpoint index of {folder} is missing or damaged (it does not list "
                f"{', '.join(Path(path).name for path in missing)}); rebuilt it from the "
                "checkpoint files.",
                stacklevel=5,
            )
        # Every worker takes part, whether or not its own index was rebuilt (a worker killed
        # while saving leaves only its own folder's index behind), and reads the indexes after
        # the chief has rewritten the shared one.
        if not self.workers.stack(bool(missing)).any():
            return manager
        return tf.train.CheckpointManager(self.checkpoint, str(folder), self.max_to_keep)

    @property
    def directory(self) -> Path:
        return self.folder.path

    @property
    def num_steps(self) -> int:
        return int(self.step_count.numpy())

    def steps_to_next(self) -> int:
        """Steps from the current one to the next checkpoint."""
        return self.every - self.num_steps % self.every

    def check_owner(self) -> None:
        """A ``ValueError`` (on every worker) when this run would write into a folder holding
        another run's checkpoints: it must :meth:`restore` them, or be built with
        ``overwrite=True``."""
        if self.occupied and self.run is None:
            raise ValueError(
                f"checkpoint_dir {self.directory} holds the {self.folder.describe()}. Pass "
                "resume=True to continue that run, overwrite=True to delete its checkpoints and "
                "start afresh, or choose another checkpoint_dir."
            )

    def save(self, elbo: np.ndarray) -> None:
        """Write a checkpoint now (history ``elbo`` [steps] first, so it always covers the
        checkpoint's steps); on a worker other than the chief, write it to a temporary folder
        and delete that."""
        self.check_owner()
        if self.run is None:  # a new run's first checkpoint: the folder becomes its own
            self.run = self._start_run()
            self.occupied = True
        self.data.current["run"] = self.run
        if self.workers.chief:
            write_history(self.directory, elbo)
            self.manager.save(checkpoint_number=self.num_steps)
        elif self.own_tables:
            self.manager.save(checkpoint_number=self.num_steps)
        else:
            with tempfile.TemporaryDirectory(prefix=f"gplvm-{self.workers.name}-") as scratch:
                self.manager.checkpoint.write(os.path.join(scratch, "ckpt"))
        self.saved_at = self.num_steps

    def close(self) -> None:
        """Release the folder for other processes."""
        self.folder.unlock()

    def restore(self, model: SVIGPLVM) -> np.ndarray | None:
        """Load the latest readable checkpoint into the objects; returns the ELBO [steps] of its
        steps (NaN where the history has none), or None when the folder holds no checkpoint. This
        run then continues the run that wrote it.

        A checkpoint of a model with other shapes or another q(u) covariance layout, or written
        while training on other data or with another batch size (unless ``allow_new_data``), is
        a ``ValueError`` that names the difference; the checkpoint files are left as they are. A
        checkpoint that cannot be read (truncated, missing or damaged files) is passed over for
        the newest older one, with a warning naming both.
        """
        paths = self._common_checkpoints()  # the same on every worker
        with self.workers.agreeing():
            path = self._restore_latest(model, paths)
        restored = -1 if path is None else self.num_steps
        if self.workers.differing(restored):
            steps = self.workers.stack(restored)
            found = ", ".join(
                f"worker {i}: {'nothing' if step < 0 else f'step {step}'}"
                for i, step in enumerate(steps)
            )
            self.workers.refuse(
                ValueError(
                    f"The workers restored different checkpoints from {self.directory} "
                    f"({found}): checkpoint_dir must be one folder that every worker reads (a "
                    "shared file system), with the same path on each."
                )
            )
        if path is None:
            if not checkpoint_steps(self.directory):  # only an index or history: no run to go on
                self.run = self._start_run()
            return None
        record = self.folder.run()
        # A folder written before runs were recorded continues as a run of its own.
        self.run = record["run"] if record and "run" in record else self._start_run()
        self.saved_at = self.num_steps
        return read_history(self.directory, self.num_steps)

    def _start_run(self) -> str:
        """Record a new run as the folder's owner (the chief writes it); its id, on every
        worker."""
        run = self.folder.start_run(self.model, self.data.current) if self.workers.chief else ""
        code = np.zeros(16, np.int64)
        code[: len(run) // 2] = np.frombuffer(bytes.fromhex(run), np.uint8)
        return bytes(self.workers.stack(code)[0].astype(np.uint8)).hex()

    def _restore_latest(self, model: SVIGPLVM, paths: list[str]) -> str | None:
        """Load the latest readable checkpoint of ``paths`` (oldest first); its path, or None
        when there is none."""
        if not paths:
            return None
        unreadable: list[str] = []
        for path in reversed(paths):
            if self._load(model, path, unreadable):
                if unreadable:
                    warnings.warn(
                        f"Could not read the newer checkpoint(s) {'; '.join(unreadable)}; resumed "
                        f"from {path}, step {self.num_steps}.",
                        stacklevel=4,
                    )
                return path
        raise ResumeRefusedError(
            "No checkpoint in {folder} can be read: {unreadable}",
            folder=self.manager.directory,
            unreadable="; ".join(unreadable),
        )

    def _load(self, model: SVIGPLVM, path: str, unreadable: list[str]) -> bool:
        """Restore the checkpoint at ``path``; False (and a note in ``unreadable``) when its
        files cannot be read, a ``ValueError`` when it belongs to another model or data."""
        try:
            reader = tf.train.load_checkpoint(path)
            shapes = reader.get_variable_to_shape_map()
            stored = TrainingData.stored_in(reader)
        except (tf.errors.OpError, OSError, IndexError, ValueError) as error:
            unreadable.append(f"{path} ({_first_line(error)})")
            return False
        _check_same_model(self.model, self.folder.run(), path)
        if not self.allow_new_data:  # names the data lacks (genes) before the shapes they change
            self.data.check_names_against(stored, path)
        _check_model_shapes(model, path, shapes)
        _check_trained_shapes(self.checkpoint, model, path, shapes)
        if not self.allow_new_data:
            self.data.check_against(stored, path)
        status = None
        try:
            status = self.manager.checkpoint.restore(path)
            status.assert_existing_objects_matched()
        except (ValueError, tf.errors.InvalidArgumentError, AssertionError) as error:
            if status is not None:
                status.expect_partial()  # refused as a whole: no warning per value
            raise ResumeRefusedError(
                "The checkpoint {path} does not fit this model ({error})",
                [
                    "resume with a model built exactly like the one that wrote it and the same "
                    f"q_u_optimizer (this run has {{q_u_optimizer:{self.q_u_optimizer!r}}})"
                ],
                path=path,
                error=_first_line(error).split(". ")[0],  # not the unmatched values it lists
            ) from error
        except tf.errors.OpError as error:  # values that cannot be read back
            unreadable.append(f"{path} ({_first_line(error)})")
            return False
        return True

    def _common_checkpoints(self) -> list[str]:
        """This worker's checkpoints, oldest first; with ``own_tables``, those of the steps that
        every worker's folder holds (a worker stopped while saving may lack the newest)."""
        paths = list(self.manager.checkpoints)
        if not self.own_tables:
            return paths
        steps = np.full(self.max_to_keep + 1, -1, np.int64)
        mine = [_step_of(path) for path in paths][-len(steps) :]
        steps[: len(mine)] = mine
        every = self.workers.stack(steps)
        common = set(every[0]).intersection(*map(set, every[1:])) - {-1}
        held = [i for i, row in enumerate(every) if (row >= 0).any()]
        if held and not common:
            self.workers.refuse(
                ResumeRefusedError(
                    "The folder {folder} holds checkpoints of worker(s) {held} alone, none of a "
                    "step that all {count} workers hold: each worker keeps its own latent rows "
                    "there, so a run resumes on as many workers as wrote it (a run of one process "
                    "in one process)",
                    ["resume it so"],
                    folder=self.directory,
                    held=held,
                    count=self.workers.count,
                )
            )
        return [path for path in paths if _step_of(path) in common]


def _clear_worker_folders(directory: Path) -> list[str]:
    """Delete the checkpoints of the ``worker-<index>/`` folders of ``directory`` (and each
    folder once empty); the names deleted."""
    deleted = []
    for folder in sorted(directory.glob("worker-*")):
        if folder.is_dir():
            deleted += [f"{folder.name}/{name}" for name in RunFolder(folder).clear()]
            if not any(folder.iterdir()):
                folder.rmdir()
    return deleted


def _step_of(path: str) -> int:
    return int(path.rsplit("-", 1)[1])


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _check_same_model(model: dict, record: dict | None, path: str) -> None:
    """A ``ValueError`` naming the class or likelihood of the model that wrote the folder's
    run (its ``record``) where they differ from this run's ``model``: a checkpoint of one
    restores into another of the same shapes without a word (a negative binomial's dispersion
    has no place in a Poisson model)."""
    written = (record or {}).get("model", {})
    differ = [
        f"{key} {written[key]} there, {model[key]} here"
        for key in ("class", "likelihood")
        if key in written and key in model and written[key] != model[key]
    ]
    if differ:
        raise ResumeRefusedError(
            "The checkpoint {path} was written by another model ({differ})",
            ["resume with the model that wrote it"],
            path=path,
            differ="; ".join(differ),
        )


def _check_trained_shapes(
    checkpoint: tf.train.Checkpoint, model: SVIGPLVM, path: str, shapes: dict
) -> None:
    """A checkpoint whose trained variables (the optimiser's list: Z, the latent tables, the
    kernel's, ...) have other shapes than this model's (another Q, M or N) is a ValueError
    naming the first, before a restore that would fail half-way."""
    variables = {
        name.lstrip("."): getattr(value, "unconstrained_variable", value)
        for name, value in parameter_dict(model).items()
    }
    names = {v.ref(): name for name, v in variables.items() if isinstance(v, tf.Variable)}
    for key in ("optimizer", "optimizer_natgrad"):
        trained = getattr(getattr(checkpoint, key, None), "variables_to_train", [])
        for i, variable in enumerate(trained):
            written = shapes.get(f"{key}/variables_to_train/{i}/.ATTRIBUTES/VARIABLE_VALUE")
            if written is None or list(written) == variable.shape.as_list():
                continue
            name = names.get(variable.ref(), variable.name)
            raise ResumeRefusedError(
                "The checkpoint {path} was written by a model whose {name} has shape {written}; "
                "this model's has {shape}",
                [
                    "resume with the model built as the one that wrote it ({latent_dim}, "
                    "{num_inducing}, the data's rows)"
                ],
                path=path,
                name=name,
                written=list(written),
                shape=variable.shape.as_list(),
            )


def _check_model_shapes(model: SVIGPLVM, path: str, shapes: dict) -> None:
    """A checkpoint (its variables' ``shapes``) of a model of another D (q_mu [M, D]) or of the
    other q(u) covariance layout is a ValueError naming both."""
    written_dim = shapes.get("model/q_mu/_pretransformed_input/.ATTRIBUTES/VARIABLE_VALUE")
    if written_dim is not None and written_dim[-1] != model.data_dim:
        raise ResumeRefusedError(
            "The checkpoint {path} was written by a model with D={written} outputs (columns of "
            "Y), but this model has D={this}",
            ["resume on data of {written} columns"],
            path=path,
            written=written_dim[-1],
            this=model.data_dim,
        )
    stored = shapes.get("model/q_sqrt/_pretransformed_input/.ATTRIBUTES/VARIABLE_VALUE")
    if stored is None or stored[0] == model.q_sqrt.shape[0]:
        return
    written_shared = stored[0] == 1
    raise ResumeRefusedError(
        "The checkpoint {path} was written by a model with {written}, but this model has {this}",
        [f"resume with a model built with {{shared_covariance:{written_shared}}}"],
        path=path,
        written=covariance_layout(written_shared, model.data_dim),
        this=model.covariance_layout,
    )
