"""Flow latents against HMC: the paper's two-point demonstration, oil flow, and the step's cost.

    python benchmarks/flows.py demo [--iterations 2000 --families gaussian shared per-row joint]
    python benchmarks/flows.py oilflow [--seeds 3 --iterations 5000 --rows 20 --hmc-draws 1000]
    python benchmarks/flows.py speed [--iterations 300 --repeats 11]
    python benchmarks/flows.py demo oilflow speed --quick      # a smoke run of every path

``demo``: the supplement's toy ("two points in R^10 from a GPLVM with a linear kernel, Q = 2"):
x_1 = (1, 1), x_2 = (-1, 1), W [2, 10] standard normal (seed 0), Y = X W + noise of variance
0.1; the model's kernel (linear, unit variances), noise and zero mean are fixed at these values
and M = 2 inducing points (the linear kernel has rank 2). The reference is NUTS on the exact
posterior p(X | Y) (``posterior_draws(..., target="exact")``, 4 chains of ``--hmc-draws``
(1000) after as many).
Each q(X) family (the Gaussian of B-SVI; 10 planar layers shared, per row, or one flow over
vec(X)) is trained two ways, both with the package's defaults (Adam, learning rate 0.01):

- against the exact posterior directly (``fit_to_posterior``, 2000 steps of 16 draws): what the
  family can reach when nothing else stands between it and p(X | Y);
- in the SVI bound (``fit``, 2000 steps, batch of both rows), with q(u) trained beside it.

The discrepancy is the unbiased MMD^2 (median-heuristic RBF kernel) between 2000 draws of q(X)
and 2000 of the HMC draws (every second), on vec(X) [4], with a 95% bootstrap interval; the
sliced 2-Wasserstein distance beside it. The bound's models are also compared with NUTS on their
own ``target="model"`` posterior (the best q(x_n) given their q(u)). Figure:
``benchmarks/figures/flows_demo.png``.

``oilflow``: the protocol of ``reproduce_paper.py`` (seeded 80/20 split, the package's defaults,
test latents inferred with the model frozen, test RMSE and NLPD per test row) for B-SVI and the
flow model (10 shared planar layers, its defaults), and for the first ``--rows`` test rows the
MMD^2 between 2000 draws of the inferred q(x*) and NUTS draws of the model's own posterior of
each row given its q(u) (``target="model"``, 4 chains of ``--hmc-draws`` after as many), per
row in R^10.
The flow model runs with its default four draws of x per step and with one.

``speed``: steps per second at the paper's oil-flow size (N=800, D=12, Q=10, M=25, batch 100),
measured as ``speed.py`` does (warm-up, then interleaved rounds; median), for B-SVI with Monte
Carlo over q(x) (one and four draws of x), B-SVI's defaults, and flows, each set beside B-SVI
with as many draws.
Data: $GPFLOW_SVI_GPLVM_DATA (oil flow).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import gpflow  # noqa: E402
import matplotlib  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from common import mean_and_error  # noqa: E402
from speed import measure  # noqa: E402

from gpflow_svi_gplvm import (  # noqa: E402
    BayesianSVIGPLVM,
    FlowBayesianGPLVM,
    GaussianLatent,
    LatentInference,
    fit,
)
from gpflow_svi_gplvm.datasets import load_oilflow, train_test_split  # noqa: E402
from gpflow_svi_gplvm.distances import mmd, sliced_wasserstein  # noqa: E402
from gpflow_svi_gplvm.latents.flows import flow_latent  # noqa: E402
from gpflow_svi_gplvm.metrics import rmse  # noqa: E402
from gpflow_svi_gplvm.posterior_check import fit_to_posterior, latent_draws, posterior_draws  # noqa: E402
from gpflow_svi_gplvm.training.trainer import Trainer  # noqa: E402

matplotlib.use("Agg")
tf.get_logger().setLevel("ERROR")

FIGURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "figures", "flows_demo.png")
DEMO_NOISE = 0.1
DRAWS = 2000  # of each q(X) and (at most) of HMC, compared; fewer in a smoke run (args.draws)
FAMILIES = ("Gaussian (B-SVI)", "flow, shared", "flow, per-row", "flow, joint")
FAMILY_KEYS = dict(zip(("gaussian", "shared", "per-row", "joint"), FAMILIES))
FLOW_PARAMETERS = {"flow, shared": "shared", "flow, per-row": "per-row", "flow, joint": "joint"}
# Oil flow: the defaults of both models, and the flow model with one draw of x (the other models'
# default) instead of its four.
OILFLOW_MODELS = {
    "B-SVI": (BayesianSVIGPLVM, {}),
    "B-SVI (flow)": (FlowBayesianGPLVM, {}),
    "B-SVI (flow), 1 draw": (FlowBayesianGPLVM, {"num_samples": 1}),
}


# ----------------------------------------------------------------------------------------- demo


def demo_data() -> np.ndarray:
    """Y [2, 10] = X W + noise: X = [[1, 1], [-1, 1]], W [2, 10] standard normal (seed 0)."""
    rng = np.random.default_rng(0)
    X = np.array([[1.0, 1.0], [-1.0, 1.0]])
    W = rng.standard_normal((2, 10))
    return X @ W + np.sqrt(DEMO_NOISE) * rng.standard_normal((2, 10))


def demo_model(Y: np.ndarray, family: str) -> BayesianSVIGPLVM:
    """The demo's GPLVM for a q(X) ``family``: linear kernel, noise and zero mean fixed at the
    generating values, M = 2."""
    options = dict(
        kernel=gpflow.kernels.Linear(variance=np.ones(2)),
        likelihood=gpflow.likelihoods.Gaussian(variance=DEMO_NOISE),
        mean_function=gpflow.mean_functions.Zero(),
    )
    if family == FAMILIES[0]:
        model: BayesianSVIGPLVM = BayesianSVIGPLVM(Y, 2, 2, **options)
    else:
        model = FlowBayesianGPLVM(Y, 2, 2, flow_parameters=FLOW_PARAMETERS[family], **options)
    gpflow.set_trainable(model.kernel, False)
    gpflow.set_trainable(model.likelihood, False)
    return model


def _family(initial: np.ndarray, family: str):
    if family == FAMILIES[0]:
        return GaussianLatent(initial)
    return flow_latent(initial, parameters=FLOW_PARAMETERS[family])


def _distances(draws: np.ndarray, reference: np.ndarray) -> tuple:
    """(MMD^2, sliced W_2) between draws [S, B, Q] and reference draws, on vec(X)."""
    flat, other = draws.reshape(len(draws), -1), reference.reshape(len(reference), -1)
    return mmd(flat, other), sliced_wasserstein(flat, other, num_bootstrap=100)


def _interval(result) -> str:
    return f"{result.value:.4f} [{result.low:.4f}, {result.high:.4f}]"


def demo(args) -> str:
    Y = demo_data()
    reference = demo_model(Y, FAMILIES[0])
    start = time.perf_counter()
    hmc = posterior_draws(reference, Y, "exact", args.hmc_draws, args.hmc_draws, seed=0)
    lines = [
        f"NUTS on the exact posterior: {time.perf_counter() - start:.0f} s; acceptance "
        f"{hmc.acceptance[0]:.2f}, R-hat max {hmc.r_hat.max():.4f}, effective draws min "
        f"{hmc.effective_sample_size.min():.0f} (of {len(hmc.draws)}), step size "
        f"{hmc.step_size[0]:.3f}",
        "",
        "| q(X) | trained | seconds | MMD^2 to HMC [95%] | sliced W2 to HMC [95%] "
        "| MMD^2 to its own q(u) posterior [95%] |",
        "|---|---|---:|---|---|---|",
    ]
    thinned = hmc.draws[:: max(1, len(hmc.draws) // args.draws)]
    panels = {"HMC, exact posterior": hmc.draws}
    for family in args.families:
        latent = _family(reference.latent_mean().numpy(), family)
        start = time.perf_counter()
        fit_to_posterior(latent, reference, Y, "exact", iterations=args.iterations)
        seconds = time.perf_counter() - start
        noise = tf.random.stateless_normal([args.draws, 2, 2], seed=[1, 0], dtype=tf.float64)
        draws = latent(tf.range(2, dtype=tf.int64), None, args.draws, noise).samples.numpy()
        distance, wasserstein = _distances(draws, thinned)
        lines.append(
            f"| {family} | to the exact posterior | {seconds:.1f} | {_interval(distance)} "
            f"| {_interval(wasserstein)} | - |"
        )
        panels[f"{family}\nfitted to p(X | Y)"] = draws
    for family in args.families:
        lines.append(_demo_svi_row(Y, family, thinned, args, panels))
    _demo_figure(panels, args.figure)
    return "\n".join(lines)


def _demo_svi_row(Y: np.ndarray, family: str, thinned: np.ndarray, args, panels: dict) -> str:
    """One family trained in the SVI bound: its table row; its draws join ``panels``."""
    model = demo_model(Y, family)
    history = fit(model, Y, iterations=args.iterations, batch_size=2, progress=False)
    draws = latent_draws(model, args.draws, rows=np.arange(2), seed=1)
    distance, wasserstein = _distances(draws, thinned)
    own = posterior_draws(model, Y, "model", args.hmc_draws, args.hmc_draws, seed=0)
    to_own = _distances(draws, own.draws[:: max(1, len(own.draws) // args.draws)])[0]
    panels[f"{family}\nin the SVI bound"] = draws
    return (
        f"| {family} | SVI bound with q(u) | {history.seconds:.1f} | {_interval(distance)} "
        f"| {_interval(wasserstein)} | {_interval(to_own)} |"
    )


def _demo_figure(panels: dict, path: str) -> None:
    """HMC's draws beside each family's: fitted to the exact posterior (top), trained in the SVI
    bound (bottom); each point's 1000 first draws in its colour."""
    import matplotlib.pyplot as plt

    names = list(panels)
    columns = (len(names) + 1) // 2  # HMC's panel, then each family's
    rows = [[names[0], *names[1:columns]], [names[0], *names[columns:]]]
    figure, axes = plt.subplots(
        2, columns, figsize=(2.6 * columns, 6.2), sharex=True, sharey=True, squeeze=False
    )
    for axis_row, row in zip(axes, rows):
        for axis, title in zip(axis_row, row):
            draws = panels[title]
            for point, colour in zip(range(draws.shape[1]), ("tab:blue", "tab:orange")):
                axis.scatter(*draws[:1000, point].T, s=1, alpha=0.3, color=colour)
            axis.set_title(title, fontsize=8)
            axis.set_aspect("equal")
    axes[0, 0].set_xlim(-3, 3)
    axes[0, 0].set_ylim(-3, 3)
    figure.tight_layout()
    os.makedirs(os.path.dirname(path), exist_ok=True)
    figure.savefig(path, dpi=110)


