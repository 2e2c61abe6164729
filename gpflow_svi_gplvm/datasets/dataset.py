"""The data-set type and the generic loaders: scikit-learn's digits and a user's own array files.

A :class:`DataSet` is what every loader returns, here and in :mod:`.paper`: the observations
``Y`` [N, D] with NaN where an entry is missing, optional labels, a held-out test set where the
data set defines one, a one-line description and a free-form ``metadata`` dict.
"""

from __future__ import annotations

import csv
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..validation import check_path


@dataclass
class DataSet:
    """Observations ``Y`` [N, D] (NaN = missing), optional ``labels`` [N] and a description.

    ``Y_test`` [N_test, D] / ``labels_test`` [N_test] hold a held-out test set where the data set
    defines one that the experiments use (MNIST's official test set, the MOCAP test trials);
    everything else the loader knows (label names, column names, image shape, unused splits,
    citation, licence, the files read) is in ``metadata``.
    """

    Y: np.ndarray
    labels: np.ndarray | None = None
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    Y_test: np.ndarray | None = None
    labels_test: np.ndarray | None = None


def load_digits() -> DataSet:
    """scikit-learn's bundled 8 x 8 digits, scaled to [0, 1]; no download needed.

    ``Y`` [1797, 64] holds the grey levels divided by 16, ``labels`` [1797] the digits 0-9; rows
    reshape to ``metadata["image_shape"]`` (8, 8).
    """
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    return DataSet(
        Y=digits.data / 16.0,
        labels=digits.target,
        description="scikit-learn digits: 1797 images of 8x8 pixels, grey levels scaled to [0, 1]",
        metadata={"image_shape": (8, 8)},
    )


_MISSING_CELLS = {"", "na", "nan", "n/a", "null"}


class _Semicolons(csv.excel):
    delimiter = ";"


_DECIMAL_COMMA = re.compile(r"^[-+]?\d*,\d+([eE][-+]?\d+)?$")
_COMMA_PAIR = re.compile(r"\s*([-+]?\d+),(\d+)\s*")


def _number(cell: str, decimal_comma: bool = False) -> float | None:
    """A cell as a float (NaN when empty or NA), or None when it is text; with
    ``decimal_comma``, "2,5" is 2.5."""
    cell = cell.strip()
    if cell.lower() in _MISSING_CELLS:
        return np.nan
    if decimal_comma and _DECIMAL_COMMA.match(cell):
        cell = cell.replace(",", ".")
    try:
        return float(cell)
    except ValueError:
        return None


def _dialect(text: str, path: Path) -> tuple[type[csv.Dialect] | csv.Dialect, bool]:
    """The table's dialect and whether it writes decimal commas. A semicolon in every line (the
    same number of them) marks a spreadsheet's table, whose commas are decimal ones; a table
    whose commas could be either is a ``ValueError``, never a guess."""
    lines = [line for line in text.splitlines()[:200] if line.strip()]
    semicolons = {line.count(";") for line in lines}
    if len(semicolons) == 1 and 0 not in semicolons:
        return _Semicolons, True
    body = lines[1:] if lines and re.search(r"[A-Za-z]", lines[0]) else lines
    pairs = [_COMMA_PAIR.fullmatch(line) for line in body]
    leading_zero = [pair and len(pair.group(2)) > 1 and pair.group(2)[0] == "0" for pair in pairs]
    if body and all(pairs) and any(leading_zero):
        raise ValueError(
            f"{path}: every row is two whole numbers joined by a comma, the second with a leading "
            f"zero (e.g. {body[0].strip()!r}): a column of numbers with decimal commas, or two "
            "columns? Write decimal points, or end each row with a semicolon for decimal commas."
        )
    tabs = {line.count("\t") for line in lines}
    try:
        if len(tabs) == 1 and 0 not in tabs:  # a tab on every line: commas are inside fields
            dialect: type[csv.Dialect] | csv.Dialect = csv.excel_tab
        else:
            dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;\t| ")
    except csv.Error:  # one column, or nothing to tell: commas
        dialect = csv.excel
    if dialect.delimiter in " \t|" and any(re.search(r"\d,\d", line) for line in lines):
        raise ValueError(
            f"{path}: its fields are separated by {dialect.delimiter!r} and its numbers hold "
            "commas, which could be decimal commas or thousands separators. Write decimal points "
            "(or separate the fields with semicolons, as spreadsheets do for decimal commas)."
        )
    return dialect, False


