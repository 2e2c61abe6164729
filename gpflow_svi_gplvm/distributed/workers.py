"""Several workers: which worker this process is, sums and agreement over workers, and what a
lost worker means.

Under ``tf.distribute.MultiWorkerMirroredStrategy`` every worker runs the same program on its own
rows of Y (a :class:`RowShard`, dense or CSR). The global parameters (kernel, Z, q(u),
likelihood, encoder, covariate weights) are mirrored, so every worker holds the same ones; the
per-row tables (the latent rows, their optimiser moments, the rows' covariates) are the worker's
own, for its rows only (:func:`worker_owned_variables`): a worker only ever draws its own rows, so
mirrored tables would cost 6 N Q numbers on every worker and send their batch rows over the
network every step for nothing. Statistics of the whole data (column moments, the PCA basis,
checks) are sums over the workers' rows (:meth:`Workers.sum`), and a check that fails on one
worker fails on all of them, with the worker named (:meth:`Workers.agreeing`), so that no worker
is left waiting for the others.
"""

from __future__ import annotations

import contextlib
import hashlib
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

T = TypeVar("T")

__all__ = ["Workers", "WorkerLostError", "LOST_WORKER_ERRORS", "lost_worker_error"]

LOST_WORKER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)
"""What a collective operation raises when a peer worker has stopped or cannot be reached."""

_MESSAGE_BYTES = 2048


class WorkerLostError(RuntimeError):
    """A worker of the cluster stopped or could not be reached; restart every worker (with
    ``resume=True`` to continue from the last checkpoint). Raised during training, ``lost`` says
    which worker noticed and after which step, and ``last_checkpoint`` where the run can resume
    from (None: nowhere), for a caller that gives its own advice (the command line's flags)."""

    def __init__(
        self, message: str, lost: str | None = None, last_checkpoint: str | None = None
    ) -> None:
        super().__init__(message)
        self.lost, self.last_checkpoint = lost, last_checkpoint


