"""A fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` as one folder, and back.

The folder holds everything needed to use the model without its training data:

- ``gpflow_svi_gplvm_model.json``, the manifest: the format and its version, the face's options,
  the registration (layer, genes in order, ``obs`` columns with their categories and scales,
  size factors), the model's shapes, the training record, and a digest of these and of the
  model's numbers (a folder edited or damaged after it was saved is refused by :func:`load_model`);
- ``variables.npz``: every variable of the GP, the likelihood and the encoder (by its path in the
  model, unconstrained values);
- ``reference.npz``: the rows of the per-cell tables (q(x) and the observed GP inputs) of up to
  :data:`REFERENCE_CELLS` training cells drawn at random: where new cells' q(x) may start;
- ``batch_offsets.npy``: the effects [K, D] of batches learnt by ``map_query``, whose
  categories the manifest lists;
- ``cells.h5ad`` (with ``adata=``): a minified AnnData of the training cells, their ``obs`` and
  their q(x) means and variances in ``obsm``, no counts.

It is written into a hidden staging folder beside its path and moved into place when whole (a
killed save leaves the earlier folder or none, never half of one), and it replaces only a saved
model of this package that holds nothing else (:mod:`~gpflow_svi_gplvm.export.folder`).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp
import tensorflow as tf
from gpflow import Parameter
from gpflow.utilities import parameter_dict

from ...export.folder import (
    FolderKind,
    check_destination,
    make_staging,
    replace_folder,
    write_marker,
)
from ...likelihoods import likelihood_by_name
from ...models import SVIGPLVM, lookup_model
from ...prediction.new_row_model import MAX_CANDIDATES, candidate_rows
from ...rows.sparse import SparseRows
from ...validation import check_path, check_writable_folder
from ...version import __version__
from ..cells.registration import CellRegistration, plain_category
from ..mapping.offsets import BatchOffsets

__all__ = ["FORMAT_VERSION", "MANIFEST", "REFERENCE_CELLS", "save_model", "load_model"]

MANIFEST = "gpflow_svi_gplvm_model.json"
FORMAT = "gpflow_svi_gplvm single-cell model"
FORMAT_VERSION = 1
"""The version of the folder's layout; a folder of another version is refused by name."""

SAVED_MODEL = FolderKind(MANIFEST, "a saved model")

REFERENCE_CELLS = MAX_CANDIDATES
"""The training cells whose table rows a saved model keeps: the candidates where new cells'
q(x) may start (as many as :class:`~gpflow_svi_gplvm.LatentInference` considers)."""

_FILES = ("variables.npz", "reference.npz")


def save_model(face: Any, folder: str | Path, adata=None, overwrite: bool = False) -> Path:
    """Write the fitted ``face`` to ``folder`` (see the module); ``adata``: the cells it was
    fitted to (or embedded), whose ``obs`` and q(x) moments are kept as ``cells.h5ad``."""
    model = face.model
    if model is None:
        raise ValueError("Fit the model first: only a fitted SingleCellGPLVM can be saved.")
    path = check_path(folder, "folder (where the model is saved)")
    check_destination(path, overwrite, SAVED_MODEL)
    check_writable_folder(path.parent, "The saved model's parent folder")
    options = _json_options(face)
    minified = None if adata is None else _minified(face, adata)
    reference = _reference_rows(model, face.seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = make_staging(path)
    try:
        tables = _table_paths(model)
        np.savez(staging / "variables.npz", **_values(model, exclude=tables))
        np.savez(staging / "reference.npz", **_values(model, only=tables, rows=reference))
        if minified is not None:
            minified.write_h5ad(staging / "cells.h5ad")
        learnt = face.batch_offsets
        if learnt.categories:
            np.save(staging / "batch_offsets.npy", learnt.offsets)
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
            "options": options,
            "registration": face.registration.to_dict(),
            "model": _shapes(model, len(reference)),
            "training": face.training_record,
            "cells": minified is not None,
            "new_batches": [plain_category(c) for c in learnt.categories],
        }
        record["digest"] = _digest(record, staging)
        write_marker(staging, record, SAVED_MODEL)
        replace_folder(staging, path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return path


def load_model(folder: str | Path, face_class: type) -> Any:
    """The face (of ``face_class``, :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM`)
    saved in ``folder`` by :func:`save_model`, ready to embed new cells."""
    path = check_path(folder, "folder (a saved model)")
    manifest = _read_manifest(path)
    face = face_class(**manifest["options"])
    face.registration = CellRegistration.from_dict(manifest["registration"])
    face.training_record = manifest.get("training")
    with np.load(path / "reference.npz") as tables, np.load(path / "variables.npz") as values:
        face.model = _skeleton(face, manifest["model"], dict(tables))
        _assign(face.model, {**dict(values), **dict(tables)}, path)
    if manifest["new_batches"]:
        offsets = np.load(path / "batch_offsets.npy")
        face.batch_offsets = BatchOffsets(manifest["new_batches"], offsets)
    if manifest.get("cells"):
        face.reference = _read_cells(path / "cells.h5ad")
    return face


def _read_cells(path: Path):
    """The minified training cells a saved model keeps; a ``ValueError`` for a damaged file."""
    import anndata

    try:
        return anndata.read_h5ad(path)
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{path} cannot be read ({type(error).__name__}: {error}): the saved model's "
            "training cells are damaged. Save the model again (with adata=) to keep them."
        ) from error


