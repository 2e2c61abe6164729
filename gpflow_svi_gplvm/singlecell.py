r"""Single-cell data as its users hold it: fit from an AnnData, embeddings written back to it.

``pip install "gpflow_svi_gplvm[singlecell]"`` brings ``anndata`` (and ``scanpy`` for neighbours
and UMAP). :class:`SingleCellGPLVM` reads counts from a layer (or ``X``), batch and technical
covariates from ``obs`` (categories one-hot, numbers standardised: the covariate part of the
GP input [x_n, c_n], :mod:`~gpflow_svi_gplvm.covariates`), and library-size factors; it models
counts as counts (negative binomial with a dispersion per gene, or Poisson, rate
:math:`s_n e^{f}`) and writes

- ``obsm["X_gplvm"]`` [N, Q]: the means of q(x_n), for ``scanpy.pp.neighbors(adata,
  use_rep="X_gplvm")``; ``obsm["X_gplvm_var"]`` [N, Q]: their variances;
- ``uns["gplvm"]``: the settings, the ELBO trace, the ARD lengthscales [Q] and the covariate
  kernel's variance per covariate column (how much each covariate moves expression).

Sparse (CSR) and backed (on-disk) matrices are read a block of rows at a time into CSR
(:class:`~gpflow_svi_gplvm.sparse_rows.SparseRows`), and every minibatch is densified on its own:
the dense N x D matrix never exists. New cells (another AnnData with the fitted genes and the
covariate columns) are embedded by :meth:`SingleCellGPLVM.transform`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import gpflow
import numpy as np
import tensorflow as tf

from .covariates import new_row_inputs
from .distributed import RowShard, Workers, worker_rows
from .inference import LatentInference
from .initialisation import pca_latents
from .likelihoods import NegativeBinomial
from .models import DEFAULT_NUM_INDUCING, SVIGPLVM, lookup_model
from .sparse_rows import RowReader, RowStream, SparseRows
from .training import History, fit
from .validation import check_integer, check_path, check_seed, check_writable_folder, row_blocks

__all__ = ["SingleCellGPLVM", "CovariateEncoding", "LIKELIHOODS"]

LIKELIHOODS = ("negative_binomial", "poisson", "gaussian")
"""The values of ``likelihood``: counts (with or without overdispersion) or continuous values."""


@dataclass
class CovariateEncoding:
    """How ``obs`` columns become covariates [N, P]: each categorical column one-hot over the
    categories seen in training, each numeric column standardised by the training mean and
    standard deviation; new cells are encoded the same way."""

    columns: Sequence[str]
    categorical: Sequence[str] = ()
    """Columns one-hot whatever their values (a batch key of integer codes is categories, as
    scanpy and scvi-tools read it)."""
    categories: dict[str, list] = field(default_factory=dict)
    location: dict[str, float] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)

    def fit(self, obs, workers: Workers | None = None) -> CovariateEncoding:
        """Learn the categories and scales of ``obs`` (a pandas DataFrame), or with ``workers``
        of every worker's ``obs`` together: the union of the categories they see, in one order
        (sorted, as pandas orders the categories of strings), and the moments of all cells."""
        workers = workers or Workers()
        for column in self.columns:
            values = _obs_column(obs, column)
            if _categorical(values) or column in self.categorical:
                seen = list(values.astype("category").cat.categories)
                self.categories[column] = _agreed_categories(seen, workers)
            else:
                numbers = values.to_numpy(dtype=float)
                if np.isinf(numbers).any():  # NaN is named by transform, as missing
                    raise ValueError(
                        f"obs column {column!r} holds {numbers[np.isinf(numbers)][0]} for "
                        f"cell {values.index[np.argmax(np.isinf(numbers))]!r}: a numeric "
                        "covariate must be finite. Fix or drop those cells, or leave it out."
                    )
                count, total, squares = workers.sum(
                    [len(numbers), np.sum(numbers), np.sum(numbers**2)]
                )
                mean = total / max(count, 1)
                self.location[column] = float(mean)
                self.scale[column] = float(np.sqrt(max(squares / max(count, 1) - mean**2, 0)))
                self.scale[column] = self.scale[column] or 1.0
        return self

    @property
    def names(self) -> list[str]:
        """One name per covariate column: ``column=category`` or ``column``."""
        names = []
        for column in self.columns:
            if column in self.categories:
                names += [f"{column}={c}" for c in self.categories[column]]
            else:
                names.append(column)
        return names

    def transform(self, obs) -> np.ndarray | None:
        """The covariates [N, P] of ``obs``, or None without columns; a ``ValueError`` names a
        missing column, a NaN, or a category unseen in training."""
        if not self.columns:
            return None
        parts = []
        for column in self.columns:
            values = _obs_column(obs, column)
            if values.isna().any():
                cell = values.index[np.argmax(values.isna().to_numpy())]
                raise ValueError(
                    f"obs column {column!r} is missing (NaN) for cell {cell!r} "
                    f"({int(values.isna().sum())} cells in all): fill it, drop those cells, or "
                    "leave the column out of the covariates."
                )
            if column in self.categories:
                parts.append(_one_hot(values, column, self.categories[column]))
            else:
                numbers = values.to_numpy(dtype=float)
                parts.append(((numbers - self.location[column]) / self.scale[column])[:, None])
        return np.concatenate(parts, axis=1)


def _agreed_categories(seen: list, workers: Workers) -> list:
    """The categories of every worker together: the workers' own list when all agree (a
    categorical column's declared order), else their sorted union."""
    lists = [json.loads(text) for text in workers.texts(json.dumps([str(c) for c in seen]))]
    if all(other == lists[0] for other in lists):
        return seen
    by_text = {str(c): c for c in seen}
    return [by_text.get(text, text) for text in sorted(set().union(*lists))]


