"""One worker of a test cluster: ``python cluster_job.py JOBS SETTINGS_JSON OUTPUT``.

JOBS is a job's name, or several joined by "+" that run in that order in this one process (one
start of TensorFlow and of the cluster for all of them); SETTINGS_JSON holds each job's settings
by its name. The tests start one process per worker with ``TF_CONFIG`` set
(tests/test_multiworker.py), or one process with two logical CPUs for the reference run, or one
without a cluster. Each job writes what the tests compare to ``OUTPUT`` with ``{job}`` replaced
by its name (a .npz), with its errors as text; a job that fails ends the process.
"""

import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import tensorflow as tf

JOB_NAMES, ALL_SETTINGS, OUTPUTS = sys.argv[1].split("+"), json.loads(sys.argv[2]), sys.argv[3]
SETTINGS: dict = {}  # the running job's settings, and where it writes
OUTPUT = ""
tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
if "reference" in JOB_NAMES:  # one process, two logical CPUs: set before TensorFlow starts
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    STRATEGY = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
elif "TF_CONFIG" in os.environ:  # before any other TensorFlow op, once every worker is reached
    from gpflow_svi_gplvm import multi_worker_strategy

    STRATEGY = multi_worker_strategy(timeout=120)
else:  # one worker of no cluster: the strategy of several, alone
    STRATEGY = tf.distribute.MultiWorkerMirroredStrategy()

import gpflow_svi_gplvm as package  # noqa: E402
from gpflow_svi_gplvm.distributed.owned import worker_owned  # noqa: E402
from gpflow_svi_gplvm.distributed.workers import Workers  # noqa: E402
from gpflow_svi_gplvm.rows.shard import worker_rows  # noqa: E402
from gpflow_svi_gplvm.training.trainer import minibatch_indices  # noqa: E402

N, D, Q, M = 80, 5, 2, 8
BATCH = 20  # global: 10 rows per replica
MODELS = {
    "point": ("PointGPLVM", {}),
    "map": ("MAPGPLVM", {"shared_covariance": True}),
    "bsvi": ("BayesianSVIGPLVM", {}),
    "bsvi_mc": ("BayesianSVIGPLVM", {"latent_expectation": "monte-carlo"}),
    "aeb": ("AmortisedBayesianGPLVM", {}),
}
# Built by the bad-input job alone (a worker whose model differs), never trained.
OTHER_MODELS = {"shared point": ("PointGPLVM", {"shared_covariance": True})}


def data() -> np.ndarray:
    """Y [N, D] with 20% of the entries missing, the same in every process."""
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((N, 2)) @ rng.standard_normal((2, D)))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    return Y


def build(name: str, Y) -> package.SVIGPLVM:
    class_name, options = {**MODELS, **OTHER_MODELS}[name]
    with STRATEGY.scope():
        return getattr(package, class_name)(Y, Q, num_inducing=M, **options)


def tables(model: package.SVIGPLVM) -> list:
    """The latent module's per-row tables (unconstrained): each worker's own on a cluster."""
    return model.table_variables


def global_variables(model: package.SVIGPLVM) -> list:
    rows = {v.ref() for v in tables(model)}
    return [v for v in model.trainable_variables if v.ref() not in rows]


def parameters(model: package.SVIGPLVM) -> np.ndarray:
    """The global parameters, the same on every worker."""
    return np.concatenate([v.numpy().ravel() for v in global_variables(model)])


def table(model: package.SVIGPLVM) -> np.ndarray:
    """The tables' rows side by side [rows, ...] (none for an amortised model)."""
    parts = [v.numpy().reshape(v.shape[0], -1) for v in tables(model)]
    return np.concatenate(parts, axis=1) if parts else np.zeros((0, 0))


def publish(path: Path, arrays: dict) -> None:
    """Write ``arrays`` to ``path`` (.npz) whole: readers wait for the name to appear."""
    staging = path.with_name(path.stem + ".partial.npz")
    np.savez(staging, **arrays)
    staging.rename(path)


def wait_for(path: Path) -> dict:
    deadline = time.monotonic() + 600
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return dict(np.load(path))


def start_from(model: package.SVIGPLVM, name: str) -> None:
    """Give ``model`` (of all rows) the workers' initial state: the chief's global parameters and
    every worker's table rows, in row order."""
    folder = Path(SETTINGS["start"])
    state = wait_for(folder / f"{name}-global.npz")
    for i, variable in enumerate(global_variables(model)):
        variable.assign(state[str(i)])
    rows = np.concatenate([wait_for(folder / f"{name}-table-{w}.npz")["table"] for w in range(2)])
    start = 0
    for variable in tables(model):
        width = int(np.prod(variable.shape[1:]))
        variable.assign(rows[:, start : start + width].reshape(variable.shape))
        start += width


