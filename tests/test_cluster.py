"""Starting several workers: TF_CONFIG checked and the workers met within a time limit, tested
with threads in one process (no TensorFlow cluster; tests/test_multiworker.py starts real
worker processes through the same meeting)."""

from __future__ import annotations

import socket
import threading
import time

import pytest
from test_multiworker import free_ports

from gpflow_svi_gplvm.distributed.cluster import checked_cluster, meet_workers


def meet(indices: list[int], size: int, timeout: float = 3.0) -> dict[int, str]:
    """Each of ``indices`` (worker indices, repeats allowed) meets in a thread of its own, in a
    cluster of ``size`` workers; what each ended with ("met" or its error), by thread."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(size)]}
    ended: dict[int, str] = {}

    def run(thread: int, index: int) -> None:
        try:
            meet_workers({"cluster": cluster, "task": {"type": "worker", "index": index}}, timeout)
            ended[thread] = "met"
        except ValueError as error:
            ended[thread] = str(error)

    threads = [threading.Thread(target=run, args=(i, index)) for i, index in enumerate(indices)]
    for thread in threads:
        thread.start()
        time.sleep(0.05)  # the chief first: it listens before the others look for it
    for thread in threads:
        thread.join(timeout + 30)
    return ended


def test_every_worker_meets_the_chief_and_goes_on():
    assert meet([0, 1, 2], 3) == {0: "met", 1: "met", 2: "met"}
    assert meet([2, 1, 0], 3) == {0: "met", 1: "met", 2: "met"}  # the chief may come last


def test_a_worker_that_never_starts_is_named_on_every_worker_within_the_time_limit():
    begin = time.monotonic()
    ended = meet([0, 1], 3, timeout=2.0)
    assert time.monotonic() - begin < 15
    assert "not reached within 2 s: worker 2 (127.0.0.1:" in ended[0]
    assert "not reached within 2 s: worker 2" in ended[1] and "(the chief, 127.0.0.1" in ended[1]


def test_a_missing_chief_or_an_index_given_twice_ends_the_start():
    alone = meet([1], 2, timeout=1.0)
    assert "worker 1 did not reach the chief (127.0.0.1:" in alone[0]
    twice = meet([0, 1, 1], 3)
    assert all("worker index 1 was given to two workers" in text for text in twice.values())


def test_a_cluster_config_that_would_wait_forever_is_refused():
    port, other = free_ports(2)
    workers = [f"127.0.0.1:{port}", f"127.0.0.1:{other}"]
    cases = [
        ({"type": "ps", "index": 0}, "task type is 'ps'"),
        ({"type": "worker", "index": 2}, "index is 2 but its cluster lists 2"),
        ({"type": "worker", "index": "0"}, "index is '0'"),
    ]
    for task, message in cases:
        with pytest.raises(ValueError, match=message):
            checked_cluster({"cluster": {"worker": workers}, "task": task})
    task = {"type": "worker", "index": 0}
    # A worker of a cluster that also names a parameter server: the strategy would wait for it.
    with pytest.raises(ValueError, match=r"cluster names \['ps'\] tasks: .* Remove \['ps'\]"):
        checked_cluster({"cluster": {"worker": workers, "ps": ["127.0.0.1:1"]}, "task": task})
    for cluster in ({"worker": ["localhost", workers[1]]}, {"worker": ["localhost:abc"]}):
        with pytest.raises(ValueError, match='give a list of "host:port" addresses'):
            checked_cluster({"cluster": cluster, "task": task})
    with pytest.raises(ValueError, match='give a list of "host:port" addresses'):
        checked_cluster({"cluster": {"worker": workers[0]}, "task": task})  # a text, not a list
    with pytest.raises(ValueError, match="must be a JSON object with a 'cluster' object"):
        checked_cluster([1, 2])  # type: ignore[arg-type]
    config = {"cluster": {"worker": workers}, "task": task}
    for timeout in (-5, 0, float("nan")):
        with pytest.raises(ValueError, match="timeout must be a positive number of seconds"):
            meet_workers(config, timeout)
    with socket.socket() as held:
        held.bind(("127.0.0.1", other))
        held.listen(1)
        with pytest.raises(ValueError, match="another process holds the port"):
            checked_cluster(
                {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}}
            )