def _obs_column(obs, column: str, option: str = "batch_key or in covariate_keys"):
    if column not in obs.columns:
        raise ValueError(
            f"obs has no column {column!r}; its columns are {list(obs.columns)}. Name one of "
            f"them as {option}."
        )
    return obs[column]


def _categorical(values) -> bool:
    return values.dtype.name in ("category", "object", "bool", "string")


def _one_hot(values, column: str, categories: list) -> np.ndarray:
    """[N, K] one-hot of ``values`` over ``categories``; an unseen category is a ValueError."""
    codes = values.astype(object).map({c: i for i, c in enumerate(categories)})
    if codes.isna().any():
        unseen = sorted({str(v) for v in values[codes.isna()]})
        raise ValueError(
            f"obs column {column!r} holds categories the model was not fitted with: {unseen} "
            f"(fitted: {categories}). Fit with cells of those categories too."
        )
    return np.eye(len(categories))[codes.to_numpy(dtype=int)]


class SingleCellGPLVM:
    """A GPLVM fitted to an AnnData: counts of chosen genes, batch and covariates from ``obs``.

    ``layer``: the layer holding the values (None: ``X``; "raw": ``adata.raw.X``, with the genes
    of ``adata.raw``); ``genes``: var names to keep, or the
    name of a boolean ``var`` column (e.g. "highly_variable"), or None for all;
    ``batch_key`` and ``covariate_keys``: ``obs`` columns that join the latents in the GP input
    (categories one-hot, numbers standardised), summed with a linear ARD kernel on them;
    ``likelihood``: "negative_binomial" (a dispersion per gene), "poisson" or "gaussian";
    ``size_factors``: "library" (each cell's total count over the mean), an ``obs`` column, or
    None (counts only); ``model``: "bsvi" (B-SVI), "aeb" (AEB-SVI), "map" or "point";
    further keyword options go to the model class. Latents start at a PCA of
    :math:`\\log(1 + y / s)` with each gene's least-squares fit on the covariates taken out.

    **Atlas scale.** :meth:`fit` takes the path of an ``.h5ad`` file as well as an AnnData. On
    one worker a path is read from disk in shuffled blocks (out of core:
    :meth:`~gpflow_svi_gplvm.disk_rows.DiskRows.batches`), only the latent table in memory.
    With ``strategy=`` a ``MultiWorkerMirroredStrategy``, every worker calling :meth:`fit` alike,
    each reads only its block of cells (:func:`~gpflow_svi_gplvm.distributed.worker_rows`) as
    CSR and keeps their latent rows alone; size factors, covariate categories (the union of what
    the workers see, in one order), numeric scales and the initial PCA are sums over the workers,
    so the model starts as from all cells on one machine. ``output=`` (needed for a path or on
    several workers) is a folder where each worker writes its cells' q(x) and the chief
    assembles ``X_<key_added>.npy`` and ``X_<key_added>_var.npy`` [N, Q] of every cell, one
    worker's rows at a time; a file given by its path is never written.
    """

    def __init__(
        self,
        latent_dim: int = 10,
        *,
        layer: str | None = None,
        genes: Sequence[str] | str | None = None,
        batch_key: str | None = None,
        covariate_keys: Sequence[str] = (),
        likelihood: str = "negative_binomial",
        size_factors: str | None = "library",
        model: str = "bsvi",
        num_inducing: int = DEFAULT_NUM_INDUCING,
        key_added: str = "gplvm",
        seed: int = 0,
        **model_options: Any,
    ):
        if likelihood not in LIKELIHOODS:
            raise ValueError(f"likelihood must be one of {LIKELIHOODS}, got {likelihood!r}.")
        if size_factors is not None and likelihood == "gaussian":
            raise ValueError("size_factors need a count likelihood: pass size_factors=None.")
        self.latent_dim, self.layer, self.genes = latent_dim, layer, genes
        self.model_name, self.num_inducing, self.key_added = model, num_inducing, key_added
        self.likelihood, self.size_factors = likelihood, size_factors
        self.seed = check_seed(seed)
        if isinstance(covariate_keys, str):  # one column's name, not its letters
            covariate_keys = [covariate_keys]
        columns = ([batch_key] if batch_key else []) + list(covariate_keys)
        self.encoding = CovariateEncoding(columns, [batch_key] if batch_key else [])
        self.model_options = model_options
        self.model: SVIGPLVM | None = None
        self.gene_names: list[str] = []
        self.history: History | None = None
        self._inference: LatentInference | None = None

    def fit(
        self,
        adata,
        iterations: int = 2000,
        batch_size: int = 256,
        learning_rate: float = 0.01,
        progress: bool = True,
        *,
        strategy: tf.distribute.Strategy | None = None,
        output: str | Path | None = None,
        callback: Callable[[int], None] | None = None,
        callback_every: int = 100,
        checkpoint_dir: str | Path | None = None,
        checkpoint_every: int = 1000,
        resume: bool = False,
    ) -> SingleCellGPLVM:
        """Fit to ``adata`` (an AnnData, or the path of an ``.h5ad`` file, read a block at a
        time) and write ``obsm`` and ``uns`` there (an AnnData), or to ``output``.

        ``batch_size`` is the global batch; ``strategy`` (several workers), ``output`` and reading
        a path out of core are described in the class's docstring. ``callback``,
        ``checkpoint_dir``, ``checkpoint_every`` and ``resume`` act as in
        :func:`~gpflow_svi_gplvm.fit` (each worker keeps its cells' latent rows itself)."""
        workers = Workers.of(strategy) if strategy is not None else Workers()
        self._check_output(adata, output, workers)
        adata = _opened(adata)
        self.gene_names = _gene_names(_genes_of(adata, self.layer), self.genes)
        self._check_same_inputs(adata, workers)
        cells = worker_rows(adata.n_obs, workers.index, workers.count)
        self.model, rows, data = self._build(adata, cells, workers, strategy)
        batch_size = min(check_integer(batch_size, "batch_size", hint="e.g. 256"), adata.n_obs)
        self.history = fit(
            cast(SVIGPLVM, self.model),
            data,
            iterations,
            batch_size=batch_size,
            learning_rate=learning_rate,
            seed=self.seed,
            progress=progress and workers.count == 1,
            strategy=strategy,
            callback=callback,
            callback_every=callback_every,
            checkpoint_dir=checkpoint_dir,
            checkpoint_every=checkpoint_every,
            resume=resume,
        )
        self._inference = None
        mean, variance = self._training_moments(rows)
        summary = self._summary(iterations, batch_size, learning_rate)
        if output is not None:
            mean, variance = _assembled(
                Path(output), self.key_added, mean, variance, cells, workers
            )
        if workers.chief and not isinstance(adata, _CellsFile):
            adata.obsm[f"X_{self.key_added}"], adata.obsm[f"X_{self.key_added}_var"] = (
                mean,
                variance,
            )
            adata.uns[self.key_added] = summary
        return self

    def _check_output(self, adata, output: str | Path | None, workers: Workers) -> None:
        if output is None and (workers.count > 1 or isinstance(adata, (str, Path))):
            raise ValueError(
                "Pass output=, a folder (one every worker writes, on several workers): the "
                f"embedding of every cell is written there (X_{self.key_added}.npy); a file given "
                "by its path is never changed."
            )
        if output is not None:  # found now, not after training
            check_writable_folder(check_path(output, "output"), "output")

    def _build(
        self,
        adata,
        cells: np.ndarray,
        workers: Workers,
        strategy: tf.distribute.Strategy | None,
    ) -> tuple[SVIGPLVM, RowReader, RowShard | RowStream]:
        """The model of this worker's ``cells`` [n] (a block), from sums over every worker's
        cells; their rows, and what to train on: rows on disk stream in shuffled blocks, rows in
        memory are a shard of CSR rows, each minibatch densified on its own."""
        block = slice(int(cells[0]), int(cells[-1]) + 1) if len(cells) else slice(0, 0)
        rows, library = self._rows(adata, cells=block)
        obs = adata.obs.iloc[block]
        covariates = self.encoding.fit(obs, workers).transform(obs)
        sizes = self._size_factors(obs, library, workers)
        initial = self._initial_latents(rows, sizes, covariates, workers, cells)
        data = rows if isinstance(rows, RowStream) else RowShard(rows, cells, adata.n_obs)
        with strategy.scope() if strategy is not None else nullcontext():
            model = lookup_model(self.model_name)(
                data,
                self.latent_dim,
                min(self.num_inducing, adata.n_obs),
                likelihood=self._likelihood(rows.shape[1]),
                latent_init=initial,
                seed=self.seed,
                covariates=covariates,
                size_factors=sizes,
                **self.model_options,
            )
        return model, rows, data

    def _check_same_inputs(self, adata, workers: Workers) -> None:
        """A ``ValueError`` on every worker, naming what differs and where, when the workers read
        other cells or genes (another file, ``genes``, ``layer`` or ``obs`` columns) or were
        built with other settings: every worker must make the same call."""
        inputs = {
            "cells (N)": adata.n_obs,
            "genes": self.gene_names,
            "layer": self.layer,
            "obs columns": list(self.encoding.columns),
            "size_factors": self.size_factors,
            "settings": [self.model_name, self.likelihood, self.latent_dim, self.num_inducing],
            "model options": sorted((k, repr(v)) for k, v in self.model_options.items()),
        }
        digests = [
            int.from_bytes(hashlib.blake2b(repr(v).encode(), digest_size=6).digest(), "little")
            for v in inputs.values()
        ]
        table = workers.stack(np.array(digests, np.int64))
        differ = [
            f"{name} (worker {', '.join(str(w) for w in np.flatnonzero(column != column[0]))})"
            for name, column in zip(inputs, table.T)
            if np.any(column != column[0])
        ]
        if differ:
            raise ValueError(
                f"The workers were given other inputs than the chief: {'; '.join(differ)}. Give "
                "every worker the same file, genes=, layer=, obs columns and settings."
            )

    def transform(self, adata, iterations: int = 300, chunk_size: int = 4096) -> np.ndarray:
        """Embed new cells: q(x*) of ``adata``'s cells (the fitted genes, found by name, and
        the fitted ``obs`` columns) with the model frozen, written to ``obsm`` as in
        :meth:`fit`; returns the means [N*, Q]."""
        if self.model is None:
            raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
        chunk_size = check_integer(chunk_size, "chunk_size", hint="e.g. 4096 cells at a time")
        _check_anndata(adata)
        if adata.n_obs == 0:
            raise ValueError("adata holds no cells to embed: give transform at least one cell.")
        names = _unique_genes(_genes_of(adata, self.layer).var_names)
        missing = [g for g in self.gene_names if g not in set(names)]
        if missing:
            raise ValueError(
                f"The new cells lack {len(missing)} of the fitted genes (e.g. {missing[:5]}): "
                "give them every gene the model was fitted with (zeros where not measured)."
            )
        position = {g: i for i, g in enumerate(names)}
        rows, library = self._rows(adata, np.array([position[g] for g in self.gene_names]))
        covariates = self.encoding.transform(adata.obs)
        sizes = self._size_factors(adata.obs, library) if self.size_factors != "library" else None
        if self._inference is None or self._inference.iterations != iterations:
            # Kept: its compiled graphs serve later calls with as many steps.
            self._inference = LatentInference(self.model, iterations, seed=self.seed)
        inference = self._inference
        means, variances = [], []
        for start in range(0, rows.shape[0], chunk_size):
            block = rows[start : start + chunk_size]
            part = slice(start, start + len(block))
            inputs = new_row_inputs(
                self.model,
                block,
                None if covariates is None else covariates[part],
                None if sizes is None else sizes[part],
            )
            mean, variance = inference.infer(block, inputs)
            means.append(mean.numpy())
            variances.append(variance.numpy())
        adata.obsm[f"X_{self.key_added}"] = np.concatenate(means)
        adata.obsm[f"X_{self.key_added}_var"] = np.concatenate(variances)
        return adata.obsm[f"X_{self.key_added}"]

    def _rows(
        self, adata, columns: np.ndarray | None = None, cells: slice = slice(None)
    ) -> tuple[RowReader, np.ndarray]:
        """The chosen genes' values of the ``cells`` (a range; default every cell), read in row
        blocks and checked, and each cell's sum of them [n] (its library size), from that pass."""
        if columns is None:
            position = {
                g: i for i, g in enumerate(map(str, _genes_of(adata, self.layer).var_names))
            }
            columns = np.array([position[g] for g in self.gene_names])
        names, genes = list(adata.obs_names[cells]), self.gene_names
        counts = self.likelihood != "gaussian"

        def check(block: np.ndarray, first: int) -> None:
            _check_values(block, first, names, genes, counts, self.layer)

        if not isinstance(adata, _CellsFile):
            matrix = _layer(adata, self.layer)
            whole = cells.indices(adata.n_obs)[:2] == (0, adata.n_obs)
            # All cells of a CSR matrix: read in place (SparseRows never writes), not copied.
            source = matrix if whole else _RowRange(matrix, cells)
            rows = SparseRows.from_matrix(source, columns, check)
            return rows, rows.row_sums()
        from .disk_rows import DiskRows

        disk = DiskRows.open(adata.path, self.layer, columns)
        start, stop, _ = cells.indices(adata.n_obs)
        # All cells on one worker stay on disk (out of core); a worker's share is loaded as CSR.
        held: RowReader = disk if (start, stop) == (0, adata.n_obs) else disk.load(start, stop)
        library, first = np.empty(held.shape[0]), 0
        for block in row_blocks(cast(np.ndarray, held)):
            check(block, first)
            library[first : first + len(block)] = block.sum(axis=1)
            first += len(block)
        return held, library

    def _size_factors(
        self, obs, library: np.ndarray, workers: Workers | None = None
    ) -> np.ndarray | None:
        """Each cell's size factor [N] (of ``obs``'s cells): its ``library`` size [N] over their
        mean over all ``workers``' cells, or an ``obs`` column."""
        if self.size_factors is None:
            return None
        workers = workers or Workers()
        if self.size_factors == "library":
            with workers.agreeing():
                empty = np.flatnonzero(library <= 0)
                if len(empty):
                    raise ValueError(
                        f"cell {obs.index[empty[0]]!r} has no counts in the chosen genes "
                        f"({len(empty)} cells in all): its size factor would be 0. Filter such "
                        "cells first, e.g. scanpy.pp.filter_cells(adata, min_counts=1)."
                    )
            total, count = workers.sum([np.sum(library), len(library)])
            return library / (total / count)
        column = _obs_column(obs, self.size_factors, "size_factors (or 'library', or None)")
        try:
            values = column.to_numpy(dtype=float)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"obs column {self.size_factors!r} is not numbers ({error}): size factors must "
                "be positive numbers, one a cell."
            ) from error
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
        if len(bad):
            raise ValueError(
                f"obs column {self.size_factors!r} gives cell {obs.index[bad[0]]!r} the "
                f"size factor {values[bad[0]]} ({len(bad)} cells in all): size factors must be "
                "positive."
            )
        return values

    def _initial_latents(
        self,
        rows: RowReader,
        sizes: np.ndarray | None,
        covariates: np.ndarray | None,
        workers: Workers | None = None,
        cells: np.ndarray | None = None,
    ) -> np.ndarray:
        """PCA scores [N, Q] of log(1 + y / s) (of y itself for a Gaussian likelihood) with each
        gene's least-squares fit on the covariates C [N, R] (and a constant) taken out, so that
        the latent starts from what the covariates do not explain, as it should end. With
        ``workers``, of this worker's ``cells`` [n], from sums over every worker's cells."""
        workers = workers or Workers()
        factors = np.ones(rows.shape[0]) if sizes is None else sizes

        def normalised(block: np.ndarray, index: np.ndarray) -> np.ndarray:
            if self.likelihood == "gaussian":
                return block
            return np.log1p(block / factors[index, None])

        transform = normalised
        if covariates is not None:
            design = np.column_stack([np.ones(rows.shape[0]), covariates])  # [N, R + 1]
            moments = np.zeros((design.shape[1], rows.shape[1]))  # C^T L, a block at a time
            for design_block, block in zip(row_blocks(design), row_blocks(rows.view(normalised))):
                moments += design_block.T @ block
            # pinv: a one-hot batch beside the constant is collinear with it.
            gram, moments = workers.sum(design.T @ design), workers.sum(moments)
            effects = np.linalg.pinv(gram) @ moments  # [R + 1, D]

            def transform(block: np.ndarray, index: np.ndarray) -> np.ndarray:
                return normalised(block, index) - design[index] @ effects

        # pca_latents reads a block of rows at a time (row_blocks), which SparseRows serves.
        view = cast(np.ndarray, rows.view(transform))
        if workers.count == 1:
            return pca_latents(view, self.latent_dim, seed=self.seed)
        return pca_latents(view, self.latent_dim, seed=self.seed, rows=cells, workers=workers)

    def _likelihood(self, num_genes: int) -> gpflow.likelihoods.Likelihood | None:
        if self.likelihood == "negative_binomial":
            return NegativeBinomial(num_outputs=num_genes)
        if self.likelihood == "poisson":
            return gpflow.likelihoods.Poisson()
        return None

    def _training_moments(self, rows: RowReader) -> tuple[np.ndarray, np.ndarray]:
        """Means and variances [N, Q] of q(x_n) of the training cells (an encoder reads them a
        block at a time)."""
        model = self.model
        assert model is not None
        if not model.latent.amortised:
            return model.latent_mean().numpy(), model.latent_variance().numpy()
        parts = []
        for start in range(0, rows.shape[0], 4096):
            block = rows[start : start + 4096]
            idx = tf.range(start, start + len(block), dtype=tf.int64)
            parts.append([m.numpy() for m in model.latent.moments(idx, tf.constant(block))])
        means, variances = zip(*parts)
        return np.concatenate(means), np.concatenate(variances)

    def _summary(self, iterations: int, batch_size: int, learning_rate: float) -> dict:
        """What ``uns[key_added]`` holds: settings, ELBO trace, ARD lengthscales, covariates."""
        model = self.model
        assert model is not None and self.history is not None
        kernel = getattr(model.kernel, "covariate_kernel", None)
        variance = getattr(kernel, "variance", None)
        return {
            "settings": {
                "model": self.model_name,
                "likelihood": self.likelihood,
                "latent_dim": self.latent_dim,
                "num_inducing": int(model.inducing_variable.num_inducing),
                "layer": self.layer or "X",
                "size_factors": self.size_factors or "none",
                "iterations": iterations,
                "batch_size": batch_size,
                "learning_rate": learning_rate,
                "seed": self.seed,
            },
            "genes": np.array(self.gene_names, dtype=object),
            "elbo": np.asarray(self.history.elbo),
            "ard_lengthscales": 1.0 / model.ard_relevance(),
            "covariates": np.array(self.encoding.names, dtype=object),
            "covariate_variances": (
                np.zeros(0) if variance is None else np.atleast_1d(variance.numpy())
            ),
        }


