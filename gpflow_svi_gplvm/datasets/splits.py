"""Experimental protocols of the paper: seeded train/test splits and artificial missingness.

* :func:`train_test_split`: the seeded 80/20 split of rows used for test RMSE / NLPD
  (oilflow, qPCR, ...).
* :func:`random_missing`: hide a fraction of the observed entries uniformly at random
  (MNIST, Brendan faces: 10-60 % missing; MovieLens: held-out ratings).
* :func:`blank_bones`: structured missingness for motion capture, blanking every channel of whole
  bones (optionally with the bones below them in the skeleton, as the authors' MOCAP script does;
  the skeleton is in :mod:`.skeleton`).

All functions copy their input; missing entries are NaN throughout, as in
:class:`~gpflow_svi_gplvm.datasets.dataset.DataSet`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from .skeleton import (
    CMU_SKELETON_PARENTS,
    MOCAP_BODY_PARTS,
    ChannelTable,
    bone_descendants,
    bone_per_column,
)

logger = logging.getLogger(__name__)


class Split(NamedTuple):
    """Result of :func:`train_test_split`; indices are sorted, so row order is preserved.

    ``Y_train`` [N - N_test, ...], ``Y_test`` [N_test, ...], ``labels_train`` /
    ``labels_test`` the matching labels (None without labels), ``train_index`` [N - N_test] and
    ``test_index`` [N_test] the rows of the input each part holds.
    """

    Y_train: np.ndarray
    Y_test: np.ndarray
    labels_train: np.ndarray | None
    labels_test: np.ndarray | None
    train_index: np.ndarray
    test_index: np.ndarray


def train_test_split(
    Y: np.ndarray,
    test_fraction: float = 0.2,
    seed: int | np.random.Generator | None = 0,
    labels: np.ndarray | None = None,
) -> Split:
    """Seeded random split of the rows of ``Y`` [N, ...] (and ``labels`` [N]) into train and test.

    ``round(test_fraction * N)`` rows (at least one, at most N - 1) go to the test set, chosen
    uniformly without replacement by ``numpy.random.default_rng(seed)``: the same seed gives the
    same split. Both index arrays are sorted, so each part keeps the original row order.
    """
    Y = np.asarray(Y)
    if Y.ndim < 1:
        raise ValueError("Y must have at least one dimension (rows).")
    n = Y.shape[0]
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must lie strictly between 0 and 1, got {test_fraction}.")
    if n < 2:
        raise ValueError(f"Cannot split {n} row(s) into non-empty train and test sets.")
    if labels is not None:
        labels = np.asarray(labels)
        if labels.shape[0] != n:
            raise ValueError(f"labels has {labels.shape[0]} rows but Y has {n}.")
    num_test = min(max(int(round(test_fraction * n)), 1), n - 1)
    rng = np.random.default_rng(seed)
    permutation = rng.permutation(n)
    test_index = np.sort(permutation[:num_test])
    train_index = np.sort(permutation[num_test:])
    return Split(
        Y_train=Y[train_index],
        Y_test=Y[test_index],
        labels_train=None if labels is None else labels[train_index],
        labels_test=None if labels is None else labels[test_index],
        train_index=train_index,
        test_index=test_index,
    )


def random_missing(
    Y: np.ndarray, fraction: float, seed: int | np.random.Generator | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Hide ``fraction`` of the *observed* entries of ``Y`` [N, D] uniformly at random.

    Returns ``(Y_missing, hidden)``, both [N, D]: a float64 copy of ``Y`` with the chosen entries
    set to NaN, and the boolean mask of the entries that were hidden (ground truth is
    ``Y[hidden]``). Entries that are already NaN are never chosen, so ``hidden`` never overlaps
    them; exactly ``round(fraction * number_observed)`` entries are hidden. For fully observed data
    (MNIST, faces) that is the fraction of all entries; for MovieLens it is a fraction of the
    ratings. The counts are logged at INFO level.
    """
    if not 0.0 <= fraction < 1.0:
        raise ValueError(f"fraction must lie in [0, 1), got {fraction}.")
    Y_missing = np.array(Y, dtype=np.float64, copy=True)
    observed = np.flatnonzero(~np.isnan(Y_missing))
    num_hide = int(round(fraction * observed.size))
    rng = np.random.default_rng(seed)
    chosen = rng.choice(observed, size=num_hide, replace=False)
    hidden = np.zeros(Y_missing.shape, dtype=bool)
    hidden.flat[chosen] = True
    Y_missing[hidden] = np.nan
    logger.info(
        "random_missing: hid %d of %d observed entries (%.2f%%); %d entries were already missing; "
        "%.2f%% of all entries are now missing.",
        num_hide,
        observed.size,
        100.0 * num_hide / max(observed.size, 1),
        Y_missing.size - observed.size,
        100.0 * np.isnan(Y_missing).mean() if Y_missing.size else 0.0,
    )
    return Y_missing, hidden


