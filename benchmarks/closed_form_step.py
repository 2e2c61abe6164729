"""What the closed-form data term costs inside the default step, by implementation.

Usage::

    python benchmarks/closed_form_step.py [--repeats 5] [--baseline PATH] [--xla] [--gaps]
                                          [--quick]

B-SVI under the package's defaults at oil flow's shapes (synthetic data of ``common.py``: N=800,
D=12, Q=10, M=25, batch 100): the closed-form expectation over q(x) and natural gradients on
q(u). Trainers side by side in one process, whose models' ``closed_form_data_term`` is, at the
one trace:

- ``as built``: this checkout's;
- ``baseline`` (``--baseline PATH``): the one in
  ``PATH/gpflow_svi_gplvm/components/psi_statistics.py`` (a checkout of another version; loaded
  as a module of this package, so its relative imports resolve here and the rest of the step is
  this checkout's);
- ``XLA island`` (``--xla``): this checkout's, compiled alone by XLA
  (``tf.function(jit_compile=True)``) inside the otherwise uncompiled step (``speed.py --jit``
  compiles the whole step instead);

and the SVGP floor of ``speed.py`` (a plain compiled GPflow SVGP step with known inputs). With
``--gaps`` 30% of the entries are hidden (seeded) and q(u) has a covariance per output, so every
contender takes the masked closed form. A step's time is the difference of two run lengths of
one compiled trainer (100 and 600 steps), the median over ``--repeats`` rounds that alternate the
contenders; the ratios are taken per round.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
from collections.abc import Callable

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import seconds_per_step, synthetic_rows  # noqa: E402
from row_updates import LONG, SHORT  # noqa: E402
from svgp_floor import PlainTrainer, floor_dataset, floor_model  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM  # noqa: E402
from gpflow_svi_gplvm.components.pca import pca_latents  # noqa: E402
from gpflow_svi_gplvm.datasets import random_missing  # noqa: E402
from gpflow_svi_gplvm.models import data_term as models  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

FLOOR, AS_BUILT = "SVGP floor (known X)", "as built"


def baseline_data_term(path: str) -> Callable:
    """``closed_form_data_term`` of the checkout at ``path``."""
    # Where the checkout keeps it: in its wing, or (older checkouts) among flat modules.
    places = [("components", "psi_statistics.py"), ("latent_expectations.py",)]
    sources = [os.path.join(path, "gpflow_svi_gplvm", *place) for place in places]
    found = [source for source in sources if os.path.isfile(source)]
    if not found:
        raise SystemExit(f"--baseline: none of {sources} exists; give a checkout of the package.")
    wing = found[0] == sources[0]  # its relative imports resolve from its own wing
    name = "gpflow_svi_gplvm.components._baseline" if wing else "gpflow_svi_gplvm._baseline"
    spec = importlib.util.spec_from_file_location(name, found[0])
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.closed_form_data_term


def package_trainer(Y: np.ndarray, data_term: Callable, short: int) -> Trainer:
    """A compiled Trainer of B-SVI under the defaults, traced with ``data_term`` in place."""
    original = models.closed_form_data_term
    models.closed_form_data_term = data_term
    try:
        model = BayesianSVIGPLVM(Y, 10, 25, seed=0, shared_covariance=False)
        assert model.closed_form, "every contender must take the closed form"
        built = Trainer(model, Y, batch_size=100)
        built.train(short, steps_per_call=short, progress=False)
    finally:
        models.closed_form_data_term = original
    return built


def floor_trainer(Y: np.ndarray, short: int) -> PlainTrainer:
    X = pca_latents(np.nan_to_num(Y), 10, seed=0)
    built = PlainTrainer(
        floor_model(Y, X, 25), floor_dataset(X, np.nan_to_num(Y), 100), 0.01, 0, False
    )
    built.train(short, steps_per_call=short)
    return built


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--baseline", default=None, help="a checkout of another version")
    parser.add_argument("--xla", action="store_true", help="add the closed form compiled by XLA")
    parser.add_argument("--gaps", action="store_true", help="30%% of the entries hidden")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    short, long = (5, 10) if args.quick else (SHORT, LONG)
    repeats = 1 if args.quick else args.repeats
    Y = synthetic_rows(200 if args.quick else 800)
    if args.gaps:
        Y = random_missing(Y, 0.3, seed=0)[0]
    data_terms = {AS_BUILT: models.closed_form_data_term}
    if args.baseline:
        data_terms["baseline"] = baseline_data_term(args.baseline)
    if args.xla:
        data_terms["XLA island"] = tf.function(models.closed_form_data_term, jit_compile=True)
    trainers: dict = {FLOOR: floor_trainer(Y, short)}
    trainers |= {name: package_trainer(Y, term, short) for name, term in data_terms.items()}
    rounds = []
    for number in range(repeats):
        order = list(trainers)[number % len(trainers) :] + list(trainers)[: number % len(trainers)]
        rounds.append({k: seconds_per_step(trainers[k], short, long) for k in order})
    print(f"{'gaps (30%), masked' if args.gaps else 'complete data'}; {repeats} rounds")
    print("| step | ms/step (median) | range | / floor | / as built |")
    print("|---|---:|---:|---:|---:|")
    for name in trainers:
        times = [1e3 * r[name] for r in rounds]
        floor = statistics.median(r[name] / r[FLOOR] for r in rounds)
        built = statistics.median(r[name] / r[AS_BUILT] for r in rounds)
        low, high = min(times), max(times)
        print(
            f"| {name} | {statistics.median(times):.2f} | {low:.2f}-{high:.2f} | {floor:.2f}x "
            f"| {built:.2f}x |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
