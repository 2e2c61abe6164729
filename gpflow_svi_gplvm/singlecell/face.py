"""SingleCellGPLVM: a GPLVM fitted to an AnnData, embeddings written back to it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import closing, nullcontext
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from ..defaults import (
    CELL_BATCH_SIZE,
    CELL_ENCODER_LEARNING_RATE,
    CELL_ITERATIONS,
    CELL_LATENT_DIM,
    CELL_NUM_INDUCING,
    CELL_TABLE_LEARNING_RATE,
    CHECKPOINT_EVERY,
)
from ..distributed.workers import Workers
from ..models import SVIGPLVM
from ..rows.h5ad import DiskRows
from ..rows.shard import worker_rows
from ..training.trainer import History
from ..validation import check_bools, check_integer
from .cells.encoding import CovariateEncoding
from .cells.reading import check_anndata, opened
from .cells.registration import CellRegistration
from .fitting.assembly import check_output, write_embedding
from .fitting.built_model import build_model, check_same_inputs
from .fitting.distilled import DISTIL_CELLS
from .fitting.fitted import CellModelOptions, FittedCells, fitted_state
from .fitting.trained import distils, step_size, train
from .genes.mixin import GenesMixin
from .mapping.cell_mapper import FIT_CELLS, INFERENCE_STEPS
from .mapping.offsets import BatchOffsets
from .mapping.query import warn_of_few_batches
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
        if likelihood == "gaussian" and size_factors is not None:
            raise ValueError("size_factors need a count likelihood: pass size_factors=None.")
        if model_options.get("shared_covariance") is None:  # what mapping and serving need
            model_options["shared_covariance"] = True
        self.options = CellModelOptions(
            latent_dim,
            likelihood,
            model,
            num_inducing,
            key_added,
            seed,
            refine_latents,
            encoder_training,
            distil_cells,
            model_options,
        )
        """What shapes the model and its fit (:mod:`~.fitting.fitted`)."""
        self._registration = CellRegistration(
            layer, genes, batch_key, covariate_keys, size_factors, counts=likelihood != "gaussian"
        )
        self.fitted: FittedCells | None = None
        """What :meth:`fit` or :meth:`load` made: the model, its registration, the batches a query
        mapping learnt, how it was trained (:class:`~.fitting.fitted.FittedCells`); None before."""

    @classmethod
    def _of(cls, fitted: FittedCells) -> SingleCellGPLVM:
        """The face holding the ``fitted`` state (a loaded model's), with its options."""
        face = cls.__new__(cls)
        face.options, face._registration, face.fitted = fitted.options, fitted.registration, fitted
        return face

    def fit(
        self,
        adata,
        iterations: int = CELL_ITERATIONS,
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
        checkpoint_every: int = CHECKPOINT_EVERY,
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
        already. A new :attr:`fitted` state replaces the earlier one (batches ``map_query``
        learnt and :attr:`reference` cells go with it)."""
        options = self.options
        check_bools(progress=progress, resume=resume, overwrite=overwrite)
        workers = workers or (Workers.of(strategy) if strategy is not None else Workers())
        adata, registration = self._opened(adata, output, workers, bool(overwrite or resume))
        cells = worker_rows(adata.n_obs, workers.index, workers.count)
        digest, distilled = checkpoint_dir is not None, distils(options, strategy)
        built = build_model(options, registration, adata, cells, workers, strategy, digest)
        batch_size = min(check_integer(batch_size, "batch_size", hint="e.g. 256"), adata.n_obs)
        learning_rate = step_size(built.model, learning_rate, distilled)
        progress = progress and workers.count == 1  # the bars of one process
        training: dict[str, Any] = dict(batch_size=batch_size, learning_rate=learning_rate)
        training |= dict(seed=options.seed, progress=progress, callback=callback, resume=resume)
        training |= dict(callback_every=callback_every, checkpoint_every=checkpoint_every)
        rows = built.rows  # the user's file closed after the fit
        with closing(rows) if isinstance(rows, DiskRows) else nullcontext():
            run = iterations, strategy, workers, training, checkpoint_dir, overwrite
            self.fitted, summary = train(options, registration, built, *run)
            write_embedding(self.fitted, adata, rows, cells, workers, output, summary, progress)
        workers.finish()
        return self

    def _opened(
        self, adata, output: str | Path | None, workers: Workers, overwrite: bool
    ) -> tuple[Any, CellRegistration]:
        """``adata`` opened (:func:`~.reading.opened`) and a new registration of its genes,
        ``output`` checked now, not after training, and every worker's call checked to be the
        same."""
        path = isinstance(adata, (str, Path))
        registration = replace(self._registration, gene_names=[])
        with workers.agreeing():  # a worker's mistake stops every worker, with its message
            adata = opened(adata)
            registration.register_genes(adata)
            registration.register_cells(adata)
        check_output(output, self.options.key_added, workers, overwrite, workers.count > 1 or path)
        check_same_inputs(self.options, registration, adata, workers)
        return adata, registration

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
        (:mod:`~gpflow_svi_gplvm.singlecell.mapping`), written to ``obsm`` as in :meth:`fit`,
        and each cell's novelty in [0, 1] to ``obs["<key_added>_novelty"]`` (how isolated it lies
        from the reference cells, on their own scale: above 0.99, more than 99% of them;
        :mod:`~gpflow_svi_gplvm.singlecell.mapping.novelty`; not for an amortised model);
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
        means [N*, Q].

        A batch's effect is one shift of each gene's level (on f's log scale) for all its cells:
        it cannot take a response specific to a cell type. Where the query's condition changes
        some types' expression differently (interferon-stimulated CD14 monocytes against control
        ones, say), those cells stay apart from their reference type in the embedding: that is
        the biology the offsets cannot remove, not a failed mapping. A reference fitted without a
        batch (``batch_key=None``) learns no batch effect, and one fitted with one batch category
        learns its new batches' prior from no difference between batches: both are mapped with a
        ``UserWarning`` saying so."""
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
        check_bools(progress=progress)
        fitted = fitted_state(self.fitted)
        check_anndata(adata)
        if adata.n_obs == 0:
            raise ValueError("adata holds no cells to embed: give at least one cell.")
        mapper = fitted.mapper(iterations)
        learn, typical = fit_cells is not None, mapper.typical_rate()
        learnt, query = fitted.offsets, fitted.read_query(adata, learn, missing_genes, typical)
        if learn:
            warn_of_few_batches(fitted.registration, query)
        if query.new:
            encoding, seed = fitted.registration.encoding, fitted.options.seed
            learnt.add(query.new, mapper.learn_offsets(query, encoding, fit_cells or 0, seed))
        moments = mapper.embed(query.rows, query.inputs, query.offsets(learnt), progress)
        adata.obsm[f"X_{fitted.key}"], adata.obsm[f"X_{fitted.key}_var"] = moments
        novelty = mapper.novelty(moments[0])
        if novelty is not None:
            adata.obs[f"{fitted.key}_novelty"] = novelty
        return adata.obsm[f"X_{fitted.key}"]

    def save(self, folder: str | Path, adata=None, overwrite: bool = False) -> Path:
        """Write the fitted model to ``folder`` (created; an earlier saved model there is
        replaced only with ``overwrite``), all :meth:`load` needs to embed new cells without the
        training data (:mod:`~gpflow_svi_gplvm.singlecell.storage.saving`); ``adata``: the cells
        it was fitted to, whose ``obs`` and q(x) moments are kept too (a minified AnnData, no
        counts)."""
        return save_model(fitted_state(self.fitted), folder, adata, overwrite)

    @classmethod
    def load(cls, folder: str | Path) -> SingleCellGPLVM:
        """The model :meth:`save` wrote to ``folder`` (in this or another process), ready for
        :meth:`transform`; its minified training cells, if saved, are :attr:`reference`."""
        return cls._of(load_model(folder))

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
        fitted = fitted_state(self.fitted)
        return export_cells(fitted, path, version, overwrite, iterations, dtype)

    @property
    def model(self) -> SVIGPLVM | None:
        """The fitted GPLVM (:attr:`fitted`'s), or None before :meth:`fit`."""
        return None if self.fitted is None else self.fitted.model

    @property
    def registration(self) -> CellRegistration:
        """What an AnnData means to the model: the fitted one's (:attr:`fitted`'s), or before
        :meth:`fit` the choices the next fit registers cells by."""
        return self._registration if self.fitted is None else self.fitted.registration

    @property
    def gene_names(self) -> list[str]:
        """The genes fitted, in the order of the model's outputs (empty before :meth:`fit`)."""
        return self.registration.gene_names

    @property
    def encoding(self) -> CovariateEncoding:
        """How the ``obs`` columns of the GP input are encoded (:attr:`registration`'s)."""
        return self.registration.encoding

    @property
    def batch_offsets(self) -> BatchOffsets:
        """The effects (offsets on f [K, D]) of batches the model was not fitted with, learnt
        by :meth:`map_query` (:attr:`fitted`'s)."""
        return BatchOffsets() if self.fitted is None else self.fitted.offsets

    @batch_offsets.setter
    def batch_offsets(self, offsets: BatchOffsets) -> None:
        self.fitted = replace(fitted_state(self.fitted), offsets=offsets)

    @property
    def training_record(self) -> dict | None:
        """How the model was trained (``uns[key_added]["settings"]`` and the final ELBO)."""
        return None if self.fitted is None else self.fitted.training_record

    @property
    def history(self) -> History | None:
        """The ELBO trace of the last :meth:`fit` (None before, and for a loaded model)."""
        return None if self.fitted is None else self.fitted.history

    @property
    def reference(self):
        """A loaded model's minified training cells (:meth:`load`), when saved with them."""
        return None if self.fitted is None else self.fitted.reference

    @property
    def latent_dim(self) -> int:
        """Q, the latent dimensions (:attr:`options`')."""
        return self.options.latent_dim

    @property
    def key_added(self) -> str:
        """q(x) of cells is stored as ``obsm["X_<key_added>"]`` and ``obsm["X_<key_added>_var"]``
        (:attr:`options`')."""
        return self.options.key_added
