"""The probe's cases of running things: the served export called with wrong inputs, an
``.h5ad`` changed or truncated while a fit reads it, and the command line's flags and its
--save/--export/--overwrite/--resume combinations (benchmarks/probe.py)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import numpy as np
from probe_kit import (
    Case,
    Refusal,
    Wrong,
    check_close,
    check_finite,
    check_kept,
    counts_cells,
    keeping,
    snapshot,
)

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

FILE = ("file", "read")
CHANGED = ("changed", "removed", "truncated", "while being read")


def serving_cases(lab) -> list[Case]:
    """The exported model called as a server would be, with inputs of wrong kinds."""
    import tensorflow as tf

    counts = lab.query.layers["counts"].toarray().astype(np.float64)
    good = dict(
        counts=tf.constant(counts),
        batch=tf.constant(lab.query.obs["batch"].astype(str).to_numpy()),
        depth=tf.constant(lab.query.obs["depth"].to_numpy()),
    )

    def changed(**inputs):
        request = dict(good)
        for name, value in inputs.items():
            if value is None:
                request.pop(name)
            else:
                request[name] = value
        return request

    def c(values, dtype=tf.float64):
        return tf.constant(values, dtype)

    def entry(value):
        values = counts.copy()
        values[2, 3] = value
        return c(values)

    wrong = [
        ("counts as float32", changed(counts=c(counts, tf.float32)), ("dtype", "float", "counts")),
        ("counts as int64", changed(counts=c(counts, tf.int64)), ("dtype", "int", "counts")),
        ("counts one gene short", changed(counts=c(counts[:, :-1])), ("shape", "counts")),
        (
            "counts one gene more",
            changed(counts=c(np.hstack([counts, counts[:, :1]]))),
            ("shape", "counts"),
        ),
        ("counts of one dimension", changed(counts=c(counts[0])), ("shape", "counts", "rank")),
        (
            "counts of three dimensions",
            changed(counts=c(counts[None])),
            ("shape", "counts", "rank"),
        ),
        ("a count of 0.5", changed(counts=entry(0.5)), ("counts",)),
        ("a negative count", changed(counts=entry(-2)), ("counts",)),
        ("a NaN count", changed(counts=entry(np.nan)), ("counts",)),
        ("an infinite count", changed(counts=entry(np.inf)), ("counts",)),
        (
            "a cell without counts",
            changed(counts=c(np.where(np.arange(10)[:, None] == 4, 0, counts))),
            ("counts",),
        ),
        ("batch missing", changed(batch=None), ("batch",)),
        ("depth missing", changed(depth=None), ("depth",)),
        ("an extra input", changed(colour=tf.constant(["red"] * 10)), ("colour", "unexpected")),
        ("an unknown batch", changed(batch=tf.constant(["z"] * 10)), ("batch", "category")),
        ("batch as numbers", changed(batch=c(np.zeros(10))), ("batch", "dtype", "string")),
        (
            "batch for 5 of 10 cells",
            changed(batch=good["batch"][:5]),
            ("batch",),
        ),
        ("batch of shape [5, 2]", changed(batch=tf.reshape(good["batch"], [5, 2])), ("batch",)),
        (
            "depth for 5 of 10 cells",
            changed(depth=good["depth"][:5]),
            ("depth",),
        ),
        ("depth NaN", changed(depth=c(np.full(10, np.nan))), ("depth",)),
        ("depth infinite", changed(depth=c(np.full(10, np.inf))), ("depth",)),
        ("depth as text", changed(depth=tf.constant(["1.5"] * 10)), ("depth", "dtype")),
        ("batch empty text", changed(batch=tf.constant([""] * 10)), ("batch", "category")),
    ]
    cases = [
        Case("serving", name, _served(lab, request, None), names) for name, request, names in wrong
    ]
    right = [
        ("the clean query", good, slice(None)),
        ("a single cell", {k: v[4:5] for k, v in good.items()}, slice(4, 5)),
        ("cells in reverse order", {k: v[::-1] for k, v in good.items()}, slice(None, None, -1)),
        (
            "batch as bytes",
            changed(batch=tf.constant([s.encode() for s in lab.query.obs["batch"].astype(str)])),
            slice(None),
        ),
        ("batch of shape [10, 1]", changed(batch=good["batch"][:, None]), slice(None)),
    ]
    cases += [
        Case("serving", name, _served(lab, request, rows), None) for name, request, rows in right
    ]
    empty = {k: v[:0] for k, v in good.items()}
    cases.append(Case("serving", "no cells", _served(lab, empty, slice(0, 0)), ("cells", "empty")))
    cases.append(
        Case(
            "serving",
            "positional arguments",
            _positional(lab, good),
            ("keyword", "argument", "positional"),
        )
    )
    cases.append(
        Case(
            "serving",
            "counts above 2^24",
            _served(lab, changed(counts=entry(2.0**24 + 1)), None, finite=True),
            ("counts", "2^24", "large"),
        )
    )
    return cases


def _served(lab, request: dict, rows, finite: bool = False):
    def run():
        embed = lab.served()
        result = _call(lambda: embed(**request))
        if rows is None and not finite:
            raise Wrong(f"served a result ({result['mean'].shape}) for a request it should refuse")
        if rows is None:
            check_finite(result["mean"], "served mean")
        else:
            # A cell served in another request stops its Newton steps at another step: the
            # export's documented tolerance (a thousandth of a posterior standard deviation).
            check_close(result["mean"], lab.baseline[rows], "served mean", atol=1e-6)
        return result

    return run


def _positional(lab, good):
    def run():
        embed = lab.served()
        return _call(lambda: embed(good["counts"], good["batch"], good["depth"]))

    return run


def _call(call):
    """The served function's answer; its refusals (a failed check, a request that does not fit
    the signature) as :class:`Refusal`."""
    import tensorflow as tf

    try:
        return call()
    except (tf.errors.InvalidArgumentError, TypeError) as error:
        raise Refusal(getattr(error, "message", str(error))) from error


def disk_cases(lab) -> list[Case]:
    """``fit`` of an ``.h5ad`` path: files damaged before and during the run, outputs."""
    cases = []

    def add(name, run, names, timeout=900.0):
        cases.append(Case("out-of-core", name, run, names, timeout))

    damages = {
        "truncated to half while training": lambda p: _truncate_file(p, 0.5),
        "truncated to nothing while training": lambda p: _truncate_file(p, 0.0),
        "removed while training": lambda p: p.unlink(),
        "rewritten with other counts while training": lambda p: _other_counts(p, in_place=True),
        "replaced (renamed over) while training": lambda p: _other_counts(p, in_place=False),
        "bytes appended while training": lambda p: p.open("ab").write(b"\0" * 4096),
    }
    for name, damage in damages.items():
        add(name, _damaged_fit(lab, damage), CHANGED)
    before = {
        "a truncated .h5ad": lambda p: _truncate_file(p, 0.5),
        "an empty file": lambda p: _truncate_file(p, 0.0),
        "a text file named .h5ad": lambda p: p.write_text("cells"),
        "a folder named .h5ad": lambda p: (p.unlink(), p.mkdir()),
        "no file at the path": lambda p: p.unlink(),
    }
    for name, damage in before.items():
        add(f"fit of {name}", _fit_path(lab, damage), FILE + ("exist", "folder"))
        add(
            f"normalized_expression of {name}",
            _expression_path(lab, damage),
            FILE + ("exist", "folder"),
        )
    add("a layer the file lacks", _fit_path(lab, None, layer="nope"), ("layer", "nope"))
    add("output= a file", _fit_path(lab, None, output="file"), ("output",))
    add("no output=", _fit_path(lab, None, output=None), ("output",))
    add("output holding an earlier embedding", _fit_twice(lab, False), ("overwrite", "earlier"))
    add("output holding an earlier embedding, overwrite=True", _fit_twice(lab, True), None)
    return cases


def _atlas_copy(lab) -> Path:
    folder = lab.folder("disk")
    path = folder / "atlas.h5ad"
    shutil.copy(lab.atlas, path)
    return path


def _fit(path: Path, output, **options):
    face = SingleCellGPLVM(
        2, layer=options.pop("layer", "counts"), batch_key="batch", num_inducing=8
    )
    face.fit(path, output=output, batch_size=16, progress=False, **options)
    return face


def _damaged_fit(lab, damage):
    """A fit whose file is damaged by a thread, started at the run's 20th step, 0.1 s later."""

    def run():
        path = _atlas_copy(lab)
        output = path.parent / "out"
        started = []

        def callback(step: int) -> None:
            if not started:
                thread = threading.Thread(target=lambda: (time.sleep(0.1), damage(path)))
                thread.start()
                started.append(thread)

        _fit(path, output, iterations=400, callback=callback, callback_every=20)
        started[0].join()
        raise Wrong("the fit ran to the end on a file changed under it, without a word")

    return run


