r"""Label transfer: cell types of a labelled reference carried to query cells through the latent
space, as class probabilities that say how sure they are.

The class density of type t is a kernel density over its reference cells, each reference cell
n a Gaussian :math:`N(x \mid \mu_n, \mathrm{diag}(v_n + h^2))`, its q(x) widened by a
bandwidth h, summed over the k reference cells nearest the query (the others weigh nothing);
with the types' shares as prior that gives

.. math::

    p(t \mid x) = (1 - \epsilon) \frac{\sum_{n \in t} w_n(x)}{\sum_n w_n(x)} + \epsilon\, \pi_t,
    \qquad w_n(x) = N(x \mid \mu_n, \mathrm{diag}(v_n + h^2)),

:math:`\epsilon` a floor of the types' shares :math:`\pi_t` (no type is ever impossible). A
query cell's latent is uncertain, so its probabilities average over its q(x*):
:math:`p(t \mid y_*) = E_{q(x_*)}[p(t \mid x_*)]`, by ``n_samples`` draws (a cell placed
between types, or barely placed at all, gets flatter probabilities). h and
:math:`\epsilon` are chosen on a grid to maximise the log-probability of the reference's own
labels held out: each reference cell classified by the reference cells of *other* groups
(batches, when given: as a query batch will be), by all other cells otherwise. Calibration is
measured by :func:`~gpflow_svi_gplvm.metrics.expected_calibration_error`
(benchmarks/results/expression.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.special import logsumexp

from ...validation import check_integer, check_seed

__all__ = ["LabelTransfer", "transfer_labels"]

BANDWIDTHS = tuple(2.0 ** (k / 2) for k in range(-8, 5))
"""The bandwidths tried, as multiples of the median distance from a reference cell to its
k-th nearest neighbour."""
FLOORS = (1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.3)
"""The floors :math:`\\epsilon` tried."""
CALIBRATION_CELLS = 3000
"""At most this many reference cells (drawn at random) choose h and :math:`\\epsilon`."""


class LabelTransfer:
    """Class probabilities from labelled reference cells' q(x) (see the module): :meth:`fit`,
    then :meth:`predict_proba`; ``classes_`` names the columns. ``num_neighbours``: k;
    ``n_samples``: draws of each cell's q(x); ``bandwidth`` (in latent units) and ``floor``:
    fixed values instead of the held-out choice (``bandwidth_`` and ``floor_`` once fitted)."""

    def __init__(
        self,
        num_neighbours: int = 30,
        n_samples: int = 20,
        seed: int = 0,
        bandwidth: float | None = None,
        floor: float | None = None,
    ):
        self.num_neighbours = check_integer(num_neighbours, "num_neighbours", hint="e.g. 30")
        self.n_samples = check_integer(n_samples, "n_samples", hint="draws of q(x*), e.g. 20")
        self.seed = check_seed(seed)
        for name, value, upper in (("bandwidth", bandwidth, np.inf), ("floor", floor, 1.0)):
            if value is not None and not 0 < value < upper:
                raise ValueError(f"{name} must be positive (a floor below 1), got {value!r}.")
        self.bandwidth, self.floor = bandwidth, floor

    def fit(
        self,
        mean: np.ndarray,
        variance: np.ndarray,
        labels: Sequence,
        groups: Sequence | None = None,
    ) -> LabelTransfer:
        """Learn from reference cells' q(x) (``mean``, ``variance`` [N, Q]) and ``labels``
        [N]; ``groups`` [N] (e.g. batches) hold out by group to choose h and epsilon."""
        from sklearn.neighbors import NearestNeighbors

        mean, variance = _checked_moments(mean, variance, "reference")
        names = pd.Series(np.asarray(labels, dtype=object))
        if len(names) != len(mean) or names.isna().any():
            raise ValueError(
                f"labels must give each of the {len(mean)} reference cells a label (no NaN): "
                "drop unlabelled cells from the reference."
            )
        self.classes_, codes = np.unique(names.astype(str).to_numpy(), return_inverse=True)
        if len(self.classes_) < 2:
            raise ValueError("The reference holds one label only: there is nothing to choose.")
        self._mean, self._variance, self._codes = mean, variance, codes
        self.shares_ = np.bincount(codes) / len(codes)
        k = min(self.num_neighbours, len(mean) - 1)
        self._index = NearestNeighbors(n_neighbors=k).fit(mean)
        distances = self._index.kneighbors(mean[: min(len(mean), 5000)], k + 1)[0][:, -1]
        scale = float(np.median(distances)) or 1.0
        self.bandwidth_, self.floor_ = self._choose(scale, groups)
        return self

    def predict_proba(self, mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
        """p(t | y*) [N*, T] of query cells with q(x*) ``mean``, ``variance`` [N*, Q]."""
        mean, variance = _checked_moments(mean, variance, "query", self._mean.shape[1])
        neighbours = self._index.kneighbors(mean, return_distance=False)
        kde = self._posteriors(self._draws(mean, variance), neighbours, self.bandwidth_)
        return (1.0 - self.floor_) * kde + self.floor_ * self.shares_

    def _draws(self, mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
        """Draws [N, S, Q] of each cell's q(x), from the seed (one where all are points)."""
        count = self.n_samples if variance.any() else 1
        noise = np.random.default_rng(self.seed).standard_normal((len(mean), count, mean.shape[1]))
        return mean[:, None] + np.sqrt(variance)[:, None] * noise

    def _posteriors(self, draws: np.ndarray, neighbours: np.ndarray, bandwidth: float):
        """The kernel densities' class posteriors [n, T] averaged over the draws [n, S, Q] of
        each cell, from its reference ``neighbours`` [n, k]; 500 cells at a time."""
        return np.concatenate(
            [
                self._posteriors_of(draws[i : i + 500], neighbours[i : i + 500], bandwidth)
                for i in range(0, len(draws), 500)
            ]
        )

    def _posteriors_of(self, draws: np.ndarray, neighbours: np.ndarray, bandwidth: float):
        centre = self._mean[neighbours]  # [n, k, Q]
        spread = self._variance[neighbours] + bandwidth**2
        squares = (draws[:, :, None, :] - centre[:, None]) ** 2 / spread[:, None]  # [n, S, k, Q]
        log_weights = -0.5 * (squares.sum(-1) + np.log(spread).sum(-1)[:, None])  # [n, S, k]
        log_weights -= logsumexp(log_weights, axis=-1, keepdims=True)
        weights = np.exp(log_weights)
        codes = self._codes[neighbours]  # [n, k]
        posteriors = np.zeros((len(draws), len(self.classes_)))
        for t in range(len(self.classes_)):
            posteriors[:, t] = np.sum(weights * (codes == t)[:, None], axis=-1).mean(axis=1)
        return posteriors

    def _choose(self, scale: float, groups: Sequence | None) -> tuple[float, float]:
        """The bandwidth and floor given, or those maximising the held-out log-probability of
        the labels of (at most :data:`CALIBRATION_CELLS`) reference cells."""
        bandwidths = [m * scale for m in BANDWIDTHS] if self.bandwidth is None else [self.bandwidth]
        floors = FLOORS if self.floor is None else (self.floor,)
        if len(bandwidths) == len(floors) == 1:
            return bandwidths[0], floors[0]
        rng = np.random.default_rng(self.seed)
        count = len(self._mean)
        cells = rng.permutation(count)[: min(CALIBRATION_CELLS, count)]
        neighbours = self._held_out_neighbours(cells, groups)
        draws = self._draws(self._mean[cells], self._variance[cells])
        best = (-np.inf, bandwidths[0], floors[0])
        for bandwidth in bandwidths:
            kde = self._posteriors(draws, neighbours, bandwidth)
            own = kde[np.arange(len(cells)), self._codes[cells]]
            prior = self.shares_[self._codes[cells]]
            for floor in floors:
                score = np.mean(np.log((1.0 - floor) * own + floor * prior))
                if score > best[0]:
                    best = (score, bandwidth, floor)
        return best[1], best[2]

    def _held_out_neighbours(self, cells: np.ndarray, groups: Sequence | None) -> np.ndarray:
        """The k nearest reference cells [n, k] of each of ``cells`` among the cells of other
        groups (with two or more groups), else among all others."""
        from sklearn.neighbors import NearestNeighbors

        k = self._index.n_neighbors
        if groups is None or len(pd.unique(np.asarray(groups, dtype=object))) < 2:
            found = self._index.kneighbors(self._mean[cells], k + 1, return_distance=False)
            return np.array([[n for n in row if n != c][:k] for c, row in zip(cells, found)])
        group_of = np.asarray(groups, dtype=object)
        if len(group_of) != len(self._mean):
            raise ValueError(f"groups must give each of the {len(self._mean)} cells a group.")
        out = np.empty((len(cells), k), dtype=np.int64)
        for group in pd.unique(group_of[cells]):
            others = np.flatnonzero(group_of != group)
            index = NearestNeighbors(n_neighbors=min(k, len(others))).fit(self._mean[others])
            mine = group_of[cells] == group
            found = others[index.kneighbors(self._mean[cells[mine]], return_distance=False)]
            out[mine] = np.pad(found, [(0, 0), (0, k - found.shape[1])], mode="edge")
        return out


