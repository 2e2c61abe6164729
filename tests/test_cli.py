"""The main job (``python -m gpflow_svi_gplvm``) end to end, with few iterations."""

import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from builders import smooth_data

import gpflow_svi_gplvm
from gpflow_svi_gplvm import AmortisedBayesianGPLVM, defaults
from gpflow_svi_gplvm.cli import arguments
from gpflow_svi_gplvm.cli.main import main
from gpflow_svi_gplvm.datasets import load_array_file
from gpflow_svi_gplvm.distributed.workers import Workers
from gpflow_svi_gplvm.export.folder import MARKER
from gpflow_svi_gplvm.likelihoods import likelihood_by_name
from gpflow_svi_gplvm.models import DEFAULT_NUM_INDUCING, MODELS
from gpflow_svi_gplvm.singlecell import face as singlecell_face
from gpflow_svi_gplvm.training.data_record import OtherDataError
from gpflow_svi_gplvm.training.refusals import ResumeRefusedError
from gpflow_svi_gplvm.training.trainer import Trainer

OUTPUTS = ["metrics.json", "latent_space.png", "ard.png", "elbo.png"]


def test_main_job_on_digits(tmp_path, capsys, exchanges):
    args = ["--iterations", "60", "--num-inducing", "10", "--latent-dim", "3", "--no-progress"]
    assert main([*args, "--output", str(tmp_path)]) == 0
    assert exchanges[-1] == "finish"
    for name in OUTPUTS:
        assert (tmp_path / name).stat().st_size > 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model"] == "BayesianSVIGPLVM"
    assert (metrics["N"], metrics["D"]) == (1797, 64)
    assert np.isfinite(metrics["elbo_final"])
    # Pixels lie in [0, 1] with sd ~0.3: a trained decoder must do far better than guessing 0.5.
    assert metrics["reconstruction_rmse"] < 0.3
    assert len(metrics["ard_relevance"]) == 3
    assert "latent dims kept by ARD" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["point", "aeb"])
