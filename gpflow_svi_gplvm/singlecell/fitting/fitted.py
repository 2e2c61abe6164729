"""A fitted single-cell model apart from its face: the options that shape it
(:class:`CellModelOptions`) and the state a fit produces, a saved model holds and every reader takes
(:class:`FittedCells`). The state keeps the model, the registration of its cells (what an AnnData
means to it: kept apart from the model, as scvi-tools keeps its setup), the effects of batches a
query mapping learnt, where the embedding is stored, how the model was trained and the training
cells a saved model brought. :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` holds one
(``fitted``): ``fit`` and ``load`` make a new one, and the readers of genes, the storage and the
mapping of new cells read it, never the face."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from ...defaults import CELL_LIKELIHOOD_NAMES
from ...models import SVIGPLVM
from ...training.trainer import History
from ...validation import check_bool, check_integer, check_seed
from ..cells.registration import CellRegistration
from ..mapping.cell_mapper import CellMapper
from ..mapping.offsets import BatchOffsets
from ..mapping.query import Query, read_query
from .distilled import ENCODER_TRAINING

__all__ = ["CellModelOptions", "FittedCells", "fitted_state"]


@dataclass(frozen=True)
class CellModelOptions:
    """The options of :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` that shape its model
    and its fit, checked when made (those that say how cells are read are the registration's):
    Q, the likelihood's and the model class's names, M, the key of the embedding in ``obsm``,
    the seed, how an encoder's q(x) is refined and trained, and the model class's own options."""

    latent_dim: int
    likelihood: str
    model: str
    num_inducing: int
    key_added: str
    seed: int
    refine_latents: bool
    encoder_training: str
    distil_cells: int
    model_options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.likelihood not in CELL_LIKELIHOOD_NAMES:
            raise ValueError(
                f"likelihood must be one of {CELL_LIKELIHOOD_NAMES}, got {self.likelihood!r}."
            )
        if self.encoder_training not in ENCODER_TRAINING:
            raise ValueError(
                f"encoder_training must be one of {ENCODER_TRAINING}, got "
                f"{self.encoder_training!r}."
            )
        checked = {
            "key_added": _check_key(self.key_added),
            "seed": check_seed(self.seed),
            "refine_latents": check_bool(self.refine_latents, "refine_latents"),
            "distil_cells": check_integer(
                self.distil_cells, "distil_cells", hint="e.g. 10000 cells"
            ),
            "model_options": dict(self.model_options),
        }
        for name, value in checked.items():  # as plain Python values
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """The options as JSON values, the model class's beside the face's (as a saved model's
        manifest holds them; :meth:`from_dict` reads them back); a ``ValueError`` naming a model
        option JSON cannot hold (a kernel or a likelihood object, say)."""
        for name, value in self.model_options.items():
            if not _json_value(value):
                raise ValueError(
                    f"The model option {name}={value!r} cannot be saved: a saved model keeps "
                    "options that are numbers, text, True/False or lists of those. Fit with the "
                    "default instead (or keep the model with tf.train.Checkpoint)."
                )
        own = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "model_options"}
        return own | {name: _listed(value) for name, value in self.model_options.items()}

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> CellModelOptions:
        """The options :meth:`to_dict` wrote (the names it does not know: the model class's)."""
        own = {f.name for f in fields(cls)} - {"model_options"}
        missing = sorted(own - set(record))
        if missing:
            raise ValueError(f"The options lack {missing}: the saved model is damaged or edited.")
        options = {name: value for name, value in record.items() if name not in own}
        return cls(**{name: record[name] for name in own}, model_options=options)


@dataclass(frozen=True)
class FittedCells:
    """The state of a fitted single-cell model (see the module): ``model``; ``registration``,
    what an AnnData means to it; ``options``, what shaped it; ``offsets``, the effects (offsets
    on f [K, D]) of batches a query mapping learnt, grown by ``map_query``; ``training_record``,
    how it was trained (``uns[key]["settings"]`` and the final ELBO); ``history``, the fit's
    trace (None for a loaded model); ``reference``, the minified training cells a saved model
    brought (None otherwise)."""

    model: SVIGPLVM
    registration: CellRegistration
    options: CellModelOptions
    offsets: BatchOffsets = field(default_factory=BatchOffsets)
    training_record: dict | None = None
    history: History | None = None
    reference: Any = None
    _mappers: dict[int, CellMapper] = field(default_factory=dict, repr=False, compare=False)
    """The embedding of cells, kept (its compiled graphs serve later calls), shared by the states
    made from this one by :func:`dataclasses.replace`."""

    @property
    def key(self) -> str:
        """q(x) of cells is stored as ``obsm["X_<key>"]`` and ``obsm["X_<key>_var"]``."""
        return self.options.key_added

    @property
    def size_factors(self) -> str | None:
        """ "library", an ``obs`` column, or None (see ``SingleCellGPLVM``)."""
        return self.registration.size_factors

    @property
    def batch_key(self) -> str | None:
        """The ``obs`` column of the batch, or None."""
        return self.registration.batch_key

    @property
    def batches(self) -> list:
        """The batch categories the model knows: those it was fitted with, then those a query
        mapping learnt."""
        if self.batch_key is None:
            return []
        return list(self.registration.encoding.categories[self.batch_key]) + list(
            self.offsets.categories
        )

    @property
    def refines(self) -> bool:
        """Whether cells' q(x) is refined from an encoder's (``refine_latents``, amortised)."""
        return self.options.refine_latents and self.model.latent.amortised

    def covariates(self, obs) -> np.ndarray | None:
        """The covariates [n, P] of cells with ``obs`` rows (a learnt batch's one-hot zero)."""
        return self.registration.encoding.transform(obs, mapped=self.offsets.categories)

    def batch_offsets(self, obs) -> np.ndarray | None:
        """The offsets on f [n, D] of cells with ``obs`` rows, or None where no batch was
        learnt by a query mapping."""
        if self.batch_key is None or not self.offsets.categories:
            return None
        batches = obs[self.batch_key].to_numpy(dtype=object)
        return self.offsets.of(batches, self.model.data_dim)

    def read_query(
        self,
        adata,
        learn: bool,
        missing_genes: str | None = None,
        typical: np.ndarray | None = None,
    ) -> Query:
        """The cells of ``adata`` as the model reads new cells; with ``learn``, the batch
        categories unseen in training (and not learnt before) are to be learnt, else they are a
        ``ValueError``; ``missing_genes`` and ``typical``:
        :func:`~gpflow_svi_gplvm.singlecell.mapping.query.read_query`."""
        model, registration, learnt = self.model, self.registration, self.offsets
        return read_query(model, registration, learnt, adata, learn, missing_genes, typical)

    def check_moments(self, mean: np.ndarray, variance: np.ndarray, cells) -> None:
        """A ``ValueError`` unless ``mean`` and ``variance`` [n, Q] (``obsm["X_<key>"]`` and
        ``obsm["X_<key>_var"]`` of the cells named ``cells`` [n]) can be this model's q(x): Q
        columns, finite means and finite, non-negative variances."""
        keys = f'obsm["X_{self.key}"] and obsm["X_{self.key}_var"]'
        Q = self.model.latent_dim
        if np.shape(mean)[1:] != (Q,) or np.shape(variance)[1:] != (Q,):
            raise ValueError(
                f"{keys} have shapes {np.shape(mean)} and {np.shape(variance)}, but the model's "
                f"q(x) has Q = {Q} columns: they hold another model's embedding. Embed the cells "
                "with this model (transform), or delete those keys to have q(x) inferred."
            )
        finite = np.isfinite(mean).all(axis=1)
        bad = ~(finite & np.isfinite(variance).all(axis=1) & (variance >= 0).all(axis=1))
        if bad.any():
            first = int(np.argmax(bad))
            what = "a mean that is not finite"
            if finite[first]:
                what = "a variance that is negative or not finite"
            raise ValueError(
                f"{keys} give cell {cells[first]!r} {what} ({int(bad.sum())} cells in all): "
                "that is not a q(x) this package wrote. Embed the cells again with this model "
                "(transform), or delete those keys to have q(x) inferred."
            )

    def mapper(self, iterations: int) -> CellMapper:
        """The embedding of cells with the model frozen, in at most ``iterations`` steps a cell
        (as ``transform``'s), kept for later calls with as many steps."""
        found = self._mappers.get(iterations)
        if found is None:
            self._mappers.clear()  # one kept: each holds compiled graphs
            found = self._mappers[iterations] = CellMapper(
                self.model, self.options.seed, iterations
            )
        return found


def fitted_state(state: FittedCells | None) -> FittedCells:
    """``state``, or a ``ValueError`` before the model is fitted (or loaded)."""
    if state is None:
        raise ValueError(
            "Fit the model first: SingleCellGPLVM(...).fit(adata), or load a saved one with "
            "SingleCellGPLVM.load(folder)."
        )
    return state


def _check_key(key: str) -> str:
    """``key_added``, which names ``obsm`` keys and the files ``X_<key>.npy``: a ``ValueError``
    for one that is not a plain name."""
    if not isinstance(key, str) or not re.fullmatch(r"\w[\w.-]*", key):
        raise ValueError(
            f"key_added names obsm keys and files (X_<key_added>.npy), so it must be a plain "
            f"name of letters, digits, '_', '-' or '.', got {key!r}: e.g. key_added='gplvm'."
        )
    return key


def _json_value(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_json_value(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _listed(value):
    return list(value) if isinstance(value, tuple) else value
