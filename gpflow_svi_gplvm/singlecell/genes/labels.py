r"""Label transfer: cell types of a labelled reference carried to query cells through the latent
space, as class probabilities that say how sure they are, and left "unassigned" below a
probability the user sets.

The class density of type t is a kernel density over its reference cells, each reference cell
n a Gaussian :math:`N(x \mid \mu_n, \mathrm{diag}(v_n + h^2))`, its q(x) widened by a
bandwidth h, summed over the k reference cells nearest the query (the others weigh nothing; the
k nearest of each type, tried, cost 6-10 times the CPU for the same accuracy, calibration and
rare-type recall on held-out real cells: benchmarks/results/labels.md); with the types' shares
as prior that gives the density's class posterior, floored by the shares :math:`\pi_t` (no type
is ever impossible),

.. math::

    \hat p(t \mid x) = (1 - \epsilon) \frac{\sum_{n \in t} w_n(x)}{\sum_n w_n(x)}
    + \epsilon\, \pi_t, \qquad w_n(x) = N(x \mid \mu_n, \mathrm{diag}(v_n + h^2)).

A query cell's latent is uncertain, so this averages over its q(x*),
:math:`\bar p_t = E_{q(x_*)}[\hat p(t \mid x_*)]`, by ``n_samples`` draws (a cell placed
between types, or barely placed at all, gets flatter probabilities). A calibration map then
turns it into the probabilities returned,

.. math::

    p(t \mid y_*) = \frac{\exp(a \log \bar p_t + b_t)}{\sum_s \exp(a \log \bar p_s + b_s)},

an inverse temperature a > 0 and a bias :math:`b_t` per type (Alexandari et al.'s bias-corrected
temperature scaling, ICML 2020; ``calibration="temperature"`` keeps b = 0, None takes a = 1,
b = 0). h and :math:`\epsilon` maximise the log-probability of the reference's own labels held
out, then a and b maximise it given them: each reference cell classified by the reference cells
of *other* groups (its batches: as a query batch will be classified), or, where the reference has
one batch or none, of other random folds of its cells (with a warning: folds of one batch cannot
show the shift between batches that a query of another batch brings). Each type weighs in that
choice by its share of the reference, at least :data:`CALIBRATION_PER_TYPE` cells of each type
taking part (rare types kept).

What the probabilities mean: among query cells whose most probable type is given probability p,
about a fraction p are of that type, where the query differs from the reference as its held-out
groups differ from each other. That is measured on held-out real cells by
:func:`~gpflow_svi_gplvm.metrics.expected_calibration_error` (benchmarks/results/labels.md); a
query with a shift the held-out groups never showed (another condition, another technology) can
be right less often than its probabilities say.

Cells whose most probable type has a probability below ``unassigned_below`` are "unassigned",
and so are those a boolean ``query.obs`` column flags (``flagged_key``: e.g. cells a novelty
score marks as of a type the reference lacks) and those whose novelty (``obs["<key>_novelty"]``,
written by ``transform`` and ``map_query``: :mod:`~gpflow_svi_gplvm.singlecell.mapping.novelty`)
is above ``novel_above``, whatever their probabilities.

A cell of a type the reference lacks is often placed among reference cells of the types nearest
it, not apart from them, where its novelty is low; but there it lies among cells of several
types, or of none. Its *label mixing* is the share of its k nearest reference cells (Euclidean
on the q(x) means, reference cells labelled or not) that do not carry the most common label
among them, a reference cell without a label carrying none:

.. math::

    m(x_*) = 1 - \frac{1}{k} \max_t \sum_{j=1}^{k} [\, t_{(j)} = t \,],

0 inside a type, 1 among unlabelled cells only. Cells whose mixing is above ``mixed_above`` are
"unassigned" too. It needs the reference's labels, and counts a cell among unlabelled
reference cells as mixed, whatever its type (benchmarks/results/mapping.md).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from scipy.special import log_softmax, logsumexp

from ...metrics import unlabelled_texts
from ...validation import check_fraction, check_integer, check_seed

__all__ = ["LabelTransfer", "transfer_labels", "assigned_labels", "UNASSIGNED"]

UNASSIGNED = "unassigned"
"""The label of query cells :func:`transfer_labels` leaves unassigned."""
BANDWIDTHS = tuple(2.0 ** (k / 2) for k in range(-8, 5))
"""The bandwidths tried, as multiples of the median distance from a reference cell to its
k-th nearest neighbour."""
FLOORS = (1e-4, 1e-3, 1e-2, 0.03, 0.1, 0.3)
"""The floors :math:`\\epsilon` tried."""
CALIBRATION_CELLS = 4000
"""About this many reference cells (drawn at random, by type) choose h, epsilon, a and b."""
CALIBRATION_PER_TYPE = 200
"""At least this many cells of each type (all of a type with fewer) take part in the choice."""
FOLDS = 5
"""The random folds of a reference's cells held out in turn where it has one batch or none."""
BIAS_PENALTY = 1e-2
"""The ridge penalty on the biases b (per held-out cell): it keeps a type that the held-out
cells never confuse with another from an unbounded bias."""
CALIBRATIONS = ("bias", "temperature", None)
"""The calibration maps: a and b, a alone, none."""
_UNLABELLED_NAMES = {"unlabelled", "unlabeled", "unknown", "unassigned", "nan", "none", "na", ""}
"""Labels that usually mean "no label": a reference class of that name draws a warning."""
MIXING_NEIGHBOURS = 15
"""k, the reference cells a query cell's label mixing counts."""


