"""Error metrics on the observed entries of Y (NaN in ``Y_true`` = not scored)."""

from __future__ import annotations

import numpy as np

__all__ = ["rmse", "nlpd"]


def rmse(Y_true: np.ndarray, Y_pred: np.ndarray, mask: np.ndarray | None = None) -> float:
    r"""Root mean squared error over the scored entries S:

    .. math::

        \sqrt{\frac{1}{|S|} \sum_{(n, d) \in S} (y_{nd} - \hat y_{nd})^2}.

    Scored entries are those where ``mask`` is True (default: everywhere) and ``Y_true`` is not NaN.
    """
    Y_true, scored = _scored(Y_true, mask, Y_pred)
    Y_pred = np.asarray(Y_pred, dtype=float)
    return float(np.sqrt(np.mean((Y_true[scored] - Y_pred[scored]) ** 2)))


def nlpd(
    Y_true: np.ndarray,
    mean: np.ndarray,
    variance: np.ndarray,
    mask: np.ndarray | None = None,
    joint: bool = False,
) -> float:
    r"""Negative log predictive density under Gaussian predictives :math:`N(m_{nd}, v_{nd})`
    (``mean``, ``variance``).

    Pointwise (default): the mean over scored entries of

    .. math::

        \tfrac12 \log(2\pi v_{nd}) + \frac{(y_{nd} - m_{nd})^2}{2 v_{nd}}.

    ``joint=True``: per test row, the sum of those terms over a row's scored entries (the
    log density of a row under independent Gaussian marginals, not a joint predictive), averaged
    over rows with any scored entry. (The paper does not define its NLPD.)
    """
    Y_true, scored = _scored(Y_true, mask, mean, variance)
    mean, variance = np.asarray(mean, dtype=float), np.asarray(variance, dtype=float)
    if np.any(variance[scored] <= 0):
        raise ValueError("Predictive variances must be positive on the scored entries.")
    with np.errstate(invalid="ignore"):
        terms = 0.5 * np.log(2 * np.pi * variance) + (Y_true - mean) ** 2 / (2 * variance)
    if not joint:
        return float(np.mean(terms[scored]))
    per_row = np.where(scored, terms, 0.0).sum(axis=1)
    return float(np.mean(per_row[scored.any(axis=1)]))


def _scored(Y_true, mask, *predictions) -> tuple[np.ndarray, np.ndarray]:
    """Y_true as floats and the boolean array of entries to score; checks shapes."""
    Y_true = np.asarray(Y_true, dtype=float)
    for prediction in predictions:
        if np.shape(prediction) != Y_true.shape:
            raise ValueError(
                f"Predictions {np.shape(prediction)} must have the shape of Y_true {Y_true.shape}."
            )
    scored = ~np.isnan(Y_true)
    if mask is not None:
        mask = np.asarray(mask, dtype=bool)
        if mask.shape != Y_true.shape:
            raise ValueError(f"mask {mask.shape} must have the shape of Y_true {Y_true.shape}.")
        scored &= mask
    if not scored.any():
        raise ValueError("No entry to score: every entry is masked out or missing.")
    return Y_true, scored
