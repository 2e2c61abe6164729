"""An adversarial probe of training on several workers, as users start it: the command line on
two loopback workers (``TF_CONFIG``), on both data paths (a table, ``.npy``; single cells, an
``.h5ad``), with each worker given what users get wrong: another file or a changed one, another
option, a missing file, an output folder that holds a user's files, a resume on one worker, a
worker killed mid-run.

Usage::

    python benchmarks/probe_workers.py [--only table h5ad] [--keep FOLDER]

Each case starts the same command on both workers (but for what the case changes) and is
classified as benchmarks/probe.py classifies (benchmarks/probe_kit.py): correct (every worker
ends well and the chief's embedding equals the clean run's, or the case's own check holds),
refused clearly (every worker ends with the command line's ``error:`` line naming the problem,
none left waiting), raw or misleading (a traceback, or a refusal that does not name it),
silently wrong (a run that should have been refused trained to the end), output lost (a user's
file changed) or hang (a worker still running after the case's time).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
from common import free_ports  # noqa: E402
from probe_kit import (  # noqa: E402
    CLASSES,
    Case,
    Hang,
    Refusal,
    Wrong,
    classify,
    counts_cells,
    keeping,
)

TIMEOUT = 420.0
"""Seconds a case's workers may take (two TensorFlow processes on two shared cores)."""

TABLE = ["--latent-dim", "2", "--num-inducing", "8", "--iterations", "10", "--batch-size", "20"]
TABLE += ["--model", "bsvi", "--no-progress", "--distributed"]
CELLS = ["--layer", "counts", "--batch-key", "batch", "--latent-dim", "2", "--num-inducing", "8"]
CELLS += ["--iterations", "10", "--batch-size", "16", "--no-progress", "--distributed"]


class Lab:
    """The data both paths start from, written once, and a fresh folder for each case."""

    def __init__(self, root: Path):
        self.root = root
        self.cases = 0
        rng = np.random.default_rng(0)
        self.Y = np.tanh(rng.standard_normal((60, 2)) @ rng.standard_normal((2, 5)))
        self.table = root / "table.npy"
        np.save(self.table, self.Y)
        self.cells = counts_cells(80, 12)
        self.h5ad = root / "cells.h5ad"
        self.cells.write_h5ad(self.h5ad)
        self.baseline: dict[str, np.ndarray] = {}

    def folder(self) -> Path:
        self.cases += 1
        folder = self.root / f"case{self.cases:03d}"
        folder.mkdir()
        return folder


def workers(
    commands: list[list[str]],
    cwd: Path,
    kill_after: float | None = None,
    kill_when: Callable[[], bool] | None = None,
) -> list[str]:
    """Run ``commands[i]`` as worker i of a loopback cluster; each worker's output. Raises
    :class:`Hang` when a worker outlives :data:`TIMEOUT` (every worker is killed then). With
    ``kill_after``, worker 1 is SIGKILLed that many seconds after the workers start; with
    ``kill_when``, as soon as it returns True (polled until the chief ends)."""
    cluster = {"worker": [f"127.0.0.1:{port}" for port in free_ports(len(commands))]}
    processes = []
    for i, command in enumerate(commands):
        config = {"cluster": cluster, "task": {"type": "worker", "index": i}}
        environment = dict(os.environ, TF_CONFIG=json.dumps(config), PYTHONUNBUFFERED="1")
        processes.append(
            subprocess.Popen(
                [sys.executable, "-m", "gpflow_svi_gplvm", *command],
                env=environment,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                cwd=cwd,
            )
        )
    deadline = time.monotonic() + TIMEOUT
    try:
        if kill_after is not None:
            time.sleep(kill_after)
            processes[1].send_signal(signal.SIGKILL)
        while kill_when is not None and processes[0].poll() is None:
            if kill_when():
                processes[1].send_signal(signal.SIGKILL)
                break
            time.sleep(0.2)
        outputs = [p.communicate(timeout=max(deadline - time.monotonic(), 1))[0] for p in processes]
    except subprocess.TimeoutExpired as expired:
        raise Hang(f"a worker still ran after {TIMEOUT:.0f} s") from expired
    finally:
        for process in processes:
            process.kill()
    return [f"[exit {p.returncode}]\n{text}" for p, text in zip(processes, outputs)]


