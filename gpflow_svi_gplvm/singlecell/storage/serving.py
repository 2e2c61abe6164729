"""A fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` exported as a TensorFlow
SavedModel that embeds cells from their raw counts, served by TensorFlow alone.

The signature ``embed`` (also ``serving_default``) takes

- ``counts`` [None, G] (declared without a shape, as every input, and checked in the graph):
  each cell's counts of the model's G genes, in the registered order (the
  export's marker file lists them);
- one input per ``obs`` column of the GP input, named after the column (letters, digits and
  underscores; another character becomes an underscore): a category as text [None] (a batch
  learnt by ``map_query`` included), or a number [None]; a column [None, 1] is read alike;
- ``size_factor`` [None] where the model reads size factors from an ``obs`` column (with
  ``size_factors="library"`` they are the cells' totals over the training reference);

and returns ``mean`` and ``variance`` [None, Q] of each cell's q(x*), found inside the graph as
``transform`` finds it (:class:`~gpflow_svi_gplvm.prediction.laplace.LaplaceLatents`): the same
numbers to within a thousandth of each cell's posterior standard deviation in the mean and 1e-4
relative in the variance (the graph sums each cell's counts in another order; differences of
about 2e-5 are usual). The signature's counts and numbers are of the export's ``dtype``
(float64 by default; TensorFlow Serving's REST API converts JSON numbers to it); the loaded
module's ``embed`` function also takes counts as float32, float64, int32 or int64, cast inside
the graph (``tf.saved_model.load(folder).embed(counts, *columns)``, in the signature's order).
``saved_model_cli show --dir FOLDER --tag_set serve --signature_def embed`` lists the inputs.
Counts that are not non-negative integers, a cell without counts (under library size
factors), a category the model does not know, a missing number, or another width of ``counts`` are
errors that name the problem. The export goes to ``path/<version>/`` (TensorFlow Serving's layout: a
model's versions side by side under its base path), written whole or not at all
(:mod:`~gpflow_svi_gplvm.export.folder`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

from ...export.folder import check_destination, write_staged
from ...export.saved_model import check_serving_dtype
from ...prediction.laplace import LaplaceLatents
from ...validation import check_bool, check_integer, check_path, check_writable_folder
from ..fitting.fitted import FittedCells

__all__ = ["CellServing", "export_cells", "input_name", "COUNT_DTYPES"]

COUNT_DTYPES = (tf.float64, tf.float32, tf.int64, tf.int32)
"""The dtypes of counts the loaded module's ``embed`` takes (the natural dtypes of counts)."""


def input_name(column: str) -> str:
    """The signature input of an ``obs`` column: its name with every character other than a
    letter, digit or underscore made an underscore (and a leading digit prefixed)."""
    name = re.sub(r"\W", "_", str(column))
    return f"obs_{name}" if not name or name[0].isdigit() else name