def _read_manifest(path: Path) -> dict:
    """The manifest of the saved model at ``path``, checked: its format and version, and every
    file it lists present."""
    marker = path / MANIFEST
    if not path.is_dir() or not marker.is_file():
        raise ValueError(
            f"{path} is not a saved model of gpflow_svi_gplvm (no {MANIFEST} in it): give the "
            "folder that SingleCellGPLVM.save wrote."
        )
    try:
        manifest = json.loads(marker.read_text())
    except ValueError as error:
        raise ValueError(f"{marker} is not JSON ({error}): the folder is damaged.") from error
    if not isinstance(manifest, dict):
        raise ValueError(f"{marker} is not a manifest (a JSON object): the folder is damaged.")
    if manifest.get("format") != FORMAT:
        raise ValueError(
            f"{marker} names the format {manifest.get('format')!r}, not {FORMAT!r}: {path} is "
            "not a saved model of this package, or it is damaged. Give the folder that "
            "SingleCellGPLVM.save wrote, or save the model again."
        )
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise ValueError(
            f"{path} was saved in format version {version} (by gpflow_svi_gplvm "
            f"{manifest.get('package_version')}); this version reads format {FORMAT_VERSION}. "
            "Load it with the version that saved it, or fit and save the model again."
        )
    missing = [name for name in manifest.get("files", []) if not (path / name).exists()]
    if missing:
        raise ValueError(
            f"{path} is incomplete: it lacks {missing} that its manifest lists. The folder is "
            "damaged: save the model again."
        )
    lacking = [key for key in _FIELDS if key not in manifest]
    if lacking:
        raise ValueError(
            f"{marker} lacks {lacking}: the folder is damaged or was edited. Save the model again."
        )
    if "digest" in manifest and manifest["digest"] != _digest(manifest, path):
        raise ValueError(
            f"{path} was changed after it was saved: its manifest or the model's numbers "
            f"({', '.join(_NUMBERS)}) no longer match the digest the manifest records. The "
            "folder is damaged or was edited: save the model again."
        )
    return manifest


_FIELDS = ("options", "registration", "model", "new_batches")
"""The manifest's fields that :func:`load_model` reads."""

_NUMBERS = ("variables.npz", "reference.npz", "batch_offsets.npy")
"""The files of the model's numbers, which the manifest's digest covers with the manifest."""


def _digest(record: dict, folder: Path) -> str:
    """A hash of what the manifest ``record`` says (but the fields of the folder's marker) and
    of the bytes of the model's numbers in ``folder``: a folder edited or damaged after it was
    saved no longer matches it."""
    digest = hashlib.blake2b(digest_size=16)
    told = {k: v for k, v in record.items() if k not in ("digest", "files", "written_by")}
    digest.update(json.dumps(told, sort_keys=True).encode())
    for name in _NUMBERS:
        if (folder / name).is_file():
            digest.update(name.encode())
            with (folder / name).open("rb") as file:
                for piece in iter(lambda: file.read(2**20), b""):
                    digest.update(piece)
    return digest.hexdigest()


def _json_options(face: Any) -> dict[str, Any]:
    """The face's options as JSON values; a ``ValueError`` naming a model option JSON cannot
    hold (a kernel or a likelihood object, say)."""
    for name, value in face.model_options.items():
        if not _json_value(value):
            raise ValueError(
                f"The model option {name}={value!r} cannot be saved: a saved model keeps "
                "options that are numbers, text, True/False or lists of those. Fit with the "
                "default instead (or keep the model with tf.train.Checkpoint)."
            )
    return {
        "latent_dim": face.latent_dim,
        "likelihood": face.likelihood,
        "model": face.model_name,
        "num_inducing": face.num_inducing,
        "key_added": face.key_added,
        "seed": face.seed,
        "refine_latents": face.refine_latents,
        "encoder_training": face.encoder_training,
        "distil_cells": face.distil_cells,
        **{name: _listed(value) for name, value in face.model_options.items()},
    }


def _json_value(value) -> bool:
    if isinstance(value, (list, tuple)):
        return all(_json_value(v) for v in value)
    return value is None or isinstance(value, (bool, int, float, str))


