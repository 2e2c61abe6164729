"""What a training step costs with each count likelihood, and what fewer quadrature points lose.

Usage::

    python benchmarks/count_step.py [--cells 10000] [--genes 2000] [--points 20 10 7 5]
                                    [--repeats 3] [--quick]

B-SVI at the single-cell benchmark's shapes (Q=10, M=50, batch 256, shared q(u) covariance, Adam
on q(u), the package's defaults otherwise) on counts from
``gpflow_svi_gplvm.datasets.simulate_atlas`` (dense, N cells x D genes), with size factors = the
cells' library sizes: Poisson (closed-form variational expectation) against the negative binomial
with a ``num_gauss_hermite_points`` rule of each size. A step's time is the difference of two run
lengths (20 and 80 steps) of one compiled Trainer, the median over ``--repeats`` rounds that
alternate the contenders. The step does not grow with N (only the batch's rows move).

Accuracy: the minibatch ELBO of the first 256 cells under the first negative binomial
contender's trained model, with each rule against a 100-point rule.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gpflow  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from row_updates import seconds_per_step  # noqa: E402

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
    parser.add_argument("--points", type=int, nargs="+", default=[20, 10, 7, 5])
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
    trainers = {}
    for name, likelihood in likelihoods.items():
        model = build(Y, size_factors, likelihood)
        trainers[name] = Trainer(model, Y, min(BATCH, args.cells), q_u_optimizer="adam")
        trainers[name].train(short, steps_per_call=short, progress=False)  # compiles
    rounds = [
        {name: seconds_per_step(trainer, short, long) for name, trainer in trainers.items()}
        for _ in range(args.repeats)
    ]
    print(
        f"N={args.cells}, D={args.genes}, Q=10, M=50, B={min(BATCH, args.cells)}, shared q(u) "
        f"covariance; {os.cpu_count()} CPU cores\n"
    )
    print("| likelihood | ms/step (median) | / Poisson (median of rounds) |")
    print("|---|---:|---:|")
    for name in trainers:
        step = statistics.median(r[name] for r in rounds)
        ratio = statistics.median(r[name] / r["Poisson"] for r in rounds)
        print(f"| {name} | {1e3 * step:.1f} | {ratio:.2f} |")
    print()
    reference_model = trainers[f"NB, {args.points[0]} points"].model
    print_accuracy(reference_model, Y, args.points)
    return 0


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


if __name__ == "__main__":
    raise SystemExit(main())
