"""Which expectation over q(x) and which q(u) optimiser to default to for each model.

Usage::

    python benchmarks/amortised_defaults.py [--seeds 0 1 2] [--iterations 2000] [--quick]

A small problem on which a new user would try the models: N = 250 training rows and 50 new rows of
D = 10 outputs drawn from a GPLVM-like map of a 2-D latent (``synthetic``), Q = 2, M = 20, batch 50,
learning rate 0.02, 2000 steps. 30% of the new rows' entries are hidden; their latents are inferred
from the rest (``LatentInference``; for AEB-SVI twice: under its defaults, the encoder's q(x*)
refined by Newton steps on the row's closed-form bound, and the encoder's q(x*) alone,
``tolerance=None``) and the hidden entries are scored: RMSE (and its ratio to the training column
means' RMSE) and the coverage of the 95% predictive interval. Each model is trained under every pair
of ``latent_expectation`` ("closed-form" or "monte-carlo") and ``q_u_optimizer`` ("natgrad" or
"adam"), and under its defaults (``latent_expectation="auto"``, ``q_u_optimizer=None``), on each
seed (data, split, hidden entries and model seeds alike).
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from gpflow_svi_gplvm import (  # noqa: E402
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    LatentInference,
    Trainer,
)
from gpflow_svi_gplvm.datasets import random_missing  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402

N_TRAIN, N_NEW, D, Q, M, BATCH, LEARNING_RATE = 250, 50, 10, 2, 20, 50, 0.02
SETTINGS = {
    "defaults": dict(latent_expectation="auto", q_u_optimizer=None),
    "closed form, natgrad": dict(latent_expectation="closed-form", q_u_optimizer="natgrad"),
    "closed form, Adam": dict(latent_expectation="closed-form", q_u_optimizer="adam"),
    "Monte Carlo, natgrad": dict(latent_expectation="monte-carlo", q_u_optimizer="natgrad"),
    "Monte Carlo, Adam": dict(latent_expectation="monte-carlo", q_u_optimizer="adam"),
}
MODELS = {"AEB-SVI": AmortisedBayesianGPLVM, "B-SVI": BayesianSVIGPLVM}


def synthetic(seed: int) -> np.ndarray:
    """[N_TRAIN + N_NEW, D]: a smooth map of a 2-D latent, plus noise of sd 0.2."""
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_TRAIN + N_NEW, 2))
    W = rng.standard_normal((2, D))
    b = rng.uniform(0.0, 2.0 * np.pi, D)
    return np.sin(X @ W + b) + 0.2 * rng.standard_normal((N_TRAIN + N_NEW, D))


INFERENCE = {"": "auto", ", encoder alone": None}
"""Label suffixes of the amortised model's new-row settings: ``LatentInference``'s defaults (the
encoder's q(x*) refined by Newton steps on the row bound) and the encoder's q(x*) alone."""


def score(model_class, setting: dict, seed: int, iterations: int) -> dict[str, dict]:
    """Per new-row setting (:data:`INFERENCE` for the amortised model, the defaults for B-SVI):
    the hidden entries' RMSE, the column means' RMSE on them and the 95% coverage."""
    Y = synthetic(seed)
    Y_train, Y_new = Y[:N_TRAIN], Y[N_TRAIN:]
    shown, hidden = random_missing(Y_new, 0.3, seed=seed)
    model = model_class(Y_train, Q, M, seed=seed, latent_expectation=setting["latent_expectation"])
    trainer = Trainer(
        model,
        Y_train,
        batch_size=BATCH,
        learning_rate=LEARNING_RATE,
        seed=seed,
        q_u_optimizer=setting["q_u_optimizer"],
    )
    trainer.train(iterations, progress=False)
    column_mean = np.broadcast_to(Y_train.mean(axis=0), Y_new.shape)
    results = {}
    for suffix, tolerance in (INFERENCE if model.latent.amortised else {"": "auto"}).items():
        inference = LatentInference(model, seed=seed, tolerance=tolerance)
        mean, variance = (a.numpy() for a in inference.reconstruct(shown))
        inside = np.abs(Y_new - mean) <= 1.96 * np.sqrt(variance)
        results[suffix] = dict(
            rmse=rmse(Y_new, mean, mask=hidden),
            column=rmse(Y_new, column_mean, mask=hidden),
            coverage=float(inside[hidden].mean()),
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--iterations", type=int, default=2000)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    parser.add_argument(
        "--quick", action="store_true", help="one seed, 20 steps, the first and last settings"
    )
    args = parser.parse_args(argv)
    settings = SETTINGS
    if args.quick:  # the two settings that take each expectation and each q(u) optimiser
        args.seeds, args.iterations = args.seeds[:1], 20
        settings = {label: SETTINGS[label] for label in ("defaults", "Monte Carlo, Adam")}
    print(
        "| model | setting | hidden-entry RMSE | / column mean | 95% coverage | per seed (RMSE) |"
    )
    print("|---|---|---:|---:|---:|---|")
    for name in args.models:
        for label, setting in settings.items():
            scored = [score(MODELS[name], setting, s, args.iterations) for s in args.seeds]
            for suffix in scored[0]:
                runs = [by_setting[suffix] for by_setting in scored]
                error = statistics.mean(r["rmse"] for r in runs)
                ratio = statistics.mean(r["rmse"] / r["column"] for r in runs)
                coverage = statistics.mean(r["coverage"] for r in runs)
                seeds = ", ".join(f"{r['rmse']:.3f}" for r in runs)
                cells = f"{error:.3f} | {ratio:.2f} | {coverage:.2f} | {seeds}"
                print(f"| {name} | {label}{suffix} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
