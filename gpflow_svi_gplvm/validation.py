"""Checks at the boundary: data and settings are turned into clear ``ValueError``s here."""

from __future__ import annotations

import functools
import math
import numbers
import os
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import tensorflow as tf
from gpflow.config import default_float

Method = TypeVar("Method", bound=Callable)

__all__ = [
    "check_observations",
    "check_finite_array",
    "check_integer",
    "check_bool",
    "check_seed",
    "check_path",
    "check_writable_folder",
    "check_learning_rate",
    "check_fraction",
    "check_chunk_size",
    "check_device",
    "check_layer_sizes",
    "takes_a_batch",
]


def check_observations(Y, name: str = "Y", num_columns: int | None = None, mask=None) -> np.ndarray:
    """Y as a float array [N, D] with NaN where missing, or a ``ValueError`` saying what to fix.

    The result is Y itself when Y is already such an array and no ``mask`` is given: treat it
    as read-only.

    ``mask`` [N, D] (True = observed) marks missing entries explicitly, for data where a sentinel
    value rather than NaN stands for "missing"; whatever value hides behind False becomes NaN.
    Rejects: not 2-D, no rows or no columns, a wrong column count (when ``num_columns`` is given),
    non-numeric entries, a mask of another shape, infinities, and data with every entry missing.
    """
    Y = _real_array(Y, name)
    _check_float_range(Y, name)
    try:
        # No copy of an array that is already right (data can be gigabytes); the mask needs one.
        Y = np.asarray(Y, dtype=default_float()) if mask is None else np.array(Y, default_float())
    except (TypeError, ValueError) as error:
        raise ValueError(f"{name} must be a numeric array [N, D]: {error}") from error
    if mask is not None:
        mask = np.asarray(mask)
        if mask.shape != Y.shape or mask.dtype != bool:
            raise ValueError(
                f"The mask must be a boolean array of {name}'s shape {Y.shape} (True = observed), "
                f"got {mask.dtype} {mask.shape}."
            )
        Y[~mask] = np.nan
    expected = f"[N, {num_columns}]" if num_columns is not None else "[N, D]"
    if Y.ndim != 2:
        raise ValueError(
            f"{name} must be 2-D {expected} (rows = data points, columns = outputs), got shape "
            f"{Y.shape}. Reshape it, e.g. Y.reshape(len(Y), -1)."
        )
    if Y.shape[0] == 0 or Y.shape[1] == 0:
        raise ValueError(f"{name} must have at least one row and one column, got shape {Y.shape}.")
    if num_columns is not None and Y.shape[1] != num_columns:
        raise ValueError(
            f"{name} must have shape {expected} (the model was built for {num_columns} columns), "
            f"got {Y.shape}."
        )
    if np.isinf(Y).any():
        raise ValueError(
            f"{name} has infinite entries; infinity is not 'missing'. Replace them with NaN to "
            "mark them missing, or fix the data."
        )
    if np.isnan(Y).all():
        raise ValueError(f"Every entry of {name} is missing (NaN): there is nothing to learn from.")
    return Y


def _real_array(Y, name: str) -> np.ndarray:
    """Y as it is (converted later), a NumPy masked array with NaN at its masked entries (and a
    warning saying so), or a ``ValueError`` for complex numbers, objects, dates and the like
    (text is tried as numbers by the conversion)."""
    if isinstance(Y, np.ma.MaskedArray):
        hidden = int(np.ma.getmaskarray(Y).sum())
        if hidden:
            warnings.warn(
                f"{name} is a masked array: its {hidden} masked entries are read as missing (NaN).",
                stacklevel=4,
            )
        Y = np.ma.filled(np.ma.asarray(Y).astype(default_float()), np.nan)
    array = Y if isinstance(Y, np.ndarray) else np.asarray(Y) if _sized(Y) else None
    if array is not None and array.dtype.kind not in "biufUS":
        what = "complex numbers" if array.dtype.kind == "c" else f"dtype {array.dtype}"
        raise ValueError(
            f"{name} must hold real numbers, but it has {what}: pass the real values you mean "
            "(e.g. np.abs(Y) or Y.real for complex data, or np.asarray(Y, dtype=float))."
        )
    return Y


def _check_float_range(Y, name: str) -> None:
    """A ``ValueError`` when ``Y`` holds finite numbers that GPflow's float (float32 after
    ``gpflow.config.set_default_float(np.float32)``) cannot hold: they would turn infinite."""
    largest = float(np.finfo(default_float()).max)
    if not isinstance(Y, np.ndarray) or Y.dtype.kind != "f" or Y.dtype.itemsize <= 4 or not Y.size:
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN data is refused below
        extremes = np.array([np.nanmin(Y), np.nanmax(Y)])
    beyond = np.isfinite(extremes) & (np.abs(extremes) > largest)
    if beyond.any():
        raise ValueError(
            f"{name} has entries up to {np.abs(extremes[beyond]).max():.3g}, beyond "
            f"{np.dtype(default_float()).name}'s largest number {largest:.3g}: rescale the data "
            "(e.g. standardise its columns) or train in float64 "
            "(gpflow.config.set_default_float(np.float64))."
        )


