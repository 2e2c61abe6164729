"""Nothing a user gives is lost or misread: one place to scan the package's fault cases.

Here: training killed at random moments resumes exactly; two processes racing for one checkpoint
folder; a checkpoint folder belongs to one run (a missing or damaged index, a second run, a
second writer, overwrite); exports never delete a user's files and leave no staging folders;
masked, complex and object data; decimal commas; seeds, callbacks, data outside a likelihood's
support, export dtypes and folders that cannot be written, each refused before any training.

Where the other fault cases live: exports killed at random moments of an overwrite and exports
of a user's own folders in ``test_export_folder.py``; damaged checkpoints, other data and another
batch size on resume in ``test_checkpoints.py``; the table of bad inputs at every boundary in
``test_validation.py``, the command line's in ``test_cli.py``; several workers in
``test_multiworker.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import gpflow
import numpy as np
import pytest
import tensorflow as tf
from builders import smooth_data

from gpflow_svi_gplvm import (
    BayesianSVIGPLVM,
    PointGPLVM,
    Trainer,
    export_saved_model,
    fit,
)
from gpflow_svi_gplvm.cli.main import main
from gpflow_svi_gplvm.datasets import load_array_file
from gpflow_svi_gplvm.export.folder import STAGING_MARKER
from gpflow_svi_gplvm.prediction.functions import infer_latents
from gpflow_svi_gplvm.sklearn import GPLVMEmbedding
from gpflow_svi_gplvm.training import run_folder as checkpoint_folder
from gpflow_svi_gplvm.training.run_folder import LOCK_FILE, RunFolder

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import checkpoint_race  # noqa: E402  (the race and its check, shared with the benchmark)

N, D, Q, M = 40, 4, 2, 6
ITERATIONS, KILLS = 1500, 2
SETTINGS = dict(batch_size=16, progress=False, steps_per_call=25, seed=3, checkpoint_every=50)

# A training process as a user would run it: resume from the folder's latest checkpoint, if
# any, and report each checkpoint written (the callback runs right after it).
CHILD = f"""
import sys
import numpy as np
from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
data = np.load(sys.argv[1])
model = BayesianSVIGPLVM(data, {Q}, num_inducing={M}, latent_expectation="monte-carlo")
report = lambda step: print(step, flush=True)
fit(model, data, iterations={ITERATIONS}, checkpoint_dir=sys.argv[2], resume=True,
    callback=report, callback_every={SETTINGS["checkpoint_every"]}, **{SETTINGS!r})
