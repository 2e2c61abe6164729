"""The probe's cases of files: ``SingleCellGPLVM.save`` and ``load`` (folders that are not a saved
model, edited manifests, missing or damaged files, saves into folders holding other files,
interrupted and killed saves) and ``export_saved_model`` (paths, versions, dtypes)
(benchmarks/probe.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
from probe_kit import Case, Lost, Wrong, check_close, check_kept, keeping, snapshot

from gpflow_svi_gplvm.export import folder as export_folder
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
from gpflow_svi_gplvm.singlecell.storage.saving import MANIFEST

FOLDER = ("folder", "path")
DAMAGED = (
    "damaged",
    "manifest",
    "not a saved model",
    "format",
    "incomplete",
    "save the model again",
)


def _loads_to_baseline(lab, folder: Path) -> None:
    """A :class:`Wrong` unless the model at ``folder`` embeds the clean query as the fitted one."""
    loaded = SingleCellGPLVM.load(folder)
    check_close(
        loaded.transform(lab.query.copy()), lab.baseline, f"the model loaded from {folder.name}"
    )


def save_cases(lab) -> list[Case]:
    """Saves into new, occupied and odd places; each success must load and embed as fitted."""
    cases = []
    face = lab.face

    def add(name, run, names):
        cases.append(Case("save", name, run, names))

    def save_new():
        folder = lab.folder("new") / "model"
        face.save(folder, adata=lab.cells)
        _loads_to_baseline(lab, folder)

    add("into a new folder", save_new, None)
    user_files = {
        "notes.txt": b"my notes",
        "data.h5ad": b"not really",
        ".hidden": b"x",
        "sub/file.txt": b"nested",
        "variables.npz": b"a user's own file of that name",
        MANIFEST: b'{"mine": true}',
    }
    for name, content in user_files.items():
        for overwrite in (False, True):
            add(
                f"into a folder holding {name}, overwrite={overwrite}",
                _save_over_user_file(lab, name, content, overwrite),
                ("overwrite", "not a saved model", "other", "holds", "files"),
            )
    add(
        "into an existing empty folder",
        _save_into_empty(lab),
        ("not a saved model", "folder", "empty"),
    )
    for overwrite in (False, True):
        add(
            f"over an earlier saved model, overwrite={overwrite}",
            _save_over_saved(lab, overwrite),
            ("overwrite",) if not overwrite else None,
        )
    add(
        "overwrite=True over a saved model holding a user's file",
        _save_over_saved(lab, True, extra="notes.txt"),
        ("notes.txt", "did not write", "other"),
    )
    for overwrite in (False, True):
        add(f"onto a file, overwrite={overwrite}", _save_onto_file(lab, overwrite), ("file",))
    add(
        "under a file",
        lambda: face.save(lab.a_file() / "model"),
        ("file", "folder", "not a directory"),
    )
    for value in (None, 123, "", b"bytes", "bad\0name"):
        add(f"folder={value!r}", lambda v=value: face.save(v), FOLDER)
    add(
        "adata without the embedding in obsm",
        lambda: face.save(lab.folder("noobsm") / "m", adata=lab.query.copy()),
        ("obsm",),
    )
    add(
        "adata a NumPy array",
        lambda: face.save(lab.folder("array") / "m", adata=np.zeros((3, 3))),
        ("adata", "anndata", "obsm"),
    )
    add("an unfitted model", lambda: SingleCellGPLVM(2).save(lab.folder("unfit") / "m"), ("fit",))
    add("a symbolic link to a saved model, overwrite=True", _save_over_link(lab), ("link",))
    for point in ("variables", "reference", "cells", "marker", "replace"):
        for earlier in (False, True):
            add(
                f"interrupted at {point}, earlier model there={earlier}",
                _interrupted_save(lab, point, earlier),
                None,
            )
    for delay in (0.05, 0.3, 1.0):
        add(
            f"save killed by SIGKILL after {delay} s, then saved again",
            _killed_save(lab, delay),
            None,
        )
    add("a dead process's staging folder beside the path", _staging_leftover(lab), None)
    return cases


KILL_FRACTIONS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
"""The points of a save (shares of its measured time) at which a saving process is killed."""


def kill_cases(lab) -> list[Case]:
    """A process SIGKILLed at each of :data:`KILL_FRACTIONS` of one save, to a new path and over
    an earlier saved model: the path holds the earlier model intact (or a whole new one, or
    nothing for a new path), which loads and embeds as fitted, and the next save leaves nothing
    of the killed one beside it."""
    return [
        Case(
            "save_kill",
            f"SIGKILL at {fraction:.0%} of a save, "
            + ("over an earlier model" if earlier else "to a new path"),
            _killed_at(lab, fraction, earlier),
            None,
        )
        for earlier in (False, True)
        for fraction in KILL_FRACTIONS
    ]


KILL_POINTS = {
    # name: (module, or module:class, attribute, which call, kill before or after it runs)
    "variables.npz written": ("numpy", "savez", 1, "after"),
    "reference.npz written": ("numpy", "savez", 2, "after"),
    "cells.h5ad written": ("anndata:AnnData", "write_h5ad", 1, "after"),
    "the marker written": ("gpflow_svi_gplvm.export.folder", "write_marker", 1, "after"),
    "the folder about to be put in place": (
        "gpflow_svi_gplvm.export.folder",
        "replace_folder",
        1,
        "before",
    ),
    "the folders exchanged, the old not yet deleted": (
        "gpflow_svi_gplvm.export.folder",
        "_exchange",
        1,
        "after",
    ),
    "the first folder deleted (the old, or the staging's remains)": (
        "shutil",
        "rmtree",
        1,
        "before",
    ),
}
"""Steps of a save at which a saving process SIGKILLs itself (:func:`point_kill_cases`)."""


POINT_SAVER = """
import importlib, os, signal, sys
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
face = SingleCellGPLVM.load(sys.argv[1])
where, name, nth, when = sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6]
module, _, kind = where.partition(":")
owner = importlib.import_module(module)
owner = getattr(owner, kind) if kind else owner
original, calls = getattr(owner, name), []
def killing(*args, **kwargs):
    calls.append(1)
    if len(calls) == nth and when == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(*args, **kwargs)
    if len(calls) == nth and when == "after":
        os.kill(os.getpid(), signal.SIGKILL)
    return result