def _sized(Y) -> bool:
    """Whether ``np.asarray(Y)`` is worth trying for its dtype (lists, arrays, frames)."""
    return hasattr(Y, "__len__") or hasattr(Y, "__array__")


def check_finite_array(values, name: str, shape: tuple[int, ...], meaning: str) -> np.ndarray:
    """``values`` as floats of ``shape``, every entry finite; else a ValueError that says what
    ``name`` must be (``meaning``) and what it got: its shape, or how many entries are NaN or
    infinite."""
    array = np.asarray(values, dtype=float)
    if array.shape == shape and np.isfinite(array).all():
        return array
    found = (
        f"{np.sum(~np.isfinite(array))} NaN or infinite entries"
        if array.shape == shape
        else f"shape {array.shape}"
    )
    raise ValueError(f"{name} must be {meaning}; got {found}.")


def check_path(path, name: str) -> Path:
    """``path`` (a ``str`` or ``os.PathLike``) as a ``Path``, or a ``ValueError`` naming ``name``
    for anything else, an empty or blank string (which would quietly mean the current folder)
    included."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise ValueError(f"{name} must be a non-empty str or pathlib.Path, got {path!r}.")
    if "\0" in str(path):  # no file system takes one; os calls would say only "null byte"
        raise ValueError(f"{name} {str(path)!r} holds a NUL character ('\\0'): remove it.")
    return Path(path)


def check_writable_folder(folder: Path, name: str) -> None:
    """A ``ValueError`` now when ``folder`` (named ``name`` in messages) could not be created or
    written: a file in its place or in the place of a folder above it, no permission, a full
    disk. Tried by writing a file in it; the folders made for the try are removed again, so a
    refused run leaves nothing behind."""
    for place in (folder, *folder.parents):
        if place.exists() and not place.is_dir():
            if place == folder:
                raise ValueError(
                    f"{name} {folder} is a file: name a folder (it is created if missing)."
                )
            raise ValueError(
                f"{name} {folder} cannot be made: {place} is a file, not a folder. Name a folder "
                "whose path holds no file."
            )
    made = [parent for parent in (folder, *folder.parents) if not parent.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise ValueError(
            f"{name} {folder} cannot be written ({error.strerror or error}): choose a folder you "
            "can write to."
        ) from error
    finally:
        for parent in made:  # the deepest first
            try:
                parent.rmdir()
            except OSError:
                break


def check_integer(value, name: str, minimum: int = 1, hint: str = "") -> int:
    """``value`` as an ``int`` of at least ``minimum`` (floats, strings and bools refused), or a
    ``ValueError`` naming ``name`` with ``hint`` (what is typical)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or int(value) < minimum:
        wanted = "a positive integer" if minimum == 1 else f"an integer >= {minimum}"
        advice = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be {wanted}, got {value!r}{advice}.")
    return int(value)


def check_bool(value, name: str, meaning: str = "") -> bool:
    """``value`` as a ``bool`` (``True``/``False`` or NumPy's), or a ``ValueError`` naming
    ``name`` and, with ``meaning``, what True does: a string such as "no" or a number is not
    read as consent."""
    if not isinstance(value, (bool, np.bool_)):
        does = f" ({meaning})" if meaning else ""
        raise ValueError(f"{name} must be True or False{does}, got {value!r}.")
    return bool(value)


def check_bools(**options: Any) -> None:
    """Each keyword's value a ``bool`` (:func:`check_bool`), or a ``ValueError`` naming it."""
    for name, value in options.items():
        check_bool(value, name)


SEED_LIMIT = 2**63
"""Seeds lie in [0, 2**63): TensorFlow's stateless seeds are int64."""


def check_seed(seed, name: str = "seed") -> int:
    """``seed`` as an ``int`` in [0, 2**63), or a ``ValueError`` naming ``name``."""
    if (
        isinstance(seed, bool)
        or not isinstance(seed, numbers.Integral)
        or not 0 <= int(seed) < SEED_LIMIT
    ):
        raise ValueError(
            f"{name} must be an integer in [0, 2**63) (any such number; the same seed repeats a "
            f"run), got {seed!r}."
        )
    return int(seed)


def check_learning_rate(
    value, name: str = "learning_rate", typical: str = "0.001 to 0.05", maximum: float = math.inf
) -> float:
    """``value`` as a positive, finite ``float`` (at most ``maximum``), or a ``ValueError``: a
    negative rate climbs the loss, zero trains nothing, and NaN or infinity turn every parameter
    into NaN."""
    if (
        isinstance(value, bool)
        or not isinstance(value, numbers.Real)
        or not math.isfinite(value)
        or not 0 < float(value) <= maximum
    ):
        bound = "" if maximum == math.inf else f" at most {maximum:g}"
        raise ValueError(
            f"{name} must be a positive, finite number{bound} ({typical} is typical), got "
            f"{value!r}."
        )
    return float(value)


