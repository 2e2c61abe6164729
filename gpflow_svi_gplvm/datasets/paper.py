"""Data loaders: scikit-learn's digits, a user's own array files, and the paper's data sets.

The paper's data sets (Lalchand et al., AISTATS 2022) are *not* shipped with the package: their
licences forbid or discourage redistribution. The loaders read them from a data folder laid out
as ``<dataset>/<file>`` (e.g. ``oilflow/oilflow.npz``). The folder is, in order of precedence,

1. the ``data_home`` argument of the loader,
2. the environment variable ``GPFLOW_SVI_GPLVM_DATA``,
3. the per-user cache, ``$XDG_CACHE_HOME/gpflow_svi_gplvm`` (default ``~/.cache/gpflow_svi_gplvm``).

The cache is also searched when the file is not in the chosen folder, and files that can be
downloaded are downloaded into the cache. Every file is checked against its sha256 in
:data:`REGISTRY` when it is read (the result is remembered per path, size and mtime, so repeated
loads do not hash again); a download that does not match is deleted and ``ValueError`` raised.

Which loaders can download their data when the staged file is missing:

============================  ==============================================================
loader                        download
============================  ==============================================================
``load_qpcr``                 yes: the original ``guo_qpcr.csv`` (sods/ods), parsed here
``load_taxi``                 yes: the authors' ``taxi_count_data.csv`` (vr308/Generalised-GPLVM)
``load_movielens100k``        yes: ``u.data`` (vr308/Generalised-GPLVM), parsed here
``load_brendan_faces``        yes: ``frey_rawface.mat`` (SheffieldML/GPmat), read with scipy
``load_mocap``                no for the poses (converted from a .mat whose full checksum is not
                              recorded); the skeleton ``35.asf`` downloads (``skeleton=True``)
``load_oilflow``              no (converted from GPmat's ``3Class.mat``)
``load_mnist``                no (assembled from convnetjs PNGs and the LeCun idx files)
============================  ==============================================================

For the others the error message says where the file comes from and where to put it.
The protocol helpers (:func:`train_test_split`, :func:`random_missing`, :func:`blank_bones`) live
in :mod:`gpflow_svi_gplvm.datasets.splits` and are re-exported here.
"""

from __future__ import annotations

import csv
import hashlib
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .splits import (
    CMU_SKELETON_PARENTS,
    MOCAP_BODY_PARTS,
    Split,
    blank_bones,
    bone_columns,
    random_missing,
    train_test_split,
)

__all__ = [
    "DataSet",
    "load_digits",
    "load_array_file",
    "load_oilflow",
    "load_qpcr",
    "load_taxi",
    "load_mnist",
    "load_brendan_faces",
    "load_mocap",
    "load_movielens100k",
    "RemoteFile",
    "REGISTRY",
    "DATA_ENV_VAR",
    "cache_dir",
    "default_data_home",
    "fetch",
    "sha256sum",
    "Split",
    "train_test_split",
    "random_missing",
    "blank_bones",
    "bone_columns",
    "CMU_SKELETON_PARENTS",
    "MOCAP_BODY_PARTS",
]

logger = logging.getLogger(__name__)

DATA_ENV_VAR = "GPFLOW_SVI_GPLVM_DATA"


@dataclass
class DataSet:
    """Y [N, D] (NaN = missing), optional labels [N] and a one-line description.

    ``Y_test`` / ``labels_test`` hold a held-out test set where the data set defines one that the
    experiments use (MNIST's official test set, the MOCAP test trials); everything else the
    loader knows (label names, column names, image shape, unused splits, citation, licence,
    the files read) is in ``metadata``.
    """

    Y: np.ndarray
    labels: np.ndarray | None = None
    description: str = ""
    metadata: dict = field(default_factory=dict)
    Y_test: np.ndarray | None = None
    labels_test: np.ndarray | None = None


def load_digits() -> DataSet:
    """scikit-learn's bundled 8 x 8 digits (1797 x 64), scaled to [0, 1]; no download needed."""
    from sklearn.datasets import load_digits as sklearn_digits

    digits = sklearn_digits()
    return DataSet(
        Y=digits.data / 16.0,
        labels=digits.target,
        description="scikit-learn digits: 1797 images of 8x8 pixels, grey levels scaled to [0, 1]",
        metadata={"image_shape": (8, 8)},
    )


_MISSING_CELLS = {"", "na", "nan", "n/a", "null"}


