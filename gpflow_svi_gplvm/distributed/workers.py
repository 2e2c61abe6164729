"""Several workers: which worker this process is, sums over workers, each worker's rows and the
latent tables it owns.

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
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn, TypeVar

import numpy as np
import scipy.sparse as sp
import tensorflow as tf
from numpy.typing import ArrayLike

from ..rows.sparse import SparseRows, row_blocks
from ..validation import check_integer, check_observations

T = TypeVar("T")

__all__ = [
    "RowShard",
    "Workers",
    "WorkerLostError",
    "worker_rows",
    "worker_owned",
    "worker_owned_variables",
    "LOST_WORKER_ERRORS",
]

LOST_WORKER_ERRORS = (
    tf.errors.UnavailableError,
    tf.errors.DeadlineExceededError,
    tf.errors.CancelledError,
    tf.errors.AbortedError,
)
"""What a collective operation raises when a peer worker has stopped or cannot be reached."""

_MESSAGE_BYTES = 2048
# Bytes copied at a time into a shard's variable: the allocator keeps small freed buffers
# resident, so small blocks keep that overhead small.
_COPY_BYTES = 2**20


class WorkerLostError(RuntimeError):
    """A worker of the cluster stopped or could not be reached; restart every worker (with
    ``resume=True`` to continue from the last checkpoint)."""


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
        """The workers of ``strategy`` (default: the strategy in scope)."""
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


_OWNING = threading.local()


@contextlib.contextmanager
def worker_owned_variables(active: bool = True) -> Iterator[None]:
    """Inside (when ``active``), :func:`owned_by_worker` makes its variables for this worker
    alone: how a model built from a :class:`RowShard` on several workers keeps its per-row
    tables."""
    previous = getattr(_OWNING, "active", False)
    _OWNING.active = active
    try:
        yield
    finally:
        _OWNING.active = previous


def owned_by_worker(create: Callable[[], T]) -> T:
    """``create()``, whose variables are this worker's alone inside
    :func:`worker_owned_variables` (made outside any strategy's scope, never mirrored, and marked
    for :func:`worker_owned`); elsewhere ``create()`` as it is."""
    if not getattr(_OWNING, "active", False):
        return create()
    made = _outside_strategy(create)
    variables = [made] if isinstance(made, tf.Variable) else list(getattr(made, "variables", ()))
    for variable in variables:
        variable._worker_owned = True  # read by worker_owned
    return made


def worker_owned(variable: tf.Variable) -> bool:
    """Whether ``variable`` belongs to this worker alone (a per-row table of its rows, or such a
    table's optimiser moments): its gradient is never summed over workers."""
    return bool(getattr(variable, "_worker_owned", False))


def _outside_strategy(create: Callable[[], T]) -> T:
    """``create()`` run in a thread of its own: a strategy's scope holds for its own thread only,
    so the variables made there are plain ones of this process."""
    made: list = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            made.append(create())
        except BaseException as error:  # raised again in the caller's thread
            failed.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failed:
        raise failed[0]
    return made[0]


def worker_rows(num_data: int, worker: int, num_workers: int) -> np.ndarray:
    """The rows [n] of worker ``worker`` of ``num_workers`` when N rows are split into contiguous
    blocks of sizes differing by at most one: :math:`[\\lfloor wN/W \\rfloor,
    \\lfloor (w+1)N/W \\rfloor)`."""
    start, stop = (num_data * w // num_workers for w in (worker, worker + 1))
    return np.arange(start, stop, dtype=np.int64)


class RowShard:
    """The rows of a data set Y [N, D] that one worker holds: ``Y`` [n, D] (NaN = missing, or
    ``mask`` [n, D], True = observed) and their row numbers ``rows`` [n] in Y, for training on
    several workers without any of them holding all of Y.

    A model built from a shard inside ``strategy.scope()`` and ``fit(model, shard,
    strategy=strategy)`` train on the union of the workers' shards: every row 0..N-1 on exactly
    one worker, whose latent rows live on that worker alone. A dense ``Y`` is kept once, in a
    variable on this worker's CPU (a copy of ``Y``: drop your array, or pass a memory-mapped one,
    to keep one copy resident); :meth:`for_worker` takes this worker's block of a (memory-mapped)
    array. Sparse rows (:class:`~gpflow_svi_gplvm.rows.sparse.SparseRows` or a SciPy sparse
    matrix, e.g. counts read from an AnnData file) stay CSR, 8 bytes per non-zero entry, and each
    minibatch is densified on its own.
    """

    def __init__(
        self,
        Y: ArrayLike | SparseRows | sp.spmatrix,
        rows: ArrayLike,
        num_data: int,
        mask: ArrayLike | None = None,
    ):
        self.num_data = check_integer(num_data, "num_data", hint="N, the rows of all shards")
        self.Y: tf.Variable | SparseRows
        if isinstance(Y, SparseRows) or sp.issparse(Y):
            if mask is not None:
                raise ValueError("Sparse rows hold every entry: a mask cannot be given with them.")
            self.Y = Y if isinstance(Y, SparseRows) else SparseRows.from_matrix(Y)
            self.rows = _check_rows(rows, self.Y.shape[0], self.num_data)
            return
        Y = check_observations(Y, "the shard's Y", mask=mask)
        self.rows = _check_rows(rows, len(Y), self.num_data)
        self.Y = _rows_on_cpu(Y)

    @property
    def sparse(self) -> bool:
        """Whether the rows are held as CSR (each minibatch densified on its own)."""
        return isinstance(self.Y, SparseRows)

    @classmethod
    def for_worker(
        cls,
        Y: np.ndarray | sp.spmatrix,
        strategy: tf.distribute.Strategy | None = None,
        mask: ArrayLike | None = None,
    ) -> RowShard:
        """This worker's contiguous block of the rows of Y [N, D] (:func:`worker_rows`), for a
        ``strategy`` (default: the one in scope). With ``np.load(path, mmap_mode="r")`` only
        those rows are read; a SciPy sparse Y stays sparse."""
        Y = Y if hasattr(Y, "shape") else np.asarray(Y)
        workers = Workers.of(strategy)
        rows = worker_rows(Y.shape[0], workers.index, workers.count)
        block = slice(int(rows[0]), int(rows[-1]) + 1) if len(rows) else slice(0, 0)
        if sp.issparse(Y):
            return cls(sp.csr_matrix(Y)[block], rows, Y.shape[0], mask=mask)
        mask = None if mask is None else np.asarray(mask)[block]
        return cls(np.asarray(Y[block]), rows, Y.shape[0], mask=mask)

    @property
    def num_rows(self) -> int:
        """n, the rows this worker holds."""
        return int(self.Y.shape[0])

    @property
    def data_dim(self) -> int:
        return int(self.Y.shape[1])

    def check(self, workers: Workers) -> None:
        """A ``ValueError`` on every worker unless the workers' shards have one N and one D and
        hold every row exactly once; it names the workers to change."""
        layout = workers.stack([self.num_data, self.data_dim])
        for column, what in enumerate(("N (num_data)", "D (columns)")):
            odd = [i for i in range(workers.count) if layout[i, column] != layout[0, column]]
            if odd:
                sizes = ", ".join(f"worker {i}: {layout[i, column]}" for i in range(workers.count))
                raise ValueError(
                    f"The workers' shards disagree on {what} ({sizes}): give every worker rows "
                    f"of the same data set, with the same num_data."
                )
        held = workers.sum(np.bincount(self.rows, minlength=self.num_data).astype(np.int32))
        twice = workers.stack(int(np.sum(held[self.rows] > 1)))
        if twice.any():
            owners = ", ".join(f"worker {i}" for i in np.flatnonzero(twice))
            first = int(np.flatnonzero(held > 1)[0])
            raise ValueError(
                f"{int(np.sum(held > 1))} rows are held by more than one worker ({owners} hold "
                f"some, e.g. row {first}): give each worker rows no other worker has."
            )
        if (held == 0).any() and workers.count == 1:
            raise ValueError(
                f"This process holds {self.num_rows} of the N={self.num_data} rows and no other "
                "worker is in sight: build the model inside `with strategy.scope():` of the "
                "MultiWorkerMirroredStrategy whose workers hold the other rows, and pass that "
                "strategy to fit (or give the shard every row)."
            )
        if (held == 0).any():
            missing = np.flatnonzero(held == 0)
            raise ValueError(
                f"{len(missing)} of the N={self.num_data} rows are held by no worker (e.g. row "
                f"{int(missing[0])}): the shards must cover every row 0..N-1, or build the shards "
                "with num_data equal to the rows they hold."
            )

    def check_against(self, num_data: int, data_dim: int, workers: Workers) -> None:
        """:meth:`check`, then a ``ValueError`` on every worker unless the shards are rows of a
        data set of N = ``num_data`` rows and D = ``data_dim`` columns (the model's)."""
        self.check(workers)
        with workers.agreeing():
            if (self.num_data, self.data_dim) != (num_data, data_dim):
                raise ValueError(
                    f"the shard holds rows of a data set of N={self.num_data}, D={self.data_dim}, "
                    f"but the model was built for N={num_data}, D={data_dim}: train on the rows "
                    "the model was built from."
                )

    def has_gaps(self, workers: Workers) -> bool:
        """Whether any worker's shard has a missing entry (read a block of rows at a time)."""
        gaps = sum(int(np.isnan(block).sum()) for block in row_blocks(self.Y))
        return bool(workers.sum(gaps) > 0)


def _rows_on_cpu(Y: np.ndarray) -> tf.Variable:
    """Y [n, D] in a non-trainable variable on this process's CPU, written in blocks of about a
    MiB so that besides Y it costs one copy and no larger temporary."""

    def create() -> tf.Variable:
        with tf.device("/cpu:0"):
            zeros = tf.fill(Y.shape, tf.constant(0, Y.dtype))
            return tf.Variable(zeros, trainable=False, name="rows")

    # A worker's rows must never become a variable mirrored from the chief's (nor copied to
    # every device).
    rows = _outside_strategy(create)
    step = max(1, _COPY_BYTES // max(1, Y.shape[1] * Y.itemsize))
    for start in range(0, len(Y), step):
        block = np.asarray(Y[start : start + step])
        positions = tf.range(start, start + len(block), dtype=tf.int64)
        rows.scatter_update(tf.IndexedSlices(tf.constant(block), positions))
    return rows


def _check_rows(rows: ArrayLike, num_rows: int, num_data: int) -> np.ndarray:
    """``rows`` as int64 [n], or a ``ValueError``: not integers, not one per row of the shard,
    repeated, or outside [0, num_data)."""
    rows = np.asarray(rows)
    if rows.ndim != 1 or not np.issubdtype(rows.dtype, np.integer) or len(rows) != num_rows:
        raise ValueError(
            f"rows must be the shard's {num_rows} row numbers in the whole data set, a 1-D integer "
            f"array, got {rows.dtype} {rows.shape}."
        )
    if num_rows and (rows.min() < 0 or rows.max() >= num_data):
        raise ValueError(
            f"rows must lie in [0, num_data={num_data}), got {rows.min()}..{rows.max()}: pass "
            "num_data = the rows of all shards together."
        )
    if len(np.unique(rows)) != num_rows:
        raise ValueError("rows repeats a row number: each row of the data set appears once.")
    return rows.astype(np.int64)


def replica_batch_size(batch_size: int, num_rows: int, replicas: int, workers: Workers) -> int:
    """The rows of each replica's batch: the global ``batch_size`` split evenly over the
    ``replicas`` of all workers, each worker holding at least that many of its ``num_rows``;
    else a ``ValueError`` (the same on every worker) that says what to choose."""
    if batch_size % replicas:
        raise ValueError(
            f"{workers.name}: batch_size={batch_size} cannot be split evenly over the "
            f"{replicas} replicas ({workers.count} worker(s) x {workers.local_replicas} "
            f"device(s)): choose a multiple of {replicas}, e.g. "
            f"{max(replicas, batch_size // replicas * replicas)}."
        )
    with workers.agreeing():
        if num_rows < batch_size // replicas:
            raise ValueError(
                f"it holds {num_rows} rows, fewer than a replica's batch of "
                f"{batch_size // replicas}: lower batch_size, or give it more rows."
            )
    return batch_size // replicas


def check_strategy(
    variables: Sequence[tf.Variable],
    strategy: tf.distribute.Strategy,
    jit_compile: bool,
    device: str | None,
    workers: Workers,
) -> None:
    """A ``ValueError`` (the same on every worker) for what a strategy cannot train: compiled
    XLA, a device of the caller's choosing, or a model's shared ``variables`` made outside the
    strategy's scope."""
    where = f"{workers.name}: " if workers.count > 1 else ""
    if jit_compile:
        raise ValueError(f"{where}jit_compile=True is not supported with a strategy: leave it off.")
    if device is not None:
        raise ValueError(
            f"{where}device={device!r} with a strategy: the strategy places the step on its own "
            "devices (choose them when building it, e.g. MirroredStrategy(['/GPU:0'])); leave "
            "device=None."
        )
    shared = [v for v in variables if not worker_owned(v)]
    if not all(strategy.extended.variable_created_in_scope(v) for v in shared):
        raise ValueError(
            f"{where}The model's variables were not created under this strategy: build the model "
            "inside `with strategy.scope():` and pass the same strategy to fit."
        )


def sum_over_replicas(
    loss: tf.Tensor, gradients: list, tables: frozenset[int], mirrored: frozenset[int]
) -> tuple:
    """In a replica: the ``loss`` and the gradients of the global parameters summed over all
    replicas of all workers, the same on every replica, from one all-reduce. Of the ``tables``
    (positions in ``gradients``), the ``mirrored`` ones (a table every worker holds whole: a
    model built from all of Y) take every replica's batch rows, gathered, so that every copy
    takes the same update; the others (each worker's own rows) stay this replica's own, and
    only the count of their non-finite entries joins the all-reduce, so that every worker takes
    the same decision to apply the step. What crosses the network does not grow with N."""
    faults = tf.add_n(
        [tf.constant(0.0, loss.dtype)]
        + [
            tf.reduce_sum(tf.cast(~tf.math.is_finite(gradient_values(gradients[i])), loss.dtype))
            for i in sorted(tables)
            if gradients[i] is not None
        ]
    )
    context = tf.distribute.get_replica_context()
    if context is None or context.num_replicas_in_sync == 1:
        return loss, faults, gradients
    present = [i for i, g in enumerate(gradients) if g is not None]
    gathered = [
        i for i in present if i in mirrored and isinstance(gradients[i], tf.IndexedSlices)
    ]  # a mirrored table's batch rows, from every replica
    shared = [
        i for i in present if i not in gathered and (i not in tables or i in mirrored)
    ]  # global parameters (an IndexedSlices of one is summed densely: they are small)
    loss, faults, *sums = context.all_reduce(
        tf.distribute.ReduceOp.SUM,
        [loss, faults] + [tf.convert_to_tensor(gradients[i]) for i in shared],
    )
    rows = [(gradients[i].values, gradients[i].indices) for i in gathered]
    rows = context.all_gather(rows, axis=0) if rows else rows
    summed = list(gradients)
    for i, total in zip(shared, sums):
        summed[i] = total
    for i, (values, indices) in zip(gathered, rows):
        summed[i] = tf.IndexedSlices(values, indices, gradients[i].dense_shape)
    return loss, faults, summed


def gradient_values(gradient: tf.Tensor | tf.IndexedSlices) -> tf.Tensor:
    """The numbers of a gradient: a dense one, or a row-sliced one's rows."""
    return gradient.values if isinstance(gradient, tf.IndexedSlices) else gradient


def local_sum(gradients: tuple) -> tf.Tensor | tf.IndexedSlices | None:
    """The sum of this worker's replicas' gradients of one table: their row slices concatenated
    (the optimiser sums repeated rows), or dense ones added."""
    first = gradients[0]
    if first is None or len(gradients) == 1:
        return first
    if isinstance(first, tf.IndexedSlices):
        return tf.IndexedSlices(
            tf.concat([g.values for g in gradients], 0),
            tf.concat([g.indices for g in gradients], 0),
            first.dense_shape,
        )
    return tf.add_n(list(gradients))


def lost_worker_message(
    workers: Workers, error: tf.errors.OpError, step: int, last_checkpoint: str | None
) -> str:
    """What to do when another worker stopped answering (``error``) after this one's ``step``;
    ``last_checkpoint`` says where the run can resume from (None: nowhere)."""
    where = last_checkpoint or (
        "no checkpoint was written (pass checkpoint_dir to fit to resume after a loss)"
    )
    return (
        f"{workers.name}: another worker stopped or cannot be reached after step {step} "
        f"({_first_line(error)}); {where}. Start every worker again with the same command and "
        "resume=True."
    )
