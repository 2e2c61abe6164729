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

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import gpflow
import numpy as np
import tensorflow as tf

from .covariates import new_row_inputs
from .inference import LatentInference
from .initialisation import pca_latents
from .likelihoods import NegativeBinomial
from .models import DEFAULT_NUM_INDUCING, SVIGPLVM, lookup_model
from .sparse_rows import SparseRows
from .training import History, fit, minibatch_indices
from .validation import row_blocks

__all__ = ["SingleCellGPLVM", "CovariateEncoding", "LIKELIHOODS"]

LIKELIHOODS = ("negative_binomial", "poisson", "gaussian")
"""The values of ``likelihood``: counts (with or without overdispersion) or continuous values."""


@dataclass
class CovariateEncoding:
    """How ``obs`` columns become covariates [N, P]: each categorical column one-hot over the
    categories seen in training, each numeric column standardised by the training mean and
    standard deviation; new cells are encoded the same way."""

    columns: Sequence[str]
    categories: dict[str, list] = field(default_factory=dict)
    location: dict[str, float] = field(default_factory=dict)
    scale: dict[str, float] = field(default_factory=dict)

    def fit(self, obs) -> CovariateEncoding:
        """Learn the categories and scales of ``obs`` (a pandas DataFrame)."""
        for column in self.columns:
            values = _obs_column(obs, column)
            if _categorical(values):
                self.categories[column] = list(values.astype("category").cat.categories)
            else:
                numbers = values.to_numpy(dtype=float)
                self.location[column] = float(np.mean(numbers))
                self.scale[column] = float(np.std(numbers)) or 1.0
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