class LabelTransfer:
    """Class probabilities from labelled reference cells' q(x) (see the module): :meth:`fit`,
    then :meth:`predict_proba`; ``classes_`` names the columns. ``num_neighbours``: k;
    ``n_samples``: draws of each cell's q(x); ``bandwidth`` (in latent units) and
    ``floor``: fixed values instead of the held-out choice (``bandwidth_`` and ``floor_`` once
    fitted); ``calibration``: the map fitted on the held-out cells, "bias" (a and b),
    "temperature" (a) or None (``temperature_`` = 1/a and ``biases_`` once fitted)."""

    def __init__(
        self,
        num_neighbours: int = 30,
        n_samples: int = 20,
        seed: int = 0,
        bandwidth: float | None = None,
        floor: float | None = None,
        calibration: str | None = "bias",
    ):
        self.num_neighbours = check_integer(num_neighbours, "num_neighbours", hint="e.g. 30")
        self.n_samples = check_integer(n_samples, "n_samples", hint="draws of q(x*), e.g. 20")
        self.seed = check_seed(seed)
        for name, value, upper in (("bandwidth", bandwidth, np.inf), ("floor", floor, 1.0)):
            if value is not None and not 0 < value < upper:
                raise ValueError(f"{name} must be positive (a floor below 1), got {value!r}.")
        if calibration not in CALIBRATIONS:
            raise ValueError(
                f"calibration must be one of {CALIBRATIONS}, got {calibration!r}: 'bias' fits a "
                "temperature and a bias per type on held-out reference cells."
            )
        self.bandwidth, self.floor, self.calibration = bandwidth, floor, calibration

    def fit(
        self,
        mean: np.ndarray,
        variance: np.ndarray,
        labels: Sequence,
        groups: Sequence | None = None,
    ) -> LabelTransfer:
        """Learn from reference cells' q(x) (``mean``, ``variance`` [N, Q]) and ``labels``
        [N]; ``groups`` [N] (e.g. batches) are held out in turn to choose h, epsilon and the
        calibration map (random folds, with a warning, where there are fewer than two)."""
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
        self._members = [np.flatnonzero(codes == t) for t in range(len(self.classes_))]
        self._index = NearestNeighbors(n_neighbors=min(self.num_neighbours, len(mean))).fit(mean)
        k = min(self.num_neighbours, len(mean) - 1)
        spacing = self._index.kneighbors(mean[: min(len(mean), 5000)], k + 1)[0][:, -1]
        scale = float(np.median(spacing)) or 1.0
        self.bandwidth_, self.floor_, self.temperature_, self.biases_ = self._choose(
            scale, self._held_out_groups(groups)
        )
        return self

    def predict_proba(self, mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
        """p(t | y*) [N*, T] of query cells with q(x*) ``mean``, ``variance`` [N*, Q]."""
        mean, variance = _checked_moments(mean, variance, "query", self._mean.shape[1])
        neighbours = self._neighbours(mean, np.ones(len(self._mean), bool))
        kde = self._posteriors(self._draws(mean, variance), neighbours, self.bandwidth_)
        floored = (1.0 - self.floor_) * kde + self.floor_ * self.shares_
        return calibrated(floored, 1.0 / self.temperature_, self.biases_)

    def _draws(self, mean: np.ndarray, variance: np.ndarray) -> np.ndarray:
        """Draws [N, S, Q] of each cell's q(x), from the seed (one where all are points)."""
        count = self.n_samples if variance.any() else 1
        noise = np.random.default_rng(self.seed).standard_normal((len(mean), count, mean.shape[1]))
        return mean[:, None] + np.sqrt(variance)[:, None] * noise

    def _neighbours(self, points: np.ndarray, allowed: np.ndarray) -> np.ndarray:
        """The k reference cells nearest each of ``points`` [n, Q] among the ``allowed`` ones
        [N] (bool): indices [n, k], -1 where fewer are allowed."""
        from sklearn.neighbors import NearestNeighbors

        k, kept = self.num_neighbours, np.flatnonzero(allowed)
        index = self._index
        if len(kept) < len(self._mean):
            index = NearestNeighbors(n_neighbors=min(k, len(kept))).fit(self._mean[kept])
        found = kept[index.kneighbors(points, return_distance=False)]
        out = np.full((len(points), k), -1, dtype=np.int64)
        out[:, : found.shape[1]] = found
        return out

    def _posteriors(self, draws: np.ndarray, neighbours: np.ndarray, bandwidth: float):
        """The kernel densities' class posteriors [n, T] averaged over the draws [n, S, Q] of
        each cell, from its reference ``neighbours`` [n, K] (-1: none); 500 cells at a time."""
        return np.concatenate(
            [
                self._posteriors_of(draws[i : i + 500], neighbours[i : i + 500], bandwidth)
                for i in range(0, len(draws), 500)
            ]
        )

    def _posteriors_of(self, draws: np.ndarray, neighbours: np.ndarray, bandwidth: float):
        present = neighbours >= 0  # [n, K]
        cells = np.where(present, neighbours, 0)
        centre = self._mean[cells]  # [n, K, Q]
        spread = self._variance[cells] + bandwidth**2
        squares = (draws[:, :, None, :] - centre[:, None]) ** 2 / spread[:, None]  # [n, S, K, Q]
        log_weights = -0.5 * (squares.sum(-1) + np.log(spread).sum(-1)[:, None])  # [n, S, K]
        log_weights = np.where(present[:, None], log_weights, -np.inf)
        log_weights -= logsumexp(log_weights, axis=-1, keepdims=True)
        weights = np.exp(log_weights)
        codes = np.where(present, self._codes[cells], -1)  # [n, K]
        posteriors = np.zeros((len(draws), len(self.classes_)))
        for t in range(len(self.classes_)):
            posteriors[:, t] = np.sum(weights * (codes == t)[:, None], axis=-1).mean(axis=1)
        return posteriors

    def _held_out_groups(self, groups: Sequence | None) -> np.ndarray:
        """Each reference cell's held-out group [N]: its group where there are two or more,
        else a random fold (with a warning)."""
        count = len(self._mean)
        if groups is not None:
            given = np.asarray(groups, dtype=object)
            if len(given) != count:
                raise ValueError(f"groups must give each of the {count} cells a group.")
            if len(pd.unique(given)) >= 2:
                return pd.factorize(given)[0]
        warnings.warn(
            f"The reference has {'one group (batch)' if groups is not None else 'no groups'}: "
            f"its labels are held out in {FOLDS} random folds of its cells to calibrate the "
            "probabilities, which cannot show the shift a query of another batch brings; such "
            "a query's probabilities may be more (or less) sure than they should be. Give a "
            "reference of several batches (groups_key) to calibrate them across batches.",
            UserWarning,
            stacklevel=3,
        )
        return np.random.default_rng(self.seed).permutation(count) % FOLDS

    def _calibration_cells(self) -> tuple[np.ndarray, np.ndarray]:
        """About :data:`CALIBRATION_CELLS` reference cells drawn by type (at least
        :data:`CALIBRATION_PER_TYPE` of each, all of a smaller type) and their weights, which
        give each type its share of the reference."""
        rng = np.random.default_rng(self.seed)
        cells, weights = [], []
        for members, share in zip(self._members, self.shares_):
            wanted = max(CALIBRATION_PER_TYPE, int(round(share * CALIBRATION_CELLS)))
            chosen = rng.permutation(members)[: min(wanted, len(members))]
            cells.append(chosen)
            weights.append(np.full(len(chosen), share / len(chosen)))
        return np.concatenate(cells), np.concatenate(weights)

    def _choose(self, scale: float, held_out: np.ndarray) -> tuple[float, float, float, np.ndarray]:
        """The bandwidth and floor given, or those maximising the weighted held-out
        log-probability of the labels of the calibration cells; then the temperature and biases
        that maximise it given them."""
        bandwidths = [m * scale for m in BANDWIDTHS] if self.bandwidth is None else [self.bandwidth]
        floors = FLOORS if self.floor is None else (self.floor,)
        cells, weights = self._calibration_cells()
        neighbours = np.empty((len(cells), self.num_neighbours), np.int64)
        for group in np.unique(held_out[cells]):
            mine = held_out[cells] == group
            neighbours[mine] = self._neighbours(self._mean[cells[mine]], held_out != group)
        draws = self._draws(self._mean[cells], self._variance[cells])
        truth = self._codes[cells]
        best: tuple = (np.inf,)
        for bandwidth in bandwidths:
            kde = self._posteriors(draws, neighbours, bandwidth)
            for floor in floors:
                floored = (1.0 - floor) * kde + floor * self.shares_
                loss = -weights @ np.log(floored[np.arange(len(truth)), truth])
                if loss < best[0]:
                    best = (loss, bandwidth, floor, floored)
        _, slope, biases = fit_calibration(best[3], truth, weights, self.calibration)
        return best[1], best[2], 1.0 / slope, biases


def label_mixing(
    reference_mean: np.ndarray, codes: np.ndarray, query_mean: np.ndarray, num_neighbours: int
) -> np.ndarray:
    r"""The label mixing [N*] of query cells with q(x) means ``query_mean`` [N*, Q] (see the
    module): among each one's ``num_neighbours`` (k) nearest reference cells (Euclidean on
    ``reference_mean`` [N, Q], k <= N), the share that do not carry the most common label,
    :math:`1 - \max_t \#\{j : t_{(j)} = t\} / k`. ``codes`` [N]: each reference cell's label as
    an integer, -1 for none (such a cell counts among the k but never for a type)."""
    from sklearn.neighbors import NearestNeighbors

    index = NearestNeighbors(n_neighbors=num_neighbours).fit(reference_mean)
    labels = np.asarray(codes)[index.kneighbors(query_mean, return_distance=False)]  # [N*, k]
    most = np.zeros(len(labels), dtype=np.int64)
    for t in range(int(labels.max()) + 1):
        most = np.maximum(most, np.count_nonzero(labels == t, axis=1))
    return 1.0 - most / num_neighbours


def calibrated(probabilities: np.ndarray, slope: float, biases: np.ndarray) -> np.ndarray:
    """The calibration map [n, T]: softmax of ``slope`` log p + ``biases`` [T]."""
    return np.exp(log_softmax(slope * np.log(probabilities) + biases, axis=1))


def fit_calibration(
    probabilities: np.ndarray, truth: np.ndarray, weights: np.ndarray, calibration: str | None
) -> tuple[float, float, np.ndarray]:
    """The slope a and biases b [T] of :func:`calibrated` that minimise the weighted negative
    log-probability of the true classes ``truth`` [n] of held-out cells with ``probabilities``
    [n, T] (weights [n] summing to one), plus :data:`BIAS_PENALTY` times the squared biases;
    returns (that loss, a, b). A convex problem (a multinomial logistic regression on log p, the
    last bias 0), solved by L-BFGS; ``calibration`` None returns a = 1, b = 0, "temperature"
    b = 0."""
    logs = np.log(probabilities)  # [n, T]
    count = logs.shape[1]
    rows = np.arange(len(truth))
    free = count - 1 if calibration == "bias" else 0

    def loss(parameters: np.ndarray) -> tuple[float, np.ndarray]:
        slope, biases = parameters[0], np.append(parameters[1:], np.zeros(count - free))
        log_p = log_softmax(slope * logs + biases, axis=1)
        value = -weights @ log_p[rows, truth] + BIAS_PENALTY * biases @ biases
        residual = np.exp(log_p)  # d(-log p_truth) / d logits, weighted
        residual[rows, truth] -= 1.0
        residual *= weights[:, None]
        bias_gradient = residual.sum(axis=0) + 2.0 * BIAS_PENALTY * biases
        return float(value), np.append(np.sum(residual * logs), bias_gradient[:free])

    start = np.append(1.0, np.zeros(free))
    if calibration is None:
        return loss(start)[0], 1.0, np.zeros(count)
    bounds = [(1e-2, 1e2)] + [(None, None)] * free
    found = minimize(loss, start, jac=True, method="L-BFGS-B", bounds=bounds)
    return float(found.fun), float(found.x[0]), np.append(found.x[1:], np.zeros(count - free))


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


def assigned_labels(
    probabilities: pd.DataFrame,
    unassigned_below: float = 0.0,
    flagged: np.ndarray | None = None,
) -> pd.Categorical:
    """Each cell's most probable label of ``probabilities`` [N*, T] (columns the classes), or
    :data:`UNASSIGNED` where its probability is below ``unassigned_below`` or ``flagged`` [N*]
    (bool) marks it."""
    classes = list(probabilities.columns)
    values = probabilities.to_numpy()
    names = np.asarray(classes, dtype=object)[values.argmax(axis=1)]
    left = values.max(axis=1) < unassigned_below
    if flagged is not None:
        left |= flagged
    if not left.any():
        return pd.Categorical(names, categories=classes)
    return pd.Categorical(np.where(left, UNASSIGNED, names), categories=classes + [UNASSIGNED])


def transfer_labels(
    reference,
    query,
    labels_key: str,
    *,
    moments=None,
    groups_key: str | None = None,
    key: str = "gplvm",
    key_added: str | None = None,
    unassigned_below: float = 0.0,
    flagged_key: str | None = None,
    novel_above: float | None = None,
    mixed_above: float | None = None,
    mixing_neighbours: int = MIXING_NEIGHBOURS,
    unlabelled_category: str | Sequence[str] | None = None,
    calibration: str | None = "bias",
    num_neighbours: int = 30,
    n_samples: int = 20,
    seed: int = 0,
) -> pd.DataFrame:
    """Carry ``reference.obs[labels_key]`` to the ``query`` cells (AnnDatas embedded by one
    model): q(x) from ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``, or from ``moments(adata)``
    where given (a function returning the means and variances [N, Q], e.g. a fitted model's).
    Reference cells whose label is missing (NaN, None) or ``unlabelled_category`` (a label or a
    list of them, e.g. "Unknown": a value that means "no label", not a type) are left out.
    ``groups_key``: the reference's ``obs`` column (e.g. its batch) whose groups are held out in
    turn to calibrate the probabilities (where it is None or holds one group, random folds of the
    cells are, with a warning).

    Writes ``query.obs[key_added]`` (default ``<labels_key>_transferred``): the most probable
    label, or "unassigned" where its probability is below ``unassigned_below`` (in [0, 1]; 0:
    none) or the boolean ``query.obs[flagged_key]`` is True (e.g. cells a novelty score marks
    as of a type the reference lacks) or its novelty ``query.obs["<key>_novelty"]`` is above
    ``novel_above`` (in [0, 1], e.g. 0.99: further from the reference cells than 99% of them
    are from each other; None: none); and ``query.obs[key_added + "_probability"]``, the most
    probable label's probability; and ``query.obs[key_added + "_mixing"]``, the cell's label
    mixing (see the module) among its ``mixing_neighbours`` nearest reference cells (labelled or
    not; all of them in a smaller reference), in [0, 1]: cells above ``mixed_above`` (in [0, 1],
    e.g. 0.5: fewer than half of them carry the most common label; None: none) are "unassigned"
    too. Returns the probabilities [N*, T], a DataFrame. ``calibration``, ``num_neighbours``,
    ``n_samples``, ``seed``: :class:`LabelTransfer`'s."""
    unassigned_below = check_fraction(
        unassigned_below,
        "unassigned_below",
        "a probability",
        "cells whose most probable label is less probable are left unassigned; 0: none, e.g. 0.5",
    )
    if mixed_above is not None:
        mixed_above = check_fraction(
            mixed_above,
            "mixed_above",
            "a label mixing",
            "cells more mixed are left unassigned, e.g. 0.5 (None: none)",
        )
    mixing_neighbours = check_integer(
        mixing_neighbours,
        "mixing_neighbours",
        hint="reference cells about each query cell, e.g. 15",
    )
    flags = [_flags(query, flagged_key)]
    if novel_above is not None:
        flags.append(_novel(query, key, novel_above))
    known = _labelled_cells(reference, labels_key, unlabelled_category)
    labels = reference.obs[labels_key][known].astype(str)
    if UNASSIGNED in set(labels):
        raise ValueError(
            f"The reference's obs[{labels_key!r}] holds the label {UNASSIGNED!r}, the name "
            "transfer_labels gives cells it leaves unassigned: rename it, or pass "
            f"unlabelled_category={UNASSIGNED!r} if it means 'no label'."
        )
    _warn_of_unlabelled_names(labels, labels_key)
    reference_mean, reference_variance = _moments_of(reference, key, moments, "reference")
    groups = None
    if groups_key is not None:
        if groups_key not in reference.obs.columns:
            raise ValueError(f"The reference's obs has no column {groups_key!r} (groups_key).")
        groups = reference.obs[groups_key].to_numpy()[known]
    transfer = LabelTransfer(num_neighbours, n_samples, seed, calibration=calibration)
    transfer.fit(reference_mean[known], reference_variance[known], labels, groups)
    query_mean, query_variance = _moments_of(query, key, moments, "query")
    probabilities = transfer.predict_proba(query_mean, query_variance)
    table = pd.DataFrame(probabilities, index=query.obs_names, columns=transfer.classes_)
    codes = np.full(len(known), -1)
    codes[known] = pd.factorize(labels)[0]
    k = min(mixing_neighbours, len(reference_mean))  # a small reference: all its cells
    mixing = label_mixing(reference_mean, codes, query_mean, k)
    if mixed_above is not None:
        flags.append(mixing > mixed_above)
    given = [f for f in flags if f is not None]
    flagged = np.logical_or.reduce(given) if given else None
    key_added = key_added or f"{labels_key}_transferred"
    query.obs[key_added] = assigned_labels(table, unassigned_below, flagged)
    query.obs[f"{key_added}_probability"] = probabilities.max(axis=1)
    query.obs[f"{key_added}_mixing"] = mixing
    return table


def _flags(query, flagged_key: str | None) -> np.ndarray | None:
    """The boolean ``query.obs[flagged_key]`` [N*], or None; a ``ValueError`` naming a column
    that is missing or not boolean."""
    if flagged_key is None:
        return None
    if flagged_key not in query.obs.columns:
        raise ValueError(
            f"The query's obs has no column {flagged_key!r} (flagged_key); its columns are "
            f"{list(query.obs.columns)}."
        )
    column = query.obs[flagged_key]
    if not pd.api.types.is_bool_dtype(column):
        raise ValueError(
            f"query.obs[{flagged_key!r}] (flagged_key) must be boolean, True for cells to leave "
            f"unassigned; it is {column.dtype}: e.g. pass a column score > threshold."
        )
    return column.to_numpy(dtype=bool)


def _novel(query, key: str, novel_above: float) -> np.ndarray:
    """The cells [N*] (bool) whose ``query.obs["<key>_novelty"]`` is above ``novel_above``; a
    ``ValueError`` for a threshold outside [0, 1] or a query without the column."""
    novel_above = check_fraction(
        novel_above,
        "novel_above",
        "a novelty",
        "cells more novel are left unassigned, e.g. 0.99 (None: none)",
    )
    column = f"{key}_novelty"
    if column not in query.obs.columns:
        raise ValueError(
            f"The query's obs has no column {column!r} (novel_above reads it): embed the query "
            "with transform or map_query, which write it."
        )
    return query.obs[column].to_numpy(dtype=float) > novel_above


def _labelled_cells(reference, labels_key: str, unlabelled_category) -> np.ndarray:
    """The reference cells [N] (bool) with a label that is not ``unlabelled_category``; a
    ``ValueError`` where the column is missing or no cell has a label."""
    if labels_key not in reference.obs.columns:
        raise ValueError(
            f"The reference's obs has no column {labels_key!r}; its columns are "
            f"{list(reference.obs.columns)}. Name the column of the reference's cell labels."
        )
    labels = reference.obs[labels_key]
    known = labels.notna().to_numpy()
    if unlabelled_category is not None:
        known &= ~labels.astype(str).isin(unlabelled_texts(unlabelled_category)).to_numpy()
    if not known.any():
        raise ValueError(
            f"The reference's obs[{labels_key!r}] has no label: every value is missing (NaN or "
            f"None){' or unlabelled_category' if unlabelled_category is not None else ''}. "
            "Give reference cells with labels."
        )
    return known


def _warn_of_unlabelled_names(labels: pd.Series, labels_key: str) -> None:
    """Warn of a label whose name says "no label": taken as a type, such cells (scattered among
    every type) take probability from every type and outvote rare ones."""
    suspect = sorted(n for n in set(labels) if n.strip().lower() in _UNLABELLED_NAMES)
    if suspect:
        warnings.warn(
            f"The reference's obs[{labels_key!r}] holds the label(s) {suspect}, taken as a cell "
            f"type; if they mean 'no label', pass unlabelled_category={suspect!r} to leave those "
            "cells out (as a type they take probability from every other type).",
            UserWarning,
            stacklevel=3,
        )


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