setattr(owner, name, killing)
face.save(sys.argv[2], adata=face.reference, overwrite=True)
print("saved", flush=True)
"""


def point_kill_cases(lab) -> list[Case]:
    """A saving process SIGKILLed at each of :data:`KILL_POINTS` (a new path does not reach the
    exchange): checked as :func:`kill_cases`'s."""
    return [
        Case(
            "save_kill_points",
            f"SIGKILL at '{point}', " + ("over an earlier model" if earlier else "to a new path"),
            _killed_at_point(lab, point, earlier),
            None,
        )
        for earlier in (False, True)
        for point in KILL_POINTS
        if earlier or "exchanged" not in point
    ]


def _killed_at_point(lab, point: str, earlier: bool):
    def run():
        parent = lab.folder("killed-point")
        folder = parent / "model"
        if earlier:
            lab.face.save(folder)
        before = snapshot(folder)
        where, name, nth, when = KILL_POINTS[point]
        done = subprocess.run(
            [sys.executable, "-c", POINT_SAVER, str(lab.saved), str(folder), where, name]
            + [str(nth), when],
            capture_output=True,
            text=True,
        )
        if done.returncode != -signal.SIGKILL:
            raise Wrong(f"the save was not killed at {point}: {done.stderr[-300:]}")
        _check_after_kill(lab, parent, before, earlier, finished=False)

    return run


TIMED_SAVER = """
import sys, time
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
face = SingleCellGPLVM.load(sys.argv[1])
for _ in range(2):  # the second save, warm, is the one timed
    start = time.perf_counter()
    face.save(sys.argv[3], adata=face.reference, overwrite=True)
    seconds = time.perf_counter() - start
print(seconds, flush=True)
sys.stdin.readline()
print("saving", flush=True)
face.save(sys.argv[2], adata=face.reference, overwrite=True)
print("saved", flush=True)
sys.stdin.readline()
"""


