"""What the probe's cases share: a case, how its outcome is classified, tiny cells, and a
snapshot of a user's files (benchmarks/probe.py runs the cases).

A case runs a user's call and checks what came back itself: it raises :class:`Wrong` for a
result that is wrong (NaNs, numbers that differ from the same cells read correctly) and
:class:`Lost` when a file the user had changed or vanished. Any other outcome is classified by
what was raised: a ``ValueError`` (or :class:`Refusal`, what the command line and the served
model answer, or Python's ``TypeError`` for an argument a function does not take) whose message
names the problem, by one of the case's ``names``, is a clear
refusal; anything else is raw or misleading.
"""

from __future__ import annotations

import hashlib
import threading
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

CORRECT, REFUSED, RAW, WRONG, LOST, HANG = (
    "correct",
    "refused clearly",
    "raw or misleading",
    "silently wrong",
    "output lost",
    "hang",
)
CLASSES = (CORRECT, REFUSED, RAW, WRONG, LOST, HANG)


class Wrong(Exception):
    """A result that is wrong without a word."""


class Lost(Exception):
    """A file the user had was changed or removed."""


class Hang(Exception):
    """A call that did not end in its time (raised by a case that stops it itself)."""


class Refusal(Exception):
    """A refusal that is not a ``ValueError`` by its interface: the command line's exit status 2
    and its ``error:`` line, or the served model's failed check."""


@dataclass
class Case:
    """One adversarial call: ``run`` performs and checks it; ``names``, words of which a clear
    refusal names one (lower case); None when only a correct result will do."""

    surface: str
    name: str
    run: Callable[[], Any]
    names: Sequence[str] | None = None
    timeout: float = 900.0


@dataclass
class Outcome:
    case: Case
    kind: str
    detail: str = ""
    seconds: float = 0.0
    trace: str = field(default="", repr=False)


def classify(case: Case) -> Outcome:
    """Run ``case`` in a thread (a hang is one that outlives ``case.timeout``) and classify it."""
    import time

    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = case.run()
        except BaseException as error:  # noqa: BLE001 - every outcome is classified
            box["error"], box["trace"] = error, traceback.format_exc()

    start = time.perf_counter()
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(case.timeout)
    seconds = time.perf_counter() - start
    if thread.is_alive():
        return Outcome(case, HANG, f"still running after {case.timeout:.0f} s", seconds)
    error = box.get("error")
    kind, detail = _kind(case, error)
    return Outcome(case, kind, detail, seconds, box.get("trace", ""))


def _kind(case: Case, error: BaseException | None) -> tuple[str, str]:
    if error is None:
        return CORRECT, ""
    message = " ".join(str(error).split())
    if isinstance(error, Wrong):
        return WRONG, message
    if isinstance(error, Lost):
        return LOST, message
    if isinstance(error, Hang):
        return HANG, message
    # A ValueError of the package's own (a library's subclass, e.g. JSONDecodeError, is raw);
    # Python's own TypeError for an argument a function does not take, or lacks, as any call's.
    refusal = type(error) in (ValueError, Refusal) or (
        type(error) is TypeError and "argument" in message
    )
    shown = f"{type(error).__name__}: {message[:300]}"
    if not refusal:
        return RAW, shown
    if case.names is None:
        return RAW, f"refused a valid request: {shown}"
    if any(word in message.lower() for word in case.names):
        return REFUSED, shown
    return RAW, f"does not name {list(case.names)}: {shown}"


def tf_refusal(call: Callable[[], Any]) -> Any:
    """``call()``, a TensorFlow check's failure (``InvalidArgumentError``) as a :class:`Refusal`
    with its message: the only way a served model can refuse."""
    import tensorflow as tf

    try:
        return call()
    except tf.errors.InvalidArgumentError as error:
        raise Refusal(error.message) from error


def counts_cells(n: int = 40, genes: int = 8, seed: int = 0):
    """An AnnData of Poisson counts [n, genes] (layer "counts"; log1p in X), two batches "a" and
    "b" in ``obs["batch"]`` (categorical) and a number ``obs["depth"]``."""
    import anndata
    import pandas as pd
    import scipy.sparse as sp

    rng = np.random.default_rng(seed)
    kind = rng.integers(0, 2, n)
    rate = np.exp(1.0 + 1.2 * kind[:, None] * (np.arange(genes) < genes // 2))
    counts = rng.poisson(rate).astype(np.float32)
    counts[:, 0] += 1  # every cell has counts
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(np.array(["a", "b"])[np.arange(n) % 2]),
            "depth": rng.uniform(1.0, 2.0, n),
            "kind": pd.Categorical(np.array(["t0", "t1"])[kind]),
        },
        index=[f"cell{seed}_{i}" for i in range(n)],
    )
    cells = anndata.AnnData(X=sp.csr_matrix(np.log1p(counts)), obs=obs)
    cells.var_names = [f"gene{j}" for j in range(genes)]
    cells.layers["counts"] = sp.csr_matrix(counts)
    return cells


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (relative path) with a hash of its bytes."""
    if not folder.exists():
        return {}
    if folder.is_file():
        return {"": hashlib.sha256(folder.read_bytes()).hexdigest()}
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def check_kept(before: dict[str, str], folder: Path, only: Sequence[str] | None = None) -> None:
    """A :class:`Lost` when a file of ``before`` (or of its ``only`` paths) changed or vanished
    under ``folder``."""
    after = snapshot(folder)
    names = before if only is None else [name for name in before if name in only]
    changed = [name for name in names if after.get(name) != before[name]]
    if changed:
        raise Lost(f"the user's files {changed[:4]} were changed or removed")


def keeping(folder: Path, call: Callable[[], Any]) -> Any:
    """``call()``; a :class:`Lost` (in place of whatever it raised) when it changed or removed a
    file under ``folder``."""
    before = snapshot(folder)
    try:
        return call()
    finally:
        check_kept(before, folder)


def check_close(got, expected, what: str, rtol: float = 1e-6, atol: float = 1e-8) -> None:
    """A :class:`Wrong` when ``got`` is not finite or differs from ``expected``."""
    got, expected = np.asarray(got, float), np.asarray(expected, float)
    if got.shape != expected.shape:
        raise Wrong(f"{what}: shape {got.shape}, expected {expected.shape}")
    if not np.isfinite(got).all():
        raise Wrong(f"{what}: {int((~np.isfinite(got)).sum())} values are not finite")
    if not np.allclose(got, expected, rtol=rtol, atol=atol):
        raise Wrong(f"{what}: differs by up to {np.max(np.abs(got - expected)):.3g}")


def check_finite(got, what: str) -> None:
    """A :class:`Wrong` when ``got`` holds a value that is not finite (or nothing)."""
    values = np.asarray(got, float)
    if values.size == 0 or not np.isfinite(values).all():
        raise Wrong(f"{what}: not finite ({values.size} values)")
