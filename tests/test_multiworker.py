"""Training on two worker processes (MultiWorkerMirroredStrategy over loopback, TF_CONFIG), each
holding only its rows: the workers agree, equal a one-process two-device run fed the same
batches, survive a killed worker, and refuse bad input before the first step.

Each worker is a real process running tests/cluster_job.py, with one thread each.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

pytestmark = pytest.mark.processes

JOB = str(Path(__file__).with_name("cluster_job.py"))
MODELS = ["point", "map", "bsvi", "bsvi_mc", "aeb"]
ITERATIONS = 120  # of each model's run in `agreed`, and of the run a killed worker resumes


def free_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def environment(config: dict | None = None) -> dict:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    env.pop("TF_CONFIG", None)
    if config is not None:
        env["TF_CONFIG"] = json.dumps(config)
    return env


def start(jobs: dict, folder: Path, workers: int = 2) -> list[subprocess.Popen]:
    """One process per worker of a loopback cluster (one process without a cluster for one
    worker) running ``jobs`` of cluster_job.py, a dict of each job's settings by its name, in
    order. A job writes folder/<job>-<worker>.npz (<job>-alone.npz without a cluster)."""
    settings = json.dumps(jobs)

    def command(i: int) -> list[str]:
        output = folder / ("{job}-alone.npz" if workers == 1 else f"{{job}}-{i}.npz")
        return [sys.executable, JOB, "+".join(jobs), settings, str(output)]

    return start_command(command, workers)


def start_command(command, workers: int, cwd: Path | None = None) -> list[subprocess.Popen]:
    """``command(i)`` for each worker i of a loopback cluster (no cluster for one worker), run in
    ``cwd``."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(workers)]}
    configs = [{"cluster": cluster, "task": {"type": "worker", "index": i}} for i in range(workers)]
    return [
        subprocess.Popen(
            command(i),
            env=environment(config if workers > 1 else None),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,
        )
        for i, config in enumerate(configs)
    ]


def finish(processes: list[subprocess.Popen], timeout: float = 600) -> list[str]:
    """Wait for every process; their output. Kills them all if one hangs."""
    deadline = time.monotonic() + timeout
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=max(deadline - time.monotonic(), 1))[0])
    finally:
        for process in processes:
            process.kill()
    return outputs


def succeeded(processes: list[subprocess.Popen], timeout: float = 600) -> list[str]:
    """Wait for ``processes`` (as ``finish``); each ended with exit status 0. Their output."""
    output = finish(processes, timeout)
    failed = [f"worker {i}:\n{output[i][-3000:]}" for i, p in enumerate(processes) if p.returncode]
    assert not failed, "\n".join(failed)  # each: a worker's error, or that another was lost
    return output


def outputs(job: str, folder: Path, workers: int = 2) -> list[dict]:
    """What ``job`` wrote on each worker (on the one process without a cluster)."""
    names = ["alone"] if workers == 1 else [str(i) for i in range(workers)]
    return [dict(np.load(folder / f"{job}-{name}.npz")) for name in names]


def run(job: str, settings: dict, folder: Path, workers: int = 2) -> list[dict]:
    succeeded(start({job: settings}, folder, workers))
    return outputs(job, folder, workers)


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cluster")


@pytest.fixture(scope="module")
def cells(folder) -> dict | None:
    """A small .h5ad (counts in a layer, a batch column whose category "c" only the second
    worker's cells have and "d" none), the same cells with other counts, and with a NaN count in
    the second half: their paths (None without anndata)."""
    try:
        import anndata
        import pandas as pd
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    cells, genes = 80, 12
    batch = np.where(np.arange(cells) < 40, np.arange(cells) % 2, 2)  # "c" in rows 40-79 only
    kind = rng.integers(0, 2, cells)
    rate = np.exp(1.0 + 1.2 * kind[:, None] * (np.arange(genes) < 5) + 0.5 * batch[:, None] / 2)
    counts = rng.poisson(rate).astype(np.float32)
    counts[:, 0] += 1
    import scipy.sparse as sp

    # "d": a category no cell holds, dropped on every worker alike
    labels = pd.Categorical(np.array(["a", "b", "c"])[batch], categories=["a", "b", "c", "d"])
    obs = pd.DataFrame({"batch": labels}, index=[f"cell{i}" for i in range(cells)])
    adata = anndata.AnnData(
        X=sp.csr_matrix(counts), obs=obs, var=pd.DataFrame(index=[f"g{j}" for j in range(genes)])
    )
    adata.layers["counts"] = sp.csr_matrix(counts)
    path = folder / "cells.h5ad"
    adata.write_h5ad(path)
    other, nan = adata.copy(), adata.copy()
    other.layers["counts"] = sp.csr_matrix(counts + (np.arange(cells) % 2)[:, None])
    gaps = counts.copy()
    gaps[50, 3] = np.nan
    nan.layers["counts"] = sp.csr_matrix(gaps)
    other.write_h5ad(folder / "other.h5ad")
    nan.write_h5ad(folder / "nan.h5ad")
    return {"path": str(path), "other": str(folder / "other.h5ad"), "nan": str(folder / "nan.h5ad")}