def _number(cell: str) -> float | None:
    """A cell as a float (NaN when empty or NA), or None when it is text."""
    cell = cell.strip()
    if cell.lower() in _MISSING_CELLS:
        return np.nan
    try:
        return float(cell)
    except ValueError:
        return None


def _read_table(path: Path) -> DataSet:
    """A delimited text table as a DataSet (see :func:`load_array_file`)."""
    text = path.read_text(encoding="utf-8-sig")
    try:
        dialect = csv.Sniffer().sniff(text[:65536], delimiters=",;\t| ")
    except csv.Error:  # one column, or nothing to tell: commas
        dialect = csv.excel
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
    cells = [[_number(cell) for cell in row] for row in rows]
    numbering = [float(i) for i in range(width)], [float(i) for i in range(1, width + 1)]
    header = None in cells[0] or (cells[0] in numbering and width > 1 and len(rows) > 1)
    names = [cell.strip() for cell in rows[0]] if header else [str(j) for j in range(width)]
    body = cells[1:] if header else cells
    if not body:
        raise ValueError(f"{path} has a header row but no rows of data.")
    keep, dropped = [], []
    for j, name in enumerate(names):
        column = [row[j] for row in body]
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
    if not keep:
        raise ValueError(f"{path} has no numeric column (columns: {', '.join(names)}).")
    Y = np.array([[row[j] for j in keep] for row in body], dtype=float)
    description = path.name + (
        f" (dropped non-numeric columns: {', '.join(dropped)})" if dropped else ""
    )
    metadata = {"columns": [names[j] for j in keep], "dropped": dropped, "header": header}
    return DataSet(Y, description=description, metadata=metadata)


def load_array_file(path: str | Path) -> DataSet:
    """Y from a .npy, .npz (key ``Y``, optional ``labels``) or .csv / .txt table of numbers.

    Tables: the delimiter (comma, semicolon, tab, bar or spaces) is sniffed; numbers may be
    quoted; an empty cell or NA / NaN is missing. A first row with a non-numeric cell, or that
    numbers the columns (0..D-1 or 1..D), is a header: its names go to ``metadata["columns"]``.
    Columns with no number in them (text) are dropped and named in ``metadata["dropped"]`` and
    in the description; a column mixing numbers and text, or a ragged row, is a ``ValueError``.
    """
    path = Path(path)
    if not path.exists():
        raise ValueError(f"Data file {path} does not exist.")
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return DataSet(np.load(path), description=path.name)
    if suffix == ".npz":
        with np.load(path) as arrays:
            if "Y" not in arrays:
                raise ValueError(
                    f"{path} has arrays {sorted(arrays)} but no 'Y': save the data as "
                    "np.savez(path, Y=Y, labels=labels)."
                )
            labels = arrays["labels"] if "labels" in arrays else None
            return DataSet(arrays["Y"], labels, description=path.name)
    if suffix in (".csv", ".txt"):
        return _read_table(path)
    raise ValueError(f"Unsupported data file type {suffix!r}: use .npy, .npz or .csv.")


# ------------------------------------------------------------------------------------------------
# File registry, location, checksums and downloads

_GPMAT = (
    "https://raw.githubusercontent.com/SheffieldML/GPmat/4b5914a38ecbad9fb7a13a3392970bfc28c9d911"
)
_GGPLVM = "https://raw.githubusercontent.com/vr308/Generalised-GPLVM"
_ODS = "https://raw.githubusercontent.com/sods/ods/f62e5b8397d00eece211852e0b778d6d8f5c5e0f"


@dataclass(frozen=True)
class RemoteFile:
    """A data file: its sha256, the URL it can be downloaded from (None: manual only) and where
    it comes from, in words (shown when the file is missing)."""

    sha256: str
    url: str | None = None
    source: str = ""


