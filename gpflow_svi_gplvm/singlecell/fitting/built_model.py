"""How :meth:`SingleCellGPLVM.fit <gpflow_svi_gplvm.singlecell.SingleCellGPLVM.fit>` builds its
model from the cells: every worker's call checked to be the same, the cells read once (checked,
their facts learnt: :mod:`~gpflow_svi_gplvm.rows.facts`), the ``obs`` columns and size factors
of every worker's cells, where the latents start, and the model from them."""

from __future__ import annotations

from contextlib import nullcontext
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from ...distributed.workers import Workers
from ...likelihoods import likelihood_by_name
from ...models import SVIGPLVM, lookup_model
from ...rows.shard import RowShard
from ...rows.sparse import RowReader, RowStream
from ..cells.reading import content_hash
from ..cells.registration import CellRegistration
from .fitted import CellModelOptions
from .start import initial_latents

__all__ = ["BuiltModel", "build_model", "check_same_inputs"]


class BuiltModel(NamedTuple):
    """A fit's model; the rows of this worker's cells; what to train on (rows on disk stream in
    shuffled blocks, rows in memory are a shard of CSR rows, each minibatch densified on its
    own); and the model class's keyword inputs, one row a cell (start, covariates, size
    factors) or shared."""

    model: SVIGPLVM
    rows: RowReader
    data: RowShard | RowStream
    inputs: dict


def build_model(
    options: CellModelOptions,
    registration: CellRegistration,
    adata,
    cells: np.ndarray,
    workers: Workers,
    strategy: tf.distribute.Strategy | None,
    digest: bool = False,
) -> BuiltModel:
    """The model of ``options`` for this worker's ``cells`` [n] (a block) of ``adata`` as
    ``registration`` reads them (its genes registered; the encoding of its ``obs`` columns is
    learnt here), from sums over every worker's cells. The cells are read once for their checks
    and facts (with ``digest``, the hash a checkpoint records), which the rows keep for the model
    and the training (``rows.facts``); the start's PCA reads a sample and every cell once more."""
    block = slice(int(cells[0]), int(cells[-1]) + 1) if len(cells) else slice(0, 0)
    with workers.agreeing():  # e.g. a count that is not one, on one worker's cells
        rows, scan = registration.scan(adata, cells=block, digest=digest)
    rows.facts = scan.across(workers)
    obs = adata.obs.iloc[block]
    covariates = registration.fit_covariates(obs, workers)
    sizes = registration.training_size_factors(obs, scan.totals, workers)
    initial = initial_latents(
        rows,
        options.latent_dim,
        counts=registration.counts,
        sizes=sizes,
        covariates=covariates,
        seed=options.seed,
        workers=workers,
        cells=cells,
    )
    data = rows if isinstance(rows, RowStream) else RowShard(rows, cells, adata.n_obs)
    with strategy.scope() if strategy is not None else nullcontext():  # the likelihood too
        inputs = dict(
            latent_dim=options.latent_dim,
            num_inducing=min(options.num_inducing, adata.n_obs),
            likelihood=likelihood_by_name(options.likelihood, rows.shape[1]),
            latent_init=initial,
            seed=options.seed,
            covariates=covariates,
            size_factors=sizes,
            **options.model_options,
        )
        model = lookup_model(options.model)(data, **inputs | {"workers": workers})
    return BuiltModel(model, rows, data, inputs)


def check_same_inputs(
    options: CellModelOptions, registration: CellRegistration, adata, workers: Workers
) -> None:
    """A ``ValueError`` on every worker, naming what differs and each worker's value, when the
    workers read other cells or genes (another file, ``genes``, ``layer`` or ``obs`` columns;
    a file of other values, told by a hash of its size and bytes sampled across it) or were
    built with other settings: every worker must make the same call. One worker: nothing to
    compare (and the file's hash is not read)."""
    if workers.count == 1:
        return
    inputs = {
        "cells (N)": adata.n_obs,
        "what the data holds (a hash)": content_hash(adata, registration.layer),
        "genes": registration.gene_names,
        "layer": registration.layer,
        "obs columns": registration.columns,
        "size_factors": registration.size_factors,
        "model": options.model,
        "likelihood": options.likelihood,
        "latent_dim": options.latent_dim,
        "num_inducing": options.num_inducing,
        "encoder": [options.encoder_training, options.distil_cells],
        "model options": sorted((k, repr(v)) for k, v in options.model_options.items()),
    }
    workers.agree("were given other inputs than the chief", inputs)