def _killed_at(lab, fraction: float, earlier: bool):
    def run():
        parent = lab.folder("killed-at")
        folder = parent / "model"
        if earlier:
            lab.face.save(folder)  # without cells: the killed save's folder differs from it
        before = snapshot(folder)
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                TIMED_SAVER,
                str(lab.saved),
                str(folder),
                str(lab.root / f"timing-{os.getpid()}"),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            seconds = float(process.stdout.readline())
            process.stdin.write("go\n")
            process.stdin.flush()
            process.stdout.readline()  # "saving"
            time.sleep(fraction * seconds)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        finished = "saved" in process.stdout.read()
        print(f"note: save of {seconds:.2f} s killed at {fraction:.0%}; had finished: {finished}")
        _check_after_kill(lab, parent, before, earlier, finished)

    return run


def _check_after_kill(lab, parent: Path, before: dict, earlier: bool, finished: bool) -> None:
    """After a saving process was killed: ``parent / "model"`` holds the earlier model intact
    (``before``), or a whole new one, or (a first save) nothing; it loads and embeds as fitted;
    the next save leaves nothing of the killed one beside it."""
    folder = parent / "model"
    after = snapshot(folder)
    if earlier and after != before and set(after) == set(before):
        raise Lost("the earlier model's files were changed in place")
    if after:  # the earlier model, or a whole new one (the killed save's, with its cells)
        _loads_to_baseline(lab, folder)
    lab.face.save(folder, overwrite=True)
    left = [p.name for p in parent.iterdir() if p.name != "model"]
    if left:
        raise Lost(f"a killed save's leftovers stay beside the model after the next save: {left}")
    _loads_to_baseline(lab, folder)


def _save_over_user_file(lab, name: str, content: bytes, overwrite: bool):
    def run():
        folder = lab.folder("user") / "model"
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(content)
        keeping(folder, lambda: lab.face.save(folder, overwrite=overwrite))
        _loads_to_baseline(lab, folder)

    return run


def _save_into_empty(lab):
    def run():
        folder = lab.folder("empty") / "model"
        folder.mkdir()
        lab.face.save(folder)
        _loads_to_baseline(lab, folder)

    return run


def _save_over_saved(lab, overwrite: bool, extra: str | None = None):
    def run():
        folder = lab.folder("again") / "model"
        lab.face.save(folder)
        if extra:
            (folder / extra).write_text("mine")
        before = snapshot(folder)
        try:
            lab.face.save(folder, overwrite=overwrite)
        except ValueError:
            check_kept(before, folder)
            raise
        if extra:
            check_kept(before, folder, only=[extra])
        _loads_to_baseline(lab, folder)

    return run


def _save_onto_file(lab, overwrite: bool):
    def run():
        path = lab.a_file()
        keeping(path, lambda: lab.face.save(path, overwrite=overwrite))

    return run


def _save_over_link(lab):
    def run():
        target = lab.folder("linked") / "model"
        lab.face.save(target)
        link = target.parent / "link"
        link.symlink_to(target)
        before = snapshot(target)
        try:
            lab.face.save(link, overwrite=True)
        finally:
            check_kept(before, target)
        _loads_to_baseline(lab, link)

    return run


class _Interrupt(BaseException):
    """What a kill would be, raised inside a save."""


def _interrupted_save(lab, point: str, earlier: bool):
    """A save stopped at ``point`` (a step of writing the folder): the path holds the earlier
    model (or nothing) and the next save succeeds."""
    targets = {
        "variables": (np, "savez", 1),
        "reference": (np, "savez", 2),
        "cells": (None, "write_h5ad", 1),
        "marker": (export_folder, "write_marker", 1),
        "replace": (export_folder, "replace_folder", 1),
    }

    def run():
        folder = lab.folder("interrupt") / "model"
        if earlier:
            lab.face.save(folder)
        before = snapshot(folder)
        owner, name, nth = targets[point]
        if owner is None:
            import anndata

            owner = anndata.AnnData
        original, calls = getattr(owner, name), []

        def stop(*args, **kwargs):
            calls.append(1)
            if len(calls) == nth:
                raise _Interrupt
            return original(*args, **kwargs)

        setattr(owner, name, stop)
        try:
            lab.face.save(folder, adata=lab.cells, overwrite=True)
        except _Interrupt:
            pass
        finally:
            setattr(owner, name, original)
        if not calls:
            raise Wrong(f"the save never reached {point}")
        check_kept(before, folder)
        if before:
            _loads_to_baseline(lab, folder)
        elif folder.exists():
            raise Wrong(f"an interrupted first save left {sorted(os.listdir(folder))}")
        lab.face.save(folder, overwrite=True)
        _loads_to_baseline(lab, folder)

    return run