class _RowRange:
    """The rows ``cells`` (a range) of a row-sliceable matrix, sliced as a matrix of their own."""

    def __init__(self, source, cells: slice):
        self.source = source
        self.start, self.stop, _ = cells.indices(source.shape[0])
        self.shape = (max(self.stop - self.start, 0), source.shape[1])

    def __getitem__(self, rows: slice):
        first, last, _ = rows.indices(self.shape[0])
        return self.source[self.start + first : self.start + last]


class _CellsFile:
    """The cells of an ``.h5ad`` file as :meth:`SingleCellGPLVM.fit` reads them: ``obs`` and
    ``var`` in memory, the matrix (X or a layer) left on disk for each worker to read its own
    cells (:class:`~gpflow_svi_gplvm.disk_rows.DiskRows`)."""

    raw = None  # of a file, X and the layers are read from disk (not raw/X)
    layers: tuple[str, ...] = ()

    def __init__(self, path: Path):
        from .disk_rows import read_frames

        self.path = path
        self.obs, self.var = read_frames(path)

    @property
    def obs_names(self):
        return self.obs.index

    @property
    def var_names(self):
        return self.var.index

    @property
    def n_obs(self) -> int:
        return len(self.obs)


def _opened(adata):
    """``adata``, or the cells of an ``.h5ad`` path (:class:`_CellsFile`); a ``ValueError`` for
    anything else, or an AnnData without cells."""
    if not isinstance(adata, (str, Path)):
        _check_anndata(adata, "or the path of an .h5ad file")
        if adata.n_obs == 0:
            raise ValueError("adata holds no cells: give at least one cell to fit.")
        return adata
    path = Path(adata)
    if not path.is_file():
        raise ValueError(f"{path} is not a file: give an AnnData or the path of an .h5ad file.")
    return _CellsFile(path)  # a file h5py cannot read is a ValueError of read_frames