@pytest.fixture(scope="module")
def cluster(folder, cells) -> Path:
    """The jobs that need no processes of their own, run by one pair of workers (agree, then the
    single-cell fits, then the bad input) beside one process with two logical CPUs (the reference
    of agree, then the single-cell fits without a cluster): one start of TensorFlow and of the
    cluster for all. Their outputs are in the folder it returns."""
    initial = folder / "initial"
    initial.mkdir()
    pair: dict = {"agree": {"initial": str(initial), "iterations": ITERATIONS}}
    alone: dict = {"reference": {"start": str(initial), "iterations": ITERATIONS}}
    if cells is not None:
        pair["single_cell"] = {**cells, "output": str(folder / "single_cell" / "two")}
        alone["single_cell"] = {**cells, "output": str(folder / "single_cell" / "one")}
    pair["mistakes"] = {}  # last: a refusal on both workers ends no other job
    succeeded(start(pair, folder) + start(alone, folder, 1), timeout=1200)
    return folder


@pytest.fixture(scope="module")
def agreed(cluster):
    """Every model trained for ITERATIONS steps by two workers, and by one process on two devices
    from the workers' initial state (the same to round-off: checked below)."""
    return outputs("agree", cluster), outputs("reference", cluster, 1)[0]


def relative(a, b):
    return np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300)


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_the_workers_hold_the_same_parameters_after_every_run(agreed, name):
    (first, second), _ = agreed
    # The global parameters; the tables are each worker's own (next test).
    assert relative(first[f"{name}_initial"], second[f"{name}_initial"]) == 0
    assert relative(first[f"{name}_final"], second[f"{name}_final"]) <= 1e-12
    np.testing.assert_array_equal(first[f"{name}_elbo"], second[f"{name}_elbo"])
    assert first[f"{name}_traces"] == 1
    # Trained: the parameters moved and the ELBO rose.
    assert relative(first[f"{name}_final"], first[f"{name}_initial"]) > 1e-3
    elbo = first[f"{name}_elbo"]
    assert np.mean(elbo[-50:]) > np.mean(elbo[:50])


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_two_workers_equal_one_process_on_two_devices_fed_the_same_batches(agreed, name):
    (first, _), reference = agreed
    # Built from the shards (sums over workers) or from all of Y: the same model to round-off
    # (the reference then starts from the workers' state, so that only the steps are compared).
    assert relative(first[f"{name}_initial"], reference[f"{name}_initial"]) <= 1e-12
    assert relative(first[f"{name}_final"], reference[f"{name}_final"]) <= 1e-10
    np.testing.assert_allclose(first[f"{name}_elbo"], reference[f"{name}_elbo"], rtol=1e-10)
    # Each worker's latent rows equal the reference's rows of its cells.
    workers, _ = agreed
    rows = np.concatenate([worker[f"{name}_table"] for worker in workers])
    if name != "aeb":
        assert rows.shape[0] == 80
        assert relative(rows, reference[f"{name}_table"]) <= 1e-10


@pytest.mark.slow
@pytest.mark.parametrize("name", ["point", "map", "bsvi", "bsvi_mc"])
def test_each_worker_owns_the_latent_rows_of_its_cells_alone(agreed, name):
    workers, reference = agreed
    for worker in workers:
        owned = worker[f"{name}_owned"]
        assert worker[f"{name}_table"].shape[0] == 40  # its 40 rows, not all 80
        # The latent tables (mean, and variance for B-SVI) are the only per-worker variables.
        assert owned.sum() == (2 if name.startswith("bsvi") else 1)
    assert not reference[f"{name}_owned"].any()  # one process: nothing to own apart


