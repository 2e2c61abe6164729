"""Covariates of single cells from their ``obs`` columns: categories one-hot, numbers
standardised, the same on every worker and for new cells."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ...distributed.workers import Workers

__all__ = ["CovariateEncoding", "obs_column"]


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
        with workers.agreeing():  # every worker's columns checked before any exchange
            columns = {column: obs_column(obs, column) for column in self.columns}
            for column, values in columns.items():
                if not (_categorical(values) or column in self.categorical):
                    _numbers(column, values)
        for column, values in columns.items():
            if _categorical(values) or column in self.categorical:
                seen = list(values.astype("category").cat.categories)
                categories = _agreed_categories(seen, workers)
                codes = _codes(values, categories).dropna().astype(int)
                held = workers.sum(np.bincount(codes, minlength=len(categories)).astype(float))
                self.categories[column] = _held_categories(column, categories, held)
            else:
                numbers = values.to_numpy(dtype=float)
                # Moments of the values over their largest size, so that no square overflows
                # (a column near 1e300 standardises as one near 1 does).
                peak = workers.stack(np.max(np.abs(numbers), initial=0.0)).max() or 1.0
                count, total, squares = workers.sum(
                    [len(numbers), np.sum(numbers / peak), np.sum((numbers / peak) ** 2)]
                )
                mean = total / max(count, 1)
                self.location[column] = float(mean * peak)
                spread = np.sqrt(max(squares / max(count, 1) - mean**2, 0))
                self.scale[column] = float(spread * peak) or 1.0
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

    def transform(self, obs, mapped: Sequence = ()) -> np.ndarray | None:
        """The covariates [N, P] of ``obs``, or None without columns; a ``ValueError`` names a
        missing column, a NaN, or a category unseen in training. ``mapped``: categories of the
        batch column (the first categorical one) unseen in training whose one-hot part is
        zero (batches whose effects a query mapping learnt apart, as offsets)."""
        if not self.columns:
            return None
        parts = []
        for column in self.columns:
            values = obs_column(obs, column)
            if values.isna().any():
                cell = values.index[np.argmax(values.isna().to_numpy())]
                raise ValueError(
                    f"obs column {column!r} is missing (NaN) for cell {cell!r} "
                    f"({int(values.isna().sum())} cells in all): fill it, drop those cells, or "
                    "leave the column out of the covariates."
                )
            if column in self.categories:
                batch = column in self.categorical
                parts.append(_one_hot(values, column, self.categories[column], batch, mapped))
            else:
                numbers = _numbers(column, values)
                parts.append(((numbers - self.location[column]) / self.scale[column])[:, None])
        return np.concatenate(parts, axis=1)


def _numbers(column: str, values) -> np.ndarray:
    """The values of a numeric covariate column as numbers [N]; a ``ValueError`` naming the
    column for values that are not numbers, and the first cell whose value is infinite (NaN is
    named by :meth:`CovariateEncoding.transform`, as missing)."""
    try:
        numbers = values.to_numpy(dtype=float)
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"obs column {column!r} is a numeric covariate but holds values that are not numbers "
            f"({error}): give numbers, e.g. adata.obs[{column!r}] = "
            f"adata.obs[{column!r}].astype(float)."
        ) from error
    if np.isinf(numbers).any():
        raise ValueError(
            f"obs column {column!r} holds {numbers[np.isinf(numbers)][0]} for "
            f"cell {values.index[np.argmax(np.isinf(numbers))]!r}: a numeric "
            "covariate must be finite. Fix or drop those cells, or leave it out."
        )
    return numbers


def _agreed_categories(seen: list, workers: Workers) -> list:
    """The categories of every worker together: the workers' own list when all agree (a
    categorical column's declared order), else their sorted union."""
    lists = [json.loads(text) for text in workers.texts(json.dumps([str(c) for c in seen]))]
    if all(other == lists[0] for other in lists):
        return seen
    by_text = {str(c): c for c in seen}
    return [by_text.get(text, text) for text in sorted(set().union(*lists))]


def _held_categories(column: str, categories: list, held: np.ndarray) -> list:
    """The ``categories`` of ``column`` that some cell holds (``held`` [K]: the cells of each,
    over every worker's): a category of no cell (a pandas category no cell uses) would be a
    covariate never trained, so it is dropped with a warning naming it, and cells of it are
    then refused as of an unknown category. A category of a single cell is kept with a warning:
    the kernel learns its effect from that cell, whose latent position absorbs whatever the
    category would have explained."""
    empty = [c for c, count in zip(categories, held) if count == 0]
    if empty:
        warnings.warn(
            f"obs column {column!r} has {len(empty)} categories without cells ({empty[:5]}): "
            "they are left out of the covariates (cells of them are refused later as of an "
            "unknown category). Drop them first to silence this, e.g. "
            f"adata.obs[{column!r}] = adata.obs[{column!r}].cat.remove_unused_categories().",
            stacklevel=4,
        )
    single = [c for c, count in zip(categories, held) if count == 1]
    if single:
        warnings.warn(
            f"obs column {column!r} has {len(single)} categories of a single cell "
            f"({single[:5]}): each one's effect is learnt from that cell alone. The fit goes on; "
            "merge such categories with others or drop their cells if that is not intended.",
            stacklevel=4,
        )
    return [c for c, count in zip(categories, held) if count > 0]


def obs_column(obs, column: str, option: str = "batch_key or in covariate_keys"):
    if column not in obs.columns:
        raise ValueError(
            f"obs has no column {column!r}; its columns are {list(obs.columns)}. Name one of "
            f"them as {option}."
        )
    return obs[column]


def _categorical(values) -> bool:
    return values.dtype.name in ("category", "object", "bool", "string")


def _codes(values, categories: list):
    """Each value's index in ``categories`` (a pandas Series [N]; NaN where it is not one)."""
    return values.astype(object).map({c: i for i, c in enumerate(categories)})


def _one_hot(
    values, column: str, categories: list, batch: bool, mapped: Sequence = ()
) -> np.ndarray:
    """[N, K] one-hot of ``values`` over ``categories`` (zeros for the ``mapped`` categories of
    the ``batch`` column); an unseen category is a ValueError saying what can embed it."""
    codes = _codes(values, list(categories) + list(mapped if batch else []))
    if codes.isna().any():
        unseen = sorted({str(v) for v in values[codes.isna()]})
        remedy = (
            "Embed cells of new batches with map_query(adata), which learns their effects with "
            "the fitted model unchanged; or fit with those cells too."
            if batch
            else "map_query learns new categories of the batch key only: give those cells a "
            "fitted category, fit with those cells too, or fit without this column in "
            "covariate_keys."
        )
        raise ValueError(
            f"obs column {column!r} holds categories the model was not fitted with: {unseen} "
            f"(fitted: {categories}). {remedy}"
        )
    return np.eye(len(categories) + 1)[np.minimum(codes.to_numpy(dtype=int), len(categories))][
        :, : len(categories)
    ]