def refused_or_trained(outputs: list[str], must_refuse: bool, names) -> None:
    """Nothing when every worker trained (a :class:`Wrong` if the case must be refused); the
    workers' refusal as a :class:`Refusal` when each ended with an ``error:`` line (the first
    line that names none of ``names``, if any, so that it is judged); a RuntimeError (raw) when
    a worker ended otherwise."""
    codes = [int(text.split("]", 1)[0].removeprefix("[exit ")) for text in outputs]
    if all(code == 0 for code in codes):
        if must_refuse:
            raise Wrong("both workers trained to the end without a word")
        return
    errors = []
    for i, (code, text) in enumerate(zip(codes, outputs)):
        lines = [line for line in text.splitlines() if "error:" in line]
        if code == 0 or "Traceback" in text or not lines:
            raise RuntimeError(f"worker {i} ended with status {code}: {text[-600:]}")
        errors.append(f"worker {i}: {lines[-1]}")
    unnamed = [e for e in errors if not any(word in e.lower() for word in names or ())]
    raise Refusal(unnamed[0] if unnamed else " | ".join(errors))


def check_embedding(out: Path, expected: np.ndarray | None) -> np.ndarray:
    """What the chief wrote to ``out`` (the cells' embedding; for a table, which has none on
    disk, the final ELBO and reconstruction error of metrics.json), checked finite and equal to
    ``expected`` (if given)."""
    if (out / "X_gplvm.npy").exists():
        X = np.load(out / "X_gplvm.npy")
    else:
        metrics = json.loads((out / "metrics.json").read_text())
        X = np.array([metrics["elbo_final"], metrics["reconstruction_rmse"]], dtype=float)
    if not np.all(np.isfinite(X)):
        raise Wrong("the chief's results hold NaN or infinite values")
    if expected is not None and not np.allclose(X, expected, rtol=1e-6, atol=1e-8):
        gap = float(np.max(np.abs(X - expected)))
        raise Wrong(f"the results differ from the clean run's by up to {gap:.3g}")
    return X


def run_case(lab, kind, data=(None, None), extra=((), ()), must_refuse=True, **options):
    """A case's run: worker i reads ``data[i]`` (default: the lab's file of ``kind``) with the
    path's options plus ``extra[i]``; both are given the output folder ``out`` (the same call on
    every worker, as the docs say: the chief writes it)."""

    def run():
        folder = lab.folder()
        default = lab.table if kind == "table" else lab.h5ad
        base = TABLE if kind == "table" else CELLS
        prepare = options.get("prepare")
        if prepare is not None:
            prepare(folder)
        commands = [
            ["--data", str(data[i] or default), *base, "--output", str(folder / "out")]
            + list(extra[i])
            for i in range(2)
        ]

        def both():
            said = workers(commands, folder, options.get("kill_after"))
            (folder / "said.txt").write_text("\n\n".join(said))
            judged = [said[i] for i in options.get("judged", (0, 1))]
            refused_or_trained(judged, must_refuse, options.get("names"))
            check = options.get("check")
            if check is not None:
                return check(folder)
            return check_embedding(folder / "out", lab.baseline.get(kind))

        return keeping(folder, both)  # the files a case prepared are the user's

    return run


def files(lab: Lab, kind: str, change) -> tuple[None, Path]:
    """Worker 1's data: a copy of the lab's file of ``kind`` changed by ``change``."""
    path = lab.root / f"{kind}-{len(list(lab.root.glob(f'{kind}-*')))}"
    if kind == "table":
        path = path.with_suffix(".npy")
        np.save(path, change(lab.Y.copy()))
    else:
        path = path.with_suffix(".h5ad")
        change(lab.cells.copy()).write_h5ad(path)
    return None, path


