"""SingleCellGPLVM: a GPLVM fitted to an AnnData, embeddings written back to it."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, nullcontext
from pathlib import Path
from typing import Any, cast

import numpy as np
import tensorflow as tf

from ..defaults import (
    CELL_BATCH_SIZE,
    CELL_ENCODER_LEARNING_RATE,
    CELL_LATENT_DIM,
    CELL_LIKELIHOOD_NAMES,
    CELL_NUM_INDUCING,
    CELL_TABLE_LEARNING_RATE,
)
from ..distributed.workers import Workers
from ..models import SVIGPLVM
from ..rows.h5ad import DiskRows
from ..rows.shard import worker_rows
from ..rows.sparse import RowReader
from ..training.trainer import History
from ..validation import check_integer, check_seed
from .cells.encoding import CovariateEncoding
from .cells.reading import CellsFile, check_anndata, opened
from .cells.registration import CellRegistration
from .fitting.assembly import assembled, check_output
from .fitting.built_model import build_model, check_same_inputs
from .fitting.distilled import DISTIL_CELLS, ENCODER_TRAINING
from .fitting.spread import EmbeddingSpread
from .fitting.trained import distils, final_elbo, step_size, summary_of, train
from .genes.mixin import GenesMixin
from .mapping.cell_mapper import BLOCK, FIT_CELLS, INFERENCE_STEPS, CellMapper
from .mapping.offsets import BatchOffsets
from .mapping.query import read_query
from .storage.saving import load_model, save_model
from .storage.serving import export_cells

__all__ = [
    "SingleCellGPLVM",
    "TABLE_LEARNING_RATE",
    "ENCODER_LEARNING_RATE",
    "NUM_INDUCING",
    "BATCH_SIZE",
]

TABLE_LEARNING_RATE, ENCODER_LEARNING_RATE = CELL_TABLE_LEARNING_RATE, CELL_ENCODER_LEARNING_RATE
"""Adam's step size in :meth:`SingleCellGPLVM.fit` unless given, for latent tables and for an
encoder (:mod:`gpflow_svi_gplvm.defaults`)."""

BATCH_SIZE = CELL_BATCH_SIZE
"""The cells of a step in :meth:`SingleCellGPLVM.fit` unless given
(:data:`gpflow_svi_gplvm.defaults.CELL_BATCH_SIZE`)."""

NUM_INDUCING = CELL_NUM_INDUCING
"""The inducing points of :class:`SingleCellGPLVM` unless given
(:data:`gpflow_svi_gplvm.defaults.CELL_NUM_INDUCING`)."""


class SingleCellGPLVM(GenesMixin):
    """A GPLVM fitted to an AnnData: counts of chosen genes, batch and covariates from ``obs``.

    ``latent_dim``: Q, 10 by default, as scVI's latent space (on hard simulated atlases 20 kept
    the cell types better still, ARD leaving unneeded dimensions at the prior:
    benchmarks/results/single_cell.md); ``layer``: the layer holding the values (None: ``X``;
    "raw": ``adata.raw.X``, with the genes of ``adata.raw``); ``genes``: var names to keep, or
    the name of a boolean ``var`` column (e.g. "highly_variable"), or None for all;
    ``batch_key`` and ``covariate_keys``: ``obs`` columns that join the latents in the GP input
    (categories one-hot, numbers standardised), summed with a linear ARD kernel on them;
    ``likelihood``: "negative_binomial" (a dispersion per gene), "poisson" or "gaussian";
    ``size_factors``: "library" (each cell's total count over the mean), an ``obs`` column, or
    None (counts only); ``model``: "bsvi" (B-SVI), "aeb" (AEB-SVI), "map" or "point";
    further keyword options go to the model class (q(u) has one covariance shared by the genes
    unless ``shared_covariance=False``: the Laplace embedding of new cells and serving need it).
    ``refine_latents`` (``model="aeb"``): the q(x) that :meth:`fit` writes and :meth:`transform`
    returns is the encoder's, refined cell by cell by Newton steps to the Laplace approximation
    at the cell's mode (:mod:`~gpflow_svi_gplvm.singlecell.mapping`; semi-amortised inference:
    the encoder's q(x) is where a cell starts, not its optimum; the refined q(x) keeps the batch
    out of the embedding as B-SVI's does, benchmarks/results/single_cell.md); False: the
    encoder's alone, one pass of its networks. ``encoder_training`` (``model="aeb"``):
    "distilled" (default) fits B-SVI to ``distil_cells`` cells drawn at random (all of them when
    fewer), hands its GP to the amortised model and trains the encoder to reproduce those cells'
    q(x) (:mod:`~gpflow_svi_gplvm.latents.distillation`; memory grows with ``distil_cells``, not
    with N; one process; the ELBO trace is that B-SVI fit's); "joint": the encoder and the GP
    together on the ELBO, as the paper's AEB-SVI (on a hard simulated atlas it lost the cell types
    that distillation keeps, benchmarks/results/single_cell.md). Latents start at a PCA of
    :math:`\\log(1 + y / s)` with each gene's least-squares fit on the covariates taken out.

    Unusual cells and genes: a cell with no counts in the chosen genes is a ``ValueError`` under
    ``size_factors="library"`` (its size factor would be 0); a gene with no count in any cell is
    kept (its rate is learnt towards 0: filter such genes first, e.g.
    ``scanpy.pp.filter_genes(adata, min_cells=1)``); a category of one cell is kept, one of no
    cell dropped (its cells later refused as unknown), each with a warning naming it.

    **Atlas scale.** :meth:`fit` takes the path of an ``.h5ad`` file as well as an AnnData. On
    one worker a path is read from disk in shuffled blocks (out of core:
    :meth:`~gpflow_svi_gplvm.rows.h5ad.DiskRows.batches`), only the latent table in memory. With
    ``strategy=`` a ``MultiWorkerMirroredStrategy``, every worker calling :meth:`fit` alike, each
    reads only its block of cells (:func:`~gpflow_svi_gplvm.rows.shard.worker_rows`) as CSR
    and keeps their latent rows alone; size factors, covariate categories (the union of what the
    workers see, in one order), numeric scales and the initial PCA are sums over the workers, so the
    model starts as from all cells on one machine. ``output=`` (needed for a path or on several
    workers) is a folder where each worker writes its cells' q(x) and the chief assembles
    ``X_<key_added>.npy`` and ``X_<key_added>_var.npy`` [N, Q] of every cell, one worker's rows at a
    time; a file given by its path is never written."""

    def __init__(
        self,
        latent_dim: int = CELL_LATENT_DIM,
        *,
        layer: str | None = None,
        genes: Sequence[str] | str | None = None,
        batch_key: str | None = None,
        covariate_keys: Sequence[str] = (),
        likelihood: str = "negative_binomial",
        size_factors: str | None = "library",
        model: str = "bsvi",
        num_inducing: int = NUM_INDUCING,
        key_added: str = "gplvm",
        seed: int = 0,
        refine_latents: bool = True,
        encoder_training: str = "distilled",
        distil_cells: int = DISTIL_CELLS,
        **model_options: Any,
    ):
        _check_options(likelihood, size_factors, refine_latents, encoder_training)
        self.latent_dim, self.model_name = latent_dim, model
        self.num_inducing, self.key_added = num_inducing, _check_key(key_added)
        self.likelihood = likelihood
        self.registration = CellRegistration(
            layer, genes, batch_key, covariate_keys, size_factors, counts=likelihood != "gaussian"
        )
        self.seed = check_seed(seed)
        self.refine_latents, self.encoder_training = bool(refine_latents), encoder_training
        self.distil_cells = check_integer(distil_cells, "distil_cells", hint="e.g. 10000 cells")
        if model_options.get("shared_covariance") is None:  # what mapping and serving need
            model_options["shared_covariance"] = True
        self.model_options = model_options
        self.model: SVIGPLVM | None = None
        self.training_record: dict | None = None
        """How the model was trained (``uns[key_added]["settings"]`` and the final ELBO)."""
        self.reference = None
        """A loaded model's minified training cells (:meth:`load`), when saved with them."""
        self.history: History | None = None
        self._cell_mapper: CellMapper | None = None
        self.batch_offsets = BatchOffsets()
        """The effects (offsets on f [K, D]) of batches the model was not fitted with, learnt
        by :meth:`map_query`."""

    def fit(
        self,
        adata,
        iterations: int = 2000,
        batch_size: int = BATCH_SIZE,
        learning_rate: float | None = None,
        progress: bool = True,
        *,
        strategy: tf.distribute.Strategy | None = None,
        workers: Workers | None = None,
        output: str | Path | None = None,
        callback: Callable[[int], None] | None = None,
        callback_every: int = 100,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = 1000,
        resume: bool = False,
        overwrite: bool = False,
    ) -> SingleCellGPLVM:
        """Fit to ``adata`` (an AnnData, or an ``.h5ad`` path, read a block at a time) and write
        ``obsm`` and ``uns`` there (an AnnData), or to ``output`` (see the class).
        ``learning_rate``: Adam's, None for :data:`TABLE_LEARNING_RATE` (an encoder:
        :data:`ENCODER_LEARNING_RATE`); ``batch_size``: the global batch. ``callback``,
        ``checkpoint_dir``, ``checkpoint_every``, ``resume`` and ``overwrite`` act as in
        :func:`~gpflow_svi_gplvm.fit`; an ``output`` holding an earlier run's embedding is
        refused unless ``overwrite`` (or ``resume``), and means and variances are replaced as a
        pair (a stop between leaves one missing, never two runs' halves). An embedding that
        collapsed (:mod:`~gpflow_svi_gplvm.singlecell.fitting.spread`) is written with a warning,
        and ``uns[key_added]["collapsed"]`` is True. ``workers``: ``strategy``'s, if made
        already."""
        workers = workers or (Workers.of(strategy) if strategy is not None else Workers())
        adata = self._opened(adata, output, workers, bool(overwrite or resume))
        cells = worker_rows(adata.n_obs, workers.index, workers.count)
        distilled = distils(self, strategy)
        built = build_model(self, adata, cells, workers, strategy, checkpoint_dir is not None)
        self.model = built.model
        batch_size = min(check_integer(batch_size, "batch_size", hint="e.g. 256"), adata.n_obs)
        learning_rate = step_size(self.model, learning_rate, distilled)
        progress = progress and workers.count == 1  # the bars of one process
        training: dict[str, Any] = dict(batch_size=batch_size, learning_rate=learning_rate)
        training |= dict(seed=self.seed, progress=progress, callback=callback, resume=resume)
        training |= dict(callback_every=callback_every, checkpoint_every=checkpoint_every)
        rows = built.rows
        with closing(rows) if isinstance(rows, DiskRows) else nullcontext():  # the user's file
            run = training, checkpoint_dir, overwrite
            self.history = train(self, built, iterations, strategy, workers, *run)
            summary = summary_of(self, iterations, batch_size, learning_rate)
            self.training_record = summary["settings"] | {"elbo_final": final_elbo(summary["elbo"])}
            self._write_embedding(adata, rows, cells, workers, output, summary, progress)
        workers.finish()
        return self

    def _opened(self, adata, output: str | Path | None, workers: Workers, replace: bool):
        """``adata`` opened (:func:`~.reading.opened`) with its genes registered, ``output``
        checked now, not after training, and every worker's call checked to be the same."""
        path = isinstance(adata, (str, Path))
        with workers.agreeing():  # a worker's mistake stops every worker, with its message
            adata = opened(adata)
            self.registration.register_genes(adata)
        check_output(output, self.key_added, workers, replace, workers.count > 1 or path)
        check_same_inputs(self, adata, workers)
        return adata

    def _write_embedding(
        self,
        adata,
        rows: RowReader,
        cells: np.ndarray,
        workers: Workers,
        output: str | Path | None,
        summary: dict,
        progress: bool = False,
    ) -> None:
        """q(x) of this worker's training ``cells`` to ``output`` (the chief assembling every
        worker's) or to ``adata.obsm``, and ``summary`` to ``adata.uns``, with a warning when the
        embedding collapsed; a progress bar of the cells refined with ``progress``."""
        spread = EmbeddingSpread(self.latent_dim)
        blocks = spread.tracked(self._training_moments(rows, progress))
        if output is not None:
            moments = assembled(Path(output), self.key_added, blocks, cells, workers)
        else:
            means, variances = zip(*blocks)
            moments = np.concatenate(means), np.concatenate(variances)
        summary["collapsed"] = spread.warn_if_collapsed(workers)
        if moments is not None and not isinstance(adata, CellsFile):
            adata.obsm[f"X_{self.key_added}"], adata.obsm[f"X_{self.key_added}_var"] = moments
            adata.uns[self.key_added] = summary

    def transform(
        self,
        adata,
        iterations: int = INFERENCE_STEPS,
        progress: bool = False,
        missing_genes: str | None = None,
    ) -> np.ndarray:
        """Embed new cells: q(x*) of ``adata``'s cells (the fitted genes, found by name in any
        order, and the fitted ``obs`` columns) with the model frozen, each cell's the Laplace
        approximation at its mode, ``iterations`` Newton steps at most
        (:mod:`~gpflow_svi_gplvm.singlecell.mapping`), written to ``obsm`` as in :meth:`fit`;
        returns the means [N*, Q]. Cells of batches the model was not fitted with are refused
        unless :meth:`map_query` has learnt them. ``missing_genes``: None refuses cells lacking
        fitted genes, naming them; "marginalise" leaves those genes out of each cell's
        likelihood (:mod:`~gpflow_svi_gplvm.singlecell.mapping.query`)."""
        return self._embed(adata, iterations, progress, missing_genes=missing_genes)

    def map_query(
        self,
        adata,
        iterations: int = INFERENCE_STEPS,
        fit_cells: int = FIT_CELLS,
        progress: bool = True,
        missing_genes: str | None = None,
    ) -> np.ndarray:
        """Map a query onto the fitted reference: its cells of batches the model was not fitted
        with get their batch's effect, an offset per gene fitted by MAP with every parameter of
        the model frozen from up to ``fit_cells`` cells of each new batch, kept for later
        :meth:`transform`, :meth:`save` and :meth:`export_saved_model`; then every cell is
        embedded as :meth:`transform` does (the reference cells' embedding is unchanged:
        :mod:`~gpflow_svi_gplvm.singlecell.mapping`; ``missing_genes`` as there). Returns the
        means [N*, Q]."""
        fit_cells = check_integer(fit_cells, "fit_cells", hint="e.g. 2000 cells of each batch")
        return self._embed(adata, iterations, progress, fit_cells, missing_genes)

    def _embed(
        self,
        adata,
        iterations: int,
        progress: bool,
        fit_cells: int | None = None,
        missing_genes: str | None = None,
    ) -> np.ndarray:
        """:meth:`transform`, and :meth:`map_query` with ``fit_cells``."""
        iterations = check_integer(iterations, "iterations", hint="e.g. 50 Newton steps")
        model = self.model
        if model is None:
            raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
        check_anndata(adata)
        if adata.n_obs == 0:
            raise ValueError("adata holds no cells to embed: give at least one cell.")
        mapper = self._mapper(iterations)
        learn, typical = fit_cells is not None, mapper.typical_rate()
        query = read_query(
            model, self.registration, self.batch_offsets, adata, learn, missing_genes, typical
        )
        if query.new:
            learnt = mapper.learn_offsets(query, self.encoding, fit_cells or 0, self.seed)
            self.batch_offsets.add(query.new, learnt)
        moments = mapper.embed(
            query.rows, query.inputs, query.offsets(self.batch_offsets), progress
        )
        adata.obsm[f"X_{self.key_added}"], adata.obsm[f"X_{self.key_added}_var"] = moments
        return adata.obsm[f"X_{self.key_added}"]

    def save(self, folder: str | Path, adata=None, overwrite: bool = False) -> Path:
        """Write the fitted model to ``folder`` (created; an earlier saved model there is
        replaced only with ``overwrite``), all :meth:`load` needs to embed new cells without the
        training data (:mod:`~gpflow_svi_gplvm.singlecell.storage.saving`); ``adata``: the cells
        it was fitted to, whose ``obs`` and q(x) moments are kept too (a minified AnnData, no
        counts)."""
        return save_model(self, folder, adata, overwrite)

    @classmethod
    def load(cls, folder: str | Path) -> SingleCellGPLVM:
        """The model :meth:`save` wrote to ``folder`` (in this or another process), ready for
        :meth:`transform`; its minified training cells, if saved, are :attr:`reference`."""
        return load_model(folder, cls)

    def export_saved_model(
        self,
        path: str | Path,
        version: int = 1,
        overwrite: bool = False,
        iterations: int = INFERENCE_STEPS,
        dtype: tf.DType = tf.float64,
    ) -> Path:
        """Export the fitted model to ``path/<version>/`` as a TensorFlow SavedModel whose
        signature ``embed`` takes raw counts of the fitted genes and the ``obs`` columns and
        returns each cell's q(x*) as :meth:`transform` does, with TensorFlow alone
        (:mod:`~gpflow_svi_gplvm.singlecell.storage.serving`); returns that folder. ``overwrite``
        replaces an earlier export of this package at that version."""
        return export_cells(self, path, version, overwrite, iterations, dtype)

    @property
    def gene_names(self) -> list[str]:
        """The genes fitted, in the order of the model's outputs (empty before :meth:`fit`)."""
        return self.registration.gene_names

    @property
    def encoding(self) -> CovariateEncoding:
        """How the ``obs`` columns of the GP input are encoded (:attr:`registration`'s)."""
        return self.registration.encoding

    @property
    def _refines(self) -> bool:
        """Whether cells' q(x) is refined from an encoder's (``refine_latents``, amortised)."""
        return self.refine_latents and cast(SVIGPLVM, self.model).latent.amortised

    def _training_moments(
        self, rows: RowReader, progress: bool = False
    ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Means and variances [b, Q] of q(x_n) of the training cells, a block of rows at a time
        (an encoder reads their values, and with ``refine_latents`` each cell's q(x) is then
        refined as in :meth:`transform`; a latent table is read a block of its rows at a time)."""
        model = cast(SVIGPLVM, self.model)
        if self._refines:
            inputs = None if model.row_inputs is None else model.row_inputs.numpy()
            mapper = self._mapper(INFERENCE_STEPS)
            yield from mapper.blocks(rows, inputs, progress=progress, desc="refine q(x)")
            return
        for start in range(0, rows.shape[0], BLOCK):
            stop = min(start + BLOCK, rows.shape[0])
            idx = tf.range(start, stop, dtype=tf.int64)
            values = tf.constant(rows[start:stop]) if model.latent.amortised else None
            mean, variance = model.latent.moments(idx, values)
            yield mean.numpy(), variance.numpy()

    def _mapper(self, iterations: int) -> CellMapper:
        """The embedding of cells with the model frozen, in at most ``iterations`` steps a cell,
        kept: its compiled graphs serve later calls with as many steps."""
        mapper = self._cell_mapper
        if mapper is None or mapper.model is not self.model or mapper.iterations != iterations:
            mapper = self._cell_mapper = CellMapper(
                cast(SVIGPLVM, self.model), self.seed, iterations
            )
        return mapper


def _check_key(key: str) -> str:
    """``key_added``, which names ``obsm`` keys and the files ``X_<key>.npy``: a ``ValueError``
    for one that is not a plain name."""
    if not isinstance(key, str) or not re.fullmatch(r"\w[\w.-]*", key):
        raise ValueError(
            f"key_added names obsm keys and files (X_<key_added>.npy), so it must be a plain "
            f"name of letters, digits, '_', '-' or '.', got {key!r}: e.g. key_added='gplvm'."
        )
    return key


def _check_options(
    likelihood: str, size_factors: str | None, refine_latents: object, encoder_training: str
) -> None:
    """A ``ValueError`` for a face's option that is not one of its choices."""
    if likelihood not in CELL_LIKELIHOOD_NAMES:
        raise ValueError(f"likelihood must be one of {CELL_LIKELIHOOD_NAMES}, got {likelihood!r}.")
    if size_factors is not None and likelihood == "gaussian":
        raise ValueError("size_factors need a count likelihood: pass size_factors=None.")
    if not isinstance(refine_latents, (bool, np.bool_)):
        raise ValueError(f"refine_latents must be True or False, got {refine_latents!r}.")
    if encoder_training not in ENCODER_TRAINING:
        raise ValueError(
            f"encoder_training must be one of {ENCODER_TRAINING}, got {encoder_training!r}."
        )
