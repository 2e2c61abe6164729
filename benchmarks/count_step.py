"""What a training step costs with each count likelihood, and what fewer quadrature points lose.

Usage::

    python benchmarks/count_step.py [--cells 10000] [--genes 2000] [--points 4]
                                    [--baseline PATH] [--repeats 3] [--quick]

B-SVI at the single-cell benchmark's shapes (Q=10, M=50, batch 256, shared q(u) covariance, Adam
on q(u), the package's defaults otherwise) on counts from
``gpflow_svi_gplvm.datasets.simulate_atlas`` (dense, N cells x D genes), with size factors = the
cells' library sizes: Poisson (closed-form variational expectation) against the negative binomial
with a ``num_gauss_hermite_points`` rule of each size and, with ``--baseline PATH``, the
variational expectation of ``NegativeBinomial`` of the checkout at ``PATH`` (its
``gpflow_svi_gplvm/likelihoods/negative_binomial.py``, or the ``likelihoods.py`` of earlier
versions, loaded as a module of this package) with its default rule, on this checkout's class
(which the size factors require). A step's time is the difference of two run
lengths (20 and 80 steps) of one compiled Trainer, the median over ``--repeats`` rounds that
alternate the contenders. The step does not grow with N (only the batch's rows move).

Accuracy: the minibatch ELBO of the first 256 cells, with each rule against a 100-point rule,
under a fresh model (q(f) widest) and under the first negative binomial contender's model after
the timed steps.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import seconds_per_step  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, NegativeBinomial, Trainer  # noqa: E402
from gpflow_svi_gplvm.datasets import simulate_atlas  # noqa: E402

SHORT, LONG, BATCH = 20, 80, 256


def build(Y: np.ndarray, size_factors: np.ndarray, likelihood) -> BayesianSVIGPLVM:
    return BayesianSVIGPLVM(
        Y,
        10,
        50,
        likelihood=likelihood,
        shared_covariance=True,
        size_factors=size_factors,
        seed=0,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--genes", type=int, default=2000)
    parser.add_argument("--points", type=int, nargs="+", default=[4])
    parser.add_argument("--baseline", default=None, help="a checkout of another version")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="tiny sizes, one round")
    args = parser.parse_args(argv)
    short, long = (SHORT, LONG)
    if args.quick:
        args.cells, args.genes, args.repeats, short, long = 300, 40, 1, 3, 6
    atlas = simulate_atlas(args.cells, args.genes, seed=0)
    Y = atlas.counts.toarray().astype(np.float64)
    size_factors = Y.sum(axis=1) / np.median(Y.sum(axis=1))
    likelihoods = {"Poisson": gpflow.likelihoods.Poisson()}
    for k in args.points:
        likelihoods[f"NB, {k} points"] = NegativeBinomial(
            num_outputs=args.genes, num_gauss_hermite_points=k
        )
    if args.baseline:
        likelihoods["NB, baseline"] = baseline_likelihood(args.baseline, args.genes)
    trainers = {}
    for name, likelihood in likelihoods.items():
        model = build(Y, size_factors, likelihood)
        trainers[name] = Trainer(model, Y, batch_size=min(BATCH, args.cells), q_u_optimizer="adam")
        trainers[name].train(short, steps_per_call=short, progress=False)  # compiles
    rounds = [
        {name: seconds_per_step(trainer, short, long) for name, trainer in trainers.items()}
        for _ in range(args.repeats)
    ]
    print(
        f"N={args.cells}, D={args.genes}, Q=10, M=50, B={min(BATCH, args.cells)}, shared q(u) "
        f"covariance; {os.cpu_count()} CPU cores\n"
    )
    versus = ["Poisson"] + (["NB, baseline"] if args.baseline else [])
    print("| likelihood | ms/step (median) | " + " | ".join(f"/ {v}" for v in versus) + " |")
    print("|---|---:|" + "---:|" * len(versus))
    for name in trainers:
        step = statistics.median(r[name] for r in rounds)
        ratios = [statistics.median(r[name] / r[v] for r in rounds) for v in versus]
        print(f"| {name} | {1e3 * step:.1f} | " + " | ".join(f"{x:.2f}" for x in ratios) + " |")
    print("\n(ratios: the median over rounds of each round's ratio)\n")
    fresh = build(Y, size_factors, NegativeBinomial(num_outputs=args.genes))
    print("At initialisation:\n")
    print_accuracy(fresh, Y, args.points)
    print(f"After the timed steps ({trainers['Poisson'].num_steps} steps):\n")
    print_accuracy(trainers[f"NB, {args.points[0]} points"].model, Y, args.points)
    return 0


def baseline_likelihood(path: str, genes: int) -> NegativeBinomial:
    """A ``NegativeBinomial`` whose variational expectation and rule are those of the checkout at
    ``path``."""
    # The class's module (its relative imports read this checkout's package): in the
    # likelihoods wing, or the one likelihoods module of earlier versions.
    places = {
        "gpflow_svi_gplvm.likelihoods._baseline": ("likelihoods", "negative_binomial.py"),
        "gpflow_svi_gplvm._baseline": ("likelihoods.py",),
    }
    found = [
        (name, os.path.join(path, "gpflow_svi_gplvm", *parts))
        for name, parts in places.items()
        if os.path.isfile(os.path.join(path, "gpflow_svi_gplvm", *parts))
    ]
    if not found:
        raise SystemExit(f"--baseline: {path} holds no gpflow_svi_gplvm likelihoods to compare.")
    name, source = found[0]
    spec = importlib.util.spec_from_file_location(name, source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    baseline = type(
        "BaselineNegativeBinomial",
        (NegativeBinomial,),
        {"_variational_expectations": module.NegativeBinomial._variational_expectations},
    )
    return baseline(
        num_outputs=genes, num_gauss_hermite_points=module.TRAINING_GAUSS_HERMITE_POINTS
    )


def print_accuracy(model: BayesianSVIGPLVM, Y: np.ndarray, points: list[int]) -> None:
    """Each rule's error in the minibatch ELBO of one batch, against a 100-point rule (the same
    latent draws for every rule)."""
    rows = tf.range(min(BATCH, len(Y)), dtype=tf.int64)
    batch = (rows, tf.gather(tf.constant(Y), rows))

    def elbo(k: int) -> float:
        model.likelihood.num_gauss_hermite_points = k
        model.latent.generator.reset_from_seed(0)
        return float(model.elbo(batch))

    exact = elbo(100)
    print(f"the minibatch ELBO (N / B times the batch's terms) with 100 points: {exact:.8g}\n")
    print("| points | error of the minibatch ELBO | relative |")
    print("|---:|---:|---:|")
    for k in points:
        error = elbo(k) - exact
        print(f"| {k} | {error:.3g} | {abs(error / exact):.1e} |")
    print()


if __name__ == "__main__":
    raise SystemExit(main())