def _truncate_file(path: Path, keep: float) -> None:
    data = path.read_bytes()
    with path.open("r+b") as file:
        file.truncate(int(len(data) * keep))


def _other_counts(path: Path, in_place: bool) -> None:
    other = counts_cells(200, 8, seed=9)
    fresh = path.with_name("other.h5ad")
    other.write_h5ad(fresh)
    if in_place:
        with path.open("r+b") as file:
            file.write(fresh.read_bytes())
            file.truncate()
    else:
        os.replace(fresh, path)


def _fit_path(lab, damage, layer: str = "counts", output: str | None = "out"):
    def run():
        path = _atlas_copy(lab)
        if damage is not None:
            damage(path)
        target = None if output is None else path.parent / output
        if output == "file":
            target.write_text("mine")
        before = snapshot(path.parent)
        try:
            _fit(path, target, iterations=5, layer=layer)
        finally:
            check_kept(before, path.parent, only=[n for n in before if n != "out"])
        check_finite(np.load(target / "X_gplvm.npy"), "embedding")

    return run


def _expression_path(lab, damage):
    def run():
        path = _atlas_copy(lab)
        damage(path)
        return lab.face.normalized_expression(str(path), n_samples=2)

    return run


def _fit_twice(lab, overwrite: bool):
    def run():
        path = _atlas_copy(lab)
        output = path.parent / "out"
        _fit(path, output, iterations=5)
        (output / "notes.txt").write_text("mine")
        before = snapshot(output)
        try:
            _fit(path, output, iterations=5, overwrite=overwrite)
        except ValueError:
            check_kept(before, output)
            raise
        check_kept(before, output, only=["notes.txt"])
        check_finite(np.load(output / "X_gplvm.npy"), "embedding")

    return run