class CellServing(tf.Module):
    """The served function of a fitted state (see the module); holds the model's variables."""

    def __init__(self, fitted: FittedCells, iterations: int, dtype: tf.DType = tf.float64):
        super().__init__()
        model = fitted.model
        registration = fitted.registration
        self.laplace = LaplaceLatents(model, iterations, seed=fitted.options.seed)
        self.genes = len(registration.gene_names)
        self.counts = registration.counts
        self.dtype = dtype
        self.size_factors = registration.size_factors
        self.batch_column = registration.batch_key
        encoding, learnt = registration.encoding, fitted.offsets
        # (column, input name, fitted categories or None for numbers)
        self.columns: list[tuple[str, str, list[str] | None]] = []
        self.tables: dict[str, tf.lookup.StaticHashTable] = {}
        # Text made here: a list kept on a tf.Module prints as TensorFlow's ListWrapper([...]).
        self.unknown: dict[str, str] = {}
        self.numbers: dict[str, tuple[float, float]] = {}
        for column in encoding.columns:
            name = input_name(column)
            if column in encoding.categories:
                known = [str(c) for c in encoding.categories[column]]
                batch = column in encoding.categorical
                extra = [str(c) for c in learnt.categories] if batch else []
                keys = tf.constant(known + extra)
                values = tf.range(len(known) + len(extra), dtype=tf.int64)
                initializer = tf.lookup.KeyValueTensorInitializer(keys, values)
                self.tables[column] = tf.lookup.StaticHashTable(initializer, -1)
                self.unknown[column] = (
                    f"{name}: a category the model does not know (known: "
                    f"{', '.join(known + extra)}); map_query learns new batches before an export"
                )
                self.columns.append((column, name, known))
            else:
                location, scale = encoding.location[column], encoding.scale[column]
                self.numbers[column] = (location, scale)
                self.columns.append((column, name, None))
        names = [name for _, name, _ in self.columns] + ["counts", "size_factor"]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(
                f"obs columns {[c for c, n, _ in self.columns if n in repeated]} would be served "
                f"as the same input {repeated}: rename them apart before fitting."
            )
        width = model.data_dim
        zeros = np.zeros((1, width))
        offsets = learnt.offsets if learnt.categories else np.zeros((0, width))
        self.offsets = tf.constant(np.concatenate([zeros, offsets]), default_float())
        checked = [tf.TensorSpec([None, self.genes], self.dtype), *self.signature()[1:]]
        self._embed_checked = tf.function(self._embed, input_signature=checked)
        # Counts of any of COUNT_DTYPES, checked and cast in a small graph before the one traced
        # embedding.
        self.embed = tf.function(self._check_counts_then_embed)
        for counts_dtype in COUNT_DTYPES:
            self.embed.get_concrete_function(*self.signature(counts_dtype))

    def signature(self, counts_dtype: tf.DType | None = None) -> list[tf.TensorSpec]:
        """The inputs of :attr:`embed`: counts [B, G] of ``counts_dtype`` (the export's dtype
        by default), then each obs column [B] and the size factors [B] if given."""
        # Every input's shape is checked in the graph (_checked_counts, _one_per_cell): a loaded
        # signature does not enforce a declared shape, and its graph optimiser would trust it.
        specs = [tf.TensorSpec(None, counts_dtype or self.dtype, name="counts")]
        for _, name, categories in self.columns:
            kind = tf.string if categories is not None else self.dtype
            specs.append(tf.TensorSpec(None, kind, name=name))
        if self.size_factors not in (None, "library"):
            specs.append(tf.TensorSpec(None, self.dtype, name="size_factor"))
        return specs

    def _check_counts_then_embed(self, counts: tf.Tensor, *columns: tf.Tensor) -> dict:
        return self._embed_checked(tf.cast(self._checked_counts(counts), self.dtype), *columns)

    def _embed(self, counts: tf.Tensor, *columns: tf.Tensor) -> dict[str, tf.Tensor]:
        counts = tf.cast(counts, default_float())
        parts, offset_rows = [], tf.zeros(tf.shape(counts)[:1], tf.int64)
        for (column, name, categories), values in zip(self.columns, columns):
            values = self._one_per_cell(values, name, counts)
            if categories is None:
                parts.append(self._number(column, name, values)[:, None])
                continue
            codes = self.tables[column].lookup(values)
            known = tf.reduce_all(codes >= 0)
            check = tf.debugging.Assert(known, [self.unknown[column]])
            with tf.control_dependencies([check]):
                fitted = len(categories)
                parts.append(tf.one_hot(codes, fitted, dtype=default_float()))
            if column == self.batch_column:
                offset_rows = tf.where(codes >= fitted, codes - fitted + 1, 0)
        sizes = self._log_size_factors(counts, columns[len(self.columns) :])
        if sizes is not None:
            parts.append(sizes[:, None])
        width = self.laplace.width
        inputs = tf.concat(parts, axis=1) if parts else tf.zeros([tf.shape(counts)[0], width])
        offsets = tf.gather(self.offsets, offset_rows)
        mean, variance = self.laplace.fit(counts, tf.cast(inputs, default_float()), offsets)
        return {"mean": tf.cast(mean, self.dtype), "variance": tf.cast(variance, self.dtype)}

    def _checked_counts(self, counts: tf.Tensor) -> tf.Tensor:
        """``counts`` (of any shape) as [B, G] in the model's precision, after run-time checks of
        its shape and values."""
        shape = tf.shape(counts)
        fits = tf.equal(tf.size(shape), 2) & tf.equal(tf.size(counts), shape[0] * self.genes)
        expected = f"counts must have shape [cells, {self.genes}] (the fitted genes); got"
        width = tf.debugging.Assert(fits, [expected, shape], name="wrong_width_of_counts")
        values = tf.cast(counts, default_float())
        flat = tf.reshape(values, [-1])
        valid = tf.math.is_finite(flat)
        if self.counts:
            valid &= (flat >= 0) & tf.equal(flat, tf.round(flat))
        check = tf.debugging.Assert(
            tf.reduce_all(valid),
            ["counts must be finite" + (" non-negative integers" if self.counts else "")],
            name="counts_that_are_not_counts",
        )
        with tf.control_dependencies([width, check]):
            return tf.reshape(values, [-1, self.genes])

    @staticmethod
    def _one_per_cell(values: tf.Tensor, name: str, counts: tf.Tensor) -> tf.Tensor:
        """``values`` [B] after a run-time check that they hold one value per row of ``counts``
        (given as [B] or as a column [B, 1])."""
        cells = tf.shape(counts)[0]
        leading = tf.concat([tf.shape(values), [-1]], axis=0)[0]  # -1 for a scalar
        fits = tf.equal(tf.size(values), cells) & tf.equal(leading, cells)
        message = f"{name} must hold one value per cell, of shape [cells]; got shape"
        shape = tf.shape(values)
        check = tf.debugging.Assert(fits, [message, shape, "for", cells, "cells"])
        with tf.control_dependencies([check]):
            return tf.reshape(values, [-1])

    def _number(self, column: str, name: str, values: tf.Tensor) -> tf.Tensor:
        location, scale = self.numbers[column]
        values = tf.cast(values, default_float())
        check = tf.debugging.Assert(
            tf.reduce_all(tf.math.is_finite(values)), [f"{name} must be finite numbers"]
        )
        with tf.control_dependencies([check]):
            return (values - location) / scale

    def _log_size_factors(self, counts: tf.Tensor, given: tuple) -> tf.Tensor | None:
        """Each cell's log size factor [B]: of its total over the reference, or as given."""
        if self.size_factors is None:
            return None
        if self.size_factors == "library":
            reference = tf.cast(self.laplace.model.size_factor_reference, default_float())
            factors = tf.reduce_sum(counts, axis=1) / reference
            message = "a cell without counts in the fitted genes has no size factor"
        else:
            factors = tf.cast(self._one_per_cell(given[0], "size_factor", counts), default_float())
            message = "size_factor must be positive numbers"
        check = tf.debugging.Assert(tf.reduce_all(factors > 0), [message])
        with tf.control_dependencies([check]):
            return tf.math.log(factors)


