r"""Normalised, batch-corrected expression: each cell's expected rate of every gene at its q(x),
with its batch (and chosen covariates) set to a reference.

For cell n and gene d the model's rate is :math:`s_n \exp f_d([x_n, c_n])` (counts: negative
binomial or Poisson, size factor :math:`s_n`) or :math:`f_d([x_n, c_n])` (a Gaussian). The
normalised expression replaces :math:`c_n` by the reference covariates :math:`c^\ast` (the
batch set to ``transform_batch``; with several categories the rate is averaged over them, as
scVI's ``transform_batch`` does; None keeps the cell's own) and :math:`s_n` by a chosen size
factor, and takes the expectation over :math:`q(x_n)` and :math:`q(f \mid x)`:

.. math::

    \rho_{nd} = \frac{L}{\bar l}\, E_{q(x_n)} E_{q(f)}\big[e^{f_d([x_n, c^\ast])}\big]
    = \frac{L}{\bar l}\, E_{q(x_n)}\big[e^{m_d + k_d / 2}\big],

with :math:`L` = ``library_size`` and :math:`\bar l` the library size of a size factor of one (the
model's reference; so that a cell's :math:`\rho` sums to about L over all the genes), or the cell's
own :math:`s_n` in place of :math:`L / \bar l` (``library_size="latent"``: the expected counts of
the cell, its batch swapped). The expectation over q(x) takes ``n_samples`` draws (the same standard
draws for every cell, so a cell's result does not depend on the cells beside it); given the draws,
the expectation over f is exact (:mod:`~gpflow_svi_gplvm.prediction.rates`). ``return_variance``
gives the variance of :math:`\rho` under the same draws of q(x) and q(f | x) (the uncertainty of the
rate, not the count's noise). Cells are taken a block at a time, and an ``.h5ad`` file is read a
block at a time, so memory is bounded by the block (and a few numbers a cell), not by N, when the
result goes to ``output`` (benchmarks/results/expression.md measures it at 10^6 cells)."""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...options import takes_options_of
from ...prediction.rates import inverse_link, rate_moments
from ...validation import (
    check_bool,
    check_integer,
    check_path,
    check_seed,
    check_writable_folder,
)
from ..cells.reading import opened
from ..fitting.fitted import FittedCells
from .cell_states import CellStates, cell_states

__all__ = ["normalized_expression", "expression_blocks", "reference_inputs", "check_genes"]

NUMBERS_PER_CALL = 2**22
"""The numbers of one [draws, cells, genes] tensor of a call: cells are taken so many at a time
that S x cells x D stays near this (32 MiB in float64)."""


def expression_blocks(
    fitted: FittedCells,
    adata,
    transform_batch: Any = None,
    genes: Sequence[str] | None = None,
    library_size: float | str = 1.0,
    n_samples: int = 25,
    return_variance: bool = False,
    *,
    transform_covariates: Mapping[str, Any] | None = None,
    seed: int = 0,
    block_size: int = 4096,
) -> Iterator[tuple[CellStates, np.ndarray, np.ndarray | None]]:
    """The normalised expression of ``adata``'s cells a block at a time: each block's states,
    the means [b, G] and the variances [b, G] (None without ``return_variance``).

    ``transform_batch``: a category of the batch, or several (the rate averaged over them), or
    None (each cell's own); ``transform_covariates``: ``obs`` columns set to a value for every
    cell (a category, or a number of a numeric covariate); ``library_size``: a positive number
    L, or "latent" (each cell's own size factor); ``n_samples``: draws of each cell's q(x)
    (one where q(x) is a point); ``seed``: of those draws."""
    columns = _gene_positions(fitted, check_genes(fitted, genes))
    references = _references(fitted, transform_batch, transform_covariates)
    link = inverse_link(fitted.model.likelihood)
    own = _check_library_size(library_size, link)
    n_samples = check_integer(n_samples, "n_samples", hint="draws of each cell's q(x), e.g. 25")
    noise = np.random.default_rng(check_seed(seed)).standard_normal(
        (n_samples, fitted.model.latent_dim)
    )
    block_size = check_integer(block_size, "block_size", hint="cells at a time, e.g. 4096")
    for states in cell_states(fitted, adata, block_size=block_size, own_size_factors=own):
        scale = _scale(fitted, states, library_size)[:, None]
        drawn = noise if states.variance.any() else noise[:1] * 0.0
        mean, second = _moments(fitted, states, references, drawn, return_variance)
        mean = mean[:, columns]
        _check_finite(fitted, states, scale * mean)
        variance = None
        if second is not None:
            variance = scale**2 * np.maximum(second[:, columns] - mean**2, 0.0)
        yield states, scale * mean, variance


