"""Several workers' data and sums (RowShard, Workers), and training under
tf.distribute.MirroredStrategy over two logical CPUs, which matches one device.

Logical devices must be configured before TensorFlow starts, so those runs happen in a subprocess.
Training on several worker processes is tested in test_multiworker.py.
"""

import json
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pytest

from gpflow_svi_gplvm import PointGPLVM, RowShard
from gpflow_svi_gplvm.distributed.workers import WorkerLostError, Workers
from gpflow_svi_gplvm.rows.shard import worker_rows

RUNS = textwrap.dedent("""
    import json
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
    import numpy as np
    import gpflow_svi_gplvm as package

    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((60, 2)) @ rng.standard_normal((2, 5)))
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    settings = dict(batch_size=20, progress=False, seed=1)
    results = {}
    # Point models have no sampling: splitting each batch over two replicas only reorders sums.
    # (Sampled models are compared exactly, fed the same batches, in test_multiworker.py.)
    contenders = {
        "PointGPLVM": ("PointGPLVM", {}, 200),
        "PointGPLVM shared": ("PointGPLVM", {"shared_covariance": True}, 200),
    }
    for key, (name, options, iterations) in contenders.items():
        model_class = getattr(package, name)
        with strategy.scope():
            mirrored = model_class(Y, 2, num_inducing=8, **options)
        distributed = package.fit(mirrored, Y, iterations, strategy=strategy, **settings)
        alone = model_class(Y, 2, num_inducing=8, **options)
        single = package.fit(alone, Y, iterations, **settings)
        results[key] = {
            "mirrored": distributed.elbo.tolist(),
            "single": single.elbo.tolist(),
            "traces": distributed.tracing_count,
            "replicated": all(
                len(strategy.experimental_local_results(v)) == 2
                for v in mirrored.trainable_variables
            ),
        }
    try:
        package.fit(package.PointGPLVM(Y, 2, num_inducing=8), Y, strategy=strategy, iterations=1)
        results["outside_scope"] = "no error"
    except ValueError as error:
        results["outside_scope"] = str(error)
    # float32 (last: it changes GPflow's default for every later model): row numbers travel in
    # two float32 columns each, and replicas still train like one device.
    import gpflow
    gpflow.config.set_default_float(np.float32)
    gpflow.config.set_default_jitter(1e-4)
    Y32 = Y.astype(np.float32)
    with strategy.scope():
        mirrored = package.PointGPLVM(Y32, 2, num_inducing=8)
    distributed = package.fit(mirrored, Y32, 50, strategy=strategy, **settings)
    single = package.fit(package.PointGPLVM(Y32, 2, num_inducing=8), Y32, 50, **settings)
    results["float32"] = {"mirrored": distributed.elbo.tolist(), "single": single.elbo.tolist()}
    print(json.dumps(results))
    """)