def export_cells(
    fitted: FittedCells,
    path: str | Path,
    version: int = 1,
    overwrite: bool = False,
    iterations: int = 50,
    dtype: tf.DType = tf.float64,
) -> Path:
    """Export the ``fitted`` state (see the module) to ``path/<version>/`` and return that
    folder."""
    version = check_integer(version, "version", hint="TensorFlow Serving's model version, e.g. 1")
    overwrite = check_bool(overwrite, "overwrite", "replace an earlier export at that version")
    dtype = check_serving_dtype(dtype)  # an integer type would round the embedding
    base = check_path(path, "path (the export's base folder)")
    target = base / str(version)
    check_destination(target, overwrite)
    if base.exists() and not base.is_dir():
        raise ValueError(f"{base} is a file: give the base folder of the export's versions.")
    module = CellServing(fitted, iterations, dtype)
    check_writable_folder(base.parent if not base.exists() else base, "The export's folder")
    concrete = module.embed.get_concrete_function(*module.signature())
    signatures = {"embed": concrete, "serving_default": concrete}

    def fill(staging: Path) -> dict[str, Any]:
        tf.saved_model.save(module, str(staging), signatures=signatures)
        return {
            "kind": "single-cell model",
            "signatures": ["embed", "serving_default"],
            "genes": list(fitted.registration.gene_names),
            "inputs": {column: name for column, name, _ in module.columns},
            "categories": {c: cats for c, _, cats in module.columns if cats is not None},
            "learnt_batches": [str(c) for c in fitted.offsets.categories],
            "size_factors": module.size_factors,
            "dtype": module.dtype.name,
            "latent_dim": int(fitted.model.latent_dim),
        }

    return write_staged(target, fill)