def _check_anndata(adata, alternative: str = "") -> None:
    """A ``ValueError`` unless ``adata`` is an AnnData (or reads as one)."""
    if not all(hasattr(adata, name) for name in ("obs", "var_names", "n_obs")):
        raise ValueError(
            f"adata is a {type(adata).__name__}: give an AnnData (anndata.AnnData(X=counts, "
            f"obs=..., var=...)){' ' + alternative if alternative else ''}."
        )


def _assembled(
    folder: Path,
    key: str,
    mean: np.ndarray,
    variance: np.ndarray,
    cells: np.ndarray,
    workers: Workers,
) -> tuple[np.ndarray, np.ndarray]:
    """Write this worker's rows of q(x) (``mean``, ``variance`` [n, Q] of ``cells`` [n]) to
    ``folder``; the chief then assembles ``X_<key>.npy`` and ``X_<key>_var.npy`` [N, Q] of every
    cell from the workers' files (one worker's rows at a time) and returns them, memory-mapped;
    the other workers return their own rows."""
    folder.mkdir(parents=True, exist_ok=True)
    names = (f"X_{key}", f"X_{key}_var")
    for name, values in zip(names, (mean, variance)):
        np.save(folder / f".{name}-worker{workers.index}.npy", values)
    # Every worker's rows are on disk once these sums return.
    starts = workers.stack(int(cells[0]) if len(cells) else 0)
    sizes = workers.stack(len(cells))
    if workers.chief:
        for name in names:
            staging = folder / f".{name}.partial.npy"
            shape = (int(sizes.sum()), mean.shape[1])
            table = np.lib.format.open_memmap(staging, "w+", np.float64, shape)
            for w in range(workers.count):
                part = folder / f".{name}-worker{w}.npy"
                table[starts[w] : starts[w] + sizes[w]] = np.load(part, mmap_mode="r")
                part.unlink()
            table.flush()
            del table
            staging.replace(folder / f"{name}.npy")
        mean, variance = (np.load(folder / f"{name}.npy", mmap_mode="r") for name in names)
    workers.sum(0)  # the chief has assembled them
    return mean, variance