def command(args: list[str]) -> str:
    """The command line run in this process: its standard output, or a :class:`Refusal` with
    its error line (exit status 2); another status or an exception escapes as raised."""
    from gpflow_svi_gplvm.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            status = main(args)
        except SystemExit as error:  # argparse's
            status = error.code
    return _status(status, out.getvalue(), err.getvalue())


def _status(status, out: str, err: str) -> str:
    if status == 0:
        return out
    if status == 2:
        lines = [line for line in err.splitlines() if "error" in line.lower()] or [err]
        message = " ".join(lines)
        if "[errno" in message.lower() or "traceback" in err.lower():
            raise RuntimeError(f"a raw error: {message}")
        raise Refusal(message)
    raise RuntimeError(f"exit status {status}: {err[-400:]}")


def cli_cases(lab) -> list[Case]:
    """Flags a user might get wrong, and runs into outputs that hold earlier runs."""
    atlas = str(lab.atlas)
    tiny = ["--latent-dim", "2", "--num-inducing", "8", "--batch-size", "16", "--no-progress"]
    cells = ["--data", atlas, "--layer", "counts", "--batch-key", "batch", *tiny]
    cases = []

    def add(name, run, names, timeout=900.0):
        cases.append(Case("command line", name, run, names, timeout))

    def refused(args, output="flags"):
        return lambda: command([*args, "--output", str(lab.folder(output) / "out")])

    flags = [
        (["--iterations", "abc"], ("iterations",)),
        (["--iterations", "-1"], ("iterations",)),
        (["--iterations", "0"], ("iterations",)),
        (["--batch-size", "0"], ("batch",)),
        (["--latent-dim", "0"], ("latent",)),
        (["--num-inducing", "0"], ("inducing",)),
        (["--learning-rate", "-1"], ("learning",)),
        (["--learning-rate", "nan"], ("learning",)),
        (["--seed", "-1"], ("seed",)),
        (["--startup-timeout", "-1"], ("timeout",)),
        (["--likelihood", "foo"], ("likelihood",)),
        (["--model", "foo"], ("model",)),
        (["--bogus"], ("bogus", "unrecognized")),
        (["--layer", "nope"], ("layer",)),
        (["--batch-key", "nope"], ("batch",)),
        (["--covariate-keys", "nope"], ("nope", "covariate")),
        (["--genes", "nope"], ("nope", "genes")),
        (["--genes", "gene_ids"], ("gene_ids", "boolean", "true/false")),
        (["--likelihood", "gaussian"], ("likelihood",)),
        (["--likelihood", "bernoulli"], ("likelihood",)),
        (["--labels"], ("labels",)),
        (["--resume"], ("resume", "checkpoint")),
    ]
    for extra, names in flags:
        add(" ".join(extra) + " (an .h5ad)", refused([*cells, "--iterations", "3", *extra]), names)
    table = ["--iterations", "3", *tiny]
    add("--layer with a table", refused([*table, "--layer", "counts"]), ("layer", "h5ad"))
    add(
        "--batch-key with a table", refused([*table, "--batch-key", "batch"]), ("batch-key", "h5ad")
    )
    for name, make in bad_files(lab).items():
        names = ("numeric", "column") if name.endswith("csv of text") else FILE + ("exist",)
        add(f"--data {name}", refused(["--data", str(make()), "--iterations", "3", *tiny]), names)
    add(
        "--output a file",
        lambda: command([*cells, "--iterations", "3", "--output", str(lab.a_file())]),
        ("output", "file"),
    )
    cases += _run_cases(lab, cells, add)
    _resume_cases(lab, cells, add)
    add(
        "python -m gpflow_svi_gplvm --bogus",
        _process([sys.executable, "-m", "gpflow_svi_gplvm", "--bogus"]),
        ("bogus", "unrecognized"),
    )
    add(
        "gpflow-svi-gplvm --data missing.h5ad",
        _process(["gpflow-svi-gplvm", "--data", str(lab.root / "missing.h5ad")]),
        ("missing.h5ad",),
    )
    add(
        "python -m gpflow_svi_gplvm on an .h5ad, --save --export",
        _process(
            [
                sys.executable,
                "-m",
                "gpflow_svi_gplvm",
                *cells,
                "--iterations",
                "5",
                "--save",
                "--export",
                "--output",
                str(lab.folder("process") / "out"),
            ]
        ),
        None,
    )
    return cases


