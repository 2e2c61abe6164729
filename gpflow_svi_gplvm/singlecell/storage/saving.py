"""A fitted :class:`~gpflow_svi_gplvm.singlecell.SingleCellGPLVM` as one folder, and back.

The folder holds everything needed to use the model without its training data:

- ``gpflow_svi_gplvm_model.json``, the manifest: the format and its version, the options that
  shape the model (:class:`~gpflow_svi_gplvm.singlecell.fitting.fitted.CellModelOptions`), the
  registration (layer, genes in order, ``obs`` columns with their categories and scales, size
  factors), the model's shapes, the training record, and a digest of these and of every other
  file of the folder (a folder edited or damaged after it was saved, or a manifest without its
  digest, is refused by :func:`load_model`);
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
model of this package that holds nothing else
(:func:`~gpflow_svi_gplvm.export.folder.write_staged`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf
from gpflow import Parameter
from gpflow.utilities import parameter_dict

from ...export.folder import STAGING_MARKER, FolderKind, check_destination, write_staged
from ...likelihoods import likelihood_by_name
from ...models import SVIGPLVM, lookup_model
from ...prediction.new_row_model import MAX_CANDIDATES, candidate_rows
from ...rows.facts import RowShape
from ...validation import check_bool, check_path, check_writable_folder
from ...version import __version__
from ..cells.registration import CellRegistration, names_hash, plain_category
from ..fitting.fitted import CellModelOptions, FittedCells
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


def save_model(
    fitted: FittedCells, folder: str | Path, adata=None, overwrite: bool = False
) -> Path:
    """Write the ``fitted`` state to ``folder`` (see the module); ``adata``: the cells it was
    fitted to, whose ``obs`` and q(x) moments are kept as ``cells.h5ad``."""
    overwrite = check_bool(overwrite, "overwrite", "replace an earlier saved model there")
    path = check_path(folder, "folder (where the model is saved)")
    check_destination(path, overwrite, SAVED_MODEL)
    check_writable_folder(path.parent, "The saved model's parent folder")
    model, learnt = fitted.model, fitted.offsets
    options = fitted.options.to_dict()
    minified = None if adata is None else _minified(fitted, adata)
    reference = _reference_rows(model, fitted.options.seed)

    def fill(staging: Path) -> dict[str, Any]:
        tables = _table_paths(model)
        np.savez(staging / "variables.npz", **_values(model, exclude=tables))
        np.savez(staging / "reference.npz", **_values(model, only=tables, rows=reference))
        if minified is not None:
            minified.write_h5ad(staging / "cells.h5ad")
        if learnt.categories:
            np.save(staging / "batch_offsets.npy", learnt.offsets)
        record = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "package_version": __version__,
            "options": options,
            "registration": fitted.registration.to_dict(),
            "model": _shapes(model, len(reference)),
            "training": fitted.training_record,
            "cells": minified is not None,
            "new_batches": [plain_category(c) for c in learnt.categories],
            "digest_covers": sorted(
                p.name for p in staging.iterdir() if p.is_file() and p.name != STAGING_MARKER
            ),
        }
        return record | {"digest": _digest(record, staging, record["digest_covers"])}

    return write_staged(path, fill, SAVED_MODEL)


def load_model(folder: str | Path) -> FittedCells:
    """The state :func:`save_model` wrote to ``folder`` (in this or another process), ready to
    embed new cells."""
    path = check_path(folder, "folder (a saved model)")
    manifest = _read_manifest(path)
    options = CellModelOptions.from_dict(manifest["options"])
    with np.load(path / "reference.npz") as tables, np.load(path / "variables.npz") as values:
        model = _skeleton(options, manifest["model"], dict(tables))
        _assign(model, {**dict(values), **dict(tables)}, path)
    offsets = BatchOffsets()
    if manifest["new_batches"]:
        offsets = BatchOffsets(manifest["new_batches"], np.load(path / "batch_offsets.npy"))
    return FittedCells(
        model,
        CellRegistration.from_dict(manifest["registration"]),
        options,
        offsets,
        training_record=manifest.get("training"),
        reference=_read_cells(path / "cells.h5ad") if manifest.get("cells") else None,
    )


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
    _check_digest(manifest, path)
    return manifest


_FIELDS = ("options", "registration", "model", "new_batches")
"""The manifest's fields that :func:`load_model` reads."""

_NUMBERS = ("variables.npz", "reference.npz", "batch_offsets.npy")
"""The files a folder's digest covers when its manifest does not list them (``digest_covers``):
the model's numbers, as folders saved before the digest covered every file."""


