import logging
import sys
from pathlib import Path

import pytest
from check_shapes import set_enable_check_shapes

from gpflow_svi_gplvm.distributed.workers import Workers


@pytest.fixture(autouse=True)
def _check_shapes_enabled():
    """Run every test with GPflow's shape checks on, as GPflow's own suite does."""
    set_enable_check_shapes(True)
    yield


@pytest.fixture(autouse=True)
def _no_autograph_fallback(caplog):
    """Fail a test whose compiled code silently fell back to Python control flow."""
    with caplog.at_level(logging.WARNING):
        yield
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "AutoGraph could not transform" in m]


# The Python processes the running test started (its fixtures' included), seen through the
# interpreter's audit events; other programs (a library's call of ldconfig) are not counted.
_started: list[str] = []


def _record_python_processes(event: str, args: tuple) -> None:
    if event != "subprocess.Popen":
        return
    executable, command = args[0], args[1]
    program = str(executable or (command if isinstance(command, (str, bytes)) else command[0]))
    here = Path(sys.executable).parent
    if program == sys.executable or Path(program).parent == here or "python" in Path(program).name:
        _started.append(program)


sys.addaudithook(_record_python_processes)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    _started.clear()


@pytest.fixture(autouse=True)
def _processes_marked(request):
    """A test that starts processes (itself or through its fixtures) is marked ``processes``:
    CI runs those in a stage of their own (.ci/run), so none may hide among the others."""
    yield
    if _started and request.node.get_closest_marker("processes") is None:
        pytest.fail(f"{request.node.nodeid} started {_started[0]}: mark it @pytest.mark.processes")


@pytest.fixture
def exchanges(monkeypatch) -> list[str]:
    """The exchanges between workers the calls of a test make, in order ("sum" or "finish";
    one worker makes them too, each alone). A run must end in "finish": a worker leaves after
    it, never while another still receives the result of an earlier one."""
    made: list[str] = []
    total, finish = Workers.sum, Workers.finish

    def recorded_sum(self, array):
        made.append("sum")
        return total(self, array)

    def recorded_finish(self):
        made.append("finish")
        return finish(self)

    monkeypatch.setattr(Workers, "sum", recorded_sum)
    monkeypatch.setattr(Workers, "finish", recorded_finish)
    return made


# The files that take longest (minutes, mostly tracing; numba compiling scanpy's and
# scib-metrics' neighbour searches), longest first. pytest-xdist hands out whole files
# (--dist loadfile) in collection order (--no-loadscope-reorder, pyproject.toml): starting the
# long ones first keeps one worker from finishing minutes after the other. A file's tests
# marked `processes` do not count here: .ci/run runs them in a stage of their own.
LONGEST_FILES = (
    "test_sklearn.py",
    "test_training.py",
    "test_scanpy.py",
    "test_metrics.py",
    "test_checkpoints.py",
    "test_export.py",
    "test_cli.py",
    "test_distributed.py",
    "test_inference.py",
    "test_likelihoods.py",
    "test_benchmarks.py",
    "test_reproduce.py",
    "test_readme.py",
    # Short when CI's documentation build has run the notebooks (tests/test_notebooks.py).
    "test_notebooks.py",
)


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(Path(str(item.fspath)).name, len(rank)))