# -------------------------------------------------------------------------------------- oilflow


def oilflow(args) -> str:
    Y = np.asarray(load_oilflow().Y, dtype=float)
    results: dict[str, list[dict]] = {name: [] for name in OILFLOW_MODELS}
    for seed in range(args.seeds):
        split = train_test_split(Y, 0.2, seed)
        for name in results:
            results[name].append(_oilflow_run(name, split.Y_train, split.Y_test, seed, args))
    lines = [
        "| model | test RMSE | test NLPD | MMD^2 to HMC, per test row (mean ± se) "
        "| HMC R-hat max | HMC effective draws min | seconds / run |",
        "|---|---|---|---|---:|---:|---:|",
    ]
    for name, runs in results.items():
        distances = np.concatenate([r["mmd"] for r in runs])
        se = distances.std(ddof=1) / np.sqrt(len(distances))
        lines.append(
            f"| {name} | {mean_and_error([r['rmse'] for r in runs])} "
            f"| {mean_and_error([r['nlpd'] for r in runs])} "
            f"| {distances.mean():.4f} ± {se:.4f} | {max(r['r_hat'] for r in runs):.4f} "
            f"| {min(r['ess'] for r in runs):.0f} | {np.mean([r['seconds'] for r in runs]):.0f} |"
        )
    return "\n".join(lines)