@pytest.fixture(scope="module")
def runs():
    result = subprocess.run(
        [sys.executable, "-c", RUNS], capture_output=True, text=True, timeout=900
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("name", ["PointGPLVM", "PointGPLVM shared"])
def test_point_estimates_train_identically_on_two_replicas(runs, name):
    # No sampling: splitting each batch over two replicas only reorders the sums.
    run = runs[name]
    np.testing.assert_allclose(run["mirrored"], run["single"], rtol=1e-8)
    assert run["traces"] == 1 and run["replicated"]


@pytest.mark.processes
@pytest.mark.slow
def test_float32_models_train_alike_on_two_replicas(runs):
    run = runs["float32"]
    # The same first step; then float32 round-off of the two replicas' sums, which Adam's first
    # steps amplify (each moves a parameter by about the learning rate however small its
    # gradient) and which depends on the CPU's vector instructions, drifts by about 0.3%.
    np.testing.assert_allclose(run["mirrored"][0], run["single"][0], rtol=1e-6)
    np.testing.assert_allclose(run["mirrored"], run["single"], rtol=2e-2, atol=1.0)


@pytest.mark.processes
@pytest.mark.slow
def test_a_model_built_outside_the_strategy_is_a_clear_error(runs):
    assert "strategy.scope()" in runs["outside_scope"]


def test_worker_rows_split_every_row_once_in_blocks_of_nearly_equal_size():
    for num_data, num_workers in [(10, 3), (7, 7), (100, 8), (5, 1)]:
        blocks = [worker_rows(num_data, w, num_workers) for w in range(num_workers)]
        np.testing.assert_array_equal(np.concatenate(blocks), np.arange(num_data))
        assert max(map(len, blocks)) - min(map(len, blocks)) <= 1


def test_one_worker_sums_and_agrees_on_its_own():
    workers = Workers()
    assert workers.chief and workers.count == 1
    np.testing.assert_array_equal(workers.sum([1.0, 2.0]), [1.0, 2.0])
    np.testing.assert_array_equal(workers.stack([1, 2]), [[1, 2]])
    assert workers.differing(3) == []
    with pytest.raises(ValueError, match="as it was"):
        with workers.agreeing():
            raise ValueError("as it was")


@dataclass(frozen=True)
class SecondOfTwo(Workers):
    """Worker 1 of two whose peer adds nothing to any exchange (so it was given other
    settings, and has no refusal of its own) and, every worker making the same exchanges, leaves
    while its last one still delivers here: exchange number ``cut`` (from 1) fails here as a
    lost worker."""

    index: int = 1
    count: int = 2
    cut: int = 0
    calls: list = field(default_factory=list)

    def sum(self, array):
        self.calls.append(array)
        if len(self.calls) == self.cut:
            raise WorkerLostError("worker 1: another worker stopped or cannot be reached")
        return np.asarray(array)


def _other_settings(workers: Workers) -> None:
    workers.agree("were given other settings", {"genes": ["a", "b"], "layer": "counts"})


def _own_refusal(workers: Workers) -> None:
    with workers.agreeing():
        raise ValueError("no such column")


@pytest.mark.parametrize(
    "refused, message",
    [
        (_other_settings, r"given other settings \(genes: worker 0 , worker 1 \['a', 'b'\];"),
        (_own_refusal, "^worker 1: no such column$"),
    ],
)
def test_a_refusal_reaches_a_worker_whose_peer_left_as_soon_as_it_refused(refused, message):
    dry = SecondOfTwo()
    with pytest.raises(ValueError, match=message):
        refused(dry)
    # The peer leaves during its last exchange: a refusal here still, not a lost worker.
    with pytest.raises(ValueError, match=message):
        refused(SecondOfTwo(cut=len(dry.calls)))


def test_a_run_ends_alike_on_a_worker_whose_peer_left_as_soon_as_it_finished():
    finished = SecondOfTwo(cut=1)
    finished.finish()  # the peer's leaving cuts the last exchange short here: no lost worker
    assert len(finished.calls) == 1


def test_a_shard_holds_its_rows_once_on_the_cpu():
    Y = np.arange(12.0).reshape(6, 2)
    shard = RowShard(Y[2:4], [2, 3], num_data=6)
    assert (shard.num_rows, shard.data_dim, shard.num_data) == (2, 2, 6)
    assert "CPU" in shard.Y.device
    np.testing.assert_array_equal(shard.Y.numpy(), Y[2:4])
    whole = RowShard.for_worker(Y)  # one worker: all rows
    np.testing.assert_array_equal(whole.rows, np.arange(6))
    mask = np.ones_like(Y, dtype=bool)
    mask[0, 0] = False
    assert np.isnan(RowShard.for_worker(Y, mask=mask).Y.numpy()[0, 0])


@pytest.mark.parametrize(
    "rows, num_data, match",
    [
        ([0.0, 1.0], 4, "1-D integer array"),
        ([[0, 1]], 4, "1-D integer array"),
        ([0], 4, "the shard's 2 row numbers"),
        ([0, 4], 4, r"must lie in \[0, num_data=4\)"),
        ([-1, 0], 4, "must lie in"),
        ([1, 1], 4, "repeats a row number"),
        ([0, 1], 0, "num_data must be a positive integer"),
    ],
)
def test_a_shard_with_wrong_row_numbers_is_refused(rows, num_data, match):
    with pytest.raises(ValueError, match=match):
        RowShard(np.ones((2, 3)), rows, num_data)


def test_a_shard_of_every_row_builds_the_model_of_all_rows():
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((30, 2)) @ rng.standard_normal((2, 4)))
    order = rng.permutation(30)
    shard = RowShard(Y[order], order, num_data=30)  # every row, in another order
    from_shard, from_rows = PointGPLVM(shard, 2, 5), PointGPLVM(Y, 2, 5)
    np.testing.assert_allclose(
        from_shard.latent.mean.numpy(), from_rows.latent.mean.numpy(), rtol=1e-10, atol=1e-12
    )


def test_a_shard_of_some_rows_alone_says_to_build_under_the_strategy():
    shard = RowShard(np.ones((3, 2)) + np.eye(3, 2), [0, 1, 2], num_data=6)
    with pytest.raises(ValueError, match="no other worker is in sight"):
        PointGPLVM(shard, 1, 2)
