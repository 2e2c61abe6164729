"""The paper's data sets (Lalchand et al., AISTATS 2022): oil flow, qPCR, NYC taxi, MNIST,
Brendan faces, CMU motion capture and MovieLens 100K.

The files are not shipped with the package (their licences forbid or discourage
redistribution): each loader finds them, checks them and, where it can, downloads them through
:mod:`.files` (see there for the data folder). Each returns a
:class:`~gpflow_svi_gplvm.datasets.dataset.DataSet` whose ``metadata`` holds the citation, the
licence and the files read.

Which loaders can download their data when the staged file is missing (each download is
checked against its sha256; a mismatch is deleted and is a ``ValueError`` naming the file):

============================  ==============================================================
loader                        download
============================  ==============================================================
``load_oilflow``              yes: the authors' ``oil_data.txt`` and ``oil_labels.txt``
                              (vr308/Generalised-GPLVM), Bishop's ``DataTrn`` as text
``load_qpcr``                 yes: the original ``guo_qpcr.csv`` (sods/ods), parsed here
``load_taxi``                 yes: the authors' ``taxi_count_data.csv`` (vr308/Generalised-GPLVM)
``load_mnist``                yes: Keras' ``mnist.npz`` (11 MB, the 60,000 + 10,000 images)
``load_brendan_faces``        yes: ``frey_rawface.mat`` (SheffieldML/GPmat), read with scipy
``load_movielens100k``        yes: ``u.data`` (vr308/Generalised-GPLVM), parsed here
``load_mocap``                no for the poses (converted from GPmat's ``cmu35WalkJog.mat``,
                              whose full checksum is not recorded); the skeleton ``35.asf``
                              downloads (``skeleton=True``)
============================  ==============================================================

For the others the error message says where the file comes from and where to put it.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np

from .dataset import DataSet
from .files import default_data_home, fetch, fetch_first_available, locate, read_npz
from .skeleton import channel_table

_OILFLOW_TEXT = ("oilflow/oil_data.txt", "oilflow/oil_labels.txt")


def _oilflow_arrays(
    data_home: str | Path | None, download: bool, verify: bool
) -> tuple[dict[str, np.ndarray], list[Path]]:
    """The oil-flow arrays and the files read: ``oilflow/oilflow.npz`` when it is on disk, else
    ``Y`` [1000, 12] and ``labels`` [1000] from the authors' two text files (downloaded if
    needed)."""
    staged = locate("oilflow/oilflow.npz", data_home, verify)
    if staged is not None:
        return read_npz(staged), [staged]
    try:
        paths = [fetch(name, data_home, download=download, verify=verify) for name in _OILFLOW_TEXT]
    except ValueError as error:
        raise ValueError(
            f"{error} Alternatively put oilflow/oilflow.npz in the data folder "
            f"{default_data_home(data_home)}."
        ) from error
    one_hot = np.loadtxt(paths[1], ndmin=2)
    return {"Y": np.loadtxt(paths[0], ndmin=2), "labels": np.argmax(one_hot, axis=1)}, paths


def load_oilflow(
    data_home: str | Path | None = None, *, download: bool = True, verify: bool = True
) -> DataSet:
    """Oilflow (Bishop & James 1993): 1000 x 12 gamma-densitometry measurements, 3 flow regimes.

    ``Y`` [1000, 12] is Bishop's training set (``DataTrn``, the paper's data set, used with an 80/20
    split), ``labels`` [1000] the flow regime 0/1/2 (the authors' code uses 1..3). Reads
    ``oilflow/oilflow.npz`` when it is in the data folder (converted from GPmat's ``3Class.mat``:
    its ``metadata`` also holds Bishop's separate test and validation sets, *not* used by the
    paper, as ``Y_test``, ``labels_test``, ``fractions_test``, ``Y_valid``, ..., and the phase
    ``fractions``); else the authors' ``oil_data.txt`` and ``oil_labels.txt``, downloaded from
    their repository when missing (``Y`` and ``labels`` only, equal element for element).
    """
    arrays, paths = _oilflow_arrays(data_home, download, verify)
    metadata: dict[str, Any] = {key: arrays[key] for key in arrays if key not in ("Y", "labels")}
    metadata.update(
        label_names=np.array(["class 0", "class 1", "class 2"]),
        label_note="homogeneous, annular and stratified flow; the source does not say which "
        "class is which",
        citation="Bishop, C. M. and James, G. D. (1993), Analysis of multiphase flows using "
        "dual-energy gamma densitometry and neural networks, Nucl. Instr. Meth. A327, 580-593.",
        licence="No licence stated; widely mirrored academic data. Do not vendor it.",
        files=[str(path) for path in paths],
    )
    return DataSet(
        Y=arrays["Y"].astype(np.float64),
        labels=arrays["labels"].astype(np.int64),
        description="Oilflow: 1000 x 12 gamma densitometry readings, 3 flow regimes "
        "(Bishop & James 1993); no licence stated, not redistributed",
        metadata=metadata,
    )


def _parse_guo_csv(path: Path) -> dict[str, np.ndarray]:
    """The arrays of ``qpcr/guo_qpcr.npz`` from the original CSV: ``Y`` [437, 48], the stage
    names ``labels`` [437], their codes ``label_codes`` [437], ``label_names`` [10] and ``genes``
    [48]."""
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

    ``Y`` [437, 48] is already normalised upstream (Ct to expression, normalised by Actb/Gapdh, each
    gene standardised). ``labels`` [437] are stage codes 0..9 in first-appearance order (the
    authors' coding); ``metadata["label_names"]`` the stage names (``"1"`` ... ``"64 EPI"``),
    ``metadata["stage"]`` the per-cell stage name, ``metadata["genes"]`` the column names. Reads
    ``qpcr/guo_qpcr.npz``, else ``qpcr/guo_qpcr.csv`` (downloaded from sods/ods if needed).
    """
    name, path = fetch_first_available(
        ["qpcr/guo_qpcr.npz", "qpcr/guo_qpcr.csv"], data_home, download, verify
    )
    arrays = read_npz(path) if name.endswith(".npz") else _parse_guo_csv(path)
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
    """The arrays of ``taxi/taxi_counts.npz`` from the authors' CSV: ``counts`` [744, 3],
    ``columns`` [3], ``day`` [744] and ``hour`` [744]."""
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

    ``Y`` [744, 3] holds the counts as float64 (for a Poisson likelihood); ``metadata`` has the
    integer ``counts``, ``columns``, ``day`` (1-31), ``hour`` (0-23) and ``time`` (hours since
    2020-01-01 00:00). Reads ``taxi/taxi_counts.npz``, else ``taxi/taxi_count_data.csv`` (downloaded
    from vr308/Generalised-GPLVM if needed).
    """
    name, path = fetch_first_available(
        ["taxi/taxi_counts.npz", "taxi/taxi_count_data.csv"], data_home, download, verify
    )
    arrays = read_npz(path) if name.endswith(".npz") else _parse_taxi_csv(path)
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


_MNIST_SOURCE = {
    "citation": "LeCun, Y., Bottou, L., Bengio, Y. and Haffner, P. (1998), Gradient-based "
    "learning applied to document recognition, Proc. IEEE 86(11); the MNIST database by "
    "Y. LeCun, C. Cortes and C. J. C. Burges.",
    "licence": "Commonly distributed as CC BY-SA 3.0.",
}
_FACES_SOURCE = {
    "citation": "Frey, B. J., Colmenarez, A. and Huang, T. S. (1998), Mixtures of local "
    "linear subspaces for face recognition, CVPR.",
    "licence": "No licence stated; do not vendor it.",
}


def _grey_levels(pixels: np.ndarray, scale: bool) -> np.ndarray:
    """Pixels [N, P] as float64: divided by 255 when ``scale``, else the grey levels as read."""
    return pixels.astype(np.float64) / (255.0 if scale else 1.0)


def _image_metadata(
    image_shape: tuple[int, int], scale: bool, path: Path, source: dict[str, str]
) -> dict[str, Any]:
    """The metadata of an image data set: the shape each row reshapes to, whether the grey
    levels were scaled, the ``citation`` and ``licence`` of ``source`` and the file read."""
    return {"image_shape": image_shape, "scale": scale, **source, "files": [str(path)]}


def _mnist_arrays(
    data_home: str | Path | None, download: bool, verify: bool
) -> tuple[dict[str, np.ndarray], Path]:
    """``x_train`` [n, 784], ``y_train`` [n], ``x_test`` [10000, 784] and ``y_test``: from
    ``mnist/mnist_subset.npz`` (n = 20,000) when it is on disk, else from Keras' ``mnist.npz``
    (n = 60,000; downloaded if needed); with the file read."""
    path = locate("mnist/mnist_subset.npz", data_home, verify)
    if path is None:
        path = fetch("mnist/mnist.npz", data_home, download=download, verify=verify)
    arrays = read_npz(path)
    for key in ("x_train", "x_test"):
        arrays[key] = arrays[key].reshape(len(arrays[key]), -1)
    return arrays, path


def load_mnist(
    data_home: str | Path | None = None,
    *,
    num_train: int | None = None,
    num_test: int | None = None,
    scale: bool = True,
    download: bool = True,
    verify: bool = True,
) -> DataSet:
    """MNIST: the first ``num_train`` training images (default all available), 784 pixels.

    ``scale=True`` divides by 255 (as the authors do, ``Y/255``), else grey levels 0-255.
    ``Y`` [num_train, 784]; ``labels`` [num_train] are the digits; ``Y_test`` [num_test, 784] /
    ``labels_test`` [num_test] the first ``num_test`` (default all
    10,000; 0 for none) official test images. Rows reshape to ``metadata["image_shape"]``
    (28, 28). Reads ``mnist/mnist_subset.npz`` (the first 20,000 training images) when it is in
    the data folder, else Keras' ``mnist.npz`` (all 60,000), downloaded when missing.
    """
    arrays, path = _mnist_arrays(data_home, download, verify)
    available = arrays["y_train"].shape[0]
    if num_train is None:
        num_train = available
    if not 0 < num_train <= available:
        raise ValueError(
            f"num_train must be between 1 and {available}: {path.name} holds the first "
            f"{available} MNIST training images."
        )
    x_train, y_train = arrays["x_train"][:num_train], arrays["y_train"][:num_train]
    x_test, y_test = arrays["x_test"], arrays["y_test"]
    if num_test is not None:
        if not 0 <= num_test <= x_test.shape[0]:
            raise ValueError(f"num_test must be between 0 and {x_test.shape[0]}, got {num_test}.")
        x_test, y_test = x_test[:num_test], y_test[:num_test]
    has_test = x_test.shape[0] > 0
    return DataSet(
        Y=_grey_levels(x_train, scale),
        labels=y_train.astype(np.int64),
        description=f"MNIST: first {num_train} training images of 28x28 pixels"
        + (", scaled to [0, 1]" if scale else ", grey levels 0-255")
        + " (LeCun, Cortes & Burges); commonly CC BY-SA 3.0",
        metadata=_image_metadata((28, 28), scale, path, _MNIST_SOURCE),
        Y_test=_grey_levels(x_test, scale) if has_test else None,
        labels_test=y_test.astype(np.int64) if has_test else None,
    )


def _read_frey_mat(path: Path) -> np.ndarray:
    """The faces [1965, 560] of ``frey_rawface.mat`` (stored there as ``ff`` [560, 1965])."""
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

    ``Y`` [1965, 560] holds grey levels 8-238 (``scale=True`` divides by 255); rows reshape to
    ``metadata["image_shape"]`` (28, 20) as upright faces. Reads
    ``brendan_faces/brendan_faces.npz``, else ``brendan_faces/frey_rawface.mat`` (downloaded from
    SheffieldML/GPmat if needed; read with scipy).
    """
    name, path = fetch_first_available(
        ["brendan_faces/brendan_faces.npz", "brendan_faces/frey_rawface.mat"],
        data_home,
        download,
        verify,
    )
    faces = read_npz(path)["Y"] if name.endswith(".npz") else _read_frey_mat(path)
    return DataSet(
        Y=_grey_levels(faces, scale),
        labels=None,
        description="Brendan faces: 1965 video frames of 28x20 pixels "
        + ("scaled to [0, 1]" if scale else "(grey levels)")
        + " (Frey, Colmenarez & Huang 1998; S. Roweis' data page); no licence stated",
        metadata=_image_metadata((28, 20), scale, path, _FACES_SOURCE),
    )


_CMU_MOCAP_SOURCE = {
    "substitute": "CMU subject 35 walk/jog (Taylor et al. 2007; Titsias & Lawrence 2010) "
    "stands in for the paper's (jumps, walks, runs of one subject it does not name).",
    "citation": "CMU Graphics Lab Motion Capture Database, mocap.cs.cmu.edu.",
    "acknowledgement": "The data used in this project was obtained from mocap.cs.cmu.edu. "
    "The database was created with funding from NSF EIA-0196217.",
    "licence": "Free for research; may be included in products but may not be resold "
    "directly, even in converted form. Do not redistribute.",
}


def _mocap_metadata(
    arrays: dict[str, np.ndarray],
    seq: np.ndarray,
    seq_test: np.ndarray,
    zero_root_position: bool,
) -> dict[str, Any]:
    """The metadata of :func:`load_mocap` but for the files read: ``arrays`` holds the staged
    ``.npz``, ``seq`` [N] / ``seq_test`` [N_test] the trial of each training / test row."""
    return {
        "channel_names": arrays["channel_names"],
        "channel_table": channel_table(arrays["channel_names"]),
        "seq_trials": arrays["seq_trials"],
        "seq_motion": arrays["seq_motion"],
        "seq_trials_test": arrays["seq_trials_test"],
        "seq_motion_test": arrays["seq_motion_test"],
        "motion": arrays["seq_motion"][seq],
        "motion_test": arrays["seq_motion_test"][seq_test],
        "frame_rate_hz": 30.0,
        "zero_root_position": zero_root_position,
        **_CMU_MOCAP_SOURCE,
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
    ``channel``, ``bone``, ``dof``: pass it to
    :func:`~gpflow_svi_gplvm.datasets.splits.blank_bones`), ``seq_trials``,
    ``seq_motion`` (walk/jog per trial), ``motion`` / ``motion_test`` (per row) and the
    acknowledgement CMU asks for. ``zero_root_position=True`` sets columns 0-2 (root position) to
    0, as the authors do. ``skeleton=True`` also fetches (downloading if needed) ``35.asf`` and puts
    its path in ``metadata["asf_path"]``. The poses are not downloadable (converted from GPmat's
    ``cmu35WalkJog.mat``).
    """
    path = fetch("mocap/cmu35_walk_jog.npz", data_home, download=download, verify=verify)
    arrays = read_npz(path)
    Y, Y_test = arrays["Y"].astype(np.float64), arrays["Y_test"].astype(np.float64)
    if zero_root_position:
        Y[:, :3] = 0.0
        Y_test[:, :3] = 0.0
    seq, seq_test = arrays["seq"].astype(np.int64), arrays["seq_test"].astype(np.int64)
    files = [str(path)]
    metadata = _mocap_metadata(arrays, seq, seq_test, zero_root_position)
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
    """The arrays of ``movielens100k/ml100k.npz`` from ``u.data``: the ``ratings`` [100000, 4]
    and the matrix ``R`` [users, items] of ratings, 0 where unrated."""
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

    ``Y`` [943, 1682]: ``Y[u - 1, i - 1]`` is user ``u``'s rating of item ``i``.
    ``metadata["ratings"]`` holds the 100,000 (user_id, item_id, rating, timestamp) rows of
    ``u.data``; ``user_ids``/``item_ids`` name the rows/columns. Reads ``movielens100k/ml100k.npz``,
    else ``movielens100k/u.data`` (downloaded from vr308/Generalised-GPLVM if needed). GroupLens'
    terms: research use only, no redistribution, acknowledge the data set.
    """
    name, path = fetch_first_available(
        ["movielens100k/ml100k.npz", "movielens100k/u.data"], data_home, download, verify
    )
    arrays = read_npz(path) if name.endswith(".npz") else _parse_u_data(path)
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