"""


@pytest.mark.processes
def test_training_killed_at_random_moments_resumes_to_the_uninterrupted_run(tmp_path):
    rng = np.random.default_rng(0)
    data = np.tanh(rng.standard_normal((N, Q)) @ rng.standard_normal((Q, D)))
    np.save(tmp_path / "data.npy", data)
    # Monte Carlo steps repeat bit for bit (closed-form ones to round-off: test_checkpoints.py).
    straight = BayesianSVIGPLVM(data, Q, num_inducing=M, latent_expectation="monte-carlo")
    uninterrupted = fit(straight, data, iterations=ITERATIONS, **SETTINGS)

    directory, reached = tmp_path / "run", []
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "data.npy"), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Let it write 2-8 checkpoints, then kill it at a random moment of the next interval
        # (measured on its own clock): inside a step, between steps or inside a save.
        steps, times = [], []
        for _ in range(rng.integers(2, 9)):
            line = child.stdout.readline()
            assert line, f"training ended before its checkpoints: {child.stderr.read()[-3000:]}"
            steps.append(int(line))
            times.append(time.perf_counter())
        time.sleep(rng.uniform(0, (times[-1] - times[0]) / (len(times) - 1)))
        child.kill()  # SIGKILL: no handler runs, a write in flight stays half done
        child.wait()
        reached.append([*steps, *map(int, child.stdout.read().split())][-1])
    print(f"the last checkpoint each killed process reported: {reached}")
    assert reached[-1] < ITERATIONS, "the last kill came after training had ended"

    resumed = BayesianSVIGPLVM(data, Q, num_inducing=M, latent_expectation="monte-carlo")
    history = fit(
        resumed, data, iterations=ITERATIONS, checkpoint_dir=directory, resume=True, **SETTINGS
    )
    for expected, actual in zip(straight.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(history.elbo, uninterrupted.elbo, rtol=1e-12)


# --------------------------------------------------------------------------------------------
# A checkpoint folder belongs to one run, and one process writes it


@pytest.fixture(scope="module")
def small():
    return smooth_data(30, 4, seed=1)


def point_run(data, folder, iterations=6, **options):
    """A few steps of a point model (no sampling: runs repeat exactly), checkpointed every 3."""
    settings = dict(batch_size=10, progress=False, checkpoint_every=3, checkpoint_dir=folder)
    return fit(PointGPLVM(data, 2, num_inducing=5), data, iterations, **{**settings, **options})


def contents(folder: Path) -> dict:
    return {p.name: p.read_bytes() for p in folder.iterdir()}


@pytest.mark.parametrize("damage", ["deleted", "garbled"])
def test_a_lost_index_is_rebuilt_from_the_checkpoint_files_never_restarted(small, tmp_path, damage):
    straight = point_run(small, tmp_path / "straight", iterations=9)
    point_run(small, tmp_path / "run")
    index = tmp_path / "run" / "checkpoint"
    index.unlink() if damage == "deleted" else index.write_text("model_checkpoint_path: {{{")
    with pytest.warns(UserWarning, match="index .* missing or damaged .* rebuilt it"):
        resumed = point_run(small, tmp_path / "run", iterations=9, resume=True)
    np.testing.assert_array_equal(resumed.elbo, straight.elbo)  # continued, not restarted
    steps = sorted(p.name for p in (tmp_path / "run").glob("ckpt-*.index"))
    assert steps == ["ckpt-3.index", "ckpt-6.index", "ckpt-9.index"]


def test_a_new_run_into_a_folder_of_another_run_is_refused_until_resumed_or_overwritten(
    small, tmp_path
):
    folder = tmp_path / "run"
    point_run(small, folder)
    (folder / "notes.txt").write_text("mine")
    before = contents(folder)
    other = small[::-1].copy()
    with pytest.raises(
        ValueError,
        match=r"holds the checkpoints up to step 6 .*resume=True.*"
        r"overwrite=True.*another checkpoint_dir",
    ):
        point_run(other, folder)
    assert contents(folder) == before  # nothing written, the lock released
    with pytest.warns(UserWarning, match="overwrite=True: deleted 7 files"):
        point_run(other, folder, iterations=3, overwrite=True)
    assert (folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in folder.glob("ckpt-*.index")) == ["ckpt-3.index"]
    with pytest.raises(ValueError, match="resume=True .* or overwrite=True, not both"):
        point_run(other, folder, resume=True, overwrite=True)


@pytest.mark.processes
def test_a_second_writer_is_refused_naming_the_first(small, tmp_path):
    folder = tmp_path / "run"
    holder = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    with pytest.raises(ValueError, match="held by another Trainer of this process"):
        point_run(small, folder)
    child = subprocess.run(
        [sys.executable, "-c", checkpoint_race.RACER, str(folder), "0", "1"],
        capture_output=True,
        text=True,
    )
    assert child.returncode == 3, child.stderr[-2000:]
    assert f"being written by another process (process {os.getpid()}" in child.stdout
    holder.close()
    assert not (folder / LOCK_FILE).exists()
    point_run(small, folder)  # free again: a new run


def test_a_trainer_nothing_refers_to_any_more_gives_its_folder_up(small, tmp_path):
    folder = tmp_path / "run"
    dropped = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    dropped.cycle = dropped  # only the garbage collector can finalise it
    dropped.save()
    del dropped
    # The new Trainer takes the lock (no refusal) and finds the dropped one's checkpoint.
    successor = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    assert successor.restore()
    successor.close()
    assert not (folder / LOCK_FILE).exists()


def test_a_lock_file_removed_by_hand_lets_no_second_writer_in_and_stops_the_holder(small, tmp_path):
    folder = tmp_path / "run"
    holder = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    holder.save()
    (folder / LOCK_FILE).unlink()
    before = contents(folder)
    with pytest.raises(ValueError, match="another process .*lock file .lock.* was removed"):
        RunFolder(folder).lock()  # the folder's own lock is still the holder's
    with pytest.raises(ValueError, match=r"lock file .* was removed, while this run held"):
        holder.save()
    assert contents(folder) == before  # nothing written after the lock file went
    holder.close()
    point_run(small, folder, resume=True)  # free again once the holder closed


def test_a_lock_file_replaced_by_another_process_stops_the_holder_before_it_writes(
    small, tmp_path, monkeypatch
):
    # As on a file system that locks no folders, where only the lock file tells writers apart.
    monkeypatch.setattr(checkpoint_folder, "_lock_folder", lambda folder: None)
    folder = tmp_path / "run"
    holder = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    (folder / LOCK_FILE).unlink()
    other = RunFolder(folder)
    other.lock()  # another writer in: nothing but the lock file could tell
    with pytest.raises(ValueError, match=f"now names process {os.getpid()} .*interleave"):
        holder.train(2, progress=False)
    assert not list(folder.glob("ckpt-*"))
    holder.close()
    assert (folder / LOCK_FILE).exists()  # the other writer's lock file is left to it
    other.unlock()


def test_a_closed_trainer_neither_trains_nor_saves(small, tmp_path):
    folder = tmp_path / "run"
    closed = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    closed.close()
    holder = Trainer(
        PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
    )
    for action in (lambda: closed.train(2, progress=False), closed.save):
        with pytest.raises(ValueError, match="Trainer was closed .*build a new Trainer"):
            action()
    assert not list(folder.glob("ckpt-*"))  # the folder is the holder's alone
    holder.close()
    without_folder = Trainer(PointGPLVM(small, 2, num_inducing=5), small, batch_size=10)
    without_folder.close()
    with pytest.raises(ValueError, match="Trainer was closed"):
        without_folder.train(1, progress=False)


@pytest.mark.processes
@pytest.mark.slow
def test_processes_racing_for_one_folder_leave_one_run_of_readable_checkpoints(tmp_path):
    # Two rounds here; `python benchmarks/checkpoint_race.py` runs twenty.
    said, killed = checkpoint_race.race(tmp_path / "run", rounds=2)  # checks it every round
    assert killed >= 2
    assert checkpoint_race.check_one_run(tmp_path / "run") > 0  # a race over something
    refused = [s for s in said if "being written by another process" in s]
    assert refused, said  # the second process of a round was turned away, not let in


# --------------------------------------------------------------------------------------------
# Exports: a user's files are never deleted, killed exports leave nothing behind


@pytest.fixture(scope="module")
def exported_model(small):
    model = PointGPLVM(small, 2, num_inducing=5)
    fit(model, small, 3, batch_size=10, progress=False)
    return model


def test_overwriting_an_export_that_holds_a_users_file_is_refused(exported_model, tmp_path):
    path = export_saved_model(exported_model, tmp_path / "export", encode_iterations=2)
    (path / "variables" / "my notes.txt").write_text("mine")
    with pytest.raises(
        ValueError,
        match=r"also holds files the package did not write "
        r"\(variables/my notes.txt\)",
    ):
        export_saved_model(exported_model, path, encode_iterations=2, overwrite=True)
    assert (path / "variables" / "my notes.txt").read_text() == "mine"
    (path / "variables" / "my notes.txt").unlink()
    export_saved_model(exported_model, path, encode_iterations=2, overwrite=True, dtype="float32")
    loaded = tf.saved_model.load(str(path))
    assert loaded.signatures["decode"].structured_input_signature[1]["X"].dtype == tf.float32


@pytest.mark.processes
def test_the_staging_folders_of_killed_exports_are_removed_by_the_next_export(
    exported_model, tmp_path
):
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    abandoned, running = tmp_path / ".export-abc123", tmp_path / ".other-def456"
    for folder, pid in [(abandoned, int(dead.stdout)), (running, os.getpid())]:
        folder.mkdir()
        (folder / "saved_model.pb").write_bytes(b"half")
        (folder / STAGING_MARKER).write_text(json.dumps({"pid": pid, "host": os.uname()[1]}))
    mine = tmp_path / ".my-hidden-folder"
    mine.mkdir()
    export_saved_model(exported_model, tmp_path / "export", encode_iterations=2)
    assert not abandoned.exists() and running.exists() and mine.exists()
    assert not (tmp_path / "export" / STAGING_MARKER).exists()


# --------------------------------------------------------------------------------------------
# Data that would be misread


def test_a_masked_array_is_read_with_its_masked_entries_missing(small):
    masked = np.ma.masked_array(small, mask=np.zeros_like(small, dtype=bool))
    masked.mask[0, 1] = True
    masked.data[0, 1] = 1e6  # the hidden value must never be trained on
    with pytest.warns(UserWarning, match="masked array: its 1 masked entries are read as missing"):
        model = PointGPLVM(masked, 2, num_inducing=5)
    assert type(model.likelihood).__name__ == "MaskedLikelihood"
    with pytest.warns(UserWarning, match="masked array"):
        fit(model, masked, 2, batch_size=10, progress=False)


@pytest.mark.parametrize(
    "data, what",
    [
        (np.ones((6, 3)) + 1j, "complex numbers"),
        (np.array([[1.0, None, 2.0]] * 6, dtype=object), "dtype object"),
        (np.array([["2026-01-01"] * 3] * 6, dtype="datetime64[D]"), "dtype datetime64"),
    ],
)
def test_non_real_data_is_refused(data, what):
    with pytest.raises(ValueError, match=f"must hold real numbers, but it has {what}"):
        PointGPLVM(data, 1, num_inducing=2)


def test_a_table_with_semicolons_and_decimal_commas_is_read_as_a_spreadsheet_writes_it(tmp_path):
    path = tmp_path / "eu.csv"
    path.write_text("a;b;c\n1,5;2,25;3\n4,0;;-6,5e1\n")
    data = load_array_file(path)
    np.testing.assert_array_equal(data.Y, [[1.5, 2.25, 3.0], [4.0, np.nan, -65.0]])
    assert "decimal commas read as points" in data.description
    spaced = tmp_path / "spaced.txt"
    spaced.write_text("1 2,5 3\n4 5 6\n")
    with pytest.raises(ValueError, match="could be decimal commas or thousands separators"):
        load_array_file(spaced)


def test_the_command_line_reads_a_spreadsheets_table_and_checks_its_output_first(tmp_path):
    rows = [
        ";".join(f"{v:.4f}".replace(".", ",") for v in row)
        for row in np.tanh(np.random.default_rng(0).standard_normal((40, 3)))
    ]
    (tmp_path / "eu.csv").write_text("\n".join(rows) + "\n")
    (tmp_path / "taken").write_text("a file")
    args = [
        "--data",
        str(tmp_path / "eu.csv"),
        "--latent-dim",
        "1",
        "--num-inducing",
        "4",
        "--iterations",
        "3",
        "--batch-size",
        "10",
        "--no-progress",
    ]
    started = time.perf_counter()
    assert main([*args, "--output", str(tmp_path / "taken" / "out")]) == 2  # before training
    assert time.perf_counter() - started < 60
    assert main([*args, "--output", str(tmp_path / "out")]) == 0
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["D"] == 3


# --------------------------------------------------------------------------------------------
# Arguments refused at the boundary, before any step


@pytest.mark.parametrize("seed", [2**70, 1.5, "abc", None, -1, True])
def test_a_bad_seed_is_the_same_clear_error_at_every_entry_point(small, seed):
    match = r"seed must be an integer in \[0, 2\*\*63\)"
    model = PointGPLVM(small, 2, num_inducing=5)
    for call in (
        lambda: fit(model, small, 1, seed=seed, progress=False),
        lambda: PointGPLVM(small, 2, num_inducing=5, seed=seed),
        lambda: infer_latents(model, small[:2], iterations=1, seed=seed),
        lambda: model.reconstruct(small[:2], rows=[0, 1], seed=seed),
        lambda: export_saved_model(model, "unused", seed=seed),
        lambda: GPLVMEmbedding(n_components=1, seed=seed, iterations=1).fit(small),
    ):
        with pytest.raises(ValueError, match=match):
            call()


def test_a_callback_that_cannot_be_called_is_refused_before_the_first_step(small):
    trainer = Trainer(PointGPLVM(small, 2, num_inducing=5), small, batch_size=10)
    with pytest.raises(ValueError, match="callback must be a function of the step number"):
        trainer.train(5, callback=5, progress=False)
    assert trainer.num_steps == 0


def test_data_outside_the_likelihoods_support_is_refused_by_fit(small):
    counts = np.random.default_rng(0).poisson(3.0, size=(20, 4)).astype(float)
    model = BayesianSVIGPLVM(counts, 2, num_inducing=5, likelihood=gpflow.likelihoods.Poisson())
    with pytest.raises(ValueError, match="Poisson likelihood needs non-negative integer counts"):
        fit(model, counts - 5.0, 3, batch_size=10, progress=False)


@pytest.mark.parametrize("dtype", ["int8", "float16", 3])
def test_an_export_dtype_other_than_float32_or_64_is_refused(exported_model, tmp_path, dtype):
    with pytest.raises(ValueError, match="dtype must be float64 or float32"):
        export_saved_model(exported_model, tmp_path / "export", dtype=dtype)


def test_a_checkpoint_folder_that_is_a_file_is_refused_before_training(small, tmp_path):
    (tmp_path / "taken").write_text("a file")
    for folder, match in [
        (tmp_path / "taken", "is a file"),
        (tmp_path / "taken" / "sub", "cannot be made: .*taken is a file, not a folder"),
    ]:
        with pytest.raises(ValueError, match=f"checkpoint_dir .* {match}"):
            Trainer(
                PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
            )
    for folder in ("", " ", 123):  # "" would be the working folder, unasked
        with pytest.raises(ValueError, match="checkpoint_dir must name a folder"):
            Trainer(
                PointGPLVM(small, 2, num_inducing=5), small, batch_size=10, checkpoint_dir=folder
            )
