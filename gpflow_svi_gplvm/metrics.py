"""Error metrics on the observed entries of Y (NaN in ``Y_true`` = not scored)."""

from __future__ import annotations

import numpy as np

__all__ = ["rmse"]


def rmse(Y_true: np.ndarray, Y_pred: np.ndarray, mask: np.ndarray | None = None) -> float:
    """sqrt(mean over scored entries of (y - y_hat)^2).

    Scored entries are those where ``mask`` is True (default: everywhere) and ``Y_true`` is not NaN.
    """
    Y_true = np.asarray(Y_true, dtype=float)
    Y_pred = np.asarray(Y_pred, dtype=float)
    if Y_true.shape != Y_pred.shape:
        raise ValueError(f"Y_true {Y_true.shape} and Y_pred {Y_pred.shape} must have one shape.")
    scored = ~np.isnan(Y_true)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != Y_true.shape:
            raise ValueError(f"mask {mask.shape} must have the shape of Y_true {Y_true.shape}.")
        scored &= mask
    if not scored.any():
        raise ValueError("No entry to score: every entry is masked out or missing.")
    return float(np.sqrt(np.mean((Y_true[scored] - Y_pred[scored]) ** 2)))