def train(name: str, Y, iterations: int, batches=None) -> dict:
    """The model built on Y (a shard, or all rows) and trained on it, or on ``batches``, starting
    from the workers' initial state when SETTINGS["start"] is given (the reference). On a cluster
    every worker publishes its tables' initial rows, the chief the global parameters."""
    model = build(name, Y)
    initial, initial_table = parameters(model), table(model)
    if "start" in SETTINGS:
        start_from(model, name)
    elif "initial" in SETTINGS:
        workers, folder = Workers.of(STRATEGY), Path(SETTINGS["initial"])
        publish(folder / f"{name}-table-{workers.index}.npz", {"table": initial_table})
        if workers.chief:
            values = {str(i): v.numpy() for i, v in enumerate(global_variables(model))}
            publish(folder / f"{name}-global.npz", values)
    history = package.fit(
        model,
        Y if batches is None else batches,
        iterations,
        batch_size=BATCH,
        strategy=STRATEGY,
        seed=1,
        progress=False,
    )
    return {
        f"{name}_initial": initial,
        f"{name}_final": parameters(model),
        f"{name}_table": table(model),
        f"{name}_elbo": history.elbo,
        f"{name}_traces": history.tracing_count,
        f"{name}_owned": np.array([worker_owned(v) for v in model.trainable_variables]),
    }


def agree() -> dict:
    """Every model trained on this worker's shard of Y, and the rows the trainer held."""
    workers = Workers.of(STRATEGY)
    shard = package.RowShard.for_worker(data(), STRATEGY)
    results = {"rows": shard.rows, "held": np.array(shard.Y.shape)}
    for name in MODELS:
        results.update(train(name, shard, SETTINGS["iterations"]))
    # All of Y on every worker (the model's latent tables mirrored, not each worker's own): the
    # same run as from the shards, every worker holding every row.
    model = build("bsvi", data())
    history = package.fit(
        model,
        data(),
        SETTINGS["iterations"],
        batch_size=BATCH,
        strategy=STRATEGY,
        seed=1,
        progress=False,
    )
    results.update(whole_final=parameters(model), whole_table=table(model))
    results["whole_elbo"] = history.elbo
    trainer = package.Trainer(build("bsvi", shard), shard, batch_size=BATCH, strategy=STRATEGY)
    results["trainer_rows"] = np.array(trainer.rows.shard.Y.shape)
    results["worker"] = workers.index
    return results