def bad_files(lab) -> dict:
    def made(name, write):
        def make():
            path = lab.folder("bad") / name
            write(path)
            return path

        return make

    return {
        "missing.h5ad": made("missing.h5ad", lambda p: None),
        "a truncated .h5ad": made("t.h5ad", lambda p: p.write_bytes(lab.atlas.read_bytes()[:5000])),
        "an empty .h5ad": made("e.h5ad", lambda p: p.write_bytes(b"")),
        "a text file as .h5ad": made("x.h5ad", lambda p: p.write_text("cells")),
        "a folder named .h5ad": made("d.h5ad", lambda p: p.mkdir()),
        "a .csv of text": made("x.csv", lambda p: p.write_text("a,b\nx,y\n")),
    }


def _run_cases(lab, cells: list[str], add) -> list[Case]:
    """Runs into one output in turn: each case's precondition is the earlier cases' output."""
    out = lab.folder("runs") / "out"
    run = [*cells, "--iterations", "5", "--output", str(out)]

    def step(extra: list[str], check=None, keep: bool = False):
        def call():
            before = snapshot(out)
            try:
                text = command([*run, *extra])
            except BaseException:
                check_kept(before, out)
                raise
            if keep:
                check_kept(before, out, only=["notes.txt"])
            if check is not None:
                check()
            return text

        return call

    def saved():
        SingleCellGPLVM.load(out / "model")
        check_finite(np.load(out / "X_gplvm.npy"), "embedding")
        if not (out / "saved_model" / "1").is_dir():
            raise Wrong("--export wrote no saved_model/1")

    add("a fresh run with --save --export", step(["--save", "--export"], saved), None)
    add("again into it, no flags", step([]), ("overwrite", "earlier", "resume"))
    add("again into it, --save", step(["--save"]), ("overwrite", "resume", "model"))
    add("again into it, --export", step(["--export"]), ("overwrite", "earlier", "export"))
    add(
        "--resume, --likelihood poisson",
        step(["--resume", "--save", "--likelihood", "poisson"]),
        ("likelihood",),
    )
    add(
        "--resume, --batch-key kind",
        step(["--resume", "--save", "--batch-key", "kind"]),
        ("kind", "covariate", "batch"),
    )
    add(
        "--resume, --latent-dim 3",
        step(["--resume", "--save", "--latent-dim", "3"]),
        ("latent", "shape", "3"),
    )
    add("--resume --save", step(["--resume", "--save"], saved), None)
    add(
        "--resume --save --export",
        step(["--resume", "--save", "--export"], saved),
        ("export", "overwrite"),
    )

    def note():
        (out / "notes.txt").write_text("mine")
        return step(["--overwrite", "--save", "--export"], saved, keep=True)()

    add("--overwrite --save --export beside a user's notes.txt", note, None)
    add(
        "--overwrite --resume",
        step(["--overwrite", "--resume", "--save"], saved),
        ("overwrite", "resume"),
    )

    def user_model():
        shutil.rmtree(out / "model")
        (out / "model").mkdir()
        (out / "model" / "mine.txt").write_text("mine")
        return step(["--overwrite", "--save"])()

    add(
        "--overwrite --save where model/ is a user's folder",
        user_model,
        ("model", "not a saved model"),
    )
    return []