def _read_table(path: Path) -> DataSet:
    """A delimited text table as a DataSet, ``Y`` [rows, numeric columns] (see
    :func:`load_array_file`)."""
    text = path.read_text(encoding="utf-8-sig")
    dialect, decimal_comma = _dialect(text, path)
    rows = [row for row in csv.reader(text.splitlines(), dialect) if any(c.strip() for c in row)]
    if not rows:
        raise ValueError(f"{path} holds no rows of data.")
    width = len(rows[0])
    for number, row in enumerate(rows, start=1):
        if len(row) != width:
            raise ValueError(
                f"{path}: row {number} has {len(row)} fields but the first row has {width}. "
                "Every row needs one field per column (leave a field empty for a missing value)."
            )
    cells = [[_number(cell, decimal_comma) for cell in row] for row in rows]
    numbering = [float(i) for i in range(width)], [float(i) for i in range(1, width + 1)]
    header = None in cells[0] or (cells[0] in numbering and width > 1 and len(rows) > 1)
    names = [cell.strip() for cell in rows[0]] if header else [str(j) for j in range(width)]
    body = cells[1:] if header else cells
    if not body:
        raise ValueError(f"{path} has a header row but no rows of data.")
    if header and not names[0] and [row[0] for row in body] == list(range(len(body))):
        raise ValueError(
            f"{path}: the first column has no name and numbers the rows 0..{len(body) - 1}: a row "
            "index (pandas writes one unless DataFrame.to_csv(path, index=False)), not data. "
            "Remove that column, or give it a name to train on it."
        )
    keep, dropped = _numeric_columns(path, names, rows, header, decimal_comma)
    if not keep:
        raise ValueError(f"{path} has no numeric column (columns: {', '.join(names)}).")
    Y = np.array([[row[j] for j in keep] for row in body], dtype=float)
    description = (
        path.name
        + (f" (dropped non-numeric columns: {', '.join(dropped)})" if dropped else "")
        + (" (fields split at semicolons, decimal commas read as points)" if decimal_comma else "")
    )
    metadata = {"columns": [names[j] for j in keep], "dropped": dropped, "header": header}
    # The text of the dropped columns, by name: a column of class names can label the rows.
    metadata["text"] = {
        name: np.array([row[names.index(name)].strip() for row in rows[header:]])
        for name in dropped
    }
    return DataSet(Y, description=description, metadata=metadata)


_COMMA_NUMBER = re.compile(r"^[-+]?[\d.]*\d,\d+([eE][-+]?\d+)?$")


def _numeric_columns(
    path: Path, names: list[str], rows: list[list[str]], header: bool, decimal_comma: bool
) -> tuple[list[int], list[str]]:
    """The indices of the numeric columns (empty cells and NA allowed) and the names of the text
    ones; a ``ValueError`` for a column mixing numbers and text, or holding numbers written with
    a comma in a table whose commas are not decimal ones (quoted "0,5": a decimal comma or a
    thousands separator?)."""
    keep, dropped = [], []
    for j, name in enumerate(names):
        cells = [row[j].strip() for row in rows[header:]]
        column = [_number(cell, decimal_comma) for cell in cells]
        comma = next((c for c in cells if _COMMA_NUMBER.match(c)), None)
        if None in column and comma is not None and not decimal_comma:
            raise ValueError(
                f"{path}: column {name!r} holds numbers written with a comma ({comma!r}), which "
                "could be decimal commas or thousands separators. Write decimal points (or "
                "separate the fields with semicolons, as spreadsheets do for decimal commas)."
            )
        if all(value is None or np.isnan(value) for value in column):
            if any(value is None for value in column):
                dropped.append(name)
                continue
        elif None in column:
            line = column.index(None) + 1 + header
            raise ValueError(
                f"{path}: column {name!r} mixes numbers and text (row {line}: "
                f"{rows[line - 1][j]!r}). Fix the cell, or leave it empty for a missing value."
            )
        keep.append(j)
    return keep, dropped