@pytest.mark.slow
def test_a_model_built_from_all_rows_on_every_worker_keeps_every_row_equal(agreed):
    """All of Y on every worker (mirrored latent tables): every worker's copy takes every
    worker's batch rows, so the run equals the one from the shards, every row on every worker."""
    workers, _ = agreed
    first, second = workers
    np.testing.assert_array_equal(first["whole_table"], second["whole_table"])
    np.testing.assert_array_equal(first["whole_final"], second["whole_final"])
    assert first["whole_table"].shape[0] == 80
    sharded = np.concatenate([worker["bsvi_table"] for worker in workers])
    assert relative(first["whole_table"], sharded) <= 1e-9
    assert relative(first["whole_final"], first["bsvi_final"]) <= 1e-9
    np.testing.assert_allclose(first["whole_elbo"], first["bsvi_elbo"], rtol=1e-9)


@pytest.mark.slow
def test_each_worker_holds_only_its_own_rows(agreed):
    workers, _ = agreed
    rows = [worker["rows"] for worker in workers]
    np.testing.assert_array_equal(rows[0], np.arange(40))
    np.testing.assert_array_equal(rows[1], np.arange(40, 80))
    for worker in workers:
        assert tuple(worker["held"]) == (40, 5)
        assert tuple(worker["trainer_rows"]) == (40, 5)


@pytest.mark.slow
def test_a_killed_worker_is_survived_by_restarting_with_resume(agreed, folder):
    (uninterrupted, _), _ = agreed
    checkpoints = folder / "checkpoints"
    settings = {"folder": str(checkpoints), "every": 40, "iterations": ITERATIONS, "resume": False}
    processes = start({"resume": {**settings, "pause": 0.3}}, folder)
    deadline = time.monotonic() + 300
    # Every worker writes its own table rows beside the chief's checkpoints.
    ours = [checkpoints / "ckpt-40.index", checkpoints / "worker-1" / "ckpt-40.index"]
    while not all(path.exists() for path in ours):
        assert time.monotonic() < deadline and processes[0].poll() is None, "no checkpoint"
        time.sleep(0.05)
    os.kill(processes[1].pid, signal.SIGKILL)
    chief_output = finish(processes, timeout=120)[0]
    assert processes[0].returncode != 0
    assert "WorkerLostError" in chief_output and "resume=True" in chief_output
    saved = sorted(int(p.name[5:-6]) for p in checkpoints.glob("ckpt-*.index"))
    assert saved and max(saved) < ITERATIONS
    assert sorted(p.name for p in checkpoints.glob("worker-*")) == ["worker-1"]
    # As if it were killed after writing its newest checkpoint's files but before its index:
    # that worker alone rebuilds its index, and the others still take the same steps.
    (checkpoints / "worker-1" / "checkpoint").unlink(missing_ok=True)
    said = succeeded(start({"resume": {**settings, "resume": True}}, folder))
    assert "rebuilt it from the checkpoint files" in said[1]
    assert "rebuilt" not in said[0]
    resumed = outputs("resume", folder)
    workers, _ = agreed
    for worker, alone in zip(resumed, workers):
        np.testing.assert_allclose(
            worker["bsvi_mc_final"], uninterrupted["bsvi_mc_final"], rtol=1e-10, atol=1e-12
        )
        np.testing.assert_allclose(
            worker["bsvi_mc_table"], alone["bsvi_mc_table"], rtol=1e-10, atol=1e-12
        )
        np.testing.assert_allclose(
            worker["bsvi_mc_elbo"][max(saved) :],
            uninterrupted["bsvi_mc_elbo"][max(saved) :],
            rtol=1e-10,
        )
    # Nothing of the chief's folder was lost: every checkpoint in it is readable.
    for path in tf.train.get_checkpoint_state(str(checkpoints)).all_model_checkpoint_paths:
        assert tf.train.load_checkpoint(path).get_variable_to_shape_map()
    assert len(np.load(checkpoints / "elbo_history.npy")) == ITERATIONS