def table_cases(lab: Lab) -> list[Case]:
    def case(name, names, **options):
        run = run_case(lab, "table", names=names, **options)
        return Case("table", name, run, names, TIMEOUT + 60)

    def other_numbers(Y):
        return Y + 0.01

    def a_nan(Y):
        Y[3, 2] = np.nan
        return Y

    cases = [
        case(
            "a copy of the same numbers at another path",
            None,
            data=files(lab, "table", np.copy),
            must_refuse=False,
        ),
        case(
            "other numbers of the same shape",
            ("data", "differ", "hold"),
            data=files(lab, "table", other_numbers),
        ),
        case(
            "a NaN where worker 0 has a number",
            ("data", "differ", "hold"),
            data=files(lab, "table", a_nan),
        ),
        case(
            "one more column",
            ("column", " d "),
            data=files(lab, "table", lambda Y: Y[:, [0, 1, 2, 3, 4, 0]]),
        ),
        case(
            "ten more rows",
            ("rows", " n "),
            data=files(lab, "table", lambda Y: np.vstack([Y, Y[:10]])),
        ),
        case(
            "the file missing",
            ("no such", "not found", "does not exist", "missing", "not a file"),
            data=(None, lab.root / "nowhere.npy"),
        ),
    ]
    for option, value, names in [
        ("--latent-dim", "3", ("latent", "q")),
        ("--num-inducing", "9", ("inducing", "m")),
        ("--iterations", "11", ("iterations",)),
        ("--batch-size", "10", ("batch",)),
        ("--seed", "1", ("seed",)),
        ("--learning-rate", "0.02", ("learning",)),
        ("--no-standardise", None, ("standardis",)),
        ("--shared-covariance", None, ("shared",)),
    ]:
        flag = [option] if value is None else [option, value]
        cases.append(case(f"worker 1 with {' '.join(flag)}", names, extra=((), flag)))
    cases += [
        case("--model map on worker 1", ("model",), extra=((), ("--model", "map"))),
        case(
            "a batch of 21 rows over 2 replicas",
            ("batch", "replica"),
            extra=(("--batch-size", "21"), ("--batch-size", "21")),
        ),
        case("--resume on worker 1 alone", ("resume",), extra=((), ("--resume",))),
        case(
            "the output folder holds a user's embedding",
            ("output", "overwrite", "holds"),
            prepare=_user_file("out"),
        ),
        case(
            "a run of one process resumed by two",
            ("checkpoint", "worker", "resume"),
            prepare=_one_process_run(lab),
            extra=(("--resume", "--save"), ("--resume", "--save")),
        ),
        _killed_mid_run(case),
    ]
    return cases


def h5ad_cases(lab: Lab) -> list[Case]:
    def case(name, names, **options):
        run = run_case(lab, "h5ad", names=names, **options)
        return Case("h5ad", name, run, names, TIMEOUT + 60)

    def other_counts(cells):
        cells.layers["counts"] = cells.layers["counts"] * 2
        return cells

    def genes_reordered(cells):
        return cells[:, cells.var_names[::-1]].copy()

    return [
        case(
            "other counts, the same cells and genes",
            ("counts", "differ", "hold", "data"),
            data=files(lab, "h5ad", other_counts),
        ),
        case(
            "the genes in another order",
            ("gene",),
            data=files(lab, "h5ad", genes_reordered),
            must_refuse=False,
        ),
        case("ten fewer cells", ("cells", " n "), data=files(lab, "h5ad", lambda c: c[:70].copy())),
        case("one gene fewer", ("gene",), data=files(lab, "h5ad", lambda c: c[:, :11].copy())),
        case(
            "the file missing",
            ("no such", "not found", "does not exist", "missing", "not a file"),
            data=(None, lab.root / "nowhere.h5ad"),
        ),
        case(
            "worker 1 with --batch-key kind",
            ("batch", "covariate", "kind"),
            extra=((), ("--batch-key", "kind")),
        ),
        case(
            "worker 1 with --likelihood poisson",
            ("likelihood",),
            extra=((), ("--likelihood", "poisson")),
        ),
        case("worker 1 without --layer", ("layer", "counts"), extra=((), ("--layer", "X"))),
        case(
            "worker 1 with --covariate-keys depth",
            ("covariate", "depth"),
            extra=((), ("--covariate-keys", "depth")),
        ),
        case(
            "--save on both",
            None,
            extra=(("--save",), ("--save",)),
            must_refuse=False,
            check=_saved_model_loads,
        ),
        _killed_mid_run(case),
        Case("h5ad", "worker 1 killed after a checkpoint, both resumed", _killed_resumed(lab)),
    ]


def _killed_mid_run(case) -> Case:
    """Worker 1 SIGKILLed 25 s into a run of 3,000 steps (``case`` makes a path's case): the
    chief must end naming the lost worker."""
    return case(
        "worker 1 killed 25 s in",
        ("worker", "lost", "peer", "unavailable"),
        kill_after=25.0,
        judged=(0,),
        extra=(("--iterations", "3000"), ("--iterations", "3000")),
    )