def check_fraction(value, name: str, meaning: str = "a fraction", hint: str = "") -> float:
    """``value`` as a ``float`` in [0, 1], or a ``ValueError`` naming ``name`` and what it means
    (``meaning``), with ``hint`` (what the ends of the range do)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 <= float(value) <= 1:
        advice = f" ({hint})" if hint else ""
        raise ValueError(f"{name} must be {meaning} in [0, 1]{advice}, got {value!r}.")
    return float(value)


def check_chunk_size(chunk_size) -> int | None:
    """``chunk_size`` (rows per compiled call) as a positive ``int``, or None for a
    memory-bounded default; anything else is a ``ValueError``."""
    if chunk_size is None:
        return None
    return check_integer(chunk_size, "chunk_size", hint="or None for a memory-bounded default")


def check_layer_sizes(sizes: Sequence[int], name: str) -> tuple[int, ...]:
    """``sizes`` as a tuple of positive integers (an empty tuple: no hidden layer), or a
    ``ValueError`` naming ``name``."""
    if isinstance(sizes, (str, bytes)) or not hasattr(sizes, "__iter__"):
        raise ValueError(
            f"{name} must be a sequence of layer widths such as (10, 5), got {sizes!r}."
        )
    return tuple(check_integer(size, f"each of {name}", hint="a layer width") for size in sizes)


def check_device(device: str | None) -> str | None:
    """``device``, a TensorFlow device name this process has ("/CPU:0", "/GPU:1", or a full
    "/job:.../device:GPU:0"), or None (TensorFlow places the step); else a ``ValueError`` listing
    the devices it has."""
    if device is None:
        return None
    names = [d.name for d in tf.config.list_logical_devices()]
    advice = (
        f"this process has {', '.join(names)}: pass one of those (e.g. '/CPU:0'), or "
        "device=None to let TensorFlow place the step (on the first GPU when it sees one)."
    )
    if not isinstance(device, str):
        raise ValueError(f"device must be a device name string, got {device!r}; {advice}")
    try:
        wanted = tf.DeviceSpec.from_string(device)
    except ValueError as error:
        raise ValueError(f"device {device!r} is not a device name ({error}); {advice}") from None
    for name in names:
        have = tf.DeviceSpec.from_string(name)
        # A job, replica or task named must be this process's: another's devices are not here.
        where = [(wanted.job, have.job), (wanted.replica, have.replica), (wanted.task, have.task)]
        if (
            (wanted.device_type or "").upper() == have.device_type
            and (wanted.device_index or 0) == have.device_index
            and all(part is None or part == own for part, own in where)
        ):
            return device
    raise ValueError(f"device {device!r} does not exist here: {advice}")


def takes_a_batch(method: Method) -> Method:
    """A model's ``method(data, ...)`` of a minibatch ``data = (idx [B], Y [B, D])``, with a
    ``ValueError`` saying so when ``data`` is not such a pair (e.g. Y alone): a shape checker
    would report only the sizes it found."""

    @functools.wraps(method)
    def checked(model, data, *args, **kwargs):
        _check_batch(data, model.data_dim, method.__name__)
        return method(model, data, *args, **kwargs)

    return checked  # type: ignore[return-value]


def _check_batch(data, num_columns: int, name: str) -> None:
    """A ``ValueError`` unless ``data`` is ``(idx [B] integers, Y [B, D])`` as far as its static
    shapes tell (inside a compiled function B may be unknown)."""
    if not (isinstance(data, (tuple, list)) and len(data) == 2):
        given = f"a {type(data).__name__} of shape {list(np.shape(data))}"
    else:
        idx, Y = (tf.TensorShape(_attribute(part, "shape")) for part in data)
        kind = tf.as_dtype(_attribute(data[0], "dtype"))
        rows = {idx[0] if idx.rank == 1 else None, Y[0] if Y.rank == 2 else None} - {None}
        if (
            idx.rank in (None, 1)
            and Y.rank in (None, 2)
            and (Y.rank is None or Y[1] in (None, num_columns))
            and len(rows) <= 1
            and kind.is_integer
        ):
            return
        given = f"a pair of shapes {[idx.as_list(), Y.as_list()]}"
    raise ValueError(
        f"{name} takes a batch (idx, Y): idx [B] the rows' numbers in the training data (integers) "
        f"and Y [B, D={num_columns}] their values, e.g. model.{name}((np.arange(len(Y)), Y)); "
        f"got {given}."
    )


def _attribute(values, name: str):
    """The ``shape`` or ``dtype`` of an array or tensor, or of what NumPy makes of a list."""
    return getattr(values, name) if hasattr(values, name) else getattr(np.asarray(values), name)