def reference() -> dict:
    """The same runs in one process on two devices, fed each worker's batches as a replica's."""

    def batches(worker: int) -> tf.data.Dataset:
        rows = tf.constant(worker_rows(N, worker, 2))
        positions = minibatch_indices(len(rows), BATCH // 2, seed=1, stream=worker, num_streams=2)
        return positions.map(lambda p: tf.gather(rows, p))

    Y = data()
    rows = tf.constant(Y)
    dataset = tf.data.Dataset.zip((batches(0), batches(1))).map(
        lambda a, b: (tf.concat([a, b], 0), tf.gather(rows, tf.concat([a, b], 0)))
    )
    results = {}
    for name in MODELS:
        results.update(train(name, Y, SETTINGS["iterations"], dataset))
    return results


def resume() -> dict:
    """B-SVI (Monte Carlo) checkpointed into a folder shared by the workers, resumed if asked;
    slowed down so that a test can stop a worker while it runs."""
    shard = package.RowShard.for_worker(data(), STRATEGY)
    model = build("bsvi_mc", shard)
    options = dict(checkpoint_dir=SETTINGS["folder"], checkpoint_every=SETTINGS["every"])
    pause = SETTINGS.get("pause", 0.0)
    history = package.fit(
        model,
        shard,
        SETTINGS["iterations"],
        batch_size=BATCH,
        strategy=STRATEGY,
        seed=1,
        progress=False,
        resume=SETTINGS["resume"],
        callback=lambda step: time.sleep(pause),
        callback_every=10,
        **options,
    )
    return {
        "bsvi_mc_final": parameters(model),
        "bsvi_mc_table": table(model),
        "bsvi_mc_elbo": history.elbo,
    }


def mistakes() -> dict:
    """What each bad input does on this worker: the error message, or "no error"."""
    workers = Workers.of(STRATEGY)
    Y = data()
    shard = package.RowShard.for_worker(Y, STRATEGY)
    cases = {
        "uneven batch": lambda: package.fit(
            build("point", shard), shard, 2, batch_size=21, strategy=STRATEGY, progress=False
        ),
        "other D": lambda: build(
            "point", package.RowShard.for_worker(Y if workers.index == 0 else Y[:, :4], STRATEGY)
        ),
        "overlapping rows": lambda: build(
            "point", package.RowShard(Y[:50], np.arange(50), N) if workers.index else shard
        ),
        "outside the scope": lambda: package.fit(
            package.PointGPLVM(Y, Q, num_inducing=M), shard, 2, strategy=STRATEGY
        ),
        "a shard outside the scope": lambda: package.PointGPLVM(shard, Q, num_inducing=M),
        "other models": lambda: package.fit(
            build("point" if workers.index == 0 else "shared point", shard),
            shard,
            2,
            batch_size=BATCH,
            strategy=STRATEGY,
            progress=False,
        ),
        "other iterations": lambda: package.fit(
            build("point", shard),
            shard,
            2 + workers.index,
            batch_size=BATCH,
            strategy=STRATEGY,
            progress=False,
        ),
        "resume on one worker": lambda: package.fit(
            build("point", shard),
            shard,
            2,
            batch_size=BATCH,
            strategy=STRATEGY,
            progress=False,
            checkpoint_dir=Path(OUTPUT).parent / "resumed",
            resume=workers.index == 1,
        ),
    }

    def resume_one_process_run() -> None:
        """A run of one process (the chief's, no strategy), resumed by both workers."""
        folder = Path(OUTPUT).parent / "one_process"
        if workers.chief:
            alone = package.PointGPLVM(Y, Q, num_inducing=M)
            package.fit(alone, Y, 2, batch_size=BATCH, progress=False, checkpoint_dir=folder)
        workers.sum(0)  # written before the others look
        package.fit(
            build("point", shard),
            shard,
            4,
            batch_size=BATCH,
            strategy=STRATEGY,
            progress=False,
            checkpoint_dir=folder,
            resume=True,
        )

    cases["a one-process run resumed by two"] = resume_one_process_run
    results = {}
    for case, run in cases.items():
        try:
            run()
            results[case] = "no error"
        except ValueError as error:
            results[case] = str(error)
    return {"messages": json.dumps(results)}


def single_cell() -> dict:
    """SingleCellGPLVM on SETTINGS["path"] (an .h5ad): its model as built (fit for 0 steps) and
    fitted for a few steps, and an amortised one fitted, on this worker's cells (or all, without
    a cluster)."""
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    workers = Workers.of(STRATEGY)
    strategy = STRATEGY if workers.count > 1 else None
    options = dict(batch_key="batch", layer="counts", num_inducing=8, model="bsvi")
    output = Path(SETTINGS["output"])
    built = SingleCellGPLVM(2, **options).fit(
        SETTINGS["path"], 0, batch_size=16, strategy=strategy, output=output / "built"
    )
    fitted = SingleCellGPLVM(2, **options).fit(
        SETTINGS["path"], 30, batch_size=16, strategy=strategy, output=output / "fitted"
    )
    # An encoder's q(x) (trained with the GP: distillation runs in one process), refined cell
    # by cell on each worker before the chief assembles it.
    SingleCellGPLVM(2, **{**options, "model": "aeb", "encoder_training": "joint"}).fit(
        SETTINGS["path"], 10, batch_size=16, strategy=strategy, output=output / "amortised"
    )

    def refusal(path: str, output_folder: Path, **changed) -> str:
        """The message of the ValueError that a 1-step fit raises, or "no error"."""
        try:
            SingleCellGPLVM(2, **{**options, **changed}).fit(
                path, 1, batch_size=16, strategy=strategy, output=output_folder
            )
            return "no error"
        except ValueError as error:
            return str(error)

    genes = [f"g{j}" for j in range(12 - workers.index)]  # the second worker leaves one out
    mistake = refusal(SETTINGS["path"], output / "mistake", genes=genes)
    # Each worker its own folder; the second worker another file of the same names (its
    # counts changed); a NaN count in the second worker's cells: refused before the first step.
    own_output = refusal(SETTINGS["path"], output / f"own{workers.index}")
    path = SETTINGS["other" if workers.index else "path"]
    other_file = refusal(path, output / "other")
    nan_count = refusal(SETTINGS["nan"], output / "nan")
    return {
        "mistake": mistake,
        "own_output": own_output,
        "other_file": other_file,
        "nan_count": nan_count,
        "initial": parameters(built.model),
        "initial_table": table(built.model),
        "categories": json.dumps(built.encoding.names),
        "rows": np.arange(len(table(built.model))) + (40 if workers.index else 0),
        "fitted_table": table(fitted.model),
        "fitted_mean": fitted.model.latent_mean().numpy(),
        "elbo": fitted.history.elbo,
    }


JOBS = {
    "agree": agree,
    "reference": reference,
    "resume": resume,
    "mistakes": mistakes,
    "single_cell": single_cell,
}

if __name__ == "__main__":
    for JOB in JOB_NAMES:
        SETTINGS, OUTPUT = ALL_SETTINGS[JOB], OUTPUTS.format(job=JOB)
        try:
            np.savez(OUTPUT, **JOBS[JOB]())
        except Exception as error:  # the test reads the error from the output
            np.savez(OUTPUT, error=f"{type(error).__name__}: {error}")
            raise
