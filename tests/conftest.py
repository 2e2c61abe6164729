import json
import logging
import statistics
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from benchmark_quick import run_quick
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


@pytest.fixture(scope="module")
def quick_runs(request, tmp_path_factory) -> dict:
    """The benchmark quick runs of this file's selected tests, run once when the first asks
    (tests/benchmark_quick.py): each run's exit status and output."""
    return run_quick(request.module, request.session.items, tmp_path_factory)


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


# The order tests start in: whole files, longest first by the durations a run measured
# (tests/durations.json), so pytest-xdist (--dist loadfile or worksteal, handing out work in
# collection order) does not leave one worker finishing minutes after the other. A file's
# length counts only the tests this run selected (`-m processes` or not). Rewrite the record
# after adding or changing slow tests: python -m pytest --record-durations (a run of one stage
# rewrites its tests' entries and keeps the other's).
DURATIONS = Path(__file__).with_name("durations.json")
# --quick: the tests measured under this many seconds, marked neither slow nor processes (a few
# minutes on two cores; docs/howto.md, "Running the tests").
QUICK_SECONDS = 3.0


def pytest_addoption(parser):
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test's measured seconds to {DURATIONS.name} (tests' start order)",
    )
    parser.addoption(
        "--quick",
        action="store_true",
        help=f"only the tests measured under {QUICK_SECONDS:g} s in {DURATIONS.name} (an "
        "unmeasured one counts as the median) and marked neither slow nor processes",
    )


def _recorded_seconds() -> dict[str, float]:
    return json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}


@pytest.hookimpl(trylast=True)  # after `-m` has deselected tests
def pytest_collection_modifyitems(config, items):
    seconds = _recorded_seconds()
    unmeasured = statistics.median(seconds.values()) if seconds else 0.0
    if config.getoption("--quick"):
        slow = {
            item
            for item in items
            if seconds.get(item.nodeid, unmeasured) >= QUICK_SECONDS
            or item.get_closest_marker("slow")
            or item.get_closest_marker("processes")
        }
        config.hook.pytest_deselected(items=list(slow))
        items[:] = [item for item in items if item not in slow]
    length: defaultdict[str, float] = defaultdict(float)
    for item in items:
        length[item.location[0]] += seconds.get(item.nodeid, unmeasured)
    items.sort(key=lambda item: -length[item.location[0]])  # stable: a file keeps its order


_measured: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Sums a test's setup, call and teardown (xdist hands the workers' reports to the main
    process, which writes the record)."""
    _measured[report.nodeid] = _measured.get(report.nodeid, 0.0) + report.duration


def pytest_sessionfinish(session):
    if not session.config.getoption("--record-durations") or hasattr(session.config, "workerinput"):
        return
    root = Path(str(session.config.rootpath))
    kept = {k: v for k, v in _recorded_seconds().items() if (root / k.split("::")[0]).is_file()}
    recorded = {**kept, **{k: round(v, 2) for k, v in _measured.items()}}
    DURATIONS.write_text(json.dumps(dict(sorted(recorded.items())), indent=0) + "\n")
