r"""Cells embedded with a fitted model left as it is: their q(x*), a block of cells per compiled
call, and the effects of batches the model was not fitted with (query mapping).

Each cell's q(x*) is the Laplace approximation at the mode of its posterior under the frozen GP
(:class:`~gpflow_svi_gplvm.prediction.laplace.LaplaceLatents`: Newton steps for a block of cells at
once), from its encoder's q(x) (the amortised model) or from the best of the reference cells'
latents; where that does not apply (a q(u) covariance per gene), by
:class:`~gpflow_svi_gplvm.LatentInference`.

**New batches** (the scArches idea, ``map_query``): a cell of batch b unseen in training has the
zero one-hot of the fitted batches in its GP input, and its batch's effect is an offset per gene
on f, :math:`f_d = g_d(x, 0) + \gamma_{bd}`, with the prior
:math:`\gamma_{bd} \sim N(0, \bar w)`, :math:`\bar w` the mean of the fitted batches' variances
in the linear covariate kernel (their effects' prior). :math:`\gamma_b` is fitted by MAP with
every parameter of the model frozen, alternating with the q(x*) of up to ``fit_cells`` of the
batch's cells: given the cells' q(x*), each :math:`\gamma_{bd}` maximises
:math:`\sum_n E \log p(y_{nd} \mid f_{nd} + \gamma_{bd}) - \gamma_{bd}^2 / (2 \bar w)`, one
concave problem per gene solved by Newton's method. The offsets start from the batch's pooled
counts per unit size factor against the fitted cells' typical rate. Then every cell of the
query is embedded with its batch's offsets; the model, and so the reference cells' embedding, do
not change.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import cast

import gpflow
import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from tqdm.auto import tqdm

from ..compiled import GraphFunction
from ..components.covariates import new_row_inputs
from ..components.initialisation import initial_offset
from ..likelihoods import expectation_derivatives
from ..models import SVIGPLVM
from ..prediction.laplace import LOW, LaplaceLatents, laplace_applies
from ..prediction.latent_inference import TOLERANCE, LatentInference
from ..rows.sparse import RowReader
from .encoding import CovariateEncoding, obs_column

__all__ = [
    "BatchOffsets",
    "CellMapper",
    "FIT_CELLS",
    "INFERENCE_STEPS",
    "Query",
    "new_batch_prior_variance",
    "read_query",
]

INFERENCE_STEPS = 50
"""The most Newton steps a cell's q(x*) takes when it is embedded; most stop after a few."""

FIT_CELLS = 2000
"""The cells of a new batch whose q(x*) its offsets are fitted with, at most (drawn at random)."""

ROUNDS = 6
"""Alternations of a new batch's offsets and its cells' q(x*), at most."""

OFFSET_TOLERANCE = 1e-2
"""The alternations stop once no offset moves by more than this (on f's scale, the log of a
count's rate: a 1% change of a gene's expression)."""

BLOCK = 4096
"""Cells read and embedded at a time."""


class BatchOffsets:
    """The offsets on f [K, D] of batches learnt by a query mapping, by category; a cell of
    another batch has offset zero."""

    def __init__(self, categories: Sequence = (), offsets: np.ndarray | None = None):
        self.categories = list(categories)
        self.offsets = np.zeros((0, 0)) if offsets is None else np.asarray(offsets)

    def add(self, categories: Sequence, offsets: np.ndarray) -> None:
        """Keep ``offsets`` [k, D] of the new ``categories``."""
        table = offsets if not self.categories else np.concatenate([self.offsets, offsets])
        self.categories += list(categories)
        self.offsets = table

    def of(self, batches: np.ndarray, genes: int) -> np.ndarray:
        """The offsets [n, D] of cells of ``batches`` [n] (zeros for other categories)."""
        found = np.zeros((len(batches), genes))
        for k, category in enumerate(self.categories):
            found[batches == category] = self.offsets[k]
        return found