REGISTRY: dict[str, RemoteFile] = {
    "oilflow/oilflow.npz": RemoteFile(
        "aff70e9eca35d214e535cd99d74462d544a8faba17b324a35bf4dd0b2ca2c563",
        source="converted from SheffieldML/GPmat datasets/data/3Class.mat (commit 4b5914a3): "
        "np.savez_compressed with Y=DataTrn, labels=argmax(DataTrnLbls), fractions=DataTrnFrctns "
        "and the DataTst*/DataVdn* sets as Y_test, labels_test, fractions_test, Y_valid, "
        "labels_valid, fractions_valid",
    ),
    "qpcr/guo_qpcr.csv": RemoteFile(
        "80bb8dd8593c98b0b53b54fcc1afd191900cc3d8cfcff8cdb9a0f42f9340badc",
        url=f"{_ODS}/datasets/guo_qpcr.csv",
        source="sods/ods datasets/guo_qpcr.csv (commit f62e5b83)",
    ),
    "qpcr/guo_qpcr.npz": RemoteFile(
        "e8288c8834439652765ac051cf909557a41eb5546f651026433d32001867f9f4",
        source="parsed from qpcr/guo_qpcr.csv (the loader reads the CSV when this is absent)",
    ),
    "taxi/taxi_count_data.csv": RemoteFile(
        "dd5c98e015ca6caee00e0cf305d96dd0b75ee72a247f20dbff36721555293f94",
        url=f"{_GGPLVM}/942c70ea938d694bc4ccba1e3e1ee805fafb63bf/taxi_count_data.csv",
        source="vr308/Generalised-GPLVM taxi_count_data.csv (commit 942c70ea)",
    ),
    "taxi/taxi_counts.npz": RemoteFile(
        "703522af2258e444e18a9a970b3adcf1bfbe5e899e170d56974530cdef05f6a8",
        source="parsed from taxi/taxi_count_data.csv (the loader reads the CSV when this is "
        "absent)",
    ),
    "mnist/mnist_subset.npz": RemoteFile(
        "9f8be740ce92b78918ff692823d24257b5775f141104e9e21febff9467e7dc29",
        source="the first 20,000 MNIST training images (karpathy/convnetjs demo/mnist/"
        "mnist_batch_0..6.png, commit b9683e93) and the official test set and labels (LeCun idx "
        "files), saved as x_train (20000, 784) uint8, y_train, x_test (10000, 784), y_test",
    ),
    "brendan_faces/brendan_faces.npz": RemoteFile(
        "cf4ea5d51a680ee7c1da19a9965f96b171c29dd4e9c1af8e2d841fc59d834f65",
        source="Y = ff.T from SheffieldML/GPmat datasets/data/frey_rawface.mat (the loader "
        "downloads and reads the .mat when this is absent)",
    ),
    "brendan_faces/frey_rawface.mat": RemoteFile(
        "265a83a23adb081755cd3de375509828e690324d1d60f076b8ecebc840d59c64",
        url=f"{_GPMAT}/datasets/data/frey_rawface.mat",
        source="SheffieldML/GPmat datasets/data/frey_rawface.mat (commit 4b5914a3), originally "
        "from Sam Roweis' data page",
    ),
    "mocap/cmu35_walk_jog.npz": RemoteFile(
        "da4726f1d2f60d6c5ee69288ca5cdfdfc9487dd25a6f86e96617d0873fd0f6c4",
        source="converted from SheffieldML/GPmat datasets/data/cmu35WalkJog.mat (commit "
        "4b5914a3): Y, seq (trial index), Y_test, seq_test, trial names and channel names",
    ),
    "mocap/cmu35_channels.csv": RemoteFile(
        "509c7a9501ef248128c481805dd62c94d8e94e3d0f3999d51cafd4f7dfe3731a",
        source="channel table (column,channel,bone,dof) of the 62 CMU Acclaim channels",
    ),
    "mocap/35.asf": RemoteFile(
        "2a8e2eda3c0d7d828566b2a9a8ab36b2b8b3864110574e8b73c8f069fded416c",
        url=f"{_GPMAT}/datasets/data/mocap/cmu/35/35.asf",
        source="CMU subject 35 skeleton, SheffieldML/GPmat datasets/data/mocap/cmu/35/35.asf",
    ),
    "movielens100k/ml100k.npz": RemoteFile(
        "151aa2af5e5e076113f782b3b3bf95321c17712a9601092690ee806dcf5d666c",
        source="parsed from ml-100k u.data (the loader downloads and reads u.data when this "
        "is absent)",
    ),
    "movielens100k/u.data": RemoteFile(
        "06416e597f82b7342361e41163890c81036900f418ad91315590814211dca490",
        url=f"{_GGPLVM}/b15044a35aba47b66f20ef5ed63fa9c2d4c7d8d3/data/ml-100k/u.data",
        source="GroupLens MovieLens 100K u.data, as committed in vr308/Generalised-GPLVM "
        "data/ml-100k/u.data (branch mocap, commit b15044a3)",
    ),
    "movielens100k/README_ml-100k.txt": RemoteFile(
        "4883b8cf340ed0059971b33f56ad3adc88a40792108ebca3d24aafc4c82e8b52",
        url=f"{_GGPLVM}/b15044a35aba47b66f20ef5ed63fa9c2d4c7d8d3/data/ml-100k/README",
        source="GroupLens' ml-100k README (licence text)",
    ),
}


