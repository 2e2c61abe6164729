"""What a model's build needs to know of its rows, learnt in one pass over them and handed on.

A model is built from rows Y [N, D] (NaN = missing) in memory, in CSR or on disk. Each stage of
its build and of the fit asks something of them: the checks of the values, each column's count,
mean and variance (the defaults' scale), whether the values are counts or 0/1 (the likelihood's
support), whether any entry is missing (a masked likelihood), each row's total (size factors),
and a hash of the values (what a checkpoint records). :func:`scan_rows` learns all of it in one
pass of :func:`~.sparse.row_blocks`; :meth:`RowScan.across` merges the workers' scans into
:class:`RowFacts`. Rows that know their facts keep them (``rows.facts``), so that a later stage
given the same rows reads them from there (:func:`facts_of`), not from the file again.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..distributed.workers import Workers
from .sparse import row_blocks

__all__ = [
    "RowFacts",
    "RowShape",
    "RowScan",
    "scan_rows",
    "read_facts",
    "facts_of",
    "row_totals",
    "hash_block",
]

Check = Callable[[np.ndarray, int], None]


@dataclass(frozen=True)
class RowFacts:
    """The facts of Y [N, D] (with ``workers`` > 1: this worker's rows [n, D] of all workers'):
    each column's count of ``observed`` entries, mean and variance (ddof 0) [D], over all
    workers' rows; whether every observed entry of every worker is a non-negative integer
    (``counts``) or 0 or 1 (``binary``), and whether any entry of any worker is missing
    (``gaps``); of this worker's rows, those with nothing observed (``empty_rows``), each one's
    total [n] (:func:`row_totals`) and, when asked for, ``digest``, the hash of their values and
    gaps that :class:`~gpflow_svi_gplvm.training.data_record.TrainingData` records. ``workers``:
    how many workers the facts were merged over."""

    observed: np.ndarray
    mean: np.ndarray
    variance: np.ndarray
    counts: bool
    binary: bool
    empty_rows: int
    totals: np.ndarray
    gaps: bool
    digest: str | None = None
    workers: int = 1


class RowShape:
    """Rows of a shape [N, D] without values: what a model is built from when every variable is
    assigned afterwards (a saved model's load), so that its build reads nothing. Its facts are
    placeholders (every entry an observed count of mean and variance 1, each row's total 1),
    which only the values they start from depend on; reading a row is an error."""

    def __init__(self, num_rows: int, data_dim: int):
        self.shape = (num_rows, data_dim)
        observed, ones = np.full(data_dim, float(num_rows)), np.ones(data_dim)
        self.facts = RowFacts(observed, ones, ones, True, False, 0, np.ones(num_rows), False)

    def __getitem__(self, rows: slice) -> np.ndarray:
        raise ValueError("RowShape holds no values: build the model from its rows to read them.")

    def take(self, rows: np.ndarray) -> np.ndarray:
        return self[slice(0, 0)]

    def view(self, transform: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> RowShape:
        return self

    def row_sums(self) -> np.ndarray:
        return self[slice(0, 0)]


@dataclass(frozen=True)
class RowScan:
    """One worker's pass over its rows (:func:`scan_rows`), before the workers' are merged:
    counts, means and sums of squared deviations [3, D], its rows' facts and the largest
    magnitude of its values (for the message of moments that overflow)."""

    moments: np.ndarray
    counts: bool
    binary: bool
    empty_rows: int
    totals: np.ndarray
    missing: int
    digest: str | None
    largest: float

    def across(self, workers: Workers | None = None) -> RowFacts:
        """The :class:`RowFacts` of every worker's rows (each worker calls this alike).

        A mean or variance beyond float64's range (entries near 1e154 and above) is a
        ``ValueError``: no model can be fitted on that scale, and standardising would turn the
        data into zeros."""
        workers = workers or Workers()
        merged = np.zeros_like(self.moments)
        with np.errstate(over="ignore", invalid="ignore"):
            for worker in workers.stack(self.moments):
                merged = _merged(merged, worker)
            count, mean, squares = merged
            variance = squares / np.maximum(count, 1)
        if not (np.isfinite(mean).all() and np.isfinite(variance).all()):
            raise ValueError(
                f"The column variances of Y overflow float64 (its largest magnitude is "
                f"{self.largest:.3g}). Rescale Y before training: standardise each column, "
                "or divide by a power of ten."
            )
        failed = workers.sum([not self.counts, not self.binary, self.missing])
        return RowFacts(
            observed=count,
            mean=mean,
            variance=variance,
            counts=not failed[0],
            binary=not failed[1],
            empty_rows=self.empty_rows,
            totals=self.totals,
            gaps=bool(failed[2] > 0),
            digest=self.digest,
            workers=workers.count,
        )


def scan_rows(Y, check: Check | None = None, digest: bool = False) -> RowScan:
    """One pass over Y [n, D] (NaN = missing) in row blocks: ``check(block, first row)`` sees
    each block first and may raise; each block's counts, means and sums of squared deviations
    are merged as Chan et al. (1979) do; with ``digest``, the values and gaps are hashed."""
    moments = np.zeros((3, Y.shape[1]))  # count, mean, sum of squared deviations
    counts, binary, empty_rows, missing, largest = True, True, 0, 0, 0.0
    totals, first = np.empty(Y.shape[0]), 0
    hashed = hashlib.blake2b(digest_size=16) if digest else None
    with np.errstate(over="ignore", invalid="ignore"):
        for block in row_blocks(Y):
            if check is not None:
                check(block, first)
            observed = ~np.isnan(block)
            complete = bool(observed.all())  # most blocks: no copy of the observed values
            values = block.ravel() if complete else block[observed]
            moments = _merged(moments, _block_moments(block, None if complete else observed))
            counts = counts and bool(np.all(values >= 0) and np.all(values == np.round(values)))
            binary = binary and bool(np.isin(values, (0.0, 1.0)).all())
            empty_rows += 0 if complete else int((~observed).all(axis=1).sum())
            missing += int(block.size - len(values))
            largest = max(largest, float(np.max(np.abs(values), initial=0.0)))
            totals[first : first + len(block)] = (
                block.sum(axis=1) if complete else row_totals(block)
            )
            first += len(block)
            if hashed is not None:
                hash_block(hashed, block, None if complete else ~observed)
    code = None if hashed is None else hashed.hexdigest()
    return RowScan(moments, counts, binary, empty_rows, totals, missing, code, largest)


def read_facts(Y, workers: Workers | None = None, digest: bool = False) -> RowFacts:
    """The :class:`RowFacts` of Y [n, D] (this worker's rows of all ``workers``'), from one
    pass (:func:`scan_rows`)."""
    return scan_rows(Y, digest=digest).across(workers)


def facts_of(Y, workers: Workers | None = None) -> RowFacts:
    """The facts Y keeps (``Y.facts``, set by whoever read them, merged over as many workers),
    or else those of one pass over it (:func:`read_facts`)."""
    workers = workers or Workers()
    known = getattr(Y, "facts", None)
    if isinstance(known, RowFacts) and known.workers == workers.count:
        return known
    return read_facts(Y, workers)


def row_totals(block: np.ndarray) -> np.ndarray:
    r"""Each row's total [b] of a block of rows [b, D], a row with gaps scaled up to all D
    columns, :math:`l_n = \frac{D}{|O_n|} \sum_{d \in O_n} y_{nd}` (of counts: the library size)."""
    observed = ~np.isnan(block)
    counts, D = observed.sum(axis=1), block.shape[1]
    sums = np.where(observed, block, 0.0).sum(axis=1)
    return np.where(counts == D, sums, sums * D / np.maximum(counts, 1))  # complete: the sum


def hash_block(digest, block: np.ndarray, missing: np.ndarray | None) -> None:
    """Add a block of rows [b, D] to a ``hashlib`` ``digest``: where its gaps are (``missing``
    [b, D], None for none) and its values, 0 in the gaps (the hash a checkpoint records)."""
    if missing is None:  # the same bytes, without masks
        digest.update(bytes(-(-block.size // 8)))
        digest.update(np.ascontiguousarray(block))
        return
    digest.update(np.packbits(missing).tobytes())
    digest.update(np.where(missing, 0.0, block).tobytes())


def _block_moments(block: np.ndarray, observed: np.ndarray | None) -> np.ndarray:
    """Counts, means and sums of squared deviations [3, D] of a block's observed entries
    (``observed`` [b, D], None when all are)."""
    if observed is None:
        mean = block.sum(axis=0) / len(block)
        squares = np.square(block - mean).sum(axis=0)
        return np.stack([np.full(block.shape[1], float(len(block))), mean, squares])
    count = observed.sum(axis=0)
    mean = np.where(observed, block, 0.0).sum(axis=0) / np.maximum(count, 1)
    squares = np.square(np.where(observed, block - mean, 0.0)).sum(axis=0)
    return np.stack([count, mean, squares])


def _merged(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Counts, means and sums of squared deviations [3, D] of two sets of rows together."""
    count = a[0] + b[0]
    share = np.divide(b[0], count, out=np.zeros_like(count), where=count > 0)
    delta = b[1] - a[1]
    return np.stack([count, a[1] + delta * share, a[2] + b[2] + np.square(delta) * a[0] * share])