class CellMapper:
    """The q(x*) of cells under a fitted ``model`` frozen, a block at a time (see the module);
    ``iterations``: the most Newton (or Adam) steps a cell takes; ``refine``: an amortised
    model's q(x) refined from its encoder's (else the encoder's alone)."""

    def __init__(self, model: SVIGPLVM, seed: int, iterations: int = INFERENCE_STEPS):
        self.model, self.iterations = model, iterations
        self.laplace = laplace_applies(model) is None
        if self.laplace:
            self.inference: LaplaceLatents | LatentInference = LaplaceLatents(
                model, iterations, seed=seed
            )
        else:
            tolerance = TOLERANCE if model.latent.amortised else "auto"
            self.inference = LatentInference(model, iterations, seed=seed, tolerance=tolerance)

    def blocks(
        self,
        rows: RowReader | np.ndarray,
        inputs: np.ndarray | None,
        offsets=None,
        progress: bool = False,
        desc: str = "embed q(x)",
        start: np.ndarray | None = None,
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Means and variances [b, Q] of q(x*) of the cells ``rows`` [n, D] with their observed
        ``inputs`` [n, R] and ``offsets`` [n, D] on f (anything sliced by rows; None: zero), a
        block of :data:`BLOCK` cells at a time, with a progress bar if asked; Laplace steps
        start at ``start`` [n, Q] when given."""
        if offsets is not None and not self.laplace:
            raise ValueError(
                "Cells of batches learnt by map_query are embedded by Laplace inference, which "
                "needs a q(u) covariance shared by the genes: fit with shared_covariance=True."
            )
        total = rows.shape[0]
        with tqdm(total=total, disable=not progress, desc=desc, unit="cell") as bar:
            for first in range(0, total, BLOCK):
                part = slice(first, min(first + BLOCK, total))
                block = rows[part]
                given = None if inputs is None else inputs[part]
                if isinstance(self.inference, LaplaceLatents):
                    shift = None if offsets is None else offsets[part]
                    begin = None if start is None else start[part]
                    mean, variance = self.inference.infer(block, given, shift, begin)
                else:
                    found = self.inference.infer(block, given)
                    mean, variance = (t.numpy() for t in found)
                bar.update(part.stop - part.start)
                yield mean, variance

    def embed(
        self,
        rows: RowReader | np.ndarray,
        inputs: np.ndarray | None,
        offsets=None,
        progress: bool = False,
        start: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`blocks` joined: means and variances [n, Q]."""
        found = self.blocks(rows, inputs, offsets, progress, start=start)
        means, variances = zip(*found)
        return np.concatenate(means), np.concatenate(variances)

    def learn_offsets(
        self, query: Query, encoding: CovariateEncoding, fit_cells: int = FIT_CELLS, seed: int = 0
    ) -> np.ndarray:
        """The MAP offsets [K, D] of the ``query``'s new batch categories (see the module) from
        up to ``fit_cells`` cells of each; ``encoding``: the fitted one."""
        assert query.key is not None and query.batches is not None
        rows, inputs, batches, categories = query.rows, query.inputs, query.batches, query.new
        prior_variance = new_batch_prior_variance(self.model, len(encoding.categories[query.key]))
        rng = np.random.default_rng(seed)
        chosen = [rng.permutation(np.flatnonzero(batches == c))[:fit_cells] for c in categories]
        cells = np.sort(np.concatenate(chosen))
        Y = rows.take(cells)
        given = None if inputs is None else inputs[cells]
        index = {c: k for k, c in enumerate(categories)}
        which = np.array([index[b] for b in batches[cells]])  # each chosen cell's category
        offsets = self._start_offsets(Y, given, which, len(categories))
        updates = _OffsetUpdates(self.model, prior_variance)
        mean = None
        for _ in range(ROUNDS):
            mean, _ = self.embed(Y, given, offsets[which], start=mean)
            moved = updates(Y, given, mean, which, offsets)
            change, offsets = np.max(np.abs(moved - offsets)), moved
            if change < OFFSET_TOLERANCE:
                break
        return offsets

    def _start_offsets(self, Y, inputs, which: np.ndarray, count: int) -> np.ndarray:
        r"""Where each new batch's offsets [K, D] start: its cells' pooled expression per unit
        size factor against the fitted cells' typical rate, on f's scale (for a log link
        :math:`\log(\sum_n y_{nd} / \sum_n s_n) - \log \bar\mu_d`). From zero, the first
        q(x*) reads a strong batch effect as biology, and the alternation settles with a share
        of the cells misplaced (``benchmarks/results/mapping.md``)."""
        typical = self.inference.typical_rate() if self.laplace else None
        if typical is None:
            return np.zeros((count, self.model.data_dim))
        sizes = np.ones(len(which))
        if self.model.size_factor_reference is not None:
            sizes = np.exp(inputs[:, -1])
        values = np.asarray(Y)
        level = initial_offset(self.model.likelihood, typical)
        starts = []
        for k in range(count):
            mine = which == k
            pooled = np.nansum(values[mine], axis=0) / sizes[mine].sum()
            starts.append(initial_offset(self.model.likelihood, pooled) - level)
        return np.stack(starts)


class _OffsetUpdates:
    """Newton's method on each new batch's offsets :math:`\\gamma_{kd}` [K, D], given its
    cells' latents (see the module), compiled: one concave problem per gene and batch."""

    def __init__(self, model: SVIGPLVM, prior_variance: float, steps: int = 20):
        self.model, self.prior_variance, self.steps = model, prior_variance, steps
        dtype, D = default_float(), model.data_dim
        self.update = GraphFunction(
            self._update,
            [
                tf.TensorSpec([None, D], dtype),  # the cells' counts
                tf.TensorSpec([None, None], dtype),  # their GP inputs at their latents
                tf.TensorSpec([None], tf.int64),  # each cell's batch, among the new ones
                tf.TensorSpec([None, D], dtype),  # the offsets the steps start from
            ],
        )

    def __call__(self, Y, inputs, latents, which, start) -> np.ndarray:
        at = latents if inputs is None else np.concatenate([latents, inputs], axis=1)
        return self.update(Y, at, which.astype(np.int64), start).numpy()

    def _update(self, Y, at, which, start):
        """The offsets [K, D] after Newton steps from ``start`` [K, D] until none moves by more
        than 1e-6, the cells' terms (counts Y [n, D], q(f) at their GP inputs ``at``) in single
        precision (:data:`~gpflow_svi_gplvm.prediction.laplace.LOW`), the offsets in the model's."""
        mean, variance = (tf.cast(t, LOW) for t in self.model.predict_f(at))  # without offsets
        counts, count = tf.cast(Y, LOW), tf.shape(start)[0]
        precision = tf.constant(1.0 / self.prior_variance, start.dtype)

        def step(i, gamma, _):
            shifted = mean + tf.cast(tf.gather(gamma, which), LOW)
            d = expectation_derivatives(self.model.likelihood, counts, shifted, variance)
            first, second = (
                tf.cast(tf.math.unsorted_segment_sum(t, which, count), gamma.dtype)
                for t in (d.mean, d.mean_mean)
            )
            move = (first - gamma * precision) / (second - precision)
            return i + 1, gamma - move, tf.reduce_max(tf.abs(move))

        def more(i, gamma, moved):
            return (i < self.steps) & (moved > 1e-6)

        state = (tf.constant(0), start, tf.constant(np.inf, start.dtype))
        return tf.while_loop(more, step, state)[1]


def query_inputs(model: SVIGPLVM, rows: RowReader, covariates, sizes) -> np.ndarray | None:
    """The observed GP inputs [n, R] of cells (covariates, log size factor), read a block at a
    time."""
    if model.row_inputs is None:
        return None
    parts = []
    for start in range(0, rows.shape[0], BLOCK):
        part = slice(start, start + BLOCK)
        block = rows[part]
        found = new_row_inputs(
            model,
            block,
            None if covariates is None else covariates[part],
            None if sizes is None else sizes[part],
        )
        parts.append(cast(np.ndarray, found))
    return np.concatenate(parts)


class _RowOffsets:
    """The offsets [n, D] of n cells, sliced by rows: row ``codes[i]`` of ``table`` [K + 1, D]
    (its last row zero, for cells of the fitted batches)."""

    def __init__(self, table: np.ndarray, codes: np.ndarray):
        self.table, self.codes = table, codes

    def __getitem__(self, rows: slice) -> np.ndarray:
        return self.table[self.codes[rows]]


@dataclass
class Query:
    """New cells as the model reads them: their ``rows`` of the fitted genes, observed GP
    ``inputs`` [n, R], batch category of each (``batches`` [n], in ``obs[key]``) and the batch
    categories to learn (``new``)."""

    rows: RowReader
    inputs: np.ndarray | None
    batches: np.ndarray | None
    key: str | None
    new: list = field(default_factory=list)

    def offsets(self, learnt: BatchOffsets) -> _RowOffsets | None:
        """Each cell's offsets on f (sliced by rows), or None when no cell has any."""
        if self.batches is None or not learnt.categories:
            return None
        index = {c: k for k, c in enumerate(learnt.categories)}
        codes = np.array([index.get(b, len(index)) for b in self.batches])
        if (codes == len(index)).all():
            return None
        table = np.concatenate([learnt.offsets, np.zeros((1, learnt.offsets.shape[1]))])
        return _RowOffsets(table, codes)


def read_query(face, adata, learn: bool) -> Query:
    """The cells of ``adata`` as ``face`` (a fitted
    :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM`) reads new cells; with ``learn``,
    the batch categories unseen in training (and not learnt before) are to be learnt, else they
    are a ``ValueError``."""
    registration, learnt = face.registration, face.batch_offsets
    rows, library = registration.read_new(adata)
    key, batches, new = registration.batch_key, None, []
    if key is not None:
        values = obs_column(adata.obs, key)
        known = set(registration.encoding.categories[key]) | set(learnt.categories)
        unseen = sorted({v for v in values.dropna().unique() if v not in known}, key=str)
        new = unseen if learn else []
        batches = values.to_numpy(dtype=object)
    covariates = registration.encoding.transform(adata.obs, mapped=learnt.categories + new)
    sizes = registration.new_size_factors(adata.obs, library)
    inputs = query_inputs(face.model, rows, covariates, sizes)
    return Query(rows, inputs, batches, key, new)


def new_batch_prior_variance(model: SVIGPLVM, batch_columns: int) -> float:
    """:math:`\\bar w`: the mean variance of the fitted batches' columns (the first
    ``batch_columns`` covariates) in the model's linear covariate kernel."""
    kernel = getattr(model.kernel, "covariate_kernel", None)
    variance = getattr(kernel, "variance", None)
    if not isinstance(kernel, gpflow.kernels.Linear) or variance is None:
        raise ValueError(
            "map_query learns new batches' effects with the prior of the fitted batches' in the "
            "model's linear covariate kernel, which this model does not have (a covariate "
            f"kernel {type(kernel).__name__}): fit with the default kernel."
        )
    values = np.atleast_1d(variance.numpy())  # one for all columns, or one each
    return float(np.mean(values if values.size == 1 else values[:batch_columns]))