def _listed(value):
    return list(value) if isinstance(value, tuple) else value


def _table_paths(model: SVIGPLVM) -> set[str]:
    """The paths (in :func:`parameter_dict`) of the model's per-row tables and row inputs."""
    tables = {id(v) for v in model.table_variables}
    if model.row_inputs is not None:
        tables.add(id(model.row_inputs))
    return {path for path, value in parameter_dict(model).items() if id(_stored(value)) in tables}


def _stored(value) -> tf.Variable:
    """The variable that holds a parameter's value (its unconstrained one) or a variable."""
    return value.unconstrained_variable if isinstance(value, Parameter) else value


def _values(
    model: SVIGPLVM,
    exclude: set[str] = frozenset(),  # type: ignore[assignment]
    only: set[str] | None = None,
    rows: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """The stored values of the model's variables by path (``rows`` of each, for tables)."""
    found = {}
    for name, value in parameter_dict(model).items():
        if name in exclude or (only is not None and name not in only):
            continue
        array = _stored(value).numpy()
        found[name] = array if rows is None else array[rows]
    return found


def _reference_rows(model: SVIGPLVM, seed: int) -> np.ndarray:
    """The table rows a saved model keeps: those new cells may start from
    (:func:`~gpflow_svi_gplvm.prediction.new_row_model.candidate_rows`), in order, so that the
    loaded model,
    whose rows they are, starts new cells from the same ones."""
    return candidate_rows(model.num_table_rows, seed, REFERENCE_CELLS)


def _shapes(model: SVIGPLVM, reference: int) -> dict[str, Any]:
    return {
        "class": type(model).__name__,
        "num_data": int(model.num_data or 0),
        "reference_cells": reference,
        "genes": int(model.data_dim),
        "latent_dim": int(model.latent_dim),
        "num_inducing": int(model.inducing_variable.num_inducing),
        "input_dim": int(model.input_dim),
        "num_covariates": int(model.num_covariates),
        "size_factors": model.size_factor_reference is not None,
    }


def _skeleton(face: Any, shapes: dict[str, Any], tables: dict) -> SVIGPLVM:
    """A model of the saved one's form whose table holds the reference cells' rows (with zero
    counts: every value is assigned from the folder afterwards)."""
    cells, genes = shapes["reference_cells"], shapes["genes"]
    inputs = tables.get(".row_inputs", np.zeros((cells, 0)))
    width = shapes["num_covariates"]
    covariates = inputs[:, :width] if width else None
    sizes = np.exp(inputs[:, -1]) if shapes["size_factors"] else None
    # Distinct placeholders (Z is chosen among them); every value is then assigned.
    initial = np.random.default_rng(0).normal(size=(cells, shapes["latent_dim"]))
    return lookup_model(face.model_name)(
        SparseRows(sp.csr_matrix((cells, genes))),
        latent_dim=shapes["latent_dim"],
        num_inducing=shapes["num_inducing"],
        likelihood=likelihood_by_name(face.likelihood, genes),
        latent_init=initial,
        seed=face.seed,
        covariates=covariates,
        size_factors=sizes,
        **face.model_options,
    )


def _assign(model: SVIGPLVM, values: dict[str, np.ndarray], path: Path) -> None:
    """Set every variable of ``model`` from ``values`` (by path); a ``ValueError`` when the two
    do not match one to one, with their shapes."""
    wanted = parameter_dict(model)
    missing, extra = sorted(set(wanted) - set(values)), sorted(set(values) - set(wanted))
    wrong = [
        name
        for name in set(wanted) & set(values)
        if tuple(_stored(wanted[name]).shape) != values[name].shape
    ]
    if missing or extra or wrong:
        raise ValueError(
            f"The variables saved in {path} do not fit the model its manifest describes "
            f"(missing {missing[:3]}, unexpected {extra[:3]}, other shapes {sorted(wrong)[:3]}): "
            "the folder is damaged or was written by another version. Save the model again."
        )
    for name, value in wanted.items():
        _stored(value).assign(values[name])


def _minified(face: Any, adata):
    """The cells of ``adata`` without their values: ``obs`` and the q(x) moments in ``obsm``."""
    import anndata

    keys = [f"X_{face.key_added}", f"X_{face.key_added}_var"]
    absent = [key for key in keys if key not in getattr(adata, "obsm", {})]
    if absent:
        raise ValueError(
            f"adata has no obsm {absent}: give the AnnData the model was fitted to (or that "
            "transform embedded), whose obsm holds the cells' q(x)."
        )
    return anndata.AnnData(
        obs=adata.obs.copy(), obsm={key: np.asarray(adata.obsm[key]) for key in keys}
    )