def _obs_column(obs, column: str):
    if column not in obs.columns:
        raise ValueError(
            f"obs has no column {column!r}; its columns are {list(obs.columns)}. Name one of "
            "them as batch_key or in covariate_keys."
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
        self.likelihood, self.size_factors, self.seed = likelihood, size_factors, seed
        columns = ([batch_key] if batch_key else []) + list(covariate_keys)
        self.encoding = CovariateEncoding(columns)
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
    ) -> SingleCellGPLVM:
        """Fit to ``adata`` (in memory or backed) and write ``obsm`` and ``uns`` there."""
        self.gene_names = _gene_names(_genes_of(adata, self.layer), self.genes)
        rows = self._rows(adata)
        covariates = self.encoding.fit(adata.obs).transform(adata.obs)
        sizes = self._size_factors(adata, rows)
        initial = self._initial_latents(rows, sizes, covariates)
        self.model = lookup_model(self.model_name)(
            rows,
            self.latent_dim,
            min(self.num_inducing, rows.shape[0]),
            likelihood=self._likelihood(rows.shape[1]),
            latent_init=initial,
            seed=self.seed,
            covariates=covariates,
            size_factors=sizes,
            **self.model_options,
        )
        batch_size = min(batch_size, rows.shape[0])
        self.history = fit(
            self.model,
            rows_dataset(rows, batch_size, self.seed),
            iterations=iterations,
            learning_rate=learning_rate,
            seed=self.seed,
            progress=progress,
        )
        self._inference = None
        mean, variance = self._training_moments(rows)
        adata.obsm[f"X_{self.key_added}"] = mean
        adata.obsm[f"X_{self.key_added}_var"] = variance
        adata.uns[self.key_added] = self._summary(iterations, batch_size, learning_rate)
        return self

    def transform(self, adata, iterations: int = 300, chunk_size: int = 4096) -> np.ndarray:
        """Embed new cells: q(x*) of ``adata``'s cells (the fitted genes, found by name, and
        the fitted ``obs`` columns) with the model frozen, written to ``obsm`` as in
        :meth:`fit`; returns the means [N*, Q]."""
        if self.model is None:
            raise ValueError("Fit the model first: SingleCellGPLVM(...).fit(adata).")
        names = list(map(str, _genes_of(adata, self.layer).var_names))
        missing = [g for g in self.gene_names if g not in set(names)]
        if missing:
            raise ValueError(
                f"The new cells lack {len(missing)} of the fitted genes (e.g. {missing[:5]}): "
                "give them every gene the model was fitted with (zeros where not measured)."
            )
        position = {g: i for i, g in enumerate(names)}
        rows = self._rows(adata, np.array([position[g] for g in self.gene_names]))
        covariates = self.encoding.transform(adata.obs)
        sizes = self._size_factors(adata, rows) if self.size_factors != "library" else None
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

    def _rows(self, adata, columns: np.ndarray | None = None) -> SparseRows:
        """The chosen genes' values of every cell, read in row blocks and checked."""
        if columns is None:
            position = {
                g: i for i, g in enumerate(map(str, _genes_of(adata, self.layer).var_names))
            }
            columns = np.array([position[g] for g in self.gene_names])
        source = _layer(adata, self.layer)
        cells, genes = list(adata.obs_names), self.gene_names
        counts = self.likelihood != "gaussian"

        def check(block: np.ndarray, first: int) -> None:
            _check_values(block, first, cells, genes, counts, self.layer)

        return SparseRows.from_matrix(source, columns, check)

    def _size_factors(self, adata, rows: SparseRows) -> np.ndarray | None:
        """Each cell's size factor [N]: library size over its mean, or an ``obs`` column."""
        if self.size_factors is None:
            return None
        if self.size_factors == "library":
            library = rows.row_sums()
            empty = np.flatnonzero(library <= 0)
            if len(empty):
                raise ValueError(
                    f"cell {adata.obs_names[empty[0]]!r} has no counts in the chosen genes "
                    f"({len(empty)} cells in all): its size factor would be 0. Filter such cells "
                    "first, e.g. scanpy.pp.filter_cells(adata, min_counts=1)."
                )
            return library / library.mean()
        values = _obs_column(adata.obs, self.size_factors).to_numpy(dtype=float)
        bad = np.flatnonzero(~(np.isfinite(values) & (values > 0)))
        if len(bad):
            raise ValueError(
                f"obs column {self.size_factors!r} gives cell {adata.obs_names[bad[0]]!r} the "
                f"size factor {values[bad[0]]} ({len(bad)} cells in all): size factors must be "
                "positive."
            )
        return values

    def _initial_latents(
        self, rows: SparseRows, sizes: np.ndarray | None, covariates: np.ndarray | None
    ) -> np.ndarray:
        """PCA scores [N, Q] of log(1 + y / s) (of y itself for a Gaussian likelihood) with each
        gene's least-squares fit on the covariates C [N, R] (and a constant) taken out, so that
        the latent starts from what the covariates do not explain, as it should end."""
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
            effects = np.linalg.pinv(design.T @ design) @ moments  # [R + 1, D]

            def transform(block: np.ndarray, index: np.ndarray) -> np.ndarray:
                return normalised(block, index) - design[index] @ effects

        # pca_latents reads a block of rows at a time (row_blocks), which SparseRows serves.
        return pca_latents(cast(np.ndarray, rows.view(transform)), self.latent_dim, seed=self.seed)

    def _likelihood(self, num_genes: int) -> gpflow.likelihoods.Likelihood | None:
        if self.likelihood == "negative_binomial":
            return NegativeBinomial(num_outputs=num_genes)
        if self.likelihood == "poisson":
            return gpflow.likelihoods.Poisson()
        return None

    def _training_moments(self, rows: SparseRows) -> tuple[np.ndarray, np.ndarray]:
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


def rows_dataset(rows: SparseRows, batch_size: int, seed: int) -> tf.data.Dataset:
    """Endless shuffled minibatches ``(idx [B] int64, Y [B, D])`` of ``rows``, each densified
    from the CSR rows on its own (:func:`~gpflow_svi_gplvm.training.minibatch_indices` order)."""
    data_dim = rows.shape[1]

    def dense(idx: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        Y = tf.numpy_function(rows.take, [idx], tf.float64, stateful=False)
        return idx, tf.ensure_shape(Y, [batch_size, data_dim])

    indices = minibatch_indices(rows.shape[0], batch_size, seed)
    return indices.map(dense, num_parallel_calls=1).prefetch(2)


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


def _gene_names(adata, genes: Sequence[str] | str | None) -> list[str]:
    """The var names to fit: all, those listed, or those a boolean ``var`` column marks."""
    names = list(map(str, adata.var_names))
    if genes is None:
        return names
    if isinstance(genes, str):
        if genes not in adata.var.columns:
            raise ValueError(
                f"var has no column {genes!r} to choose genes by; its columns are "
                f"{list(adata.var.columns)}. Pass a list of gene names instead."
            )
        return [n for n, keep in zip(names, adata.var[genes].to_numpy(dtype=bool)) if keep]
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