def cache_dir() -> Path:
    """The per-user cache: ``$XDG_CACHE_HOME/gpflow_svi_gplvm`` or ``~/.cache/gpflow_svi_gplvm``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "gpflow_svi_gplvm"


def default_data_home(data_home: str | Path | None = None) -> Path:
    """The data folder: ``data_home``, else ``$GPFLOW_SVI_GPLVM_DATA``, else :func:`cache_dir`."""
    if data_home is not None:
        return Path(data_home).expanduser()
    from_env = os.environ.get(DATA_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    return cache_dir()


_VERIFIED: dict[tuple[str, int, int], str] = {}


def sha256sum(path: str | Path) -> str:
    """The sha256 of a file, remembered per (path, size, mtime) so that reloading is cheap."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _VERIFIED:
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        _VERIFIED[key] = digest.hexdigest()
    return _VERIFIED[key]


def _entry(name: str) -> RemoteFile:
    if name not in REGISTRY:
        raise ValueError(f"Unknown data file {name!r}; known files: {', '.join(REGISTRY)}.")
    return REGISTRY[name]


def _candidates(name: str, data_home: str | Path | None) -> list[Path]:
    paths = [default_data_home(data_home) / name]
    in_cache = cache_dir() / name
    if in_cache != paths[0]:
        paths.append(in_cache)
    return paths


def _check(path: Path, name: str) -> None:
    expected = _entry(name).sha256
    actual = sha256sum(path)
    if actual != expected:
        raise ValueError(
            f"{path} has sha256 {actual} but {name} should have {expected}: the file is corrupt, "
            "truncated or a different version. Replace it (or delete it so that it can be "
            "downloaded again, where the loader can download it)."
        )


def _where_to_put(name: str, data_home: str | Path | None) -> str:
    target = default_data_home(data_home) / name
    return (
        f"Put the file at {target} (the data folder is the data_home argument, else "
        f"${DATA_ENV_VAR}, else the cache {cache_dir()}); its sha256 must be "
        f"{_entry(name).sha256}."
    )


def _locate(name: str, data_home: str | Path | None, verify: bool) -> Path | None:
    for path in _candidates(name, data_home):
        if path.is_file():
            if verify:
                _check(path, name)
            return path
    return None


def _download(name: str, url: str, destination: Path, sha256: str) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    digest = hashlib.sha256()
    logger.info("Downloading %s from %s to %s", name, url, destination)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
    except (urllib.error.URLError, OSError, TimeoutError) as error:
        partial.unlink(missing_ok=True)
        raise ValueError(
            f"Could not download {name} from {url} ({error}). If this machine is offline, "
            f"download it elsewhere and put it at {destination}."
        ) from error
    if digest.hexdigest() != sha256:
        partial.unlink(missing_ok=True)
        raise ValueError(
            f"The download of {name} from {url} has sha256 {digest.hexdigest()}, expected "
            f"{sha256}; the file was deleted. The source may have changed: get the file from "
            f"{_entry(name).source} and put it at {destination}."
        )
    os.replace(partial, destination)