def _check_digest(manifest: dict, path: Path) -> None:
    """A ``ValueError`` unless the manifest's digest matches what the manifest says and the bytes
    of the files it covers: every file of the folder beside the manifest (folders saved before
    the digest covered the training cells: the model's numbers, :data:`_NUMBERS`)."""
    if "digest" not in manifest:
        raise ValueError(
            f"{path / MANIFEST} lacks its digest, which tells an edited or damaged folder: the "
            "folder was edited. Save the model again."
        )
    covers = manifest.get("digest_covers", _NUMBERS)
    uncovered = sorted(set(manifest.get("files", [])) - set(covers) - {MANIFEST})
    if "digest_covers" in manifest and uncovered:
        raise ValueError(
            f"{path}'s digest does not cover {uncovered}, which its manifest lists: the folder "
            "was edited. Save the model again."
        )
    if manifest["digest"] != _digest(manifest, path, covers):
        raise ValueError(
            f"{path} was changed after it was saved: its manifest or its files "
            f"({', '.join(name for name in covers if (path / name).is_file())}) no longer match "
            "the digest the manifest records. The folder is damaged or was edited: save the "
            "model again."
        )


def _digest(record: dict, folder: Path, files) -> str:
    """A hash of what the manifest ``record`` says (but the fields of the folder's marker) and
    of the bytes of the ``files`` of ``folder``: a folder edited or damaged after it was saved
    no longer matches it."""
    digest = hashlib.blake2b(digest_size=16)
    told = {k: v for k, v in record.items() if k not in ("digest", "files", "written_by")}
    digest.update(json.dumps(told, sort_keys=True).encode())
    for name in files:
        if (folder / name).is_file():
            digest.update(name.encode())
            with (folder / name).open("rb") as file:
                for piece in iter(lambda: file.read(2**20), b""):
                    digest.update(piece)
    return digest.hexdigest()


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


def _skeleton(options: CellModelOptions, shapes: dict[str, Any], tables: dict) -> SVIGPLVM:
    """A model of the saved one's class, ``options`` and ``shapes``, whose tables hold the
    reference cells' rows: built from rows of that shape without values
    (:class:`~gpflow_svi_gplvm.rows.facts.RowShape`), with the reference cells' observed inputs
    and every other variable a placeholder, all assigned from the folder afterwards."""
    cells, genes = shapes["reference_cells"], shapes["genes"]
    inputs = tables.get(".row_inputs", np.zeros((cells, 0)))
    width = shapes["num_covariates"]
    return lookup_model(options.model)(
        RowShape(cells, genes),
        latent_dim=shapes["latent_dim"],
        num_inducing=shapes["num_inducing"],
        likelihood=likelihood_by_name(options.likelihood, genes),
        latent_init=np.zeros((cells, shapes["latent_dim"])),
        seed=options.seed,
        covariates=inputs[:, :width] if width else None,
        size_factors=np.exp(inputs[:, -1]) if shapes["size_factors"] else None,
        **options.model_options,
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


def _minified(fitted: FittedCells, adata):
    """The cells of ``adata`` without their values: ``obs`` and the q(x) moments in ``obsm``; a
    ``ValueError`` unless they are the cells the model was fitted to (as many, the same names)
    with a q(x) of this model (:meth:`~.fitted.FittedCells.check_moments`)."""
    import anndata

    keys = [f"X_{fitted.key}", f"X_{fitted.key}_var"]
    absent = [key for key in keys if key not in getattr(adata, "obsm", {})]
    if absent:
        raise ValueError(
            f"adata has no obsm {absent}: give the AnnData the model was fitted to, whose obsm "
            "holds the cells' q(x) that fit wrote."
        )
    registration = fitted.registration
    fitted_cells = registration.cells or int(fitted.model.num_data or 0)
    other = registration.cell_names not in (None, names_hash(adata.obs_names))
    if adata.n_obs != fitted_cells or other:
        told = f"{adata.n_obs} cells" if adata.n_obs != fitted_cells else "other cells' names"
        raise ValueError(
            f"adata holds {told}, not the {fitted_cells} cells the model was fitted to: a saved "
            "model keeps its training cells as its reference. Give the AnnData it was fitted to "
            "(in its order), or save without adata."
        )
    mean, variance = (np.asarray(adata.obsm[key]) for key in keys)
    fitted.check_moments(mean, variance, adata.obs_names)
    return anndata.AnnData(obs=adata.obs.copy(), obsm=dict(zip(keys, (mean, variance))))
