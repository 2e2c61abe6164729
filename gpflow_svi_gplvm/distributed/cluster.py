"""Starting several workers: ``TF_CONFIG`` read and checked, the workers met, then the strategy.

TensorFlow's ``MultiWorkerMirroredStrategy`` waits for every worker of its cluster without a time
limit: a worker that never starts, a missing one, or two given the same index leave the others
waiting forever, with nothing said. :func:`multi_worker_strategy` first checks ``TF_CONFIG``
(:func:`checked_cluster`), then meets the workers over plain TCP on the chief's port
(:func:`meet_workers`): every worker says hello to the chief, which answers once all have, or
after ``timeout`` seconds tells those present which workers it did not reach. Only then is the
strategy made, so a start-up that cannot succeed ends within the time limit, with a message.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import socket
import time

import tensorflow as tf

__all__ = [
    "STARTUP_TIMEOUT",
    "cluster_from_environment",
    "checked_cluster",
    "meet_workers",
    "multi_worker_strategy",
]

STARTUP_TIMEOUT = 90.0
"""Seconds :func:`multi_worker_strategy` waits for every worker of the cluster by default."""

_RETRY_SECONDS = 0.5

_EXAMPLE = (
    '{"cluster": {"worker": ["host0:12345", "host1:12345"]}, '
    '"task": {"type": "worker", "index": 0}}'
)

_ADVICE = (
    "Start every worker of TF_CONFIG's cluster, the chief (index 0) included, each with its own "
    "index, within the time limit (timeout=, or --startup-timeout on the command line)."
)


def multi_worker_strategy(
    timeout: float = STARTUP_TIMEOUT,
) -> tf.distribute.MultiWorkerMirroredStrategy:
    """A ``MultiWorkerMirroredStrategy`` over the cluster of ``TF_CONFIG``, made once every
    worker has been reached (:func:`meet_workers`): a ``ValueError`` naming the workers not
    reached within ``timeout`` seconds, or what is wrong with ``TF_CONFIG``
    (:func:`checked_cluster`). Call it first, before other TensorFlow work, on every worker."""
    config = cluster_from_environment()
    if isinstance(config, dict) and not config.get("cluster"):
        raise ValueError(
            f"Several workers need TF_CONFIG naming the cluster and this worker, e.g. {_EXAMPLE} "
            'on the first machine and "index": 1 on the second.'
        )
    meet_workers(checked_cluster(config), timeout)
    return tf.distribute.MultiWorkerMirroredStrategy()


def cluster_from_environment() -> dict:
    """``TF_CONFIG`` as a dict (empty when unset); a ``ValueError`` when it is not JSON."""
    text = os.environ.get("TF_CONFIG", "")
    if not text:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"TF_CONFIG is not valid JSON ({error}): {text[:200]!r}") from error


def checked_cluster(config: dict) -> dict:
    """``config`` (a parsed ``TF_CONFIG``), or a ``ValueError`` for what would leave the
    workers waiting for each other forever: a task type other than worker or chief, an index
    outside its list, or this task's own port taken by another process."""
    if not (
        isinstance(config, dict)
        and isinstance(config.get("cluster", {}), dict)
        and isinstance(config.get("task", {}), dict)
    ):
        raise ValueError(
            f"TF_CONFIG must be a JSON object with a 'cluster' object and a 'task', e.g. "
            f"{_EXAMPLE}; got {json.dumps(config)[:200]}."
        )
    cluster, task = config.get("cluster") or {}, config.get("task") or {}
    others = sorted(set(cluster) - {"worker", "chief"})
    if others:  # MultiWorkerMirroredStrategy would wait for them forever
        raise ValueError(
            f"TF_CONFIG's cluster names {others} tasks: training here runs on 'worker' tasks "
            "(and at most one 'chief') alone, all with MultiWorkerMirroredStrategy, which waits "
            f"for every task it is told of. Remove {others} from the cluster."
        )
    for kind, addresses in cluster.items():
        bad = addresses if not isinstance(addresses, list) else _unparsed(addresses)
        if bad:
            raise ValueError(
                f"TF_CONFIG's cluster lists {kind!r} as {json.dumps(bad)[:200]}: give a list of "
                f'"host:port" addresses, one a task, e.g. {_EXAMPLE}.'
            )
    kind, index = task.get("type"), task.get("index")
    if kind not in ("worker", "chief") or kind not in cluster:
        raise ValueError(
            f"TF_CONFIG's task type is {kind!r}; training runs on 'worker' tasks (and at most one "
            f"'chief') named in its cluster, which has {sorted(cluster)}."
        )
    if not isinstance(index, int) or not 0 <= index < len(cluster[kind]):
        raise ValueError(
            f"TF_CONFIG's task index is {index!r} but its cluster lists {len(cluster[kind])} "
            f"{kind} address(es): give each process its own index from 0 to "
            f"{len(cluster[kind]) - 1}."
        )
    address = str(cluster[kind][index])
    try:
        _listener(address).close()
    except OSError as error:
        raise ValueError(
            f"This task's address {address} cannot be listened on ({error}): another process "
            "holds the port (two tasks given one index?), or the host is not this machine. Give "
            "each task its own index and a free port."
        ) from error
    return config