def _oilflow_run(name: str, Y_train: np.ndarray, Y_test: np.ndarray, seed: int, args) -> dict:
    start = time.perf_counter()
    model_class, options = OILFLOW_MODELS[name]
    model = model_class(Y_train, 10, 25, seed=seed, **options)
    fit(model, Y_train, iterations=args.iterations, seed=seed, progress=False)
    inference = LatentInference(model, args.inference_iterations, seed=seed)
    mean, _ = inference.reconstruct(Y_test)
    log_density, _ = inference.log_density(Y_test, Y_test)
    rows = Y_test[: args.rows]
    hmc = posterior_draws(model, rows, "model", args.hmc_draws, args.hmc_draws, seed=seed)
    draws = inference.draws(rows, args.draws).numpy()
    # Each row's estimate only: the spread over rows and seeds gives the interval.
    distances = [
        mmd(q, h, num_bootstrap=1).value
        for q, h in zip(draws.swapaxes(0, 1), hmc.draws.swapaxes(0, 1))
    ]
    result = dict(
        rmse=rmse(Y_test, mean.numpy()),
        nlpd=-float(np.mean(np.sum(log_density.numpy(), axis=1))),
        mmd=np.array(distances),
        r_hat=float(hmc.r_hat.max()),
        ess=float(hmc.effective_sample_size.min()),
        seconds=time.perf_counter() - start,
    )
    print(
        f"  {name} seed {seed}: RMSE {result['rmse']:.4g}, NLPD {result['nlpd']:.4g}, MMD^2 "
        f"mean {result['mmd'].mean():.4f}, R-hat {result['r_hat']:.4f}, ESS {result['ess']:.0f}"
        f" ({result['seconds']:.0f} s)",
        flush=True,
    )
    return result