def test_main_job_on_a_csv_with_missing_entries(tmp_path, model):
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((60, 2)) @ rng.standard_normal((2, 5)))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    path = tmp_path / "mine.csv"
    rows = [",".join("" if np.isnan(v) else f"{v:.6f}" for v in row) for row in Y]
    path.write_text("a,b,c,d,e\n" + "\n".join(rows) + "\n")
    args = ["--data", str(path), "--model", model, "--latent-dim", "2", "--num-inducing", "8"]
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        layout = ["--shared-covariance"] if model == "aeb" else []
        main([*args, *layout, "--iterations", "40", "--no-progress", "--output", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["N"], metrics["D"]) == (60, 5)
    assert metrics["shared_covariance"] is (model == "aeb")
    assert np.isfinite(metrics["reconstruction_rmse"])


def small_csv(path, cells=None):
    """A 30 x 4 CSV of smooth data; ``cells`` {(row, column): text} overrides entries."""
    Y = smooth_data(30, 4, seed=1)
    rows = [[f"{v:.6f}" for v in row] for row in Y]
    for (i, j), text in (cells or {}).items():
        rows[i][j] = text
    path.write_text("\n".join(",".join(row) for row in rows) + "\n")
    return path


def bad_input(tmp_path, case):
    """(command-line arguments, what the one-line error must say) for one user mistake."""
    csv = small_csv(tmp_path / "ok.csv")
    if case == "missing file":
        return ["--data", str(tmp_path / "nope.csv")], "does not exist"
    if case == "a directory":
        (tmp_path / "folder.csv").mkdir()
        return ["--data", str(tmp_path / "folder.csv")], "folder.csv is a folder: give the path"
    if case == "a directory without suffix":
        return ["--data", str(tmp_path)], f"{tmp_path} is a folder: give the path of a data file"
    if case == "an object array":
        np.save(tmp_path / "objects.npy", np.array([[1, "a"]] * 6, dtype=object))
        return ["--data", str(tmp_path / "objects.npy")], "holds Python objects (an array of dtype"
    if case == "a table named .npy":
        (tmp_path / "table.npy").write_text(csv.read_text())
        return ["--data", str(tmp_path / "table.npy")], "table.npy is not a NumPy .npy file"
    if case == "labels of another length":
        np.savez(tmp_path / "d.npz", Y=np.loadtxt(csv, delimiter=","), labels=np.arange(5))
        return ["--data", str(tmp_path / "d.npz")], "'labels' has shape (5,) but 'Y' has (30, 4)"
    if case == "quoted decimal commas":
        (tmp_path / "eu.csv").write_text('a,b\n"-0,098","1,5"\n"0,25","2,0"\n"1,5","3,5"\n')
        return ["--data", str(tmp_path / "eu.csv")], "column 'a' holds numbers written with a comma"
    if case == "unknown suffix":
        (tmp_path / "data.parquet").write_text("")
        return ["--data", str(tmp_path / "data.parquet")], "Unsupported data file type"
    if case == "3-D array":
        np.save(tmp_path / "cube.npy", np.zeros((4, 3, 2)))
        return ["--data", str(tmp_path / "cube.npy")], "must be 2-D"
    if case == "strings":
        np.save(tmp_path / "words.npy", np.array([["a", "b"], ["c", "d"]]))
        return ["--data", str(tmp_path / "words.npy")], "numeric"
    if case == "an infinite cell":
        path = small_csv(tmp_path / "inf.csv", {(3, 2): "inf"})
        return ["--data", str(path)], "infinite entries"
    if case == "an overflowing scale":
        path = small_csv(tmp_path / "huge.csv", {(3, 2): "1e200"})
        return ["--data", str(path)], "overflow float64 (its largest magnitude is 1e+200)"
    if case == "negative learning rate":
        return ["--data", str(csv), "--learning-rate", "-1"], "learning_rate must be a positive"
    if case == "output is a file":
        (tmp_path / "taken").write_text("a user's file")
        return ["--data", str(csv), "--output", str(tmp_path / "taken")], "is a file"
    if case == "single-cell options for a csv":
        options = ["--layer", "counts", "--batch-key", "batch"]
        return ["--data", str(csv), *options], "--layer, --batch-key choose what to read of an"
    raise AssertionError(case)


CASES = [
    "missing file",
    "a directory",
    "a directory without suffix",
    "an object array",
    "a table named .npy",
    "labels of another length",
    "quoted decimal commas",
    "unknown suffix",
    "3-D array",
    "strings",
    "an infinite cell",
    "an overflowing scale",
    "negative learning rate",
    "output is a file",
    "single-cell options for a csv",
]


@pytest.mark.parametrize("case", CASES)
def test_a_user_mistake_is_one_line_on_stderr_and_exit_status_2(tmp_path, capsys, case):
    args, message = bad_input(tmp_path, case)
    if "--output" not in args:
        args += ["--output", str(tmp_path / "out")]
    quick = ["--iterations", "5", "--num-inducing", "4", "--latent-dim", "2", "--no-progress"]
    assert main([*args, *quick]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert not (tmp_path / "out").exists()  # nothing trained, nothing written
    if case == "output is a file":
        assert (tmp_path / "taken").read_text() == "a user's file"


@pytest.mark.parametrize("value", ["nan", "-5", "0", "inf", "soon"])
def test_a_startup_timeout_that_is_not_a_positive_number_of_seconds_is_refused(capsys, value):
    with pytest.raises(SystemExit) as stopped:
        main(["--startup-timeout", value])
    assert stopped.value.code == 2
    expected = f"--startup-timeout: '{value}' is not a positive, finite number of seconds"
    assert expected in capsys.readouterr().err


def test_an_h5ad_genes_column_with_missing_values_is_refused_before_training(tmp_path, capsys):
    anndata = pytest.importorskip("anndata")
    pd = pytest.importorskip("pandas")
    marks = pd.array([True, None, True, False], dtype="boolean")
    var = pd.DataFrame({"hv": marks}, index=[f"g{j}" for j in range(4)])
    counts = np.random.default_rng(0).poisson(3.0, (12, 4)).astype(np.float32)
    anndata.AnnData(X=counts, var=var).write_h5ad(tmp_path / "cells.h5ad")
    args = ["--data", str(tmp_path / "cells.h5ad"), "--genes", "hv", "--iterations", "5"]
    assert main([*args, "--no-progress", "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "var column 'hv' has no value (NA) for 1 gene(s)" in err[0], err
    assert not (tmp_path / "out").exists()


def test_an_h5ad_run_saves_a_model_that_loads_and_an_export_of_it(tmp_path, capsys, monkeypatch):
    pytest.importorskip("anndata")
    from builders import count_cells

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    cells = count_cells()
    cells.write_h5ad(tmp_path / "cells.h5ad")
    args = ["--data", str(tmp_path / "cells.h5ad"), "--layer", "counts", "--batch-key", "batch"]
    args += ["--latent-dim", "2", "--num-inducing", "8", "--iterations", "10", "--no-progress"]
    out = tmp_path / "out"
    made, make = [], Workers.__init__

    def counted(self, *given, **options):
        made.append(self)
        make(self, *given, **options)

    monkeypatch.setattr(Workers, "__init__", counted)
    assert main([*args, "--save", "--export", "--output", str(out)]) == 0
    monkeypatch.undo()
    assert len(made) == 1  # made at the command's entry and handed down to every stage
    assert "model/" in capsys.readouterr().out
    face = SingleCellGPLVM.load(out / "model")
    assert face.gene_names == list(cells.var_names) and face.registration.layer == "counts"
    assert np.isfinite(face.transform(cells[:5].copy())).all()
    assert json.loads((out / "saved_model" / "1" / MARKER).read_text())["genes"] == face.gene_names
    # Another run into the same output keeps the saved model unless it continues the run.
    assert main([*args, "--save", "--output", str(out)]) == 2
    assert "pass --resume" in capsys.readouterr().err
    # A resume on an .h5ad lacking one of the model's genes names it, before any shape.
    kept = _folder_bytes(out / "checkpoints")
    cells[:, 1:].copy().write_h5ad(tmp_path / "fewer.h5ad")
    fewer = ["--data", str(tmp_path / "fewer.h5ad"), *args[2:], "--save", "--resume"]
    assert main([*fewer, "--output", str(out)]) == 2
    said = capsys.readouterr().err
    assert "this data lacks 1 of its 10 genes: gene0;" in said
    assert "give another --output" in said and "allow_new_data" not in said  # flags, no kwargs
    # A resume of another latent width names the flags that set the model's shapes.
    wider = [*args[:6], "--latent-dim", "3", *args[8:], "--save", "--resume"]
    assert main([*wider, "--output", str(out)]) == 2
    said = capsys.readouterr().err
    assert (
        "Resume with the model built as the one that wrote it (--latent-dim, --num-inducing" in said
    )
    assert not [word for word in ("latent_dim", "checkpoint_dir", "overwrite=") if word in said]
    assert _folder_bytes(out / "checkpoints") == kept


def test_the_model_s_size_defaults_to_the_data_s_kind(tmp_path):
    """M 25, Q 5 and fit's batch size for a table of rows; the single-cell face's M 100, Q 10
    and batch size for an .h5ad (unless --num-inducing, --latent-dim and --batch-size);
    metrics.json records M as the model took it, at most one per cell."""
    anndata = pytest.importorskip("anndata")
    counts = np.random.default_rng(0).poisson(3.0, (120, 4)).astype(np.float32)
    anndata.AnnData(X=counts).write_h5ad(tmp_path / "cells.h5ad")
    anndata.AnnData(X=counts[:40]).write_h5ad(tmp_path / "few.h5ad")
    table = ["--data", str(small_csv(tmp_path / "ok.csv"))]
    for name, data, expected, latent_dim, batch_size in (
        ("table", table, DEFAULT_NUM_INDUCING, 5, 100),
        ("cells", ["--data", str(tmp_path / "cells.h5ad")], 100, 10, singlecell_face.BATCH_SIZE),
        ("few", ["--data", str(tmp_path / "few.h5ad")], 40, 10, singlecell_face.BATCH_SIZE),
    ):
        out = tmp_path / name
        assert main([*data, "--iterations", "0", "--no-progress", "--output", str(out)]) == 0
        settings = json.loads((out / "metrics.json").read_text())["settings"]
        assert settings["num_inducing"] == expected
        assert settings["latent_dim"] == latent_dim and settings["batch_size"] == batch_size


def test_debug_shows_the_traceback(tmp_path):
    with pytest.raises(ValueError, match="Unsupported data file type"):
        main([*bad_input(tmp_path, "unknown suffix")[0], "--debug"])


def test_zero_iterations_writes_its_outputs_and_exits_0(tmp_path, capsys):
    args = ["--data", str(small_csv(tmp_path / "ok.csv")), "--iterations", "0", "--no-progress"]
    assert main([*args, "--latent-dim", "2", "--num-inducing", "4", "--output", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "metrics.json").read_text())["elbo_final"] is None
    assert "trained 0 steps" in capsys.readouterr().out


def test_an_earlier_run_s_outputs_are_replaced_only_with_overwrite(tmp_path, capsys):
    args = ["--data", str(small_csv(tmp_path / "ok.csv")), "--iterations", "0", "--no-progress"]
    args += ["--latent-dim", "2", "--num-inducing", "4", "--output", str(tmp_path / "out")]
    assert main(args) == 0
    written = (tmp_path / "out" / "metrics.json").read_text()
    capsys.readouterr()
    assert main([*args, "--seed", "3"]) == 2  # refused before training: nothing replaced
    said = capsys.readouterr().err
    assert "holds an earlier run's outputs (metrics.json, latent_space.png" in said
    assert "--overwrite to replace them" in said
    assert (tmp_path / "out" / "metrics.json").read_text() == written
    assert main([*args, "--seed", "3", "--overwrite"]) == 0
    assert json.loads((tmp_path / "out" / "metrics.json").read_text())["settings"]["seed"] == 3


def test_overwrite_leaves_no_output_of_the_earlier_run_beside_the_new_one(tmp_path, capsys):
    out = tmp_path / "out"
    args = ["--data", str(small_csv(tmp_path / "ok.csv")), "--iterations", "0", "--no-progress"]
    args += ["--latent-dim", "2", "--num-inducing", "4", "--output", str(out)]
    assert main([*args, "--save"]) == 0
    assert (out / "checkpoints").is_dir()
    (out / "notes.txt").write_text("the user's")
    capsys.readouterr()
    assert main([*args, "--seed", "3", "--overwrite"]) == 0  # without --save
    assert "removed an earlier run's checkpoints/ (--overwrite)" in capsys.readouterr().out
    assert not (out / "checkpoints").exists()
    assert (out / "notes.txt").read_text() == "the user's"  # never the user's files


def test_the_earlier_runs_folders_are_removed_only_when_the_package_wrote_them(tmp_path):
    from gpflow_svi_gplvm.cli.outputs import remove_earlier_outputs
    from gpflow_svi_gplvm.export.folder import write_marker
    from gpflow_svi_gplvm.singlecell.storage.saving import SAVED_MODEL

    def written_folder(path, kind=None):
        path.mkdir(parents=True)
        (path / "saved_model.pb").write_bytes(b"")
        write_marker(path, {}, *([kind] if kind else []))

    written_folder(tmp_path / "model", SAVED_MODEL)
    written_folder(tmp_path / "saved_model" / "1")  # a single-cell run's served versions
    for name in ("X_gplvm.npy", "X_gplvm_var.npy", "ard.png", "data.csv"):
        (tmp_path / name).write_bytes(b"")
    removed = remove_earlier_outputs(tmp_path, ["metrics.json", "elbo.png", "checkpoints/"])
    assert removed == ["ard.png", "X_gplvm.npy", "X_gplvm_var.npy", "model/", "saved_model/"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.csv"]
    written_folder(tmp_path / "saved_model")  # a table run's export, with a user's file in it
    (tmp_path / "saved_model" / "mine.txt").write_text("the user's")
    assert remove_earlier_outputs(tmp_path, []) == []
    assert (tmp_path / "saved_model" / "mine.txt").read_text() == "the user's"
    written_folder(tmp_path / "model")  # a table export's marker is not a saved model's
    assert remove_earlier_outputs(tmp_path, []) == []


def labelled_csv(path, counts=False):
    """A 40 x 4 CSV with a header, a text column "kind" and (unless ``counts``) some gaps."""
    rng = np.random.default_rng(2)
    latent = rng.standard_normal((40, 2))
    Y = np.tanh(latent @ rng.standard_normal((2, 4)))
    if counts:
        Y = rng.poisson(np.exp(1 + Y)).astype(float)
    else:
        Y[rng.random(Y.shape) < 0.1] = np.nan
    kinds = np.where(latent[:, 0] > 0, "right", "left")
    cells = [
        [kind, *("" if np.isnan(v) else f"{v:.5f}" for v in row)] for kind, row in zip(kinds, Y)
    ]
    path.write_text("kind,a,b,c,d\n" + "\n".join(",".join(row) for row in cells) + "\n")
    return path, kinds


def wide_csv(path):
    """A 40 x 4 CSV whose columns' scales differ by 10^5 (as in scikit-learn's wine data), with
    a text column "kind" and some gaps."""
    rng = np.random.default_rng(3)
    latent = rng.standard_normal((40, 2))
    Y = np.tanh(latent @ rng.standard_normal((2, 4))) * [0.01, 1.0, 30.0, 1000.0]
    Y += [0.5, -2.0, 100.0, 1200.0]
    Y[rng.random(Y.shape) < 0.1] = np.nan
    kinds = np.where(latent[:, 0] > 0, "right", "left")
    cells = [[kind, *("" if np.isnan(v) else repr(v) for v in row)] for kind, row in zip(kinds, Y)]
    path.write_text("kind,acid,ph,colour,proline\n" + "\n".join(map(",".join, cells)) + "\n")
    return path


SERVE_THE_CSV = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tensorflow as tf

    path, rows, outputs = sys.argv[1:4]
    out = tf.saved_model.load(path).signatures["reconstruct"](Y=tf.constant(np.load(rows)))
    np.savez(outputs, **{key: value.numpy() for key, value in out.items()})
    print(json.dumps([m for m in ("gpflow", "gpflow_svi_gplvm") if m in sys.modules]))
    """)


@pytest.mark.processes
def test_a_fresh_command_keeps_what_it_trains_in_the_data_s_units_and_prints_no_noise(tmp_path):
    """As a user runs it: a new process, a text column as labels, columns on scales 10^5 apart,
    checkpoints and an export. The CSV's own rows, sent to the export in a process with
    TensorFlow alone, come back as the saved model's reconstruction in the data's units (the
    model restored from the checkpoint, metrics.json's standardisation undone); warnings are one
    plain line and TensorFlow's log is quiet."""
    path, out = wide_csv(tmp_path / "wine.csv"), tmp_path / "out"
    command = [sys.executable, "-m", "gpflow_svi_gplvm", "--data", str(path), "--labels", "kind"]
    command += ["--model", "aeb", "--latent-dim", "2", "--num-inducing", "6", "--iterations", "3"]
    command += ["--save", "--export", "--no-progress", "--output", str(out)]
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    result = subprocess.run(command, capture_output=True, text=True, env=environment, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    noise = ["cpu_feature_guard", "port.cc", "absl::InitializeLog", "DT_DOUBLE", "UserWarning"]
    assert not [word for word in noise if word in result.stderr], result.stderr
    assert not re.search(r"^E\d{4} ", result.stderr, flags=re.M), result.stderr
    (notice,) = [line for line in result.stderr.splitlines() if "MaskedLikelihood" in line]
    assert notice.startswith("warning: ")
    assert "(labels: kind)" in result.stdout and "dropped" not in result.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["settings"]["labels"] == "kind" and metrics["D"] == 4  # not trained on
    assert metrics["settings"]["seed"] == 0 and metrics["settings"]["batch_size"] == 100
    assert metrics["versions"]["gpflow_svi_gplvm"] == gpflow_svi_gplvm.__version__
    assert (out / "checkpoints" / "ckpt-3.index").is_file()

    Y = load_array_file(path).Y
    moments = metrics["standardisation"]
    location, scale = np.array(moments["location"]), np.array(moments["scale"])
    assert metrics["standardised"] and moments["columns"] == ["acid", "ph", "colour", "proline"]
    np.testing.assert_allclose(location, np.nanmean(Y, axis=0), rtol=1e-12)
    np.testing.assert_allclose(scale, np.nanstd(Y, axis=0), rtol=1e-12)
    marker = json.loads((out / "saved_model" / MARKER).read_text())
    assert marker["units"].startswith("the data's own") and marker["scale"] == moments["scale"]
    errors = metrics["reconstruction_rmse_per_column"]  # each on its own column's scale
    assert errors["proline"] > 100 * errors["acid"]
    assert metrics["reconstruction_rmse_units"] == "standardised columns"

    np.save(tmp_path / "rows.npy", Y)
    command = [sys.executable, "-c", SERVE_THE_CSV, str(out / "saved_model")]
    command += [str(tmp_path / "rows.npy"), str(tmp_path / "served.npz")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []  # TensorFlow alone
    served = np.load(tmp_path / "served.npz")
    standardised = (Y - location) / scale
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        model = AmortisedBayesianGPLVM(standardised, 2, num_inducing=6, seed=0)
    saved = tf.train.latest_checkpoint(out / "checkpoints")
    tf.train.Checkpoint(model=model).restore(saved).expect_partial()
    mean, variance = model.reconstruct(standardised)
    np.testing.assert_allclose(served["mean"], location + scale * mean.numpy(), rtol=1e-10)
    np.testing.assert_allclose(served["variance"], scale**2 * variance.numpy(), rtol=1e-10)


def test_counts_with_a_poisson_likelihood_are_not_standardised(tmp_path):
    path, _ = labelled_csv(tmp_path / "counts.csv", counts=True)
    args = ["--data", str(path), "--labels", "kind", "--likelihood", "poisson", "--model", "map"]
    args += ["--latent-dim", "2", "--num-inducing", "5", "--iterations", "3", "--no-progress"]
    assert main([*args, "--output", str(tmp_path / "out")]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["settings"]["likelihood"] == "poisson" and not metrics["standardised"]


def test_labels_name_a_column_or_the_error_lists_them(tmp_path, capsys):
    path, _ = labelled_csv(tmp_path / "mine.csv")
    assert main(["--data", str(path), "--labels", "sort", "--output", str(tmp_path / "o")]) == 2
    assert "'a', 'b', 'c', 'd', 'kind'" in capsys.readouterr().err


def test_help_shows_the_defaults_and_explains_the_models(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert f"M (default: {DEFAULT_NUM_INDUCING}; 100 for an .h5ad)" in text
    assert "(default: bsvi)" in text
    assert "AEB-SVI: q(x_n) from an encoder network" in text and "poisson" in text


@pytest.mark.processes
def test_a_library_user_keeps_tensorflow_s_log_and_loads_no_command_line():
    """Only the command line quiets TensorFlow: every public name of the package loaded leaves
    the setting as importing TensorFlow leaves it (unset; "1" where jax is installed, which
    TensorFlow imports and which sets it when unset), loads no command-line module and reads no
    ``sys.argv`` (deleted first: reading it would raise)."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP")}
    level = "os.environ.get('TF_CPP_MIN_LOG_LEVEL')"
    code = (
        f"import os, sys, tensorflow; alone = {level}; del sys.argv, sys.orig_argv; "
        f"from gpflow_svi_gplvm import *; "
        f"cli = [m for m in sys.modules if m.startswith('gpflow_svi_gplvm.cli')]; "
        f"print(alone, {level}, len(cli))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=environment
    )
    alone, after, cli_modules = result.stdout.split()
    assert after == alone in ("None", "1"), result.stderr
    assert cli_modules == "0"


def test_the_command_line_sets_tensorflow_s_log_level_unless_the_user_did(monkeypatch):
    """What the command line's process runs before TensorFlow loads: level 3 (fatal lines only)
    when unset, the user's own level otherwise."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    arguments.quiet_tensorflow()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    arguments.quiet_tensorflow()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    assert not arguments.running_the_command_line()  # main() here leaves the setting alone


# What pip writes as the gpflow-svi-gplvm script (pyproject.toml's [project.scripts]).
CONSOLE_SCRIPT = textwrap.dedent("""
    import re
    import sys
    from gpflow_svi_gplvm.cli.main import main
    if __name__ == "__main__":
        sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
        sys.exit(main())
    """)


@pytest.mark.processes
@pytest.mark.parametrize("command", ["python -m", "script"])
def test_help_imports_no_tensorflow_and_shows_every_default(command, tmp_path):
    """``--help`` is read before TensorFlow is imported, so it prints at once, from ``python -m
    gpflow_svi_gplvm`` and from the ``gpflow-svi-gplvm`` script alike: ``-X importtime`` lists
    every module the command imports."""
    if command == "script":
        script = tmp_path / "gpflow-svi-gplvm"
        script.write_text(CONSOLE_SCRIPT)
        target = [str(script)]
    else:
        target = ["-m", "gpflow_svi_gplvm"]
    run = [sys.executable, "-X", "importtime", *target, "--help"]
    result = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr[-3000:]
    imported = [line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()]
    assert "gpflow_svi_gplvm.cli.arguments" in imported
    assert not [name for name in imported if name.split(".")[0] in ("tensorflow", "gpflow")]
    shown = ["(default: 0)", "(default: bsvi)", "(default 3000 for a table, 2000 for an .h5ad"]
    text = " ".join(result.stdout.split())  # as argparse wraps it
    for default in [*shown, "(default: fit's, 0.01;"]:
        assert default in text


def test_the_options_name_what_the_package_has():
    """One owner of every name and default (gpflow_svi_gplvm.defaults): the registries built from
    it, the parser and the Python faces read it."""
    assert defaults.MODEL_NAMES == tuple(sorted(MODELS))
    for name in defaults.LIKELIHOOD_NAMES:
        built = likelihood_by_name(name, 3)
        assert (built is None) == (name == "gaussian")
    with pytest.raises(ValueError, match="likelihood must be one of"):
        likelihood_by_name("gamma", 3)
    choices = {a.dest: a.choices for a in arguments.build_parser()._actions}
    assert tuple(choices["model"]) == defaults.MODEL_NAMES
    assert tuple(choices["likelihood"]) == defaults.LIKELIHOOD_NAMES
    assert DEFAULT_NUM_INDUCING == defaults.NUM_INDUCING
    assert singlecell_face.NUM_INDUCING == defaults.CELL_NUM_INDUCING
    face_defaults = inspect.signature(singlecell_face.SingleCellGPLVM).parameters
    assert face_defaults["latent_dim"].default == defaults.CELL_LATENT_DIM
    fit_defaults = inspect.signature(singlecell_face.SingleCellGPLVM.fit).parameters
    assert fit_defaults["batch_size"].default == defaults.CELL_BATCH_SIZE
    trainer_defaults = inspect.signature(Trainer.__init__).parameters
    assert trainer_defaults["batch_size"].default == defaults.BATCH_SIZE


def test_the_training_steps_left_unset_are_the_data_kinds_and_the_help_says_why():
    from gpflow_svi_gplvm.cli.run import _fill_defaults
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    parser = arguments.build_parser()
    for cells, steps in ((False, defaults.ITERATIONS), (True, defaults.CELL_ITERATIONS)):
        args = parser.parse_args([])
        _fill_defaults(args, cells)
        assert args.iterations == steps
    fit_default = inspect.signature(SingleCellGPLVM.fit).parameters["iterations"].default
    assert fit_default == defaults.CELL_ITERATIONS
    assert "3000 for a table, 2000 for an .h5ad" in " ".join(parser.format_help().split())


@pytest.fixture(scope="module")
def saved_cell_model(tmp_path_factory):
    """The folder of a tiny SingleCellGPLVM (Q = 2, batches "a" and "b") fitted and saved once
    for the module's ``embed`` and ``map-query`` runs."""
    pytest.importorskip("anndata")
    from builders import count_cells

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    face = SingleCellGPLVM(2, layer="counts", batch_key="batch", num_inducing=8)
    face.fit(count_cells(), iterations=10, progress=False)
    return face.save(tmp_path_factory.mktemp("saved") / "model")


@pytest.mark.processes
def test_embed_writes_a_saved_models_embedding_of_an_h5ad_read_in_blocks(
    tmp_path, capsys, saved_cell_model
):
    """As a user runs it: ``python -m gpflow_svi_gplvm embed`` in a new process on a saved
    model and an .h5ad read three cells at a time; the outputs are transform's in this process,
    the .h5ad is unchanged, and a second run, a folder that is not a saved model, a file that
    is not an .h5ad and a truncated one are refused with a message and exit status 2."""
    from builders import count_cells

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    model, data, out = saved_cell_model, tmp_path / "query.h5ad", tmp_path / "out"
    face = SingleCellGPLVM.load(model)
    query = count_cells(seed=1)[:10].copy()
    query.write_h5ad(data)
    written = data.read_bytes()
    command = [sys.executable, "-m", "gpflow_svi_gplvm", "embed", "--model", str(model)]
    command += ["--data", str(data), "--output", str(out), "--block", "3"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "embedded 10 cells" in result.stdout
    face.transform(query)  # all ten cells in one block here: equal but for round-off
    means, variances = np.load(out / "X_gplvm.npy"), np.load(out / "X_gplvm_var.npy")
    np.testing.assert_allclose(means, query.obsm["X_gplvm"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(variances, query.obsm["X_gplvm_var"], rtol=1e-5, atol=1e-6)
    novelty = np.load(out / "gplvm_novelty.npy")  # a share of reference cells: a step in it
    np.testing.assert_allclose(novelty, query.obs["gplvm_novelty"], atol=0.02)
    assert json.loads((out / "embed.json").read_text())["cells"] == 10
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["X_gplvm.npy", "X_gplvm_var.npy", "gplvm_novelty.npy", "embed.json"]
    )
    assert data.read_bytes() == written
    again = ["embed", "--model", str(model), "--data", str(data), "--output", str(out)]
    assert main(again) == 2
    assert "holds an earlier embedding (X_gplvm.npy" in capsys.readouterr().err
    assert main([*again, "--overwrite", "--no-progress"]) == 0
    again_means = np.load(out / "X_gplvm.npy")
    np.testing.assert_allclose(again_means, query.obsm["X_gplvm"], rtol=1e-5, atol=1e-6)
    assert main(["embed", "--model", str(tmp_path), "--data", str(data), "--output", str(out)]) == 2
    assert "gpflow_svi_gplvm_model.json" in capsys.readouterr().err
    assert main(["embed", "--model", str(model), "--data", str(model), "--output", str(out)]) == 2
    assert "is not an .h5ad file" in capsys.readouterr().err
    truncated = tmp_path / "truncated.h5ad"
    truncated.write_bytes(written[:5000])
    assert main([*again[:3], "--data", str(truncated), "--output", str(tmp_path / "t")]) == 2
    assert "cannot be read as an .h5ad" in capsys.readouterr().err
    assert not (tmp_path / "t").exists()


def test_embed_help_names_its_outputs_and_the_main_help_names_embed(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["embed", "--help"])
    assert stopped.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ("--model", "--data", "--output", "--overwrite", "X_<key>_var.npy", "novelty"):
        assert name in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "embed --help" in " ".join(capsys.readouterr().out.split())
    with pytest.raises(SystemExit) as stopped:
        main(["embed", "--data", "cells.h5ad"])  # no --model, no --output
    assert stopped.value.code == 2
    assert "--model" in capsys.readouterr().err


@pytest.mark.parametrize("verb", ["embed", "map-query"])
def test_an_h5ad_of_no_cells_is_refused_before_anything_is_written(
    tmp_path, capsys, saved_cell_model, verb
):
    """As ``transform`` refuses no cells, so do ``embed`` and ``map-query``: one line on stderr
    saying the file holds none, exit status 2, no --output made."""
    from builders import count_cells

    empty, out = tmp_path / "empty.h5ad", tmp_path / "out"
    count_cells()[:0].copy().write_h5ad(empty)
    command = [verb, "--model", str(saved_cell_model), "--data", str(empty), "--no-progress"]
    assert main([*command, "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--data {empty} holds no cells" in err[0], err
    assert not out.exists()


def _query_with_new_batches(path):
    """Twelve cells written to ``path``: six of the fitted batches "a" and "b", three each of the
    new batches "c" and "d" (interleaved); the AnnData."""
    import pandas as pd
    from builders import count_cells

    query = count_cells(seed=1)[:12].copy()
    query.obs["batch"] = pd.Categorical(list("abcdabcdabcd"))
    query.write_h5ad(path)
    return query


def _folder_bytes(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


MAPPED_TOLERANCE = dict(rtol=1e-5, atol=1e-6)
"""How far map-query's means (cells embedded by transform a block at a time) may lie from
map_query's on the whole query in one call: the Laplace steps' round-off, as embed's test."""


def test_map_query_maps_new_batches_as_map_query_and_saves_a_model_embed_reads(
    tmp_path, capsys, saved_cell_model
):
    """map-query (the new batches' offsets learnt from their cells read alone, then every cell
    embedded in blocks of five) writes map_query's means on the whole query, once with
    --fit-cells covering every new-batch cell and once drawing two of three (the same cells
    map_query draws); the model it saves embeds the query as it mapped it; the reference folder
    and the .h5ad are unchanged."""
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
    from gpflow_svi_gplvm.singlecell.mapping.offsets import BatchOffsets

    model, data = saved_cell_model, tmp_path / "query.h5ad"
    query = _query_with_new_batches(data)
    written, reference = data.read_bytes(), _folder_bytes(model)
    saved, out = tmp_path / "mapped_model", tmp_path / "out"
    saved.mkdir()  # an empty folder will do
    run = ["map-query", "--model", str(model), "--data", str(data), "--no-progress"]
    assert main([*run, "--output", str(out), "--block", "5", "--save-model", str(saved)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "learnt 2 new batches (c, d) from 6 of their cells" in printed
    assert f"embed --model {saved}" in printed
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["X_gplvm.npy", "X_gplvm_var.npy", "gplvm_novelty.npy", "map_query.json"]
    )
    record = json.loads((out / "map_query.json").read_text())
    assert record["new_batches"] == ["c", "d"] and record["fit_cells"] == defaults.FIT_CELLS
    assert record["cells"] == 12 and record["cells_learnt_from"] == 6
    face = SingleCellGPLVM.load(model)  # one model for both, its traces shared
    mapped = face.map_query(query.copy(), progress=False)
    means = np.load(out / "X_gplvm.npy")
    np.testing.assert_allclose(means, mapped, **MAPPED_TOLERANCE)
    assert data.read_bytes() == written and _folder_bytes(model) == reference
    assert SingleCellGPLVM.load(saved).batch_offsets.categories == ["c", "d"]
    embedded = tmp_path / "embedded"
    embed = ["embed", "--model", str(saved), "--data", str(data), "--output", str(embedded)]
    assert main([*embed, "--no-progress"]) == 0
    np.testing.assert_allclose(np.load(embedded / "X_gplvm.npy"), means, **MAPPED_TOLERANCE)
    few = tmp_path / "few"
    assert main([*run, "--output", str(few), "--fit-cells", "2"]) == 0
    assert "from 4 of their cells (up to 2 of each)" in capsys.readouterr().out
    face.batch_offsets = BatchOffsets()  # the new batches learnt afresh, from two cells each
    drawn = face.map_query(query.copy(), fit_cells=2, progress=False)
    np.testing.assert_allclose(np.load(few / "X_gplvm.npy"), drawn, **MAPPED_TOLERANCE)
    assert not np.allclose(drawn, mapped, atol=1e-4)  # two of three cells learn other offsets


def test_map_query_refuses_bad_input_by_name_and_embeds_a_query_of_known_batches(
    tmp_path, capsys, saved_cell_model
):
    """Each mistake is one line on stderr and exit status 2, leaving nothing written; a query
    without cells of a new batch is embedded as embed does, and the summary says so (its model
    saved over an earlier saved model with --overwrite)."""
    from builders import count_cells

    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    model, data, out = saved_cell_model, tmp_path / "query.h5ad", tmp_path / "out"
    _query_with_new_batches(data)
    run = ["map-query", "--model", str(model), "--data", str(data), "--output", str(out)]
    mistakes = {
        "is not an .h5ad file": ["--data", str(model / "variables.npz")],
        "gpflow_svi_gplvm_model.json": ["--model", str(tmp_path)],
        "--fit-cells must be a positive integer": ["--fit-cells", "0"],
        "the reference folder --model": ["--save-model", str(model)],
        "is, or holds, --output": ["--save-model", str(out)],
    }
    for message, options in mistakes.items():
        assert main([*run, *options]) == 2, message
        assert message in " ".join(capsys.readouterr().err.split())
    taken = tmp_path / "taken"
    (taken / "notes").mkdir(parents=True)
    assert main([*run, "--save-model", str(taken)]) == 2
    assert "holds something already: pass --overwrite" in capsys.readouterr().err
    assert main([*run, "--save-model", str(taken), "--overwrite"]) == 2
    assert "not a saved model written by gpflow_svi_gplvm" in capsys.readouterr().err
    assert not out.exists() and list(taken.iterdir()) == [taken / "notes"]
    known = tmp_path / "known.h5ad"
    count_cells(seed=2)[:4].copy().write_h5ad(known)
    knowns = [*run[:4], str(known), "--output", str(out), "--no-progress"]
    earlier_model = shutil.copytree(model, tmp_path / "earlier_model")
    assert main([*knowns, "--save-model", str(earlier_model), "--overwrite"]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert (
        "no cell of a batch the model does not know (obs 'batch'), so nothing was learnt" in printed
    )
    assert json.loads((out / "map_query.json").read_text())["new_batches"] == []
    assert SingleCellGPLVM.load(earlier_model).batch_offsets.categories == []
    assert main(knowns) == 2
    assert "holds an earlier embedding (X_gplvm.npy" in capsys.readouterr().err


def test_map_query_help_names_its_outputs_and_the_main_help_names_map_query(capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["map-query", "--help"])
    assert stopped.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    for name in ("--fit-cells", "--save-model", "X_<key>_var.npy", "novelty", "map_query.json"):
        assert name in text
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "map-query --help" in " ".join(capsys.readouterr().out.split())


def _said_on_stderr(error: Exception, tmp_path, capsys, monkeypatch) -> str:
    """What the command line prints (exit status 2) when its run raises ``error``."""
    from gpflow_svi_gplvm.cli import run as cli_run

    def fail(args):
        raise error

    monkeypatch.setattr(cli_run, "_run", fail)
    assert main(["--output", str(tmp_path / "out")]) == 2
    return capsys.readouterr().err


@pytest.mark.parametrize(
    "refusal, said",
    [
        (
            OtherDataError("out/checkpoints/ckpt-3", batch_sizes=(16, 10)),
            "written with --batch-size 16, this run has --batch-size 10. Resume with "
            "--batch-size 16, or give another --output",
        ),
        (
            OtherDataError("out/checkpoints/ckpt-3", ["values and gaps a there, b here"]),
            "(values and gaps a there, b here). Resume with the data it was trained on (the same "
            "rows in the same order), or give another --output (or start afresh there: "
            "--overwrite in place of --resume).",
        ),
        (
            ResumeRefusedError(
                "The checkpoint {path} was written by a model with {written}",
                ["resume with a model built with {shared_covariance:False}"],
                path="out/checkpoints/ckpt-3",
                written="one q(u) covariance for each output",
            ),
            "Resume with a model built with --no-shared-covariance, or give another --output",
        ),
    ],
    ids=["batch size", "data", "covariance layout"],
)
def test_a_refused_resume_says_what_to_do_in_flags_not_fit_s_arguments(
    tmp_path, capsys, monkeypatch, refusal, said
):
    """``fit``'s refusal to resume advises its arguments (``batch_size=``,
    ``allow_new_data=True``, ``shared_covariance=``, another ``checkpoint_dir``); the command
    line says the same in its flags and leaves out what no flag does (going on on other data)."""
    assert "checkpoint_dir" in str(refusal)
    assert [word for word in ("allow_new_data=True", "=16", "=False") if word in str(refusal)]
    shown = _said_on_stderr(refusal, tmp_path, capsys, monkeypatch)
    assert said in shown
    assert not [
        word
        for word in ("batch_size=", "allow_new_data", "shared_covariance=", "checkpoint_dir")
        if word in shown
    ]


@pytest.mark.parametrize("last", [None, "the last checkpoint is step 1000 in out/checkpoints"])
def test_a_lost_worker_is_told_to_resume_in_flags_not_fit_s_arguments(
    tmp_path, capsys, monkeypatch, last
):
    """A worker's peer lost during training: ``fit`` says ``resume=True``; the command line says
    the same in its own flags (``--resume``, ``--save``), with where the run can resume from."""
    from gpflow_svi_gplvm.distributed.workers import lost_worker_error

    lost = lost_worker_error(Workers(), tf.errors.UnavailableError(None, None, "gone"), 7, last)
    assert "resume=True" in str(lost) and "after step 7 (gone)" in str(lost)
    said = _said_on_stderr(lost, tmp_path, capsys, monkeypatch)
    assert "after step 7 (gone)" in said and "plus --resume" in said
    assert "resume=True" not in said and "checkpoint_dir" not in said
    assert (last or "--save keeps one every 1000 steps") in said