@pytest.mark.slow
def test_bad_input_is_the_same_clear_error_on_every_worker(cluster):
    messages = [json.loads(str(worker["messages"])) for worker in outputs("mistakes", cluster)]
    # No worker was left waiting: each raised, the same error but for the worker it names.
    for case in messages[0]:
        unnamed = [re.sub(r"^worker \d: ", "", worker[case]) for worker in messages]
        assert unnamed[0] == unnamed[1]
    said = messages[0]
    assert "batch_size=21 cannot be split evenly over the 2 replicas" in said["uneven batch"]
    assert "disagree on D (columns) (worker 0: 5, worker 1: 4)" in said["other D"]
    assert "held by more than one worker (worker 0, worker 1" in said["overlapping rows"]
    for i, worker in enumerate(messages):
        assert f"worker {i}: The model's variables were not created" in worker["outside the scope"]
    assert "no other worker is in sight" in said["a shard outside the scope"]
    assert "other iterations (iterations: worker 0 2, worker 1 3)" in said["other iterations"]
    assert "built other models (shared_covariance: worker 0 0, worker 1 1)" in said["other models"]
    assert "other settings (resume: worker 0 0, worker 1 1)" in said["resume on one worker"]
    resumed = said["a one-process run resumed by two"]
    assert "holds checkpoints of worker(s) [0] alone, none of a step that all 2" in resumed


@pytest.mark.slow
def test_the_command_line_trains_on_every_worker_and_only_the_chief_writes(tmp_path):
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((60, 2)) @ rng.standard_normal((2, 5)))
    np.save(tmp_path / "mine.npy", Y)
    options = ["--data", str(tmp_path / "mine.npy"), "--latent-dim", "2", "--num-inducing", "8"]
    options += ["--iterations", "20", "--batch-size", "20", "--no-progress", "--distributed"]
    options += ["--model", "bsvi"]  # each worker's latent rows, gathered for the chief's outputs
    processes = start_command(
        lambda i: [
            sys.executable,
            "-m",
            "gpflow_svi_gplvm",
            *options,
            "--output",
            str(tmp_path / f"out{i}"),
        ],
        2,
    )
    outputs = finish(processes)
    for process, output in zip(processes, outputs):
        assert process.returncode == 0, output[-3000:]
    assert "worker 1 of 2: trained on rows 30-59" in outputs[1]
    assert "wrote metrics.json" in outputs[0] and "wrote" not in outputs[1]
    metrics = json.loads((tmp_path / "out0" / "metrics.json").read_text())
    assert metrics["N"] == 60 and metrics["model"] == "BayesianSVIGPLVM"
    # Every row's q(x) reached the chief: a row left at zero would not reconstruct its data.
    assert (
        metrics["reconstruction_rmse"] < 0.5 and (tmp_path / "out0" / "latent_space.png").exists()
    )
    assert not (tmp_path / "out1").exists()


@pytest.mark.slow
@pytest.mark.parametrize(
    "other, said",
    [
        ("other.npy", "were given other inputs than the chief (what --data holds (a hash)"),
        ("nowhere.npy", "worker 1: Data file nowhere.npy does not exist"),
    ],
)
def test_workers_given_copies_of_the_data_that_differ_are_refused_on_every_worker(
    tmp_path, other, said
):
    """Each worker reads the whole --data file and trains on its block of rows: a copy with
    other numbers of the same shape (a NaN for one), or a file one worker lacks, is named on
    both workers before training."""
    Y = np.tanh(np.random.default_rng(0).standard_normal((40, 3)))
    np.save(tmp_path / "mine.npy", Y)
    Y[3, 2] = np.nan
    np.save(tmp_path / "other.npy", Y)
    options = ["--latent-dim", "2", "--num-inducing", "8", "--iterations", "5"]
    options += ["--batch-size", "20", "--no-progress", "--distributed", "--output", "out"]
    processes = start_command(
        lambda i: [
            sys.executable,
            "-m",
            "gpflow_svi_gplvm",
            "--data",
            ["mine.npy", other][i],
            *options,
        ],
        2,
        cwd=tmp_path,
    )
    outputs = finish(processes)
    for process, output in zip(processes, outputs):
        assert process.returncode == 2, output[-3000:]
        assert said in output
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.slow
def test_the_tutorials_script_trains_on_two_workers_and_resumes(tmp_path):
    tutorial = Path(__file__).resolve().parents[1] / "tutorials" / "05_scaling_out.md"
    marker = "<!-- the two-worker test (tests/test_multiworker.py) runs this block -->\n```python\n"
    text = tutorial.read_text()
    script = text[text.index(marker) + len(marker) :].split("```")[0]
    # The tutorial's run length is for real data; everything else runs as printed.
    script = script.replace("iterations=10_000", "iterations=ITERATIONS").replace(
        "import numpy as np", "import numpy as np\nimport sys\nITERATIONS = int(sys.argv[1])"
    )
    (tmp_path / "train.py").write_text(script)
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((1200, 2)) @ rng.standard_normal((2, 6)))
    Y[rng.random(Y.shape) < 0.1] = np.nan
    np.save(tmp_path / "cells.npy", Y)
    for iterations in (20, 30):  # the second run resumes the first's checkpoint at step 20
        processes = start_command(
            lambda i, n=iterations: [sys.executable, str(tmp_path / "train.py"), str(n)],
            2,
            tmp_path,
        )
        for process, output in zip(processes, finish(processes)):
            assert process.returncode == 0, output[-3000:]
        history = np.load(tmp_path / "checkpoints" / "elbo_history.npy")
        assert len(history) == iterations and np.all(np.isfinite(history))
    assert sorted(p.name for p in (tmp_path / "checkpoints").glob("ckpt-*.index")) == [
        "ckpt-20.index",
        "ckpt-30.index",
    ]


