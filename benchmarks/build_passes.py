"""The build of an out-of-core single-cell fit: how often it reads the ``.h5ad`` file, and its
seconds, for two trees of the package side by side (e.g. this one against an older checkout).

Usage::

    python benchmarks/build_passes.py --cells 200000 --trees OLD_TREE .
    python benchmarks/build_passes.py --quick                      # a smoke run: tiny sizes

Each tree is run in a process of its own (``PYTHONPATH`` set to it) on the same atlas file
(:func:`atlas_scale.write_atlas`: 2,000 genes, a batch column) with the fit of the atlas-scale
benchmark, ``SingleCellGPLVM(10, batch_key="batch").fit(path, output=..., checkpoint_dir=...)``.
The build is everything before the first training step (``Trainer.train`` is stopped at its
entry); the rows read are those the main thread reads from the file's matrix (the block reader
of ``DiskRows`` wrapped with a counter), so that the training stream's prefetching is left out;
passes are rows read over N. The best of ``--repeats`` builds is shown for each tree.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from atlas_scale import write_atlas


class _Built(Exception):
    """Raised at the first training step: the build is done."""


def _module(*names: str):
    """The first of the modules ``names`` that the package imported holds (the layout moved:
    flat modules, then sub-packages)."""
    import importlib

    import gpflow_svi_gplvm

    package = Path(gpflow_svi_gplvm.__file__).parent
    for name in names:
        parts = name.split(".")[1:]
        if package.joinpath(*parts[:-1], parts[-1] + ".py").exists():
            return importlib.import_module(name)
    raise ImportError(f"none of {names} in {package}")


def build_process(path: str, folder: str) -> dict:
    """One build in this process: rows read from the matrix and seconds until the first step."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

    rows_module = _module("gpflow_svi_gplvm.rows.h5ad", "gpflow_svi_gplvm.disk_rows")
    trainer_module = _module("gpflow_svi_gplvm.training.trainer", "gpflow_svi_gplvm.training")
    source, trainer = rows_module._Source, trainer_module.Trainer
    read, counted = source.read, [0]

    def counting_read(self, start: int, stop: int):
        if threading.current_thread() is threading.main_thread():
            counted[0] += stop - start
        return read(self, start, stop)

    def stop_at_first_step(self, *args, **kwargs):
        raise _Built

    source.read, trainer.train = counting_read, stop_at_first_step
    begin = time.perf_counter()
    try:
        SingleCellGPLVM(10, batch_key="batch").fit(
            path, 10, progress=False, output=folder, checkpoint_dir=f"{folder}/checkpoints"
        )
    except _Built:
        pass
    seconds = time.perf_counter() - begin
    import h5py

    with h5py.File(path, "r") as file:
        cells = int(file["X"].attrs["shape"][0])
    return {"rows_read": counted[0], "passes": counted[0] / cells, "seconds": seconds}


def run_tree(tree: Path, path: Path, repeats: int) -> dict:
    """The best of ``repeats`` builds by the package of ``tree``, each in a fresh process."""
    best: dict | None = None
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as folder:
            env = dict(os.environ, PYTHONPATH=f"{tree}{os.pathsep}{Path(__file__).parent}")
            command = [sys.executable, __file__, "--child", str(path), folder]
            done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
            if done.returncode:
                raise RuntimeError(f"{tree}: {done.stderr[-3000:]}")
            result = json.loads(done.stdout.strip().splitlines()[-1])
        if best is None or result["seconds"] < best["seconds"]:
            best = result
    assert best is not None
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cells", type=int, default=200_000)
    parser.add_argument("--trees", type=Path, nargs="+", default=[Path(".")])
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--folder", type=Path, help="where the .h5ad file goes (kept)")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 3,000 cells")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(build_process(*args.child)))
        return 0
    cells = 3000 if args.quick else args.cells
    folder = args.folder or Path(tempfile.mkdtemp(prefix="build_passes_"))
    folder.mkdir(parents=True, exist_ok=True)
    path = write_atlas(folder / f"atlas_{cells}.h5ad", cells)
    print(f"build of SingleCellGPLVM(10, batch_key='batch').fit on {cells} cells ({path.name})")
    print("\n| tree | rows read | passes | build s | s against the first |")
    print("|---|---:|---:|---:|---:|")
    first = None
    for tree in args.trees:
        r = run_tree(tree.resolve(), path, args.repeats)
        first = first or r["seconds"]
        print(
            f"| {tree} | {r['rows_read']:,} | {r['passes']:.2f} | {r['seconds']:.1f} "
            f"| {r['seconds'] / first:.2f} |"
        )
    return 0


if __name__ == "__main__":
    np.seterr(all="ignore")
    sys.exit(main())