def _layer(adata, layer: str | None):
    """The matrix ``layer`` names: None is ``X``; "raw" is ``adata.raw.X`` (where scanpy keeps
    the unprocessed values) unless ``adata.layers`` has a layer of that name."""
    if layer is None:
        return adata.X
    if _reads_raw(adata, layer):
        if adata.raw is None:
            raise ValueError(
                f"adata has no layer 'raw' and no adata.raw; its layers are {list(adata.layers)}. "
                "Pass one of them, or layer=None to read adata.X."
            )
        return adata.raw.X
    if layer not in adata.layers:
        raise ValueError(
            f"adata has no layer {layer!r}; its layers are {list(adata.layers)}. Pass "
            "layer=None to read adata.X."
        )
    return adata.layers[layer]


def _reads_raw(adata, layer: str | None) -> bool:
    return layer == "raw" and "raw" not in adata.layers


def _genes_of(adata, layer: str | None):
    """What holds the genes (``var_names``, ``var``) of ``layer``: ``adata.raw``, whose genes
    are its own, for the raw matrix; else ``adata``."""
    return adata.raw if _reads_raw(adata, layer) and adata.raw is not None else adata


def _unique_genes(var_names) -> list[str]:
    """The var names as text; a ``ValueError`` when one repeats (which column would it be?)."""
    names = list(map(str, var_names))
    if len(set(names)) < len(names):
        values, counts = np.unique(names, return_counts=True)
        repeated = list(values[counts > 1])
        raise ValueError(
            f"var_names repeat {repeated[:5]} ({len(repeated)} names in all), so a gene cannot "
            "be found by its name: make them unique first, e.g. adata.var_names_make_unique()."
        )
    return names


