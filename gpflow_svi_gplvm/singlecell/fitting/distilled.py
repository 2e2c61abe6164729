"""The amortised model of single cells trained by distillation (``SingleCellGPLVM(model="aeb")``,
``encoder_training="distilled"``): B-SVI on cells drawn at random, its GP handed to the amortised
model, the encoder fitted to those cells' q(x) (:mod:`gpflow_svi_gplvm.latents.distillation`)."""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import tensorflow as tf
from gpflow.utilities import deepcopy

from ...latents.distillation import copy_global_parameters, distil_encoder
from ...models import SVIGPLVM, lookup_model
from ...rows.shard import RowShard
from ...rows.sparse import RowReader, SparseRows
from ...training.trainer import History, fit

__all__ = ["ENCODER_TRAINING", "DISTIL_CELLS", "fit_distilled"]

ENCODER_TRAINING = ("distilled", "joint")
"""The values of ``SingleCellGPLVM(encoder_training=...)``: the encoder fitted to a B-SVI fit's
q(x), or trained with the GP on the ELBO."""

DISTIL_CELLS = 10_000
"""The cells B-SVI is fitted to before the encoder is distilled from it, unless given: on a hard
simulated atlas of 10,000 cells, half of them gave the whole atlas the embedding that B-SVI on
all of them gives (benchmarks/results/single_cell.md)."""

PER_CELL = ("latent_init", "covariates", "size_factors")
"""The model inputs that hold a row a cell, taken for the cells drawn."""


def fit_distilled(
    model: SVIGPLVM,
    rows: RowReader,
    inputs: dict[str, Any],
    distil_cells: int,
    iterations: int,
    *,
    batch_size: int,
    seed: int,
    progress: bool,
    **options: Any,
) -> History:
    """Fit B-SVI for ``iterations`` steps to ``distil_cells`` of the N cells' ``rows`` [N, D],
    drawn at random (all of them when fewer), with ``model``'s inputs (``inputs``, the model
    class's keyword arguments; those of :data:`PER_CELL` a row a cell), then copy its GP to the
    amortised ``model`` and distil ``model``'s encoder from the drawn cells' q(x) in as many
    steps. Returns the B-SVI fit's history. ``options`` go to :func:`~gpflow_svi_gplvm.fit`."""
    N = rows.shape[0]
    if min(N, distil_cells) < inputs["num_inducing"]:
        raise ValueError(
            f"distil_cells={distil_cells} is fewer than num_inducing={inputs['num_inducing']}: "
            "B-SVI is fitted to the cells drawn, at least one for each inducing point. Raise "
            "distil_cells or lower num_inducing."
        )
    drawn = np.sort(np.random.default_rng(seed).permutation(N)[: min(N, distil_cells)])
    cells = SparseRows.from_matrix(_Drawn(rows, drawn))
    table_class = lookup_model("bsvi")
    accepted = inspect.signature(table_class).parameters
    given = {k: v for k, v in inputs.items() if k in accepted}
    given.update({k: given[k][drawn] for k in PER_CELL if given.get(k) is not None})
    given["likelihood"] = deepcopy(given["likelihood"])  # its own, trained by the table
    shard = RowShard(cells, np.arange(len(drawn)), len(drawn))
    table = table_class(shard, **given)
    batch_size = min(batch_size, len(drawn))
    history = fit(
        table, shard, iterations, batch_size=batch_size, seed=seed, progress=progress, **options
    )
    copy_global_parameters(table, model)
    means, variances = table.latent.moments(tf.range(len(drawn), dtype=tf.int64))
    distil_encoder(
        model.latent,
        cells,
        means.numpy(),
        variances.numpy(),
        iterations,
        batch_size=batch_size,
        seed=seed,
        progress=progress,
    )
    return history


class _Drawn:
    """The drawn cells of ``rows`` as :meth:`SparseRows.from_matrix` reads a source: sliced by
    rows into dense blocks."""

    def __init__(self, rows: RowReader, drawn: np.ndarray):
        self.rows, self.drawn = rows, drawn
        self.shape = (len(drawn), rows.shape[1])

    def __getitem__(self, part: slice) -> np.ndarray:
        return self.rows.take(self.drawn[part])