def blank_bones(
    Y: np.ndarray,
    channel_table: ChannelTable,
    bones: str | Iterable[str],
    *,
    descendants: bool = False,
    rows: np.ndarray | Sequence[int] | slice | None = None,
    parents: Mapping[str, str | None] = CMU_SKELETON_PARENTS,
) -> tuple[np.ndarray, np.ndarray]:
    """Structured missingness: set every channel of the named bones in ``Y`` [N, D] to NaN.

    ``channel_table`` names the bone of each of the D columns (see
    :func:`~gpflow_svi_gplvm.datasets.skeleton.bone_per_column`). ``bones`` holds bone names
    (``"head"``, ``"lfemur"``, ...) and/or body parts from :data:`MOCAP_BODY_PARTS`
    (``"left_leg"``, ``"neck_and_head"``, ...). With ``descendants=True`` each named bone takes
    its whole subtree with it (``"lhumerus"`` then blanks the left forearm, hand and fingers as
    well), as the authors' script does. ``rows`` restricts the blanking to some rows (index
    array, boolean mask or slice; default all rows).

    Returns ``(Y_missing, hidden)``, both [N, D], like :func:`random_missing`: a float64 copy and
    the mask of the entries this call hid (entries already NaN are not counted). Raises
    ``ValueError`` for an unknown name, listing the valid ones.
    """
    Y_missing = np.array(Y, dtype=np.float64, copy=True)
    column_bones = bone_per_column(channel_table)
    if Y_missing.ndim != 2 or Y_missing.shape[1] != column_bones.size:
        raise ValueError(
            f"Y has shape {Y_missing.shape} but the channel table describes "
            f"{column_bones.size} columns."
        )
    bones = [bones] if isinstance(bones, str) else list(bones)
    selected = _selected_bones(bones, column_bones, parents, descendants)
    columns = np.flatnonzero(np.isin(column_bones, selected))
    if columns.size == 0:
        raise ValueError(
            f"The bones {bones} have no channels in this table (hip joints have no degrees of "
            "freedom): use descendants=True or a body part such as 'left_leg'."
        )
    row_index = np.arange(Y_missing.shape[0]) if rows is None else rows
    target = np.zeros(Y_missing.shape, dtype=bool)
    target[np.ix_(np.arange(Y_missing.shape[0])[row_index], columns)] = True
    hidden = target & ~np.isnan(Y_missing)
    Y_missing[target] = np.nan
    return Y_missing, hidden


def _selected_bones(
    bones: list[str],
    column_bones: np.ndarray,
    parents: Mapping[str, str | None],
    descendants: bool,
) -> list[str]:
    """The bones that the names ``bones`` (bones or body parts) pick, or a ``ValueError`` for an
    unknown name, listing the valid ones."""
    known_bones = list(dict.fromkeys(column_bones.tolist() + list(parents)))
    selected: list[str] = []
    for name in bones:
        if name in MOCAP_BODY_PARTS:
            selected.extend(MOCAP_BODY_PARTS[name])
        elif name in known_bones:
            selected.extend(bone_descendants(name, parents) if descendants else [name])
        else:
            raise ValueError(
                f"Unknown bone or body part {name!r}. Valid bones: {', '.join(known_bones)}. "
                f"Valid body parts: {', '.join(MOCAP_BODY_PARTS)}."
            )
    return selected
