r"""The groups a differential-expression request compares, checked before anything is computed,
and whether their design lets the batch effect be told apart from the contrast.

**Groups.** ``obs[groupby]``'s categories: ``group1`` (one, a list compared in turn, or None:
each) against ``group2`` (one, or None: the rest). A ``ValueError`` says what to do for a group
that does not exist or holds fewer than :data:`MIN_GROUP_CELLS` cells (a group's expression is a
mean over its cells), a column that looks continuous or like an identifier (more than
:data:`MAX_SINGLE_CELL_SHARE` of its values a single cell each: bin it first), and cells
without a label where "the rest" would silently take them in or leave them out.

**Confounded designs.** With ``batch_correction`` both groups are read at the same reference
batches, which removes the batch effect; if the groups and the batches go together, the
contrast goes with it. The overlap of the two groups' batch compositions,
:math:`\sum_b \min(p_1(b), p_2(b))`, says how far the batch effect can be told apart from the
contrast: below :data:`CONFOUNDED_OVERLAP` it cannot (each group (nearly) a batch of its own,
or a compared group a batch ``map_query`` learnt, whose offsets on f then carry the
contrast: stimulated cells mapped onto a control reference, say). ``batch_correction=None``
(the default) corrects where the design allows it and compares each cell at its own batch
where it does not, with a warning naming the reason; ``True`` corrects in any case (warning
that the contrast may be removed), ``False`` never does. A model without a batch has nothing
to correct.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..fitting.fitted import FittedCells

__all__ = [
    "Comparison",
    "batch_references",
    "comparisons",
    "label_codes",
    "CONFOUNDED_OVERLAP",
    "MIN_GROUP_CELLS",
    "MAX_SINGLE_CELL_SHARE",
]

MIN_GROUP_CELLS = 2
"""The fewest cells a compared group may hold."""

MAX_SINGLE_CELL_SHARE = 0.5
"""A ``groupby`` column with more than 20 values, more than this share of them a single cell
each, is refused as continuous (or an identifier)."""

CONFOUNDED_OVERLAP = 0.1
"""Below this overlap of the two groups' batch compositions, batch and contrast are one."""


@dataclass(frozen=True)
class Comparison:
    """Group ``first`` against ``second`` (None: every other labelled cell): their cells
    [n1], [n2] and their categories' codes (in :func:`label_codes`' order)."""

    first: Any
    second: Any
    cells1: np.ndarray
    cells2: np.ndarray
    codes1: tuple[int, ...]
    codes2: tuple[int, ...]

    @property
    def second_name(self) -> Any:
        return "Rest" if self.second is None else self.second


def label_codes(labels: pd.Series, groupby: str) -> tuple[np.ndarray, list]:
    """Each cell's category code [N] (-1 without a label) and the categories; a ``ValueError``
    for a column that looks continuous or is empty."""
    categorical = labels.astype("category")
    categories = list(categorical.cat.categories)
    sizes = categorical.value_counts()
    singles = int((sizes == 1).sum())
    if len(categories) > 20 and singles > MAX_SINGLE_CELL_SHARE * len(categories):
        raise ValueError(
            f"obs[{groupby!r}] holds {len(categories)} distinct values, {singles} of them a "
            "single cell: it looks continuous (or an identifier), and DE compares groups of "
            "cells. Bin it first (e.g. pandas.cut into a few ranges) or choose a categorical "
            "column."
        )
    if not categories:
        raise ValueError(f"obs[{groupby!r}] holds no label: nothing to compare.")
    return categorical.cat.codes.to_numpy().astype(np.int64), categories