@dataclass(frozen=True)
class Workers:
    """The workers of a ``tf.distribute`` strategy as seen from one of them: its ``index``
    (0 = the chief) among ``count``. One process (no strategy, ``MirroredStrategy``, or a
    ``MultiWorkerMirroredStrategy`` without a cluster) is one worker, whatever its devices."""

    strategy: tf.distribute.Strategy | None = None
    index: int = 0
    count: int = 1

    @classmethod
    def of(cls, strategy: tf.distribute.Strategy | None = None) -> Workers:
        """The workers of ``strategy`` (default: the strategy in scope; none: one worker)."""
        if strategy is None and not tf.distribute.has_strategy():
            return cls()
        strategy = strategy or tf.distribute.get_strategy()
        resolver = getattr(strategy, "cluster_resolver", None)
        spec = resolver.cluster_spec().as_dict() if resolver is not None else {}
        if resolver is None or not spec:
            return cls(strategy)
        unknown = set(spec) - {"chief", "worker"}
        if unknown or resolver.task_type not in ("chief", "worker"):
            raise ValueError(
                f"The cluster has task types {sorted(spec)} and this task is "
                f"{resolver.task_type!r}: training runs on 'worker' tasks (and at most one "
                "'chief'), all with MultiWorkerMirroredStrategy."
            )
        chiefs = len(spec.get("chief", []))
        index = resolver.task_id if resolver.task_type == "chief" else chiefs + resolver.task_id
        return cls(strategy, int(index), chiefs + len(spec.get("worker", [])))

    @property
    def chief(self) -> bool:
        """Whether this is the worker that writes checkpoints, histories and outputs."""
        return self.index == 0

    @property
    def name(self) -> str:
        return f"worker {self.index}"

    @property
    def local_replicas(self) -> int:
        """The replicas (devices) of this worker."""
        if self.strategy is None:
            return 1
        return len(self.strategy.extended.worker_devices)

    def sum(self, array: ArrayLike) -> np.ndarray:
        """The sum over the workers of each worker's ``array`` (same shape and dtype on every
        worker); ``array`` itself for one worker. Every worker must call it, in the same order."""
        array = np.asarray(array)
        if self.count == 1 or self.strategy is None:
            return array
        value = tf.constant(array.astype(np.int64) if array.dtype == bool else array)
        local = self.local_replicas

        def first_local_replica(context: tf.distribute.experimental.ValueContext) -> tf.Tensor:
            # Replicas are numbered worker by worker; each worker's value counts once.
            first = context.replica_id_in_sync_group % local == 0
            return value if first else tf.zeros_like(value)

        values = self.strategy.experimental_distribute_values_from_function(first_local_replica)
        try:
            total = self.strategy.reduce(tf.distribute.ReduceOp.SUM, values, axis=None)
        except LOST_WORKER_ERRORS as error:
            raise WorkerLostError(
                f"{self.name}: another worker stopped or cannot be reached ({_first_line(error)}). "
                "Look at its output for the reason, then start every worker again."
            ) from error
        return total.numpy()

    def stack(self, array: ArrayLike) -> np.ndarray:
        """Every worker's ``array`` [...] stacked in worker order: [count, ...]."""
        array = np.asarray(array)
        slots = np.zeros((self.count,) + array.shape, array.dtype)
        slots[self.index] = array
        return self.sum(slots)

    def texts(self, text: str) -> list[str]:
        """Every worker's ``text``, in worker order."""
        codes = np.frombuffer(text.encode(), np.uint8)
        width = int(self.stack(len(codes)).max(initial=0))
        padded = np.zeros(width, np.int64)
        padded[: len(codes)] = codes
        return [_decode(row) for row in self.stack(padded)] if width else [""] * self.count

    def differing(self, value: ArrayLike) -> list[int]:
        """The workers whose ``value`` differs from the chief's (none for one worker)."""
        values = self.stack(value)
        return [i for i in range(self.count) if not np.array_equal(values[i], values[0])]

    def agree(self, what: str, settings: dict[str, object]) -> None:
        """A ``ValueError`` on every worker, naming the settings and each worker's value, when
        some worker was given other ``settings`` than another (``what`` says where, e.g. "fit
        with other settings"). Values compare exactly: numbers as they are, others by their
        text. One worker: nothing to agree on."""
        if self.count == 1:
            return
        table = self.stack(np.array([_comparable(value) for value in settings.values()]))
        odd = [name for name, column in zip(settings, table.T) if np.any(column != column[0])]
        if odd:
            differences = "; ".join(
                f"{name}: " + ", ".join(f"worker {i} {text}" for i, text in enumerate(shown))
                for name, shown in ((name, self._shown(settings[name])) for name in odd)
            )
            self.refuse(
                ValueError(
                    f"The workers {what} ({differences}): every worker must make the same "
                    "call, with only its data differing."
                )
            )

    def _shown(self, value: object) -> list[str]:
        """Every worker's ``value`` as text (every worker calls this for the same setting)."""
        text = f"{value:g}" if isinstance(value, (bool, int, float, np.number)) else repr(value)
        return [t if len(t) <= 80 else t[:77] + "..." for t in self.texts(text)]

    @contextlib.contextmanager
    def agreeing(self) -> Iterator[None]:
        """Run a block of checks on every worker; a ``ValueError`` raised in it on any worker is
        raised on all of them, naming the worker(s) and their messages. One worker: as is."""
        if self.count == 1:
            yield
            return
        error: ValueError | None = None
        try:
            yield
        except ValueError as raised:
            error = raised
        messages = [_decode(row) for row in self.stack(_encode(str(error) if error else ""))]
        failed = [(i, text) for i, text in enumerate(messages) if text]
        if failed:
            refusal = ValueError("; ".join(f"worker {i}: {text}" for i, text in failed))
            refusal.__cause__ = error
            self.refuse(refusal)

    def check_shared_folder(self, folder: Path, name: str) -> None:
        """A ``ValueError`` on every worker unless ``folder`` (which the chief has made) is one
        folder that every worker sees: the chief leaves a file of its own there and each worker
        looks for it (a folder of the same path on each machine is not enough). One worker:
        nothing to share."""
        if self.count == 1:
            return
        token = secrets.token_hex(8) if self.chief else ""
        probe = Path(folder) / f".shared-folder-check-{token}"
        if self.chief:
            probe.touch()
        probe = Path(folder) / f".shared-folder-check-{self.texts(token)[0]}"  # after the touch
        try:
            with self.agreeing():
                if not probe.exists():
                    raise ValueError(
                        f"{name} {folder} is not the chief's folder here (its file is not "
                        "there): it must be one folder that every worker reads and writes (a "
                        "shared file system), with the same path on each."
                    )
        finally:
            if self.chief:  # every worker has looked
                probe.unlink(missing_ok=True)

    def finish(self) -> None:
        """Return once every worker has reached this point, the end of a run (or of a call after
        which a worker may leave). A worker that left as soon as the last exchange returned to it
        could cut that exchange short on another, which would then report a lost worker: one
        more exchange keeps each worker until the others are past the last one (and may itself
        be cut short, harmlessly: every worker has what the run exchanged)."""
        if self.count > 1:
            with contextlib.suppress(WorkerLostError):
                self.sum(np.zeros(1))

    def refuse(self, error: ValueError) -> NoReturn:
        """Raise ``error``, a refusal every worker has reached alike, once every worker has
        reached it (:meth:`finish`), so that none reports a lost worker instead."""
        self.finish()
        raise error


def _comparable(value: object) -> float:
    """A setting as a number that equals another worker's exactly when the settings are equal:
    numbers as they are, anything else by a hash of its text."""
    if isinstance(value, (bool, int, float, np.number)):
        return float(value)
    digest = hashlib.blake2b(repr(value).encode(), digest_size=6).digest()
    return float(int.from_bytes(digest, "little"))


def _encode(text: str) -> np.ndarray:
    """``text`` as UTF-8 codes [_MESSAGE_BYTES] int64, cut if longer, zero-padded."""
    codes = np.frombuffer(text.encode()[:_MESSAGE_BYTES], np.uint8)
    padded = np.zeros(_MESSAGE_BYTES, np.int64)
    padded[: len(codes)] = codes
    return padded


def _decode(codes: np.ndarray) -> str:
    return bytes(codes[codes > 0].astype(np.uint8)).decode(errors="replace")


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def lost_worker_error(
    workers: Workers, error: tf.errors.OpError, step: int, last_checkpoint: str | None
) -> WorkerLostError:
    """The error, saying what to do, when another worker stopped answering (``error``) after
    this one's ``step``; ``last_checkpoint`` says where the run can resume from (None:
    nowhere)."""
    lost = (
        f"{workers.name}: another worker stopped or cannot be reached after step {step} "
        f"({_first_line(error)})"
    )
    where = last_checkpoint or (
        "no checkpoint was written (pass checkpoint_dir to fit to resume after a loss)"
    )
    message = f"{lost}; {where}. Start every worker again with the same command and resume=True."
    return WorkerLostError(message, lost, last_checkpoint)
