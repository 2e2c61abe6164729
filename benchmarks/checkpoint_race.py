"""Processes racing for one checkpoint folder, killed at random moments.

Usage::

    python benchmarks/checkpoint_race.py [--rounds 20] [--seed 0]

Each round starts two training processes at once on the same folder, each as a user would run
it (``fit(..., checkpoint_dir=folder, resume=True)``, a point GPLVM checkpointed every 2 steps),
waits for the round's first new checkpoint, then SIGKILLs one of them at a random moment of the
next 2 s, then the other. One process holds the folder's lock and trains; the other is turned away
(``ValueError`` naming the holder). After every round each checkpoint in the folder must read
and carry the id of the run that the folder's record names: one run, never two mixed.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# A process as a user would run it: resume whatever the folder holds. Exit status 3 when the
# folder is held by the other process.
RACER = """
import sys, numpy as np
from gpflow_svi_gplvm import PointGPLVM, fit
rng = np.random.default_rng(1)
data = np.tanh(rng.standard_normal((30, 2)) @ rng.standard_normal((2, 4)))
try:
    fit(PointGPLVM(data, 2, num_inducing=5), data, int(sys.argv[2]), batch_size=10,
        progress=False, checkpoint_every=int(sys.argv[3]), checkpoint_dir=sys.argv[1],
        resume=True, steps_per_call=1)
except ValueError as error:
    print(error, flush=True)
    sys.exit(3)
"""


def race(folder: Path, rounds: int, seed: int = 0) -> tuple[list[str], int]:
    """``rounds`` rounds of two processes started at once on ``folder``, one SIGKILLed at a random
    moment, then the other; what each said (the one turned away names the holder) and how many
    were killed while they ran."""
    rng = np.random.default_rng(seed)
    said, killed = [], 0
    for _ in range(rounds):
        racers = [
            subprocess.Popen(
                [sys.executable, "-c", RACER, str(folder), "100000", "2"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(2)
        ]
        # Once the round's first checkpoint is written (after TensorFlow's import), kill one of
        # them within the next 2 s: inside a step, between steps, or inside a save.
        before = len(list(folder.glob("ckpt-*.index"))) if folder.exists() else 0
        deadline = time.monotonic() + 120
        # The one turned away exits soon: wait on the one that holds the folder.
        while time.monotonic() < deadline and any(r.poll() is None for r in racers):
            if folder.exists() and len(list(folder.glob("ckpt-*.index"))) > before:
                break
            time.sleep(0.05)
        time.sleep(rng.uniform(0, 2))
        victim = int(rng.integers(2))
        for racer in (racers[victim], racers[1 - victim]):
            racer.kill()
            said.append(racer.communicate()[0])
            killed += racer.returncode == -9
        check_one_run(folder)
    return said, killed


def check_one_run(folder: Path) -> int:
    """Every checkpoint in ``folder`` reads and was written by the run that the folder's record
    names (an ``AssertionError`` otherwise); the number of checkpoints."""
    import tensorflow as tf

    from gpflow_svi_gplvm.training.run_folder import RUN_FILE

    indexes = sorted(folder.glob("ckpt-*.index"))
    if not indexes:
        return 0
    run = json.loads((folder / RUN_FILE).read_text())["run"]
    for index in indexes:
        reader = tf.train.load_checkpoint(str(index.with_suffix("")))
        record = json.loads(reader.get_tensor("data/.ATTRIBUTES/py_state"))
        assert record["run"] == run, f"{index} was written by run {record['run']}, not {run}"
    return len(indexes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "run"
        start = time.perf_counter()
        said, killed = race(folder, args.rounds, args.seed)
        checkpoints = check_one_run(folder)
        if not checkpoints:
            raise SystemExit("No checkpoint was written: the race tested nothing.")
        steps = sorted(int(p.name[5:-6]) for p in folder.glob("ckpt-*.index"))
        refused = sum("being written by another process" in s for s in said)
        seconds = time.perf_counter() - start
        print(f"{args.rounds} rounds: {killed} processes SIGKILLed while running, {seconds:.0f} s")
        print(f"processes turned away by the lock: {refused}")
        print(f"checkpoints left: {checkpoints} (steps {steps}), every one readable and of one run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