def _checked_moments(mean, variance, name: str, width: int | None = None):
    """q(x) means and variances [N, Q] as float arrays; a ``ValueError`` naming what is wrong."""
    mean, variance = np.asarray(mean, dtype=float), np.asarray(variance, dtype=float)
    if mean.ndim != 2 or mean.shape != variance.shape or len(mean) == 0:
        raise ValueError(
            f"The {name} cells' q(x) must be means and variances of one shape [N, Q], N >= 1; "
            f"got {mean.shape} and {variance.shape}."
        )
    if width is not None and mean.shape[1] != width:
        raise ValueError(
            f"The {name} cells have {mean.shape[1]} latent dimensions, the reference {width}: "
            "embed both with one model."
        )
    if not (np.isfinite(mean).all() and np.isfinite(variance).all() and (variance >= 0).all()):
        raise ValueError(f"The {name} cells' q(x) holds NaN, infinite or negative variances.")
    return mean, variance


def transfer_labels(
    reference,
    query,
    labels_key: str,
    *,
    moments=None,
    groups_key: str | None = None,
    key: str = "gplvm",
    key_added: str | None = None,
    num_neighbours: int = 30,
    n_samples: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Carry ``reference.obs[labels_key]`` to the ``query`` cells (AnnDatas embedded by one
    model): q(x) from ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``, or from ``moments(adata)``
    where given (a function returning the means and variances [N, Q], e.g. a fitted model's);
    ``groups_key``: the reference's ``obs`` column (e.g. its batch) whose groups are held out
    in turn to choose h and epsilon. Writes ``query.obs[key_added]`` (default
    ``<labels_key>_transferred``, the most probable label) and ``query.obs[key_added +
    "_probability"]`` (its probability); returns the probabilities [N*, T], a DataFrame.
    ``num_neighbours``, ``n_samples``, ``seed``: :class:`LabelTransfer`'s."""
    if labels_key not in reference.obs.columns:
        raise ValueError(
            f"The reference's obs has no column {labels_key!r}; its columns are "
            f"{list(reference.obs.columns)}."
        )
    labels = reference.obs[labels_key]
    known = labels.notna().to_numpy()
    if not known.any():
        raise ValueError(
            f"The reference's obs[{labels_key!r}] has no label: every value is missing (NaN or "
            "None). Give reference cells with labels."
        )
    reference_mean, reference_variance = _moments_of(reference, key, moments, "reference")
    groups = None
    if groups_key is not None:
        if groups_key not in reference.obs.columns:
            raise ValueError(f"The reference's obs has no column {groups_key!r} (groups_key).")
        groups = reference.obs[groups_key].to_numpy()[known]
    transfer = LabelTransfer(num_neighbours, n_samples, seed).fit(
        reference_mean[known], reference_variance[known], labels[known], groups
    )
    probabilities = transfer.predict_proba(*_moments_of(query, key, moments, "query"))
    table = pd.DataFrame(probabilities, index=query.obs_names, columns=transfer.classes_)
    key_added = key_added or f"{labels_key}_transferred"
    query.obs[key_added] = pd.Categorical(
        transfer.classes_[probabilities.argmax(axis=1)], categories=transfer.classes_
    )
    query.obs[f"{key_added}_probability"] = probabilities.max(axis=1)
    return table


def _moments_of(adata, key: str, moments, name: str) -> tuple[np.ndarray, np.ndarray]:
    if moments is not None:
        return moments(adata)
    names = (f"X_{key}", f"X_{key}_var")
    if not all(n in adata.obsm for n in names):
        raise ValueError(
            f"The {name} cells have no obsm[{names[0]!r}] and obsm[{names[1]!r}]: embed them "
            "first (SingleCellGPLVM.fit or transform), or transfer through the fitted model."
        )
    return np.asarray(adata.obsm[names[0]]), np.asarray(adata.obsm[names[1]])