@takes_options_of(expression_blocks)
def normalized_expression(
    fitted: FittedCells,
    adata,
    *args: Any,
    output: str | Path | None = None,
    overwrite: bool = False,
    **options: Any,
):
    """The normalised expression of ``adata``'s cells (an AnnData or the path of an ``.h5ad``
    file): a pandas DataFrame [N, G] (cells by ``genes``, default every fitted gene), with
    ``return_variance`` a pair (means, variances); with ``output`` (a folder) the arrays are
    written there a block at a time (``normalized_expression.npy``, and
    ``normalized_expression_variance.npy``) and returned memory-mapped; arrays an earlier call
    wrote there are replaced only with ``overwrite``. The options are
    :func:`expression_blocks`'."""
    overwrite = check_bool(overwrite, "overwrite", "replace the arrays an earlier call wrote")
    request = inspect.signature(expression_blocks).bind(fitted, opened(adata), *args, **options)
    request.apply_defaults()
    names = check_genes(fitted, request.arguments["genes"])
    variance = request.arguments["return_variance"]
    blocks = expression_blocks(*request.args, **request.kwargs)
    if output is not None:
        folder = Path(check_path(output, "output"))
        check_writable_folder(folder, "output")  # now, not after the cells are read
        earlier = [f"{name}.npy" for name in _ARRAYS if (folder / f"{name}.npy").exists()]
        if earlier and not overwrite:
            raise ValueError(
                f"output {folder} holds an earlier call's arrays ({', '.join(earlier)}): pass "
                "overwrite=True to replace them, or choose another output."
            )
        shape = (request.arguments["adata"].n_obs, len(names))
        return _written(blocks, folder, shape, variance)
    import pandas as pd

    parts = list(blocks)
    index = [name for part in parts for name in part[0].obs.index]
    frames = [
        pd.DataFrame(
            np.concatenate([part[column] for part in parts])
            if parts
            else np.zeros((0, len(names))),
            index=index,
            columns=names,
        )
        for column in ((1, 2) if variance else (1,))
    ]
    return tuple(frames) if variance else frames[0]


_ARRAYS = ("normalized_expression", "normalized_expression_variance")
"""The arrays written to ``output``: the means, and the variances."""


def check_genes(fitted: FittedCells, genes: Sequence[str] | None) -> list[str]:
    """``genes`` (default all the fitted genes) as a list; a ``ValueError`` naming any the
    model was not fitted with."""
    if genes is None:
        return list(fitted.registration.gene_names)
    if isinstance(genes, str):
        genes = [genes]
    known = set(fitted.registration.gene_names)
    unknown = [str(g) for g in genes if str(g) not in known]
    if unknown or len(genes) == 0:
        raise ValueError(
            f"genes= names {unknown[:5]} ({len(unknown)} in all) that the model was not fitted "
            "with: choose among its genes (SingleCellGPLVM.gene_names)."
            if unknown
            else "genes= is empty: name at least one fitted gene, or pass None for all."
        )
    return [str(g) for g in genes]


def reference_inputs(
    fitted: FittedCells, obs, categories: list, covariates: Mapping[str, Any]
) -> tuple[np.ndarray, np.ndarray | None]:
    """The observed inputs [K, b, R] of cells with ``obs`` rows, their batch set to each of
    ``categories`` in turn (None: their own) and the ``covariates`` columns set to a value,
    with a log size factor 0 where the model has size factors; and their offsets on f
    [K, b, D] where a query mapping learnt batches (None otherwise)."""
    model = fitted.model
    inputs, offsets = [], []
    for category in categories:
        values = dict(covariates)
        if category is not None:
            values[fitted.batch_key] = category  # type: ignore[index]
        frame = obs.assign(**values) if values else obs
        encoded = fitted.covariates(frame)
        columns = [] if encoded is None else [encoded]
        if model.size_factor_reference is not None:
            columns.append(np.zeros((len(obs), 1)))
        inputs.append(np.concatenate(columns, axis=1) if columns else np.zeros((len(obs), 0)))
        offsets.append(fitted.batch_offsets(frame))
    known = [o for o in offsets if o is not None]
    return np.stack(inputs), np.stack(known) if known else None


def _references(
    fitted: FittedCells, transform_batch: Any, covariates: Mapping[str, Any] | None
) -> tuple[list, dict]:
    """The batch categories to average over ([None]: each cell's own) and the covariates to
    set, checked against what the model was fitted with."""
    covariates = dict(covariates or {})
    encoding = fitted.registration.encoding
    for column, value in covariates.items():
        if column not in encoding.columns or column == fitted.batch_key:
            raise ValueError(
                f"transform_covariates names {column!r}, not one of the model's covariates "
                f"other than the batch ({[c for c in encoding.columns if c != fitted.batch_key]}"
                "); set the batch with transform_batch."
            )
        if column in encoding.categories and value not in encoding.categories[column]:
            raise ValueError(
                f"transform_covariates[{column!r}] = {value!r} is not a category the model was "
                f"fitted with: {encoding.categories[column]}."
            )
        if column not in encoding.categories and not np.isfinite(_number(value, column)):
            raise ValueError(f"transform_covariates[{column!r}] must be a finite number.")
    if transform_batch is None:
        return [None], covariates
    if fitted.batch_key is None:
        raise ValueError(
            "transform_batch needs a model fitted with a batch (batch_key=...); this one has "
            "none: leave transform_batch None."
        )
    known = fitted.batches
    categories = list(transform_batch) if _several(transform_batch) else [transform_batch]
    unknown = [c for c in categories if c not in known]
    if unknown or not categories:
        raise ValueError(
            f"transform_batch {unknown if unknown else categories!r}: give categories of "
            f"obs[{fitted.batch_key!r}] the model was fitted with (or map_query learnt): "
            f"{known}."
        )
    return categories, covariates


