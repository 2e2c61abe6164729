"""Downloads over HTTP from a server on loopback (127.0.0.1): checksums, interrupted transfers,
and the loaders that build a data set from what they download (oil flow, MNIST).

No test reaches the internet: each points the file registry at a small file that a server in
this process serves on 127.0.0.1.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from gpflow_svi_gplvm import datasets
from gpflow_svi_gplvm.datasets import REGISTRY, RemoteFile, fetch

STAGED = os.environ.get(datasets.DATA_ENV_VAR)  # read before the tests empty the data folder


class _Files(BaseHTTPRequestHandler):
    """Serves ``server.files`` (path -> bytes); a path in ``server.cut`` announces its full length
    but sends only half of it, then closes the connection (an interrupted download)."""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        content = self.server.files.get(self.path)  # type: ignore[attr-defined]
        if content is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(content)))
        self.end_headers()
        if self.path in self.server.cut:  # type: ignore[attr-defined]
            content = content[: len(content) // 2]
            self.close_connection = True
        self.wfile.write(content)

    def log_message(self, *args) -> None:  # the test output stays quiet
        pass


class LoopbackServer:
    """An HTTP server on 127.0.0.1 and a free port, serving files from memory."""

    def __init__(self) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Files)
        self.httpd.files = {}
        self.httpd.cut = set()
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, monkeypatch, name: str, content: bytes, sha256: str | None = None) -> str:
        """Serve ``content`` and point REGISTRY[name] at it (with its own sha256 by default)."""
        path = "/" + name
        self.httpd.files[path] = content
        url = f"http://127.0.0.1:{self.httpd.server_address[1]}{path}"
        digest = sha256 or hashlib.sha256(content).hexdigest()
        monkeypatch.setitem(REGISTRY, name, RemoteFile(digest, url=url, source="a test server"))
        return url

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    running = LoopbackServer()
    yield running
    running.close()


@pytest.fixture(autouse=True)
def _empty_folders(tmp_path, monkeypatch) -> Path:
    """An empty cache and an empty data folder for every test: each file must be downloaded."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv(datasets.DATA_ENV_VAR, str(tmp_path / "data"))
    return tmp_path / "cache" / "gpflow_svi_gplvm"


def _leftovers(folder: Path) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file()] if folder.exists() else []


def test_a_download_is_checked_and_kept(server, monkeypatch, _empty_folders):
    content = b"0,1,2\n" * 5000
    server.serve(monkeypatch, "taxi/taxi_count_data.csv", content)
    path = fetch("taxi/taxi_count_data.csv")
    assert path == _empty_folders / "taxi" / "taxi_count_data.csv"
    assert path.read_bytes() == content
    assert _leftovers(_empty_folders) == [path]  # no .part file beside it


def test_a_wrong_checksum_is_a_value_error_naming_the_file_and_leaves_nothing(
    server, monkeypatch, _empty_folders
):
    server.serve(monkeypatch, "qpcr/guo_qpcr.csv", b"not the real file", sha256="0" * 64)
    with pytest.raises(ValueError, match=r"qpcr/guo_qpcr\.csv.*sha256.*deleted"):
        fetch("qpcr/guo_qpcr.csv")
    assert _leftovers(_empty_folders) == []


def test_an_interrupted_download_is_a_value_error_and_leaves_nothing(
    server, monkeypatch, _empty_folders
):
    content = os.urandom(200_000)
    server.serve(monkeypatch, "brendan_faces/frey_rawface.mat", content)
    server.httpd.cut.add("/brendan_faces/frey_rawface.mat")
    with pytest.raises(ValueError, match=r"Could not download brendan_faces/frey_rawface\.mat"):
        fetch("brendan_faces/frey_rawface.mat")
    assert _leftovers(_empty_folders) == []


def test_a_missing_remote_file_says_where_to_put_it(server, monkeypatch, _empty_folders):
    url = server.serve(monkeypatch, "movielens100k/u.data", b"")
    server.httpd.files.pop("/movielens100k/u.data")  # the server answers 404
    with pytest.raises(ValueError, match="404") as info:
        fetch("movielens100k/u.data")
    assert url in str(info.value)
    assert str(_empty_folders / "movielens100k" / "u.data") in str(info.value)
    # Offline, the data folder is the other place to put it: the message names its variable.
    assert f"${datasets.DATA_ENV_VAR}" in str(info.value)


def _matlab_ascii(values: np.ndarray) -> bytes:
    """``values`` as MATLAB's ``save -ascii`` writes them, the format of the authors' files."""
    text = io.BytesIO()
    np.savetxt(text, values, fmt="%16.7e", delimiter="")
    return text.getvalue()


def test_oilflow_is_built_from_the_authors_text_files(server, monkeypatch):
    rng = np.random.default_rng(0)
    Y = np.round(rng.uniform(0, 1, size=(30, 12)), 4)
    labels = rng.integers(0, 3, size=30)
    server.serve(monkeypatch, "oilflow/oil_data.txt", _matlab_ascii(Y))
    server.serve(monkeypatch, "oilflow/oil_labels.txt", _matlab_ascii(np.eye(3)[labels]))
    data = datasets.load_oilflow()
    np.testing.assert_array_equal(data.Y, Y)
    np.testing.assert_array_equal(data.labels, labels)
    assert [Path(f).name for f in data.metadata["files"]] == ["oil_data.txt", "oil_labels.txt"]


def test_the_oilflow_checksums_are_those_of_the_staged_data_written_as_the_authors_did():
    """The registry's checksums of the authors' text files are reproduced, byte for byte, by
    writing the staged oilflow.npz (converted from GPmat's 3Class.mat) in MATLAB's format."""
    if not STAGED or not (Path(STAGED) / "oilflow" / "oilflow.npz").is_file():
        pytest.skip(f"needs the staged oilflow/oilflow.npz in ${datasets.DATA_ENV_VAR}")
    with np.load(Path(STAGED) / "oilflow" / "oilflow.npz") as arrays:
        Y, labels = arrays["Y"], arrays["labels"]
    for name, values in (("oil_data.txt", Y), ("oil_labels.txt", np.eye(3)[labels])):
        digest = hashlib.sha256(_matlab_ascii(values)).hexdigest()
        assert digest == REGISTRY[f"oilflow/{name}"].sha256, name


def test_mnist_is_built_from_the_keras_file(server, monkeypatch):
    rng = np.random.default_rng(1)
    arrays = {
        "x_train": rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, size=7, dtype=np.uint8),
        "x_test": rng.integers(0, 256, size=(3, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, size=3, dtype=np.uint8),
    }
    file = io.BytesIO()
    np.savez(file, **arrays)
    server.serve(monkeypatch, "mnist/mnist.npz", file.getvalue())
    data = datasets.load_mnist(num_train=5)
    np.testing.assert_array_equal(data.Y, arrays["x_train"][:5].reshape(5, 784) / 255.0)
    np.testing.assert_array_equal(data.labels, arrays["y_train"][:5])
    assert data.Y_test.shape == (3, 784)
    with pytest.raises(ValueError, match="between 1 and 7"):
        datasets.load_mnist(num_train=8)
