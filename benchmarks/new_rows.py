"""New rows: seconds and accuracy of q(x*) and the reconstruction, in-process and exported.

Usage::

    python benchmarks/new_rows.py [--rows 1 100 10000] [--baseline PATH] [--held-out] [--quick]

B-SVI on the digits (N=1797, D=64, standardised columns, 30% of the entries hidden; Q=5, M=50,
the default shared q(u) covariance, 500 steps of batch 100, seed 0). A request of R rows is the
digits repeated to R rows with another 30% of the entries hidden; the RMSE is over those hidden
entries (standardised units). With ``--held-out`` the model trains on a seeded 80% of the digits
and the requests repeat the other 20%. Settings, side by side in this run:

- ``defaults``: each row stops when its closed-form bound stops improving (``tolerance="auto"``),
  and the predictive is exact;
- ``300 fixed steps``: every row takes 300 Adam steps with Polyak averaging (``tolerance=None``);
- ``exported``: the defaults served from ``export_saved_model``, loaded with TensorFlow alone;
- with ``--baseline PATH`` (a checkout of an earlier version of the package), that version's
  ``LatentInference(model, iterations=300)`` with its other defaults, in a subprocess on the
  same model (same seed) and requests.

In-process seconds are a second call of one compiled object (the first call traces); one row's
seconds are the median of 20 calls.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

TRAINING = dict(iterations=500, batch_size=100, seed=0, progress=False)


def digits_and_model(iterations: int, held_out: bool = False):
    """The standardised digits with 30% hidden and B-SVI trained on them: on all of them, and
    the rows of requests are the digits; or (``held_out``) on a seeded 80%, and the requests'
    rows are the other 20%, which the model never saw."""
    import numpy as np

    import gpflow_svi_gplvm as svi
    from gpflow_svi_gplvm.datasets import load_digits

    Y = load_digits().Y
    Y = (Y - Y.mean(0)) / np.where(Y.std(0) > 0, Y.std(0), 1.0)
    observed = np.where(np.random.default_rng(0).random(Y.shape) < 0.3, np.nan, Y)
    requested = Y
    if held_out:
        order = np.random.default_rng(2).permutation(len(Y))
        cut = int(0.8 * len(Y))
        observed, requested = observed[order[:cut]], Y[order[cut:]]
    model = svi.BayesianSVIGPLVM(observed, 5, num_inducing=50)
    svi.fit(model, observed, **{**TRAINING, "iterations": iterations})
    return requested, model


def request(Y, rows: int):
    """``rows`` rows of the digits with 30% of their entries hidden, and the hidden mask."""
    import numpy as np

    truth = np.resize(Y, (rows, Y.shape[1]))
    hidden = np.random.default_rng(1).random(truth.shape) < 0.3
    return truth, np.where(hidden, np.nan, truth), hidden


def timed(call, repeats: int = 1) -> tuple[float, object]:
    """Median seconds of ``repeats`` calls after one untimed call, and the last result."""
    result = call()
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        result = call()
        seconds.append(time.perf_counter() - start)
    return statistics.median(seconds), result


def measure(reconstruct, Y, sizes: list[int]) -> dict[int, dict]:
    """Seconds and hidden-entry RMSE of ``reconstruct(rows) -> mean`` per request size."""
    import numpy as np

    results = {}
    for rows in sizes:
        truth, requested, hidden = request(Y, rows)
        seconds, mean = timed(
            lambda requested=requested: reconstruct(requested), 20 if rows == 1 else 1
        )
        error = np.sqrt(np.mean((np.asarray(mean)[hidden] - truth[hidden]) ** 2))
        results[rows] = {"seconds": seconds, "rmse": float(error)}
    return results


def in_process(
    sizes: list[int], iterations: int, defaults_only: bool = False, held_out: bool = False
) -> dict:
    """This package's settings on one trained model (``defaults_only``: its defaults only, the
    call an earlier version also has; ``held_out``: see :func:`digits_and_model`)."""
    import tensorflow as tf

    import gpflow_svi_gplvm as svi

    Y, model = digits_and_model(iterations, held_out)
    if defaults_only:
        inference = svi.LatentInference(model, iterations=300)
        return {"baseline": measure(lambda rows: inference.reconstruct(rows)[0], Y, sizes)}
    results = {}
    for name, tolerance in (("defaults", "auto"), ("300 fixed steps", None)):
        inference = svi.LatentInference(model, iterations=300, tolerance=tolerance)
        results[name] = measure(lambda rows, i=inference: i.reconstruct(rows)[0], Y, sizes)
    with tempfile.TemporaryDirectory() as folder:
        path = svi.export_saved_model(model, os.path.join(folder, "model"))
        served = tf.saved_model.load(str(path)).signatures["reconstruct"]
        results["exported"] = measure(lambda rows: served(Y=tf.constant(rows))["mean"], Y, sizes)
    return results


def baseline(path: str, sizes: list[int], iterations: int, held_out: bool) -> dict:
    """The defaults of the package checked out at ``path``, in a subprocess."""
    code = (
        "import json, sys; import gpflow_svi_gplvm, new_rows;"
        "assert gpflow_svi_gplvm.__file__.startswith(sys.argv[1]);"
        "print(json.dumps(new_rows.in_process("
        "json.loads(sys.argv[2]), int(sys.argv[3]), True, sys.argv[4] == 'held-out')))"
    )
    # The checkout is the process's working folder (first on a `-c` process's path), this folder
    # (for new_rows itself) is next.
    root, here = os.path.abspath(path), os.path.dirname(os.path.abspath(__file__))
    command = [
        sys.executable,
        "-c",
        code,
        root,
        json.dumps(sizes),
        str(iterations),
        "held-out" if held_out else "all",
    ]
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([root, here]))
    result = subprocess.run(
        command, capture_output=True, text=True, check=True, cwd=root, env=environment
    )
    measured = json.loads(result.stdout.strip().splitlines()[-1])["baseline"]
    return {"version at --baseline, its defaults": {int(k): v for k, v in measured.items()}}


def table(results: dict, sizes: list[int]) -> str:
    header = " | ".join(f"{rows} row(s): s, RMSE" for rows in sizes)
    lines = [f"| setting | {header} |", "|---|" + "---:|" * len(sizes)]
    for name, by_size in results.items():
        cells = " | ".join(f"{by_size[r]['seconds']:.3g}, {by_size[r]['rmse']:.4f}" for r in sizes)
        lines.append(f"| {name} | {cells} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 100, 10000])
    parser.add_argument("--baseline", default=None, help="a checkout of an earlier version")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a smoke test)")
    parser.add_argument(
        "--held-out", action="store_true", help="requests from 20%% of the digits never trained on"
    )
    args = parser.parse_args(argv)
    sizes, iterations = ([1, 20], 20) if args.quick else (args.rows, TRAINING["iterations"])
    results = in_process(sizes, iterations, held_out=args.held_out)
    if args.baseline:
        results.update(baseline(args.baseline, sizes, iterations, args.held_out))
    print(table(results, sizes), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