def fetch(
    name: str, data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> Path:
    """Path of the data file ``name`` (a key of :data:`REGISTRY`, e.g. ``"qpcr/guo_qpcr.csv"``).

    Looks in the data folder (see the module docstring), then in the cache. A missing file with
    a URL is downloaded into the cache when ``download`` is true and verified (a mismatch deletes
    it and raises ``ValueError``); otherwise ``ValueError`` says where to get it and where to put
    it. ``verify=False`` skips the checksum of files already on disk (downloads are always
    verified).
    """
    entry = _entry(name)
    found = _locate(name, data_home, verify)
    if found is not None:
        return found
    if entry.url is None:
        raise ValueError(
            f"Data file {name} was not found (looked at "
            f"{', '.join(str(p) for p in _candidates(name, data_home))}) and cannot be downloaded "
            f"automatically. It is {entry.source}. {_where_to_put(name, data_home)}"
        )
    if not download:
        raise ValueError(
            f"Data file {name} was not found and download=False. It can be downloaded from "
            f"{entry.url}. {_where_to_put(name, data_home)}"
        )
    destination = cache_dir() / name
    _download(name, entry.url, destination, entry.sha256)
    return destination


def _first_available(
    names: list[str], data_home: str | Path | None, download: bool, verify: bool
) -> tuple[str, Path]:
    """The first of ``names`` on disk; else fetch (maybe download) the first with a URL."""
    for name in names:
        found = _locate(name, data_home, verify)
        if found is not None:
            return name, found
    downloadable = [name for name in names if _entry(name).url is not None]
    if not downloadable:
        return names[0], fetch(names[0], data_home, download=download, verify=verify)
    try:
        return downloadable[0], fetch(downloadable[0], data_home, download=download, verify=verify)
    except ValueError as error:
        others = [name for name in names if name != downloadable[0]]
        raise ValueError(
            f"{error} Alternatively put {' or '.join(others)} in the data folder "
            f"{default_data_home(data_home)}."
        ) from error


def _npz(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}


# ------------------------------------------------------------------------------------------------
# The paper's data sets


def load_oilflow(
    data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> DataSet:
    """Oilflow (Bishop & James 1993): 1000 x 12 gamma-densitometry measurements, 3 flow regimes.

    ``Y`` is Bishop's training set (``DataTrn``, the paper's data set, used with an 80/20 split),
    ``labels`` the flow regime 0/1/2 (the authors' code uses 1..3). Bishop's separate test and
    validation sets, *not* used by the paper, are in ``metadata`` (``Y_test``, ``labels_test``,
    ``fractions_test``, ``Y_valid``, ...), as are the phase fractions. Not downloadable:
    ``oilflow/oilflow.npz`` was converted from GPmat's ``3Class.mat``.
    """
    path = fetch("oilflow/oilflow.npz", data_home, download=download, verify=verify)
    arrays = _npz(path)
    metadata = {key: arrays[key] for key in arrays if key not in ("Y", "labels")}
    metadata.update(
        label_names=np.array(["class 0", "class 1", "class 2"]),
        label_note="homogeneous, annular and stratified flow; the source does not say which "
        "class is which",
        citation="Bishop, C. M. and James, G. D. (1993), Analysis of multiphase flows using "
        "dual-energy gamma densitometry and neural networks, Nucl. Instr. Meth. A327, 580-593.",
        licence="No licence stated; widely mirrored academic data. Do not vendor it.",
        files=[str(path)],
    )
    return DataSet(
        Y=arrays["Y"].astype(np.float64),
        labels=arrays["labels"].astype(np.int64),
        description="Oilflow: 1000 x 12 gamma densitometry readings, 3 flow regimes "
        "(Bishop & James 1993); no licence stated, not redistributed",
        metadata=metadata,
    )


def _parse_guo_csv(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], [row for row in rows[1:] if row]
    labels = np.array([row[0] for row in body])
    label_names = np.array(list(dict.fromkeys(labels.tolist())))
    codes = {name: code for code, name in enumerate(label_names.tolist())}
    return {
        "Y": np.array([[float(value) for value in row[1:]] for row in body]),
        "labels": labels,
        "label_codes": np.array([codes[label] for label in labels], dtype=np.int64),
        "label_names": label_names,
        "genes": np.array(header[1:]),
    }


def load_qpcr(
    data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> DataSet:
    """Single-cell qPCR of mouse embryos (Guo et al. 2010): 437 cells x 48 genes, 10 stages.

    ``Y`` is already normalised upstream (Ct to expression, normalised by Actb/Gapdh, each gene
    standardised). ``labels`` are stage codes 0..9 in first-appearance order (the authors'
    coding); ``metadata["label_names"]`` the stage names (``"1"`` ... ``"64 EPI"``),
    ``metadata["stage"]`` the per-cell stage name, ``metadata["genes"]`` the column names.
    Reads ``qpcr/guo_qpcr.npz``, else ``qpcr/guo_qpcr.csv`` (downloaded from sods/ods if needed).
    """
    name, path = _first_available(
        ["qpcr/guo_qpcr.npz", "qpcr/guo_qpcr.csv"], data_home, download, verify
    )
    arrays = _npz(path) if name.endswith(".npz") else _parse_guo_csv(path)
    return DataSet(
        Y=arrays["Y"].astype(np.float64),
        labels=arrays["label_codes"].astype(np.int64),
        description="qPCR: 437 cells x 48 genes, 10 developmental stages (Guo et al. 2010, "
        "Developmental Cell 18(4)); ScienceDirect terms, not redistributed",
        metadata={
            "label_names": arrays["label_names"],
            "stage": arrays["labels"],
            "genes": arrays["genes"],
            "citation": "Guo, G. et al. (2010), Resolution of cell fate decisions revealed by "
            "single-cell gene expression analysis from zygote to blastocyst, Developmental Cell "
            "18(4), 675-685.",
            "licence": "Supplementary data of the paper; pods lists ScienceDirect terms. Avoid "
            "redistributing.",
            "files": [str(path)],
        },
    )


def _parse_taxi_csv(path: Path) -> dict[str, np.ndarray]:
    with open(path, newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    header, body = rows[0], [row for row in rows[1:] if row]
    day_hour = np.array([[int(part) for part in row[0].split("_")] for row in body])
    return {
        "counts": np.array([[int(value) for value in row[1:]] for row in body], dtype=np.int64),
        "columns": np.array(header[1:]),
        "day": day_hour[:, 0].astype(np.int64),
        "hour": day_hour[:, 1].astype(np.int64),
    }


def load_taxi(
    data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> DataSet:
    """NYC taxi pickups per hour, January 2020: 744 hours x 3 services (yellow, green, fhv).

    ``Y`` holds the counts as float64 (for a Poisson likelihood); ``metadata`` has the integer
    ``counts``, ``columns``, ``day`` (1-31), ``hour`` (0-23) and ``time`` (hours since
    2020-01-01 00:00). Reads ``taxi/taxi_counts.npz``, else ``taxi/taxi_count_data.csv``
    (downloaded from vr308/Generalised-GPLVM if needed).
    """
    name, path = _first_available(
        ["taxi/taxi_counts.npz", "taxi/taxi_count_data.csv"], data_home, download, verify
    )
    arrays = _npz(path) if name.endswith(".npz") else _parse_taxi_csv(path)
    counts = arrays["counts"].astype(np.int64)
    day, hour = arrays["day"].astype(np.int64), arrays["hour"].astype(np.int64)
    return DataSet(
        Y=counts.astype(np.float64),
        labels=None,
        description="NYC taxi: hourly pickup counts, January 2020, 744 x 3 (yellow, green, fhv); "
        "derived from NYC TLC trip records (NYC Open Data)",
        metadata={
            "counts": counts,
            "columns": arrays["columns"],
            "day": day,
            "hour": hour,
            "time": (day - 1) * 24 + hour,
            "citation": "NYC Taxi & Limousine Commission trip record data, January 2020; counts "
            "by Lalchand et al. (2022), vr308/Generalised-GPLVM.",
            "licence": "NYC Open Data terms of use; the authors' repository has no licence file.",
            "files": [str(path)],
        },
    )


def load_mnist(
    data_home: str | Path | None = None,
    *,
    num_train: int | None = None,
    num_test: int | None = None,
    scale: bool = True,
    download: bool = True,
    verify: bool = True,
) -> DataSet:
    """MNIST: the first ``num_train`` (default all 20,000 staged) training images, 784 pixels.

    ``scale=True`` divides by 255 (as the authors do, ``Y/255``), else grey levels 0-255.
    ``labels`` are the digits; ``Y_test`` / ``labels_test`` the first ``num_test`` (default all
    10,000; 0 for none) official test images. Rows reshape to ``metadata["image_shape"]``
    (28, 28). Not downloadable: ``mnist/mnist_subset.npz`` was assembled from several sources.
    """
    path = fetch("mnist/mnist_subset.npz", data_home, download=download, verify=verify)
    with np.load(path) as arrays:
        available = arrays["y_train"].shape[0]
        if num_train is None:
            num_train = available
        if not 0 < num_train <= available:
            raise ValueError(
                f"num_train must be between 1 and {available}: only the first {available} MNIST "
                "training images are staged in mnist/mnist_subset.npz."
            )
        x_train, y_train = arrays["x_train"][:num_train], arrays["y_train"][:num_train]
        x_test, y_test = arrays["x_test"], arrays["y_test"]
    if num_test is not None:
        if not 0 <= num_test <= x_test.shape[0]:
            raise ValueError(f"num_test must be between 0 and {x_test.shape[0]}, got {num_test}.")
        x_test, y_test = x_test[:num_test], y_test[:num_test]
    divisor = 255.0 if scale else 1.0
    has_test = x_test.shape[0] > 0
    return DataSet(
        Y=x_train.astype(np.float64) / divisor,
        labels=y_train.astype(np.int64),
        description=f"MNIST: first {num_train} training images of 28x28 pixels"
        + (", scaled to [0, 1]" if scale else ", grey levels 0-255")
        + " (LeCun, Cortes & Burges); commonly CC BY-SA 3.0",
        metadata={
            "image_shape": (28, 28),
            "scale": scale,
            "citation": "LeCun, Y., Bottou, L., Bengio, Y. and Haffner, P. (1998), Gradient-based "
            "learning applied to document recognition, Proc. IEEE 86(11); the MNIST database by "
            "Y. LeCun, C. Cortes and C. J. C. Burges.",
            "licence": "Commonly distributed as CC BY-SA 3.0.",
            "files": [str(path)],
        },
        Y_test=x_test.astype(np.float64) / divisor if has_test else None,
        labels_test=y_test.astype(np.int64) if has_test else None,
    )


def _read_frey_mat(path: Path) -> np.ndarray:
    try:
        from scipy.io import loadmat
    except ImportError as error:  # pragma: no cover - scipy comes with scikit-learn
        raise ValueError(f"Reading {path} needs scipy (pip install scipy).") from error
    contents = loadmat(path, variable_names=["ff"])
    if "ff" not in contents:
        raise ValueError(f"{path} holds no variable 'ff' (the 560 x N frames).")
    faces = np.asarray(contents["ff"]).T
    if faces.ndim != 2 or faces.shape[1] != 560:
        raise ValueError(f"'ff' in {path} has shape {faces.T.shape}, expected (560, N).")
    return faces


def load_brendan_faces(
    data_home: str | Path | None = None,
    *,
    scale: bool = False,
    download: bool = True,
    verify: bool = True,
) -> DataSet:
    """Brendan Frey's face video: 1965 frames of 28 x 20 pixels (560 dimensions).

    ``Y`` holds grey levels 8-238 (``scale=True`` divides by 255); rows reshape to
    ``metadata["image_shape"]`` (28, 20) as upright faces. Reads
    ``brendan_faces/brendan_faces.npz``, else ``brendan_faces/frey_rawface.mat`` (downloaded from
    SheffieldML/GPmat if needed; read with scipy).
    """
    name, path = _first_available(
        ["brendan_faces/brendan_faces.npz", "brendan_faces/frey_rawface.mat"],
        data_home,
        download,
        verify,
    )
    faces = _npz(path)["Y"] if name.endswith(".npz") else _read_frey_mat(path)
    return DataSet(
        Y=faces.astype(np.float64) / (255.0 if scale else 1.0),
        labels=None,
        description="Brendan faces: 1965 video frames of 28x20 pixels "
        + ("scaled to [0, 1]" if scale else "(grey levels)")
        + " (Frey, Colmenarez & Huang 1998; S. Roweis' data page); no licence stated",
        metadata={
            "image_shape": (28, 20),
            "scale": scale,
            "citation": "Frey, B. J., Colmenarez, A. and Huang, T. S. (1998), Mixtures of local "
            "linear subspaces for face recognition, CVPR.",
            "licence": "No licence stated; do not vendor it.",
            "files": [str(path)],
        },
    )


def _channel_table(channel_names: np.ndarray) -> dict[str, np.ndarray]:
    names = np.asarray(channel_names).astype(str)
    parts = [name.split(".", 1) for name in names]
    return {
        "column": np.arange(names.size),
        "channel": names,
        "bone": np.array([part[0] for part in parts]),
        "dof": np.array([part[1] for part in parts]),
    }


def load_mocap(
    data_home: str | Path | None = None,
    *,
    zero_root_position: bool = False,
    skeleton: bool = False,
    download: bool = True,
    verify: bool = True,
) -> DataSet:
    """CMU motion capture, subject 35 walk and jog (a SUBSTITUTE for the paper's data).

    The paper uses jumps, walks and runs of "a single subject" of the CMU database, not named.

    ``Y`` [2644, 62]: 31 training trials at 30 Hz (every 4th frame), 62 Acclaim channels (root
    position in ASF length units, rotations in degrees); ``labels`` the trial index 0-30 of each
    row. ``Y_test`` [169, 62] / ``labels_test``: the held-out trials 35_18 (jog) and 35_29 (walk).
    ``metadata``: ``channel_names``, ``channel_table`` (dict of per-column ``column``,
    ``channel``, ``bone``, ``dof``: pass it to :func:`blank_bones`), ``seq_trials``,
    ``seq_motion`` (walk/jog per trial), ``motion`` / ``motion_test`` (per row) and the
    acknowledgement CMU asks for. ``zero_root_position=True`` sets columns 0-2 (root position) to
    0, as the authors do. ``skeleton=True`` also fetches (downloading if needed) ``35.asf`` and puts
    its path in ``metadata["asf_path"]``. The poses are not downloadable (converted from GPmat's
    ``cmu35WalkJog.mat``).
    """
    path = fetch("mocap/cmu35_walk_jog.npz", data_home, download=download, verify=verify)
    arrays = _npz(path)
    Y, Y_test = arrays["Y"].astype(np.float64), arrays["Y_test"].astype(np.float64)
    if zero_root_position:
        Y[:, :3] = 0.0
        Y_test[:, :3] = 0.0
    seq, seq_test = arrays["seq"].astype(np.int64), arrays["seq_test"].astype(np.int64)
    files = [str(path)]
    metadata = {
        "channel_names": arrays["channel_names"],
        "channel_table": _channel_table(arrays["channel_names"]),
        "seq_trials": arrays["seq_trials"],
        "seq_motion": arrays["seq_motion"],
        "seq_trials_test": arrays["seq_trials_test"],
        "seq_motion_test": arrays["seq_motion_test"],
        "motion": arrays["seq_motion"][seq],
        "motion_test": arrays["seq_motion_test"][seq_test],
        "frame_rate_hz": 30.0,
        "zero_root_position": zero_root_position,
        "substitute": "CMU subject 35 walk/jog (Taylor et al. 2007; Titsias & Lawrence 2010) "
        "stands in for the paper's (jumps, walks, runs of one subject it does not name).",
        "citation": "CMU Graphics Lab Motion Capture Database, mocap.cs.cmu.edu.",
        "acknowledgement": "The data used in this project was obtained from mocap.cs.cmu.edu. "
        "The database was created with funding from NSF EIA-0196217.",
        "licence": "Free for research; may be included in products but may not be resold "
        "directly, even in converted form. Do not redistribute.",
    }
    if skeleton:
        asf = fetch("mocap/35.asf", data_home, download=download, verify=verify)
        metadata["asf_path"] = asf
        files.append(str(asf))
    metadata["files"] = files
    return DataSet(
        Y=Y,
        labels=seq,
        description="CMU MOCAP subject 35 walk/jog (substitute for the paper's data): 2644 train "
        "+ 169 test poses x 62 channels at 30 Hz; mocap.cs.cmu.edu, research use, no resale",
        metadata=metadata,
        Y_test=Y_test,
        labels_test=seq_test,
    )


def _parse_u_data(path: Path) -> dict[str, np.ndarray]:
    ratings = np.loadtxt(path, dtype=np.int64, delimiter="\t", ndmin=2)
    if ratings.shape[1] != 4:
        raise ValueError(f"{path} should have 4 tab-separated columns, found {ratings.shape[1]}.")
    R = np.zeros((ratings[:, 0].max(), ratings[:, 1].max()), dtype=np.uint8)
    R[ratings[:, 0] - 1, ratings[:, 1] - 1] = ratings[:, 2]
    return {"ratings": ratings, "R": R}


def load_movielens100k(
    data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> DataSet:
    """MovieLens 100K: 943 users x 1682 movies, ratings 1-5, NaN where unrated (93.7 % missing).

    ``Y[u - 1, i - 1]`` is user ``u``'s rating of item ``i``. ``metadata["ratings"]`` holds the
    100,000 (user_id, item_id, rating, timestamp) rows of ``u.data``; ``user_ids``/``item_ids``
    name the rows/columns. Reads ``movielens100k/ml100k.npz``, else ``movielens100k/u.data``
    (downloaded from vr308/Generalised-GPLVM if needed). GroupLens' terms: research use only, no
    redistribution, acknowledge the data set.
    """
    name, path = _first_available(
        ["movielens100k/ml100k.npz", "movielens100k/u.data"], data_home, download, verify
    )
    arrays = _npz(path) if name.endswith(".npz") else _parse_u_data(path)
    Y = arrays["R"].astype(np.float64)
    Y[Y == 0] = np.nan
    return DataSet(
        Y=Y,
        labels=None,
        description="MovieLens 100K: 943 users x 1682 movies, ratings 1-5, NaN = unrated "
        "(Harper & Konstan 2015); GroupLens research-only licence, no redistribution",
        metadata={
            "ratings": arrays["ratings"].astype(np.int64),
            "user_ids": np.arange(1, Y.shape[0] + 1),
            "item_ids": np.arange(1, Y.shape[1] + 1),
            "observed_fraction": float(np.mean(~np.isnan(Y))),
            "citation": "Harper, F. M. and Konstan, J. A. (2015), The MovieLens Datasets: History "
            "and Context, ACM TiiS 5(4).",
            "licence": "GroupLens: research use only, no redistribution without permission, no "
            "commercial use; acknowledge the data set (see README_ml-100k.txt).",
            "files": [str(path)],
        },
    )