def _gene_names(adata, genes: Sequence[str] | str | None) -> list[str]:
    """The var names to fit: all, those listed, or those a boolean ``var`` column marks."""
    names = _unique_genes(adata.var_names)
    if genes is None:
        return names
    if isinstance(genes, str):
        if genes not in adata.var.columns:
            raise ValueError(
                f"var has no column {genes!r} to choose genes by; its columns are "
                f"{list(adata.var.columns)}. Pass a list of gene names instead."
            )
        marks = adata.var[genes]
        if str(marks.dtype) == "boolean":  # pandas' nullable booleans: no value may be missing
            if marks.isna().any():
                raise ValueError(
                    f"var column {genes!r} has no value (NA) for {int(marks.isna().sum())} "
                    f"gene(s), e.g. {list(marks.index[marks.isna()][:3])}: fill them, e.g. "
                    f"adata.var[{genes!r}] = adata.var[{genes!r}].fillna(False)."
                )
            marks = marks.astype(bool)
        if marks.dtype != bool:
            raise ValueError(
                f"var column {genes!r} holds {marks.dtype} values, not True/False: choose genes "
                "by a boolean column (e.g. 'highly_variable') or pass a list of gene names."
            )
        chosen = [n for n, keep in zip(names, marks.to_numpy()) if keep]
        if not chosen:
            raise ValueError(f"var column {genes!r} marks no gene: nothing would be fitted.")
        return chosen
    if len(genes) == 0:
        raise ValueError("genes= is empty: name at least one gene, or pass None for all.")
    repeated = sorted({str(g) for g in genes if list(genes).count(g) > 1})
    if repeated:
        raise ValueError(
            f"genes= names {repeated[:5]} more than once: each gene is one output of the model "
            "(and counts once in a cell's library size). Name each gene once."
        )
    unknown = [g for g in genes if g not in set(names)]
    if unknown:
        raise ValueError(f"genes not in adata.var_names: {unknown[:5]} ({len(unknown)} in all).")
    return list(map(str, genes))


def _check_values(
    block: np.ndarray,
    first: int,
    cells: list,
    genes: list[str],
    counts: bool,
    layer: str | None,
) -> None:
    """A ``ValueError`` naming the cell and gene of the first entry of ``block`` (rows from
    ``first`` on) that is not finite or, for a count likelihood, not a non-negative integer."""
    bad = ~np.isfinite(block)
    if counts:
        bad |= (block < 0) | (block != np.round(block))
    if not bad.any():
        return
    row, column = np.argwhere(bad)[0]
    where = f"layer {layer!r}" if layer else "adata.X"
    advice = (
        "Give the raw counts (e.g. layer='counts'), or likelihood='gaussian' for normalised values."
        if counts
        else "Replace infinite or missing values."
    )
    raise ValueError(
        f"{where} holds {block[row, column]!r} for cell {cells[first + row]!r}, gene "
        f"{genes[column]!r}: a count likelihood needs non-negative integers. {advice}"
        if counts
        else f"{where} holds {block[row, column]!r} for cell {cells[first + row]!r}, gene "
        f"{genes[column]!r}. {advice}"
    )