SAVER = """
import sys
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
face = SingleCellGPLVM.load(sys.argv[1])
print("ready", flush=True)
while True:
    face.save(sys.argv[2], overwrite=True)
"""


def _killed_save(lab, delay: float):
    """A process saving over and over, SIGKILLed: the path holds a whole saved model."""

    def run():
        folder = lab.folder("killed") / "model"
        lab.face.save(folder)
        process = subprocess.Popen(
            [sys.executable, "-c", SAVER, str(lab.saved), str(folder)],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert process.stdout is not None
            process.stdout.readline()
            time.sleep(delay)
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait()
        _loads_to_baseline(lab, folder)
        lab.face.save(folder, overwrite=True)
        left = [p.name for p in folder.parent.iterdir() if p.name != "model"]
        if left:
            raise Lost(
                f"a killed save's leftovers stay beside the model after the next save: {left}"
            )
        _loads_to_baseline(lab, folder)

    return run


def _staging_leftover(lab):
    def run():
        parent = lab.folder("staging")
        staging = parent / ".model-dead"
        staging.mkdir()
        (staging / ".gpflow_svi_gplvm_staging").write_text(
            json.dumps({"pid": 2**22 + 7, "host": os.uname().nodename})
        )
        lab.face.save(parent / "model")
        if staging.exists():
            raise Wrong("a dead process's staging folder was left")
        _loads_to_baseline(lab, parent / "model")

    return run


def load_cases(lab) -> list[Case]:
    """Folders that are not a saved model, damaged ones and edited manifests."""
    cases = []

    def add(name, edit, names=DAMAGED):
        cases.append(Case("load", name, _load_edited(lab, edit), names))

    add("a folder that does not exist", lambda f: shutil.rmtree(f), ("not a saved model", "exist"))
    add(
        "an empty folder",
        lambda f: [p.unlink() if p.is_file() else shutil.rmtree(p) for p in f.iterdir()],
    )
    add("a file", _make_file)
    add("the export folder", lambda f: _replace_with(f, lab.exported), DAMAGED + ("export",))
    add("the parent folder", lambda f: f.parent, DAMAGED)
    for value in (None, 5):
        cases.append(
            Case("load", f"folder={value!r}", lambda v=value: SingleCellGPLVM.load(v), FOLDER)
        )
    for keep in (0, 1, 40, 0.5, -1):
        add(f"manifest truncated to {keep} bytes", _truncate(MANIFEST, keep))
    add("manifest not JSON", _write(MANIFEST, "format: yaml?"))
    add("manifest a JSON list", _write(MANIFEST, "[1, 2]"))
    add("manifest empty object", _write(MANIFEST, "{}"))
    manifest = json.loads((lab.saved / MANIFEST).read_text())
    for key in manifest:
        add(f"manifest without '{key}'", _edit(lambda m, k=key: m.pop(k)), DAMAGED + (key,))
    for version in (0, 2, "1", None, 1.0):
        add(
            f"format_version {version!r}",
            _edit(lambda m, v=version: m.update(format_version=v)),
            ("version",) if version != 1.0 else DAMAGED,
        )
    add("format of another kind", _edit(lambda m: m.update(format="something else")), DAMAGED)
    edits = {
        "options.latent_dim 3": lambda m: m["options"].update(latent_dim=3),
        "options.likelihood poisson": lambda m: m["options"].update(likelihood="poisson"),
        "options.likelihood gaussian": lambda m: m["options"].update(likelihood="gaussian"),
        "options.model aeb": lambda m: m["options"].update(model="aeb"),
        "options.num_inducing 5": lambda m: m["options"].update(num_inducing=5),
        "options with an unknown option": lambda m: m["options"].update(colour="red"),
        "options.seed -1": lambda m: m["options"].update(seed=-1),
        "registration.gene_names reversed": lambda m: m["registration"]["gene_names"].reverse(),
        "registration.gene_names one fewer": lambda m: m["registration"]["gene_names"].pop(),
        "registration.gene_names a name twice": lambda m: m["registration"][
            "gene_names"
        ].__setitem__(1, m["registration"]["gene_names"][0]),
        "registration.categories reversed": lambda m: m["registration"]["categories"][
            "batch"
        ].reverse(),
        "registration.categories one fewer": lambda m: m["registration"]["categories"][
            "batch"
        ].pop(),
        "registration.batch_key another column": lambda m: m["registration"].update(
            batch_key="kind"
        ),
        "registration.scale of depth 0": lambda m: m["registration"]["scale"].update(depth=0.0),
        "registration.layer None": lambda m: m["registration"].update(layer=None),
        "registration.counts false": lambda m: m["registration"].update(counts=False),
        "model.genes 9": lambda m: m["model"].update(genes=9),
        "model.latent_dim 3": lambda m: m["model"].update(latent_dim=3),
        "model.num_inducing 5": lambda m: m["model"].update(num_inducing=5),
        "model.num_covariates 1": lambda m: m["model"].update(num_covariates=1),
        "model.reference_cells 3": lambda m: m["model"].update(reference_cells=3),
        "model.size_factors false": lambda m: m["model"].update(size_factors=False),
        "model.class another": lambda m: m["model"].update({"class": "PointGPLVM"}),
        "new_batches ['x'] without offsets": lambda m: m.update(new_batches=["x"]),
        "cells true without cells.h5ad": lambda m: (
            m.update(cells=True) or m["files"].remove("cells.h5ad")
        ),
        "files lists a missing file": lambda m: m["files"].append("more.npz"),
        "training record a number": lambda m: m.update(training=5),
    }
    for name, change in edits.items():
        add(f"manifest edited: {name}", _edit(change), DAMAGED + ("edited", "does not match"))
    for name in ("variables.npz", "reference.npz", "cells.h5ad"):
        add(f"{name} missing", lambda f, n=name: (f / n).unlink(), DAMAGED + (name,))
        add(f"{name} truncated to half", _truncate(name, 0.5), DAMAGED + (name,))
        add(f"{name} empty", _truncate(name, 0), DAMAGED + (name,))
        add(f"{name} replaced by text", _write(name, "not an archive"), DAMAGED + (name,))
    add("variables.npz without q_mu", _npz_edit("variables.npz", lambda d: d.pop(".q_mu")))
    add(
        "variables.npz with an extra array",
        _npz_edit("variables.npz", lambda d: d.update(extra=np.zeros(2))),
    )
    add(
        "variables.npz q_mu of another shape",
        _npz_edit("variables.npz", lambda d: d.update({".q_mu": d[".q_mu"][:-1]})),
    )
    add(
        "variables.npz q_mu NaN",
        _npz_edit("variables.npz", lambda d: d.update({".q_mu": d[".q_mu"] * np.nan})),
        DAMAGED + ("nan", "finite"),
    )
    add(
        "variables.npz q_mu scaled (other values)",
        _npz_edit("variables.npz", lambda d: d.update({".q_mu": d[".q_mu"] * 2})),
        DAMAGED + ("changed",),
    )
    add(
        "reference.npz rows of another count",
        _npz_edit("reference.npz", lambda d: d.update({k: v[:-1] for k, v in d.items()})),
    )
    add(
        "a saved model with a user's extra file",
        lambda f: (f / "notes.txt").write_text("mine"),
        None,
    )
    add("loaded twice from one folder", lambda f: SingleCellGPLVM.load(f), None)
    return cases


def _load_edited(lab, edit):
    """Copy the saved model, ``edit`` it (which may return another path to load), load it and
    embed the clean query: it must match the fitted model or be refused."""

    def run():
        folder = lab.folder("load") / "model"
        shutil.copytree(lab.saved, folder)
        other = edit(folder)
        target = other if isinstance(other, Path) else folder
        _loads_to_baseline(lab, target)

    return run


def _make_file(folder: Path) -> Path:
    shutil.rmtree(folder)
    folder.write_text("a file")
    return folder


def _replace_with(folder: Path, source: Path) -> Path:
    shutil.rmtree(folder)
    shutil.copytree(source, folder)
    return folder


def _truncate(name: str, keep):
    def edit(folder: Path) -> None:
        data = (folder / name).read_bytes()
        size = int(len(data) * keep) if isinstance(keep, float) else keep % (len(data) + 1)
        (folder / name).write_bytes(data[:size])

    return edit


def _write(name: str, text: str):
    return lambda folder: (folder / name).write_text(text)


def _edit(change):
    def edit(folder: Path) -> None:
        manifest = json.loads((folder / MANIFEST).read_text())
        change(manifest)
        (folder / MANIFEST).write_text(json.dumps(manifest))

    return edit


def _npz_edit(name: str, change):
    def edit(folder: Path) -> None:
        with np.load(folder / name) as stored:
            arrays = dict(stored)
        change(arrays)
        np.savez(folder / name, **arrays)

    return edit


def export_cases(lab) -> list[Case]:
    """Exports to new, occupied and odd places, versions and dtypes."""
    import tensorflow as tf

    face, cases = lab.face, []

    def add(name, run, names):
        cases.append(Case("export", name, run, names, timeout=900))

    def export(base_name: str, **options):
        def run():
            base = lab.folder(base_name) / "served"
            lab.serve(face.export_saved_model(base, **options), rtol=1e-3)

        return run

    add(
        "again at the same version, overwrite=False",
        lambda: face.export_saved_model(lab.exported.parent),
        ("overwrite",),
    )
    add("version=2 beside version 1", _export_beside(lab), None)
    for version in (0, -1, "1", 1.5, True, None):
        add(f"version={version!r}", export("version", version=version), ("version",))
    for iterations in (0, -2, 2.5):
        add(
            f"iterations={iterations!r}",
            export("iterations", iterations=iterations),
            ("iterations",),
        )
    for dtype in (tf.int32, tf.string, "bad", tf.bool, tf.complex64):
        add(f"dtype={dtype!r}", export("dtype", dtype=dtype), ("dtype",))
    for path in (None, "", 5):
        add(f"path={path!r}", lambda p=path: face.export_saved_model(p), FOLDER)
    add("the base path is a file", _export_onto_file(lab), ("file",))
    add(
        "under a file",
        lambda: face.export_saved_model(lab.a_file() / "served"),
        ("file", "not a directory"),
    )
    add(
        "the version folder holds a user's file, overwrite=True",
        _export_over_user_file(lab),
        ("did not write", "notes.txt", "not an export"),
    )
    add(
        "the version folder is a saved model, overwrite=True",
        _export_over_saved(lab),
        ("not an export", "saved model"),
    )
    add(
        "an unfitted model",
        lambda: SingleCellGPLVM(2).export_saved_model(lab.folder("unfit") / "s"),
        ("fit",),
    )
    add("the base folder holds a user's file", _export_beside_user_file(lab), None)
    return cases


def _export_beside(lab):
    def run():
        base = lab.folder("beside") / "served"
        shutil.copytree(lab.exported, base / "1")
        before = snapshot(base / "1")
        lab.face.export_saved_model(base, version=2)
        check_kept(before, base / "1")
        lab.serve(base / "2")

    return run


def _export_onto_file(lab):
    def run():
        path = lab.a_file()
        keeping(path, lambda: lab.face.export_saved_model(path))

    return run


def _export_over_user_file(lab):
    def run():
        base = lab.folder("userfile") / "served"
        shutil.copytree(lab.exported, base / "1")
        (base / "1" / "notes.txt").write_text("mine")
        keeping(base, lambda: lab.face.export_saved_model(base, overwrite=True))

    return run


def _export_over_saved(lab):
    def run():
        base = lab.folder("oversaved") / "served"
        shutil.copytree(lab.saved, base / "1")
        keeping(base, lambda: lab.face.export_saved_model(base, overwrite=True))

    return run


def _export_beside_user_file(lab):
    def run():
        base = lab.folder("basefile") / "served"
        base.mkdir()
        (base / "README").write_text("mine")
        before = snapshot(base)
        folder = lab.face.export_saved_model(base, dtype="float32")
        check_kept(before, base, only=["README"])
        lab.serve(folder, rtol=1e-3)

    return run
