r"""Cells embedded with a fitted model left as it is: their q(x*), a block of cells per compiled
call, and new batches among a query's cells (a :class:`~.query.Query`, which
:meth:`~gpflow_svi_gplvm.singlecell.fitting.fitted.FittedCells.read_query` makes with
:func:`.query.read_query`).

Each cell's q(x*) is the Laplace approximation at the mode of its posterior under the frozen GP
(:class:`~gpflow_svi_gplvm.prediction.laplace.LaplaceLatents`: Newton steps for a block of cells at
once), from its encoder's q(x) (the amortised model) or from the mean of the latents of the
reference cells whose decoded expression is nearest its own; where that does not apply (a q(u)
covariance per gene), by :class:`~gpflow_svi_gplvm.LatentInference`.

New batches' offsets (:mod:`~gpflow_svi_gplvm.singlecell.mapping.offsets`) are fitted by
:meth:`CellMapper.learn_offsets`, alternating with the q(x*) of the batch's cells; then every
cell of the query is embedded with its batch's offsets, and the model, and so the reference
cells' embedding, do not change.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from ...components.initialisation import initial_offset
from ...defaults import FIT_CELLS
from ...models import SVIGPLVM
from ...prediction.laplace import LaplaceLatents, laplace_applies
from ...prediction.latent_inference import TOLERANCE, LatentInference
from ...prediction.new_row_model import candidate_rows
from ...rows.sparse import RowReader
from ..cells.encoding import CovariateEncoding
from .novelty import Novelty
from .offsets import OffsetUpdates, new_batch_prior_variance
from .query import Query, QueryInputs, offset_fitting_cells

__all__ = ["BLOCK", "CellMapper", "FIT_CELLS", "INFERENCE_STEPS"]

INFERENCE_STEPS = 50
"""The most Newton steps a cell's q(x*) takes when it is embedded; most stop after a few."""

ROUNDS = 6
"""Alternations of a new batch's offsets and its cells' q(x*), at most."""

OFFSET_TOLERANCE = 1e-2
"""The alternations stop once no offset moves by more than this (on f's scale, the log of a
count's rate: a 1% change of a gene's expression)."""

BLOCK = 4096
"""Cells read and embedded at a time."""


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
        self.seed = seed
        self._novelty: Novelty | None = None

    def novelty(self, means: np.ndarray) -> np.ndarray | None:
        """The novelty [n] in [0, 1] of cells whose q(x*) ``means`` [n, Q] are given
        (:mod:`~gpflow_svi_gplvm.singlecell.mapping.novelty`) against the q(x) means of the
        fitted cells a saved model keeps (:func:`candidate_rows` of the latent table); None for
        an amortised model (no table) or a table of one cell."""
        model = self.model
        if self._novelty is None:
            if model.latent.amortised or model.num_table_rows < 2:
                return None
            rows = candidate_rows(model.num_table_rows, self.seed)
            reference = model.latent.moments(tf.constant(rows, tf.int64))[0].numpy()
            self._novelty = Novelty(reference, 1.0 / model.ard_relevance())
        return self._novelty(means)

    def typical_rate(self) -> np.ndarray | None:
        """The fitted cells' typical rate of each gene [D] at a size factor of one (None where
        the inference has none: :meth:`LaplaceLatents.typical_rate`)."""
        return self.inference.typical_rate() if isinstance(self.inference, LaplaceLatents) else None

    def blocks(
        self,
        rows: RowReader | np.ndarray,
        inputs: np.ndarray | QueryInputs | None,
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
        inputs: np.ndarray | QueryInputs | None,
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
        """The MAP offsets [K, D] of the ``query``'s new batch categories
        (:mod:`~gpflow_svi_gplvm.singlecell.mapping.offsets`) from up to ``fit_cells`` cells of
        each; ``encoding``: the fitted one."""
        assert query.key is not None and query.batches is not None
        rows, inputs, batches, categories = query.rows, query.inputs, query.batches, query.new
        prior_variance = new_batch_prior_variance(self.model, len(encoding.categories[query.key]))
        cells = offset_fitting_cells(batches, categories, fit_cells, seed)
        Y = rows.take(cells)
        given = None if inputs is None else inputs[cells]
        index = {c: k for k, c in enumerate(categories)}
        which = np.array([index[b] for b in batches[cells]])  # each chosen cell's category
        offsets = self._start_offsets(Y, given, which, len(categories))
        updates = OffsetUpdates(self.model, prior_variance)
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
        typical = self.typical_rate()
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