@pytest.fixture(scope="module")
def single_cells(cluster, cells) -> tuple[list[dict], dict, Path]:
    """The cells of ``cells`` fitted by two workers and by one process, and the folder of their
    outputs."""
    if cells is None:
        pytest.skip("needs anndata")
    workers, (alone,) = outputs("single_cell", cluster), outputs("single_cell", cluster, 1)
    return workers, alone, cluster / "single_cell"


@pytest.mark.slow
def test_single_cell_models_built_on_two_workers_equal_the_one_built_in_one_process(single_cells):
    workers, alone, _ = single_cells
    # Size factors, categories (the union, "c" seen by one worker, "d" by none: dropped), scales
    # and the initial PCA come from sums over the workers: the same model as from all cells.
    for worker in workers:
        assert json.loads(str(worker["categories"])) == ["batch=a", "batch=b", "batch=c"]
        assert relative(worker["initial"], alone["initial"]) <= 1e-9
    rows = np.concatenate([worker["initial_table"] for worker in workers])
    assert relative(rows, alone["initial_table"]) <= 1e-9


@pytest.mark.slow
def test_single_cell_embedding_of_every_cell_is_assembled_from_the_workers_rows(single_cells):
    workers, alone, output = single_cells
    for fitted, worker_count in ((workers, 2), ([alone], 1)):
        folder = output / ("two" if worker_count == 2 else "one") / "fitted"
        mean = np.load(folder / "X_gplvm.npy")
        assert mean.shape == (80, 2) and np.all(np.isfinite(np.load(folder / "X_gplvm_var.npy")))
        np.testing.assert_array_equal(mean, np.concatenate([w["fitted_mean"] for w in fitted]))
        assert not list(folder.glob(".*"))  # the workers' parts are gone
    for worker in workers:
        assert worker["fitted_table"].shape[0] == 40  # each holds its own cells' rows only
        assert np.all(np.isfinite(worker["elbo"]))
    for count in ("one", "two"):  # the encoder's model: each worker refines its own cells' q(x)
        folder = output / count / "amortised"
        mean, variance = np.load(folder / "X_gplvm.npy"), np.load(folder / "X_gplvm_var.npy")
        assert mean.shape == variance.shape == (80, 2) and np.isfinite(mean).all()
        assert (variance > 0).all() and not list(folder.glob(".*"))


@pytest.mark.slow
def test_single_cell_workers_given_other_genes_are_refused_by_name(single_cells):
    workers, alone, _ = single_cells
    for worker in workers:
        mistake = str(worker["mistake"])
        assert "other inputs than the chief (genes: worker 0 " in mistake, mistake
        assert "; " not in mistake.split("(genes: ")[1]  # genes alone differ
        own_output = str(worker["own_output"])
        assert "other inputs than the chief (output: worker 0 " in own_output, own_output
        other_file = str(worker["other_file"])
        assert "other inputs than the chief (what the data holds (a hash): worker 0 " in other_file
        # The second worker's own message, on both workers.
        nan_count = str(worker["nan_count"])
        assert "worker 1: layer 'counts' holds nan for cell 'cell50', gene 'g3'" in nan_count
    assert str(alone["mistake"]) == str(alone["own_output"]) == "no error"
    assert "holds nan for cell 'cell50'" in str(alone["nan_count"])