def _killed_resumed(lab: Lab):
    """Worker 1 SIGKILLed once a long ``--save`` run on the ``.h5ad`` path has written its first
    checkpoint (the chief must end naming the lost worker), then both started again with
    ``--resume``, 100 steps past the newest checkpoint: the resumed run must end well and write a
    finite embedding and a model that loads, its newest checkpoint that step."""

    def run():
        folder = lab.folder()
        out = folder / "out"
        long_run = ["--data", str(lab.h5ad), *CELLS, "--output", str(out), "--save"]
        long_run += ["--iterations", "1000000"]
        saved = out / "checkpoints" / "ckpt-1000.index"
        said = workers([long_run, long_run], folder, kill_when=saved.exists)
        (folder / "killed.txt").write_text("\n\n".join(said))
        try:
            refused_or_trained(said[:1], True, ("worker", "lost"))
        except Refusal:
            pass  # the chief named the lost worker, as it must
        steps = [int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index")]
        if not steps:
            raise RuntimeError(f"no checkpoint before the chief ended: {said[0][-600:]}")
        resumed = [*long_run[:-1], str(max(steps) + 100), "--resume"]
        said = workers([resumed, resumed], folder)
        (folder / "resumed.txt").write_text("\n\n".join(said))
        refused_or_trained(said, False, None)
        _saved_model_loads(folder)
        kept = [int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index")]
        if max(kept) != max(steps) + 100:
            raise Wrong(f"the resumed run saved steps {sorted(kept)}, not {max(steps) + 100}")

    return run


def _user_file(name: str):
    def prepare(folder: Path) -> None:
        (folder / name).mkdir()
        (folder / name / "X_gplvm.npy").write_bytes(b"a user's own embedding")

    return prepare


def _one_process_run(lab: Lab):
    def prepare(folder: Path) -> None:
        command = [sys.executable, "-m", "gpflow_svi_gplvm", "--data", str(lab.table), *TABLE[:-1]]
        command += ["--save", "--output", str(folder / "out")]
        environment = {k: v for k, v in os.environ.items() if k != "TF_CONFIG"}
        subprocess.run(command, env=environment, check=True, capture_output=True, timeout=TIMEOUT)

    return prepare


def _saved_model_loads(folder: Path) -> None:
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    check_embedding(folder / "out", None)
    loaded = SingleCellGPLVM.load(folder / "out" / "model")
    if loaded.gene_names != [f"gene{j}" for j in range(12)]:
        raise Wrong(f"the saved model holds genes {loaded.gene_names}")


def baselines(lab: Lab) -> None:
    """The clean run of each path: its embedding is what the correct cases must give."""
    for kind in ("table", "h5ad"):
        outcome = classify(Case(kind, "clean", run_case(lab, kind, must_refuse=False), None))
        if outcome.kind != CLASSES[0]:
            sys.exit(f"the clean {kind} run failed: {outcome.detail}\n{outcome.trace}")
        lab.baseline[kind] = check_embedding(lab.root / f"case{lab.cases:03d}" / "out", None)
        print(f"clean {kind} run: {outcome.seconds:.0f} s", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="+", choices=["table", "h5ad"], help="paths to probe")
    parser.add_argument("--keep", default=None, help="keep the cases' folders here")
    args = parser.parse_args()
    root = Path(args.keep or tempfile.mkdtemp(prefix="probe-workers-"))
    root.mkdir(parents=True, exist_ok=True)
    lab = Lab(root)
    baselines(lab)
    cases = [c for build in (table_cases, h5ad_cases) for c in build(lab)]
    cases = [c for c in cases if not args.only or c.surface in args.only]
    counts: dict[str, Counter] = {}
    unclean = []
    for i, case in enumerate(cases, 1):
        outcome = classify(case)
        counts.setdefault(case.surface, Counter())[outcome.kind] += 1
        print(
            f"[{i}/{len(cases)}] {case.surface}: {case.name}: {outcome.kind} "
            f"({outcome.seconds:.0f} s) {outcome.detail[:400]}",
            flush=True,
        )
        if outcome.kind not in CLASSES[:2]:
            unclean.append(outcome)
    print("\n| path | cases | " + " | ".join(CLASSES) + " |")
    print("|---|---:|" + "---:|" * len(CLASSES))
    total: Counter = Counter()
    for surface, counter in counts.items():
        total += counter
        row = " | ".join(str(counter[k]) for k in CLASSES)
        print(f"| {surface} | {sum(counter.values())} | {row} |")
    print(
        f"| **all** | {sum(total.values())} | " + " | ".join(str(total[k]) for k in CLASSES) + " |"
    )
    for outcome in unclean:
        print(
            f"- {outcome.case.surface}: {outcome.case.name}: **{outcome.kind}**: {outcome.detail}"
        )
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
