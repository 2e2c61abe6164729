"""How a model is built from its data: the rows it holds (all of them, a worker's shard, or a
reader of rows) and their facts, the observed inputs of its rows, what every worker must build
alike, and the checks of the latent module built from them."""

from __future__ import annotations

from typing import NamedTuple, cast

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike

from ..components.covariates import RowInputs
from ..distributed.owned import worker_owned
from ..distributed.workers import Workers
from ..latents import LatentVariables
from ..rows.facts import RowFacts, facts_of
from ..rows.shard import RowShard
from ..rows.sparse import RowReader
from ..validation import check_observations

__all__ = ["HeldRows", "held_rows", "row_inputs", "outline", "check_owned", "check_latent"]


class HeldRows(NamedTuple):
    """The rows a model is built from: ``Y`` (all of them, checked, or this worker's rows of a
    :class:`RowShard`, or a :class:`RowReader`; each read a block of rows at a time, typed as
    the array :func:`~gpflow_svi_gplvm.rows.sparse.row_blocks` reads), their row numbers
    ``rows`` (None for all rows in order), N, the ``workers`` holding them, whether each worker
    keeps its rows' latent tables (``owned``) and their :class:`~.rows.facts.RowFacts`."""

    Y: np.ndarray
    rows: np.ndarray | None
    num_data: int
    workers: Workers
    owned: bool
    facts: RowFacts

    @property
    def table_rows(self) -> np.ndarray | None:
        """The row numbers [n] of the latent tables' rows when each worker owns its rows'."""
        return self.rows if self.owned else None


def held_rows(
    data: ArrayLike | RowShard | RowReader, mask: ArrayLike | None, workers: Workers | None = None
) -> HeldRows:
    """The :class:`HeldRows` of a model's ``data`` (``mask`` [N, D]: True where observed); a
    shard is checked against the other ``workers``' (default: those of the strategy in scope).
    The facts are those the rows keep (rows read for a single-cell fit), or else one pass's."""
    Y, rows, num_data, workers = _local_rows(data, mask, workers)
    owned = rows is not None and workers.count > 1  # each worker keeps its rows' tables
    blocks = cast(np.ndarray, Y)
    return HeldRows(blocks, rows, num_data, workers, owned, facts_of(blocks, workers))


def _local_rows(
    data: ArrayLike | RowShard | RowReader, mask: ArrayLike | None, workers: Workers | None
) -> tuple[np.ndarray | tf.Tensor | RowReader, np.ndarray | None, int, Workers]:
    """The rows a model is built from: Y (all of them, checked, or this worker's rows of a
    :class:`RowShard`, or a :class:`RowReader` read a block at a time), their row numbers (None
    for all rows in order), N and the workers holding them; a shard is checked against the other
    workers' (``workers``, default those of the strategy in scope). Rows that are not a shard
    are all N rows: one worker's alone, whatever ``workers`` are given."""
    alone = workers if workers is not None and workers.count == 1 else Workers()
    if isinstance(data, RowReader):
        if mask is not None:
            raise ValueError("Sparse rows hold every entry: a mask cannot be given with them.")
        return data, None, data.shape[0], alone
    if not isinstance(data, RowShard):
        Y = check_observations(data, "data", mask=mask)
        return Y, None, Y.shape[0], alone
    if mask is not None:
        raise ValueError("Give the mask to the RowShard (RowShard(Y, rows, num_data, mask=...)).")
    workers = workers or Workers.of()
    data.check(workers)
    return data.Y, data.rows, data.num_data, workers


# The constructor's options (its local names) every worker must build alike, as named to users.
_AGREED_OPTIONS = {
    "latent_dim": "latent_dim",
    "num_inducing": "num_inducing",
    "num_samples": "num_samples",
    "shared_covariance": "shared",
    "whiten": "whiten",
    "latent_expectation": "latent_expectation",
    "num_importance": "num_importance",
    "doubly_reparameterised": "doubly_reparameterised",
    "latent_init": "latent_init",
    "kernel": "kernel",
    "likelihood": "likelihood",
    "mean_function": "mean_function",
}


def outline(model: type, options: dict[str, object], inputs: RowInputs) -> dict[str, object]:
    """What every worker must build its model with alike (from the constructor's ``options``,
    its locals): numbers, switches and names as they are, components and arrays by kind."""
    outline: dict[str, object] = {"model": model.__name__}
    for name, local in _AGREED_OPTIONS.items():
        value = options[local]
        plain = value is None or isinstance(value, (bool, int, float, str))
        outline[name] = value if plain else type(value).__name__
    outline["covariates"] = inputs.num_covariates
    outline["size_factors"] = inputs.size_factors is not None
    return outline


def row_inputs(
    covariates: ArrayLike | None, size_factors: ArrayLike | None, held: HeldRows
) -> RowInputs:
    """The checked covariates and size factors of the model's table rows (all N, or this
    worker's own), with the size factors' reference set from the library sizes [n] of this
    worker's ``held`` rows (their facts' totals) and those of every other."""
    rows, num_data, owned = held.rows, held.num_data, held.owned
    inputs = RowInputs(
        _shard_rows(covariates, rows, num_data, owned),
        _shard_rows(size_factors, rows, num_data, owned),
        num_data if rows is None or not owned else len(rows),
    )
    inputs.set_reference(held.facts.totals, None if owned else rows, held.workers)
    return inputs


def _shard_rows(
    values: ArrayLike | None, rows: np.ndarray | None, num_data: int, owned: bool
) -> np.ndarray | None:
    """Per-row inputs (covariates [., P], size factors [.]) for the model's table rows: as given,
    or, when a worker owns its rows and was given all N, those of its rows."""
    if values is None or not owned or rows is None:
        return None if values is None else np.asarray(values)
    values = np.asarray(values)
    return values[rows] if len(values) == num_data != len(rows) else values


def check_owned(latent: LatentVariables, owned: bool) -> None:
    """A ``ValueError`` when a latent family keeps per-row tables that could not be made this
    worker's own (a family building its tables without :func:`~.latents.row_table`)."""
    tables = getattr(latent, "row_parameters", ())
    if owned and not all(worker_owned(p.unconstrained_variable) for p in tables):
        raise ValueError(
            f"{type(latent).__name__} keeps per-row tables that are not split over the workers "
            "(e.g. flow_parameters='per-row'): on several workers use a family whose tables "
            "are built with gpflow_svi_gplvm.latents.row_table (e.g. flow_parameters='shared')."
        )


def check_latent(latent: LatentVariables, num_data: int, latent_dim: int) -> LatentVariables:
    """``latent`` when it holds ``num_data`` rows (if it has rows) of ``latent_dim`` dims."""
    rows = getattr(latent, "num_data", num_data)  # amortised modules hold no rows
    if rows != num_data:
        raise ValueError(f"The latent module holds {rows} rows but data has {num_data}.")
    if latent.latent_dim != latent_dim:
        raise ValueError(
            f"The latent module has {latent.latent_dim} dims but latent_dim={latent_dim}."
        )
    return latent
