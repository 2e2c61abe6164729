"""Exports are never lost and never delete what is not theirs: the marker, the refusals, kills.

The kill tests run the replacement in child processes that load ``export_folder.py`` alone
(standard library only), so each kill costs milliseconds, not a TensorFlow import.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gpflow_svi_gplvm import PointGPLVM, export_saved_model
from gpflow_svi_gplvm.export import folder as export_folder
from gpflow_svi_gplvm.export.folder import MARKER, check_destination, replace_folder

FILES_PER_EXPORT = 200  # enough that deleting the old export takes a while to kill inside

CHILD = """
import importlib.util, sys
from pathlib import Path
spec = importlib.util.spec_from_file_location("export_folder", sys.argv[1])
module = sys.modules["export_folder"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
new = Path(sys.argv[2])
module._mark_staging(new, new.name)  # as make_staging marks the folder it writes into
print("go", flush=True)
module.replace_folder(new, Path(sys.argv[3]))
"""


def fake_export(path: Path, name: str) -> Path:
    """A folder shaped like an export, marked with ``name``."""
    (path / "variables").mkdir(parents=True)
    (path / "saved_model.pb").write_text(name)
    for i in range(FILES_PER_EXPORT):
        (path / "variables" / f"part{i}").write_text(name * 100)
    (path / MARKER).write_text(json.dumps({"written_by": "gpflow_svi_gplvm", "name": name}))
    return path


def held_export(path: Path) -> str:
    """The name of the complete export at ``path``; fails if there is none or it is partial."""
    name = json.loads((path / MARKER).read_text())["name"]
    assert (path / "saved_model.pb").read_text() == name
    parts = sorted((path / "variables").iterdir())
    assert len(parts) == FILES_PER_EXPORT and all(p.read_text() == name * 100 for p in parts)
    return name


@pytest.fixture(scope="module")
def model():
    return PointGPLVM(np.random.default_rng(0).standard_normal((20, 3)), 1, num_inducing=3)


@pytest.mark.parametrize("overwrite", [True, False])
@pytest.mark.parametrize("kind", ["file", "folder", "link", "unmarked export"])
def test_overwrite_never_deletes_what_is_not_an_export_of_this_package(
    model, tmp_path, kind, overwrite
):
    path = tmp_path / "target"
    if kind == "file":
        path.write_text("a user's file")
    elif kind == "folder":
        path.mkdir()
        (path / "notes.txt").write_text("a user's notes")
    elif kind == "link":
        path.symlink_to(fake_export(tmp_path / "elsewhere", "theirs"), target_is_directory=True)
    else:  # a SavedModel of someone else's, or of a release before the marker
        fake_export(path, "old")
        (path / MARKER).unlink()
    before = sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*.*"))
    # Without overwrite, too, the error says what is there: overwrite=True would not help.
    with pytest.raises(ValueError, match="never deletes anything else"):
        export_saved_model(model, path, overwrite=overwrite)
    after = sorted((p.relative_to(tmp_path), p.read_bytes()) for p in tmp_path.rglob("*.*"))
    assert after == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["target", "elsewhere"] if kind == "link" else ["target"]
    )


@pytest.mark.processes
@pytest.mark.skipif(sys.platform != "linux", reason="the atomic exchange is Linux' renameat2")
def test_a_replacement_killed_at_any_moment_leaves_the_old_or_the_new_export(tmp_path):
    rng = np.random.default_rng(0)
    module_file = export_folder.__file__

    def start(root: Path) -> subprocess.Popen:
        path, new = fake_export(root / "model", "old"), fake_export(root / ".model-x", "new")
        (root / "mine.txt").write_text("a user's file beside the export")
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, module_file, str(new), str(path)], stdout=subprocess.PIPE
        )
        assert child.stdout.readline() == b"go\n"
        return child

    whole = start(tmp_path / "whole")  # one uninterrupted replacement sets the time scale
    begin = time.perf_counter()
    assert whole.wait() == 0
    duration = time.perf_counter() - begin
    assert held_export(tmp_path / "whole" / "model") == "new"
    assert sorted(p.name for p in (tmp_path / "whole").iterdir()) == ["mine.txt", "model"]

    outcomes, interrupted = [], 0
    for kill in range(30):
        root = tmp_path / f"kill{kill}"
        child = start(root)
        time.sleep(0.0 if kill % 5 == 0 else rng.uniform(0, duration))
        child.kill()
        interrupted += child.wait() != 0  # killed before it finished
        outcomes.append(held_export(root / "model"))
        assert (root / "mine.txt").read_text() == "a user's file beside the export"
        # The next export into the folder finds nothing of the killed one's left beside it.
        staging = export_folder.make_staging(root / "model")
        assert sorted(p.name for p in root.iterdir()) == sorted(["mine.txt", "model", staging.name])
        assert export_folder.STAGING_MARKER not in export_folder._foreign_files(root / "model")
    print(f"{interrupted} of 30 kills inside a replacement; held after: {outcomes}")
    assert interrupted >= 10, f"only {interrupted} of 30 kills landed inside a replacement"
    assert "new" in outcomes  # kills before the exchange leave "old"; both are complete


def test_without_an_atomic_exchange_an_interruption_is_named_on_the_next_call(
    tmp_path, monkeypatch
):
    path, new = fake_export(tmp_path / "model", "old"), fake_export(tmp_path / ".model-x", "new")
    monkeypatch.setattr(export_folder, "_exchange", lambda a, b: False)
    renames = []
    original = Path.rename

    def rename_then_die(self, target):
        if renames:  # the second rename: the process dies before it
            raise KeyboardInterrupt
        renames.append(target)
        return original(self, target)

    monkeypatch.setattr(Path, "rename", rename_then_die)
    with pytest.raises(KeyboardInterrupt):
        replace_folder(new, path)
    monkeypatch.setattr(Path, "rename", original)
    assert not path.exists()
    retired = renames[0]
    assert held_export(retired) == "old"
    with pytest.warns(UserWarning, match=f"kept at {retired}"):
        check_destination(path, overwrite=True)
    replace_folder(new, path)
    assert held_export(path) == "new" and held_export(retired) == "old"  # nothing deleted
    assert os.path.basename(retired).startswith(".model-")


def test_a_finished_folder_a_kill_left_its_staging_marker_in_is_never_taken_for_a_leftover(
    tmp_path,
):
    """A kill between moving a folder into place and removing its staging marker leaves the
    marker inside a finished folder, under a name other than the one the marker records."""
    finished = fake_export(tmp_path / ".model-final", "mine")
    dead = {"pid": 2**22 + 7, "host": os.uname().nodename, "name": ".model-staging"}
    (finished / export_folder.STAGING_MARKER).write_text(json.dumps(dead))
    half_deleted = tmp_path / (".model-old" + export_folder.DELETING)
    (half_deleted / "variables").mkdir(parents=True)
    staging = export_folder.make_staging(tmp_path / "model")
    assert held_export(finished) == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([".model-final", staging.name])