def comparisons(labels: pd.Series, group1: Any, group2: Any, groupby: str) -> list[Comparison]:
    """The comparisons asked for (see the module), each group checked."""
    codes, categories = label_codes(labels, groupby)
    unlabelled = int(np.sum(codes < 0))
    if unlabelled and (group1 is None or group2 is None):
        raise ValueError(
            f"obs[{groupby!r}] leaves {unlabelled} cell(s) without a label (NaN): against "
            "'the rest' they would be left out silently. Label them (e.g. "
            f"adata.obs[{groupby!r}].cat.add_categories('unlabelled').fillna('unlabelled')), "
            "or name both groups (group1=..., group2=...)."
        )
    if group1 is None:
        if len(categories) < 2:
            raise ValueError(
                f"obs[{groupby!r}] holds {len(categories)} group(s): one against the rest needs "
                "at least two."
            )
        group1 = categories
    firsts = list(group1) if isinstance(group1, (list, tuple, np.ndarray)) else [group1]
    out = []
    for first in firsts:
        code1 = _code(first, categories, groupby)
        if group2 is None:
            code2 = tuple(c for c in range(len(categories)) if c != code1)
        else:
            if group2 == first:
                raise ValueError(f"group1 and group2 are both {first!r}: compare two groups.")
            code2 = (_code(group2, categories, groupby),)
        cells1 = np.flatnonzero(codes == code1)
        cells2 = np.flatnonzero(np.isin(codes, code2))
        for name, cells in ((first, cells1), ("the rest" if group2 is None else group2, cells2)):
            if len(cells) < MIN_GROUP_CELLS:
                raise ValueError(
                    f"Group {name!r} of obs[{groupby!r}] holds {len(cells)} cell(s): a group's "
                    f"expression is a mean over its cells, and needs at least {MIN_GROUP_CELLS} "
                    "(a few dozen for a useful answer). Merge it with another or leave it out "
                    "(group1=[...] names the groups to compare)."
                )
        out.append(Comparison(first, group2, cells1, cells2, (code1,), code2))
    return out


def _code(group: Any, categories: list, groupby: str) -> int:
    if group is None or (isinstance(group, float) and np.isnan(group)):
        raise ValueError(
            f"A group of obs[{groupby!r}] is {group!r}: name a label (cells without one belong "
            "to no group)."
        )
    if group not in categories:
        raise ValueError(
            f"obs[{groupby!r}] has no cell in group {group!r}: its groups are "
            f"{sorted(map(str, categories))[:20]}."
        )
    return categories.index(group)


def batch_references(
    fitted: FittedCells, obs: pd.DataFrame, comparison: Comparison, batch_correction: bool | None
) -> list:
    """The reference batches both groups are read at (the fitted batches, or [None]: each
    cell's own), as ``batch_correction`` and the design decide (see the module); a warning
    where the design and the choice do not go together."""
    key = fitted.batch_key
    if key is None:
        if batch_correction:
            warnings.warn(
                "The model was fitted without a batch (batch_key): batch_correction has "
                "nothing to correct, the groups are compared as they are.",
                UserWarning,
                stacklevel=4,
            )
        return [None]
    if batch_correction is False:
        return [None]
    reason = _confounded(fitted, obs[key], comparison)
    name = f"{comparison.first!r} vs {comparison.second_name!r}"
    if reason is not None and batch_correction is None:
        warnings.warn(
            f"{name}: {reason}, so reading both groups at one batch would remove the contrast "
            "with the batch effect. Compared at each cell's own batch instead "
            "(batch_correction=False); pass batch_correction=True to correct all the same.",
            UserWarning,
            stacklevel=4,
        )
        return [None]
    if reason is not None:
        warnings.warn(
            f"{name}: {reason}: batch_correction=True removes the contrast with the batch "
            "effect. Pass batch_correction=False (or None) to compare each cell at its own "
            "batch.",
            UserWarning,
            stacklevel=4,
        )
    return list(fitted.registration.encoding.categories[key])


def _confounded(fitted: FittedCells, batches: pd.Series, comparison: Comparison) -> str | None:
    """Why the two groups' batches and their contrast cannot be told apart, or None."""
    values = batches.astype(object).to_numpy()
    first, second = values[comparison.cells1], values[comparison.cells2]
    learnt = set(fitted.offsets.categories)
    mapped = [np.mean([b in learnt for b in group]) for group in (first, second)]
    shares = [pd.Series(group).value_counts(normalize=True) for group in (first, second)]
    overlap = float(shares[0].combine(shares[1], min, fill_value=0.0).sum())
    if overlap >= CONFOUNDED_OVERLAP:
        return None
    if abs(mapped[0] - mapped[1]) > 0.5:
        return (
            "one group's cells are of a batch map_query learnt (whose offsets on f carry what "
            "sets it apart) and the other's are not"
        )
    return f"the two groups share almost no batch (overlap of their compositions {overlap:.2f})"
