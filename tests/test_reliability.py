"""Whole-process faults: training killed at random moments resumes exactly.

Where the other fault cases live: exports killed at random moments of an overwrite and exports
that never delete a user's files in ``test_export_folder.py``; damaged checkpoints, other data
and another batch size on resume in ``test_checkpoints.py``; the table of bad inputs at every
boundary in ``test_validation.py``, the command line's in ``test_cli.py``.
"""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit

N, D, Q, M = 40, 4, 2, 6
ITERATIONS, KILLS = 1500, 2
SETTINGS = dict(batch_size=16, progress=False, steps_per_call=25, seed=3, checkpoint_every=50)

# A training process as a user would run it: resume from the folder's latest checkpoint, if
# any, and report each checkpoint written (the callback runs right after it).
CHILD = f"""
import sys
import numpy as np
from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
data = np.load(sys.argv[1])
model = BayesianSVIGPLVM(data, {Q}, num_inducing={M}, latent_expectation="monte-carlo")
report = lambda step: print(step, flush=True)
fit(model, data, iterations={ITERATIONS}, checkpoint_dir=sys.argv[2], resume=True,
    callback=report, callback_every={SETTINGS["checkpoint_every"]}, **{SETTINGS!r})
"""


def test_training_killed_at_random_moments_resumes_to_the_uninterrupted_run(tmp_path):
    rng = np.random.default_rng(0)
    data = np.tanh(rng.standard_normal((N, Q)) @ rng.standard_normal((Q, D)))
    np.save(tmp_path / "data.npy", data)
    # Monte Carlo steps repeat bit for bit (closed-form ones to round-off: test_checkpoints.py).
    straight = BayesianSVIGPLVM(data, Q, num_inducing=M, latent_expectation="monte-carlo")
    uninterrupted = fit(straight, data, iterations=ITERATIONS, **SETTINGS)

    directory, reached = tmp_path / "run", []
    for _ in range(KILLS):
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(tmp_path / "data.npy"), str(directory)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Let it write 2-8 checkpoints, then kill it at a random moment of the next interval
        # (measured on its own clock): inside a step, between steps or inside a save.
        steps, times = [], []
        for _ in range(rng.integers(2, 9)):
            line = child.stdout.readline()
            assert line, f"training ended before its checkpoints: {child.stderr.read()[-3000:]}"
            steps.append(int(line))
            times.append(time.perf_counter())
        time.sleep(rng.uniform(0, (times[-1] - times[0]) / (len(times) - 1)))
        child.kill()  # SIGKILL: no handler runs, a write in flight stays half done
        child.wait()
        reached.append([*steps, *map(int, child.stdout.read().split())][-1])
    print(f"the last checkpoint each killed process reported: {reached}")
    assert reached[-1] < ITERATIONS, "the last kill came after training had ended"

    resumed = BayesianSVIGPLVM(data, Q, num_inducing=M, latent_expectation="monte-carlo")
    history = fit(
        resumed, data, iterations=ITERATIONS, checkpoint_dir=directory, resume=True, **SETTINGS
    )
    for expected, actual in zip(straight.trainable_variables, resumed.trainable_variables):
        np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(history.elbo, uninterrupted.elbo, rtol=1e-12)