@pytest.mark.slow
def test_the_tutorials_single_cell_blocks_run_on_two_workers(single_cells, tmp_path):
    tutorial = Path(__file__).resolve().parents[1] / "tutorials" / "05_scaling_out.md"
    text = tutorial.read_text()
    blocks = []
    for marker in ("the two-worker single-cell test", "and then this block"):
        start = text.index("```python\n", text.index(marker)) + len("```python\n")
        blocks.append(text[start:].split("```")[0])
    # The tutorial's run length is for a real atlas; everything else runs as printed.
    (tmp_path / "fit.py").write_text(blocks[0].replace("iterations=20_000", "iterations=20"))
    (tmp_path / "read.py").write_text(blocks[1] + "\nprint(adata.obsm['X_gplvm'].shape)\n")
    _, _, output = single_cells
    (tmp_path / "atlas.h5ad").symlink_to(output.parent / "cells.h5ad")
    processes = start_command(lambda i: [sys.executable, "fit.py"], 2, tmp_path)
    for process, said in zip(processes, finish(processes)):
        assert process.returncode == 0, said[-3000:]
    assert len(np.load(tmp_path / "atlas_checkpoints" / "elbo_history.npy")) == 20
    assert list((tmp_path / "atlas_checkpoints" / "worker-1").glob("ckpt-20.index"))
    read = subprocess.run(
        [sys.executable, "read.py"], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert read.returncode == 0 and "(80, 10)" in read.stdout, read.stderr[-3000:]


@pytest.mark.slow
def test_the_command_line_fits_an_h5ad_in_one_process_and_on_two_workers(single_cells, tmp_path):
    _, _, output = single_cells
    cells = output.parent / "cells.h5ad"
    options = ["--data", str(cells), "--layer", "counts", "--batch-key", "batch"]
    options += ["--latent-dim", "2", "--num-inducing", "8", "--iterations", "10"]
    options += ["--batch-size", "16", "--no-progress", "--output"]
    for workers, extra in ((1, []), (2, ["--distributed"])):
        out = tmp_path / f"out{workers}"
        command = [sys.executable, "-m", "gpflow_svi_gplvm", *options, str(out), *extra]
        processes = start_command(lambda i, c=command: c, workers)
        said = finish(processes)
        for process, text in zip(processes, said):
            assert process.returncode == 0, text[-3000:]
        assert "80 cells x 12 genes, 10 steps" in said[0] and "wrote X_gplvm.npy" in said[0]
        assert np.load(out / "X_gplvm.npy").shape == (80, 2)
        metrics = json.loads((out / "metrics.json").read_text())
        assert metrics["cells"] == 80 and metrics["settings"]["likelihood"] == "negative_binomial"
    assert "worker 1 of 2: trained on its cells" in said[1]


@pytest.mark.slow
def test_a_cluster_that_would_wait_forever_is_refused_at_once(tmp_path):
    """As a user meets it, through the command line (tests/test_cluster.py checks every refusal
    of TF_CONFIG and both sides of the meeting in one process): a worker whose port another
    process holds, and a chief whose other worker never starts, each end with exit status 2
    and the reason, at the same time."""
    np.save(tmp_path / "mine.npy", np.ones((20, 3)))
    port, other = free_ports(2)
    workers = [f"127.0.0.1:{port}", f"127.0.0.1:{other}"]
    command = [sys.executable, "-m", "gpflow_svi_gplvm", "--data", "mine.npy", "--distributed"]
    cases = {
        f"address {workers[1]} cannot be": ({"type": "worker", "index": 1}, []),
        f"not reached within 3 s: worker 1 ({workers[1]})": (
            {"type": "worker", "index": 0},
            ["--startup-timeout", "3"],
        ),
    }
    with socket.socket() as held:
        held.bind(("127.0.0.1", other))  # another process holds the second worker's port
        processes = {
            message: subprocess.Popen(
                command + extra,
                cwd=tmp_path,
                env=environment({"cluster": {"worker": workers}, "task": task}),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for message, (task, extra) in cases.items()
        }
        outputs = finish(list(processes.values()), timeout=300)
    for (message, process), output in zip(processes.items(), outputs):
        assert process.returncode == 2 and message in output, output[-2000:]