def _several(value: Any) -> bool:
    return isinstance(value, (list, tuple, np.ndarray, set)) or hasattr(value, "to_list")


def _number(value: Any, column: str) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"transform_covariates[{column!r}] = {value!r}: the covariate is numeric, give a "
            "number."
        ) from None


def _check_library_size(library_size: float | str, link: str) -> bool:
    """Whether ``library_size`` asks for each cell's own size factor ("latent"); a
    ``ValueError`` unless it is that or a positive number (1 for a Gaussian's identity)."""
    counts = link == "exp"
    if isinstance(library_size, str):
        valid = library_size == "latent" and counts
    else:
        number = isinstance(library_size, (int, float, np.number)) and not isinstance(
            library_size, bool
        )
        valid = number and np.isfinite(library_size) and library_size > 0
        valid = valid and (counts or library_size == 1)
    if not valid:
        raise ValueError(
            f"library_size must be a positive number or 'latent', got {library_size!r}"
            + ("." if counts else " (a Gaussian likelihood has no library: leave it 1).")
        )
    return library_size == "latent"


def _scale(fitted: FittedCells, states: CellStates, library_size: float | str) -> np.ndarray:
    """What multiplies each cell's rate at a size factor of one [b]: its own size factor, or
    L over the model's reference library size (L alone for a model without size factors)."""
    count = len(states.obs)
    if library_size == "latent":
        own = states.size_factors
        return np.ones(count) if own is None else own
    reference = fitted.model.size_factor_reference
    level = 1.0 if reference is None else float(reference.numpy())
    return np.full(count, float(library_size) / level)


def _moments(
    fitted: FittedCells,
    states: CellStates,
    references: tuple[list, dict],
    noise: np.ndarray,
    second_moment: bool,
) -> tuple[np.ndarray, np.ndarray | None]:
    """The rate's first and second moments [b, D] at a size factor of one, a few cells per
    call (:data:`NUMBERS_PER_CALL`)."""
    model = fitted.model
    inputs, offsets = reference_inputs(fitted, states.obs, *references)  # [K, b, R], [K, b, D]
    step = max(1, NUMBERS_PER_CALL // (len(noise) * model.data_dim))
    firsts: list[np.ndarray] = []
    seconds: list[np.ndarray] = []
    for start in range(0, len(states.obs), step):
        part = slice(start, start + step)
        first, second = rate_moments(
            model,
            states.mean[part],
            states.variance[part],
            inputs[:, part],
            noise,
            second_moment,
            None if offsets is None else offsets[:, part],
        )
        firsts.append(first.numpy())
        if second is not None:
            seconds.append(second.numpy())
    return np.concatenate(firsts), np.concatenate(seconds) if second_moment else None


def _check_finite(fitted: FittedCells, states: CellStates, mean: np.ndarray) -> None:
    """A ``ValueError`` naming the first cell whose expression overflows (an ``obs`` value far
    outside those the model was fitted on, say), rather than infinite or NaN rates."""
    bad = ~np.isfinite(mean).all(axis=1)
    if bad.any():
        row = states.obs.iloc[int(np.argmax(bad))]
        columns = fitted.registration.columns
        raise ValueError(
            f"The expression of cell {row.name!r} overflows (its rate is not finite): its obs "
            f"values {row[columns].to_dict() if columns else {}} or library_size lie far "
            "outside what the model was fitted on. Check their units, or leave such cells out."
        )


def _gene_positions(fitted: FittedCells, genes: list[str]) -> np.ndarray:
    position = {g: i for i, g in enumerate(fitted.registration.gene_names)}
    return np.array([position[g] for g in genes], dtype=np.int64)


def _written(blocks, folder: Path, shape: tuple[int, int], variance: bool):
    """Write the blocks' means (and variances) to ``folder`` as ``.npy`` files of ``shape``
    [N, G], a block at a time, each moved into place once whole; return them memory-mapped."""
    folder.mkdir(parents=True, exist_ok=True)
    names = list(_ARRAYS[: 2 if variance else 1])
    staging = [folder / f".{name}.partial" for name in names]
    with contextlib.ExitStack() as stack:
        handles = [stack.enter_context(path.open("wb")) for path in staging]
        for handle in handles:
            header = {"descr": "<f8", "fortran_order": False, "shape": shape}
            np.lib.format.write_array_header_1_0(handle, header)
        for _, *arrays in blocks:
            for handle, values in zip(handles, arrays):
                handle.write(np.ascontiguousarray(values, np.float64).tobytes())
    for path, name in zip(staging, names):
        path.replace(folder / f"{name}.npy")
    arrays = [np.load(folder / f"{name}.npy", mmap_mode="r") for name in names]
    return tuple(arrays) if variance else arrays[0]