def meet_workers(config: dict, timeout: float = STARTUP_TIMEOUT) -> None:
    """Return once every worker of ``config``'s cluster (a checked ``TF_CONFIG``) has reached
    the chief (the chief task, else worker 0) at its address, or raise a ``ValueError`` within
    about ``timeout`` seconds naming the workers not reached, or a worker index given twice."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(
            f"The start-up timeout must be a positive number of seconds (e.g. {STARTUP_TIMEOUT:g}"
            f"), got {timeout!r}: timeout= here, --startup-timeout on the command line."
        )
    addresses = _addresses(config["cluster"])
    task = config["task"]
    index = task["index"] + (
        len(config["cluster"].get("chief", [])) if task["type"] == "worker" else 0
    )
    deadline = time.monotonic() + timeout
    if index == 0:
        _gather(addresses, deadline, timeout)
    else:
        _report(addresses, index, deadline, timeout)


def _unparsed(addresses: list) -> list:
    """The entries of ``addresses`` that are not "host:port" with a port number."""
    return [
        a
        for a in addresses
        if not (isinstance(a, str) and a.rpartition(":")[0] and a.rpartition(":")[2].isdigit())
    ]


def _addresses(cluster: dict) -> list[str]:
    """The workers' addresses in worker order: the chief first, if any."""
    return [str(a) for a in cluster.get("chief", [])] + [str(a) for a in cluster.get("worker", [])]


def _listener(address: str) -> socket.socket:
    host, _, port = address.rpartition(":")
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(("" if host in ("localhost", "127.0.0.1") else host, int(port)))
    except OSError:
        listener.close()
        raise
    return listener


def _gather(addresses: list[str], deadline: float, timeout: float) -> None:
    """The chief: take every other worker's hello, then answer all of them at once."""
    waiting: dict[int, socket.socket] = {}
    problem = ""
    with contextlib.closing(_listener(addresses[0])) as listener:
        listener.listen(len(addresses))
        while len(waiting) < len(addresses) - 1 and not problem:
            listener.settimeout(max(deadline - time.monotonic(), 0.001))
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                break
            index = _hello(connection, deadline)
            if index in waiting or index is None or not 0 < index < len(addresses):
                problem = (
                    f"worker index {index} was given to two workers (or is not in the cluster)"
                )
                waiting.setdefault(-1 - len(waiting), connection)
            else:
                waiting[index] = connection
    missing = [f"worker {i} ({addresses[i]})" for i in range(1, len(addresses)) if i not in waiting]
    if not problem and missing:
        problem = f"not reached within {timeout:g} s: {', '.join(missing)}"
    for connection in waiting.values():
        with contextlib.closing(connection):
            with contextlib.suppress(OSError):
                connection.sendall((problem or "go").encode() + b"\n")
                connection.settimeout(5.0)
                connection.recv(1)  # the worker closes first, so the chief's port stays free
    if problem:
        raise ValueError(f"The cluster did not start: {problem}. {_ADVICE}")


def _hello(connection: socket.socket, deadline: float) -> int | None:
    connection.settimeout(max(deadline - time.monotonic(), 0.001))
    with contextlib.suppress(OSError, ValueError):
        return int(connection.makefile().readline())
    return None


def _report(addresses: list[str], index: int, deadline: float, timeout: float) -> None:
    """A worker: say hello to the chief (retrying until it listens), then wait for its word."""
    host, _, port = addresses[0].rpartition(":")
    while True:
        try:
            connection = socket.create_connection((host, int(port)), timeout=_RETRY_SECONDS)
            break
        except OSError:
            if time.monotonic() > deadline:
                raise ValueError(
                    f"The cluster did not start: worker {index} did not reach the chief "
                    f"({addresses[0]}) within {timeout:g} s. {_ADVICE}"
                ) from None
            time.sleep(_RETRY_SECONDS)
    with contextlib.closing(connection):
        connection.sendall(f"{index}\n".encode())
        connection.settimeout(timeout + 10.0)  # the chief answers within its own time limit
        try:
            word = connection.makefile().readline().strip()
        except OSError:
            word = ""
    if word != "go":
        said = word or "the chief stopped answering"
        raise ValueError(
            f"The cluster did not start: {said} (the chief, {addresses[0]}). {_ADVICE}"
        )