def load_array_file(path: str | Path) -> DataSet:
    """``Y`` [N, D] from a .npy, .npz (key ``Y``, optional ``labels`` [N]) or .csv / .txt table.

    Tables: the delimiter (comma, semicolon, tab, bar or spaces) is sniffed; numbers may be
    quoted; an empty cell or NA / NaN is missing. A first row with a non-numeric cell, or that
    numbers the columns (0..D-1 or 1..D), is a header: its names go to ``metadata["columns"]``.
    Columns with no number in them (text) are dropped and named in ``metadata["dropped"]`` and
    in the description, their values kept in ``metadata["text"]`` (name -> [N] strings); a
    column mixing numbers and text, numbers written with a comma in a table not separated by
    semicolons, or a ragged row, is a ``ValueError``. NumPy files holding Python objects
    (pickles) are never loaded.
    """
    path = check_path(path, "path")
    if not path.exists():
        raise ValueError(f"Data file {path} does not exist.")
    if path.is_dir():
        raise ValueError(f"{path} is a folder: give the path of a data file (.csv, .npy, .npz).")
    suffix = path.suffix.lower()
    if suffix in _NUMPY_FILES:
        return _read_numpy(path, suffix)
    if suffix in (".csv", ".txt"):
        return _read_table(path)
    raise ValueError(f"Unsupported data file type {suffix!r}: use .npy, .npz or .csv.")


_NUMPY_FILES = {".npy": b"\x93NUMPY", ".npz": b"PK"}
"""NumPy's file types and how their files begin (an .npz is a zip archive)."""


def _read_numpy(path: Path, suffix: str) -> DataSet:
    """The DataSet of an .npy (its array is ``Y``) or .npz file (arrays ``Y`` [N, D] and optional
    ``labels`` [N]); a ``ValueError`` for another file under that name, for pickled Python
    objects (never loaded: loading a pickle can run code) and for labels of another length."""
    with open(path, "rb") as file:
        if not file.read(6).startswith(_NUMPY_FILES[suffix]):
            raise ValueError(
                f"{path} is not a NumPy {suffix} file (it does not begin as one): save arrays "
                "with np.save / np.savez, and name a text table .csv."
            )
    try:
        if suffix == ".npy":
            arrays = {"Y": np.load(path)}
        else:
            with np.load(path) as loaded:
                arrays = {key: loaded[key] for key in loaded.files}
    except (ValueError, OSError, EOFError, zipfile.BadZipFile) as error:
        raise ValueError(
            f"{path} holds Python objects (an array of dtype object), which are not loaded: save "
            "the numbers as a numeric array, e.g. np.save(path, np.asarray(Y, dtype=float))."
            if "allow_pickle" in str(error)  # NumPy stores object arrays as pickles
            else f"{path} cannot be read as a NumPy {suffix} file ({error}): it may be truncated "
            "or damaged. Save it again."
        ) from error
    if "Y" not in arrays:
        raise ValueError(
            f"{path} has arrays {sorted(arrays)} but no 'Y': save the data as "
            "np.savez(path, Y=Y, labels=labels)."
        )
    Y, labels = arrays["Y"], arrays.get("labels")
    if labels is not None and (labels.ndim != 1 or Y.ndim < 1 or len(labels) != len(Y)):
        raise ValueError(
            f"{path}: 'labels' has shape {labels.shape} but 'Y' has {Y.shape}: give one label "
            "per row of Y (labels [N]), or save the file without labels."
        )
    return DataSet(Y, labels, description=path.name)


def split_labels(data: DataSet, column: str) -> DataSet:
    """``data`` with the table column named ``column`` as its ``labels`` [N]: a text column
    (``metadata["text"]``) as it is, or a numeric one moved out of ``Y``; a ``ValueError``
    listing the columns when there is none of that name."""
    text = data.metadata.get("text", {})
    columns = list(data.metadata.get("columns", []))
    if column in text:
        labels, Y = text[column], data.Y
    elif column in columns:
        j = columns.index(column)
        labels, Y = data.Y[:, j], np.delete(data.Y, j, axis=1)
        columns.pop(j)
    else:
        known = columns + list(text)
        raise ValueError(
            f"There is no column {column!r} to take the labels from"
            + (
                f"; the columns are {', '.join(map(repr, known))}."
                if known
                else ": the file has no header row naming its columns."
            )
        )
    metadata = {**data.metadata, "columns": columns, "labels_column": column}
    return DataSet(Y, labels, data.description, metadata, data.Y_test, data.labels_test)