# ---------------------------------------------------------------------------------------- speed


def speed(args) -> str:
    Y = np.asarray(load_oilflow().Y[:800], dtype=float)
    monte_carlo = dict(latent_expectation="monte-carlo")
    # (model, draws of x): each is compared with B-SVI under Monte Carlo with as many draws.
    models = {
        ("B-SVI, Monte Carlo", 1): lambda: BayesianSVIGPLVM(
            Y, 10, 25, num_samples=1, **monte_carlo
        ),
        ("B-SVI, Monte Carlo", 4): lambda: BayesianSVIGPLVM(
            Y, 10, 25, num_samples=4, **monte_carlo
        ),
        ("B-SVI, defaults (closed form)", 1): lambda: BayesianSVIGPLVM(Y, 10, 25),
        ("flow: 10 planar, shared", 1): lambda: FlowBayesianGPLVM(Y, 10, 25, num_samples=1),
        ("flow: 10 planar, shared (defaults)", 4): lambda: FlowBayesianGPLVM(Y, 10, 25),
        ("flow: 10 planar, per-row", 4): lambda: FlowBayesianGPLVM(
            Y, 10, 25, flow_parameters="per-row"
        ),
        ("flow: 4 inverse autoregressive, shared", 4): lambda: FlowBayesianGPLVM(
            Y, 10, 25, flow="iaf", num_layers=4
        ),
    }
    entries = {
        ("graph", f"{name}, {draws} draw(s)"): (
            lambda make=make: Trainer(make(), Y, batch_size=100)
        )
        for (name, draws), make in models.items()
    }
    results = measure(entries, args.iterations, args.repeats, 100)["graph"]
    lines = [
        "| model | draws of x | steps / s (median) | step time / B-SVI Monte Carlo's, same draws |",
        "|---|---:|---:|---:|",
    ]
    for name, draws in models:
        rate = results[f"{name}, {draws} draw(s)"].median
        baseline = results[f"B-SVI, Monte Carlo, {draws} draw(s)"].median
        lines.append(f"| {name} | {draws} | {rate:.0f} | {baseline / rate:.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("parts", nargs="+", choices=["demo", "oilflow", "speed"])
    parser.add_argument("--iterations", type=int, default=None, help="training steps")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rows", type=int, default=20, help="oil-flow test rows against HMC")
    parser.add_argument("--repeats", type=int, default=11)
    parser.add_argument("--hmc-draws", type=int, default=1000, help="NUTS draws per chain")
    parser.add_argument(
        "--families",
        nargs="+",
        choices=list(FAMILY_KEYS),
        default=list(FAMILY_KEYS),
        help="the demo's q(X) families (default: all four)",
    )
    parser.add_argument("--quick", action="store_true", help="a smoke run of every path")
    args = parser.parse_args(argv)
    chosen = (
        "" if len(args.families) == len(FAMILY_KEYS) else " --families " + " ".join(args.families)
    )
    args.families = [FAMILY_KEYS[key] for key in args.families]
    args.hmc_draws = 50 if args.quick else args.hmc_draws
    args.inference_iterations = 10 if args.quick else 300
    # MMD^2 and its bootstrap cost the square of the draws (~3 s a pair at 2000): a smoke run
    # compares 500, by the same code.
    args.draws = 500 if args.quick else DRAWS
    # A smoke run keeps the committed figure.
    args.figure = (
        os.path.join(tempfile.gettempdir(), "flows_demo_quick.png") if args.quick else FIGURE
    )
    if args.quick:
        args.seeds, args.rows, args.repeats = 1, 2, 1
    for part in args.parts:
        default = {"demo": 2000, "oilflow": 5000, "speed": 300}[part]
        iterations = args.iterations or (10 if args.quick else default)
        run = argparse.Namespace(**{**vars(args), "iterations": iterations})
        print(f"## {part}\n", flush=True)
        print({"demo": demo, "oilflow": oilflow, "speed": speed}[part](run), flush=True)
        sizes = {
            "demo": f" --hmc-draws {args.hmc_draws}{chosen}",
            "oilflow": f" --seeds {args.seeds} --rows {args.rows} --hmc-draws {args.hmc_draws}",
            "speed": f" --repeats {args.repeats}",
        }[part]
        quick = " --quick" if args.quick else ""
        command = f"python benchmarks/flows.py {part} --iterations {iterations}{sizes}{quick}"
        print(f"\n_`{command}`_\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
