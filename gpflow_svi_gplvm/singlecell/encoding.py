"""Covariates of single cells from their ``obs`` columns: categories one-hot, numbers
standardised, the same on every worker and for new cells."""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from ..distributed import Workers

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
        for column in self.columns:
            values = obs_column(obs, column)
            if _categorical(values) or column in self.categorical:
                seen = list(values.astype("category").cat.categories)
                self.categories[column] = _agreed_categories(seen, workers)
                _warn_of_single_cell_categories(column, values, self.categories[column], workers)
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
                extra = mapped if column in self.categorical else ()
                parts.append(_one_hot(values, column, self.categories[column], extra))
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


def _warn_of_single_cell_categories(column: str, values, categories: list, workers: Workers):
    """A warning naming the categories of ``column`` that one cell alone holds (over every
    worker's cells): the kernel learns their effect from that cell, and its latent position
    absorbs whatever the category would have explained."""
    codes = _codes(values, categories)
    held = np.bincount(codes.dropna().astype(int), minlength=len(categories))
    single = [categories[i] for i in np.flatnonzero(workers.sum(held.astype(float)) == 1)]
    if single:
        warnings.warn(
            f"obs column {column!r} has {len(single)} categories of a single cell "
            f"({single[:5]}): each one's effect is learnt from that cell alone. The fit goes on; "
            "merge such categories with others or drop their cells if that is not intended.",
            stacklevel=4,
        )


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


def _one_hot(values, column: str, categories: list, mapped: Sequence = ()) -> np.ndarray:
    """[N, K] one-hot of ``values`` over ``categories`` (zeros for those ``mapped``); an unseen
    category is a ValueError."""
    codes = _codes(values, list(categories) + list(mapped))
    if codes.isna().any():
        unseen = sorted({str(v) for v in values[codes.isna()]})
        raise ValueError(
            f"obs column {column!r} holds categories the model was not fitted with: {unseen} "
            f"(fitted: {categories}). Embed cells of new batches with map_query(adata), which "
            "learns their effects with the fitted model unchanged; or fit with those cells too."
        )
    return np.eye(len(categories) + 1)[np.minimum(codes.to_numpy(dtype=int), len(categories))][
        :, : len(categories)
    ]
