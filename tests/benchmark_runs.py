"""Benchmark scripts run one after another in this one process, each as ``python
benchmarks/<script> ARGS`` would run it (its ``__main__``, its argv, the repository as the working
folder), so that TensorFlow and the package are imported once for all of them:

    python tests/benchmark_runs.py RUNS_JSON OUTPUT_JSON

RUNS_JSON maps a run's name to ``[script, *args]``; OUTPUT_JSON gets, for each run, its exit
status, everything written to its standard output and error, by the script and by the
processes it starts (they are captured at the file descriptors), and its wall and CPU seconds
(the CPU of this process and of the processes it waited for: where a quick run's time goes). A
run still going after SECONDS_PER_RUN is stopped (exit status 124) and the next one starts.
tests/benchmark_quick.py starts it and reads it (for test_benchmarks.py and
test_benchmarks_data.py).
"""

from __future__ import annotations

import json
import os
import resource
import runpy
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SECONDS_PER_RUN = 900  # as long as a script alone was given when each ran in its own process


class TooLong(Exception):
    """A run outlasted SECONDS_PER_RUN."""


def _stop(signum, frame):
    raise TooLong(f"stopped after {SECONDS_PER_RUN} s")


def _cpu_seconds() -> float:
    """CPU seconds of this process and of the children it has waited for."""
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    return sum(usage.ru_utime + usage.ru_stime for usage in used)


def run(script: str, args: list[str]) -> dict:
    """Run ``script`` with ``args`` as its ``__main__``; its exit status, output and seconds."""
    sys.argv = [script, *args]
    started, cpu = time.perf_counter(), _cpu_seconds()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(out.fileno(), 1)
        os.dup2(err.fileno(), 2)
        signal.alarm(SECONDS_PER_RUN)
        try:
            runpy.run_path(script, run_name="__main__")
            status = 0
        except SystemExit as stop:  # the scripts end in `raise SystemExit(main())`
            status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except TooLong:
            traceback.print_exc()
            status = 124
        except BaseException:
            traceback.print_exc()
            status = 1
        finally:
            signal.alarm(0)
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in saved.items():
                os.dup2(copy, fd)
                os.close(copy)
        texts = []
        for file in (out, err):
            file.seek(0)
            texts.append(file.read().decode(errors="replace"))
    seconds = {"seconds": time.perf_counter() - started, "cpu_seconds": _cpu_seconds() - cpu}
    return {"returncode": status, "stdout": texts[0], "stderr": texts[1], **seconds}


def main() -> None:
    runs = json.loads(sys.argv[1])
    output = Path(sys.argv[2])
    os.chdir(BENCHMARKS.parent)
    signal.signal(signal.SIGALRM, _stop)
    sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings and `common`
    results = {}
    for name, (script, *args) in runs.items():
        results[name] = run(str(BENCHMARKS / script), args)
        output.write_text(json.dumps(results))  # a crash later keeps the runs done


if __name__ == "__main__":
    main()
