"""Data loaders: the embedded default (scikit-learn's digits) and a user's own array files."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["DataSet", "load_digits", "load_array_file"]


@dataclass
class DataSet:
    """Y [N, D] (NaN = missing), optional labels [N] and a one-line description."""

    Y: np.ndarray
    labels: np.ndarray | None = None
    description: str = ""
    metadata: dict = field(default_factory=dict)


def load_digits() -> DataSet:
    """scikit-learn's bundled 8 x 8 digits (1797 x 64), scaled to [0, 1]; no download needed."""
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    return DataSet(
        Y=digits.data / 16.0,
        labels=digits.target,
        description="scikit-learn digits: 1797 images of 8x8 pixels, grey levels scaled to [0, 1]",
        metadata={"image_shape": (8, 8)},
    )


def load_array_file(path: str | Path) -> DataSet:
    """Y from a .npy, .npz (key ``Y``, optional ``labels``) or numeric .csv file (empty = NaN).

    A CSV header row (non-numeric first line) is skipped.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"Data file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return DataSet(np.load(path), description=path.name)
    if suffix == ".npz":
        with np.load(path) as arrays:
            if "Y" not in arrays:
                raise ValueError(
                    f"{path} has arrays {sorted(arrays)} but no 'Y': save the data as "
                    "np.savez(path, Y=Y, labels=labels)."
                )
            labels = arrays["labels"] if "labels" in arrays else None
            return DataSet(arrays["Y"], labels, description=path.name)
    if suffix in (".csv", ".txt"):
        Y = np.genfromtxt(path, delimiter="," if suffix == ".csv" else None, dtype=float)
        Y = np.atleast_2d(Y)
        if np.isnan(Y[0]).all():
            Y = Y[1:]
        return DataSet(Y, description=path.name)
    raise ValueError(f"Unsupported data file type {suffix!r}: use .npy, .npz or .csv.")