def _resume_cases(lab, cells: list[str], add) -> None:
    """A run resumed on data lacking a gene, and a run SIGKILLed once its first checkpoint is
    written, then resumed: each in a folder of its own."""

    def lacking_a_gene():
        import anndata

        out = lab.folder("resume") / "out"
        command([*cells, "--iterations", "5", "--save", "--output", str(out)])
        lacking = lab.folder("resume") / "lacking.h5ad"
        anndata.read_h5ad(lab.atlas)[:, 1:].copy().write_h5ad(lacking)
        data = cells.index("--data") + 1
        fewer = [*cells[:data], str(lacking), *cells[data + 1 :]]
        return keeping(
            out,
            lambda: command(
                [*fewer, "--iterations", "10", "--save", "--resume", "--output", str(out)]
            ),
        )

    def killed_then_resumed():
        out = lab.folder("killed") / "out"
        run = [*cells, "--save", "--output", str(out)]
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        first = out / "checkpoints" / "ckpt-1000.index"
        process = subprocess.Popen(
            [sys.executable, "-m", "gpflow_svi_gplvm", *run, "--iterations", "1000000"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while not first.exists():
                if process.poll() is not None:
                    raise RuntimeError(f"the run ended (status {process.returncode}) unkilled")
                time.sleep(0.1)
        finally:
            process.kill()
            process.wait()
        steps = [int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index")]
        command([*run, "--iterations", str(max(steps) + 100), "--resume"])
        SingleCellGPLVM.load(out / "model")
        check_finite(np.load(out / "X_gplvm.npy"), "embedding")
        kept = [int(p.name[5:-6]) for p in (out / "checkpoints").glob("ckpt-*.index")]
        if max(kept) != max(steps) + 100:
            raise Wrong(f"the resumed run saved steps {sorted(kept)}, not {max(steps) + 100}")

    add("--resume on data lacking a gene", lacking_a_gene, ("gene", "data", "differ"))
    add("killed once its first checkpoint is written, then --resume", killed_then_resumed, None)


def _process(args: list[str]):
    def run():
        env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
        result = subprocess.run(args, capture_output=True, text=True, timeout=900, env=env)
        return _status(result.returncode, result.stdout, result.stderr)

    return run
