# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Flow latents, and how wrong is my q(x)?
#
# B-SVI's q(x_n) is a Gaussian. The paper's supplement ("Flexible Variational Families using
# Normalising Flows") replaces it by a base Gaussian pushed through invertible maps: "sampling
# from the base Gaussian at each step $x_n^{(0)} \sim \mathcal{N}(\mu_n, s_n I_Q)$ and passing
# them through the flow $g_k \circ g_{k-1} \circ \ldots g_1 (x_n^{(0)})$ to yield the final latent
# point $x_n^{(k)}$". `FlowBayesianGPLVM` is that model: planar or inverse autoregressive layers,
# whose parameters all rows share, each row owns, or which form one flow over vec(X) of a few
# rows. Its row term is the Monte Carlo estimate of E_q[log p(x) - log q(x)] at the transformed
# draws, log q from the base density and the layers' log-determinants.
#
# To see whether any q(x) is right we need the posterior it approximates. `posterior_draws`
# draws from it with NUTS and reports its diagnostics; `mmd` measures how far two sets of draws
# are apart, with a bootstrap interval. This notebook runs both on the supplement's toy and then
# on a model of your own.

# %%
import os

import gpflow
import matplotlib.pyplot as plt
import numpy as np
import tensorflow as tf

from gpflow_svi_gplvm import BayesianSVIGPLVM, FlowBayesianGPLVM, GaussianLatent, fit
from gpflow_svi_gplvm.datasets import load_digits
from gpflow_svi_gplvm.distances import mmd
from gpflow_svi_gplvm.latents.flows import flow_latent
from gpflow_svi_gplvm.plotting import keep_figures
from gpflow_svi_gplvm.posterior_check import fit_to_posterior, latent_draws, posterior_draws

keep_figures("08_flows_and_hmc")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the iterations
ITERATIONS = 300 if FAST else 2000
HMC_DRAWS = 200 if FAST else 1000  # per chain, after as many burn-in steps
DRAWS = 500 if FAST else 2000  # of each q(x) compared with HMC (MMD^2 costs their square)

# %% [markdown]
# ## The supplement's toy: two points in R^10, probabilistic PCA
#
# "We generate a toy synthetic dataset using the forward model of the GPLVM (with a linear
# kernel, so this is equivalent to probabilistic PCA) of two points in $\mathbb R^{10}$". We
# place the two points at (1, 1) and (-1, 1) and fix the kernel, the noise and a zero mean at the
# values that generated the data, so the true posterior p(X | Y) is known up to sampling.

# %%
rng = np.random.default_rng(0)
X_true = np.array([[1.0, 1.0], [-1.0, 1.0]])
Y = X_true @ rng.standard_normal((2, 10)) + np.sqrt(0.1) * rng.standard_normal((2, 10))


def toy_model(model_class=BayesianSVIGPLVM, **options):
    model = model_class(
        Y,
        2,
        2,  # a linear kernel in 2-d has rank 2: two inducing points are exact
        kernel=gpflow.kernels.Linear(variance=np.ones(2)),
        likelihood=gpflow.likelihoods.Gaussian(variance=0.1),
        mean_function=gpflow.mean_functions.Zero(),
        **options,
    )
    gpflow.set_trainable(model.kernel, False)
    gpflow.set_trainable(model.likelihood, False)
    return model


reference = toy_model()
hmc = posterior_draws(reference, Y, target="exact", num_draws=HMC_DRAWS, num_burnin=HMC_DRAWS)
print(f"acceptance {hmc.acceptance[0]:.2f}, largest R-hat {hmc.r_hat.max():.4f}, ")
print(f"fewest effective draws {hmc.effective_sample_size.min():.0f} of {len(hmc.draws)}")

# %% [markdown]
# `target="exact"` integrates u and f out in closed form, the "true posterior" of the
# supplement. PCA cannot tell rotations of the latent space apart, so the posterior of each point
# is a ring, and the two points turn together. Check the diagnostics before trusting draws:
# R-hat near 1 (below 1.01) and a few hundred effective draws.
#
# Now fit two families to this posterior directly (`fit_to_posterior`: the package's Adam at its
# default learning rate, 16 draws a step): B-SVI's Gaussian and one flow of 10 planar layers
# over vec(X), the supplement's "single flow to model the joint density".

# %%
initial = reference.latent_mean().numpy()
families = {
    "Gaussian": GaussianLatent(initial),
    "joint flow": flow_latent(initial, "planar", 10, "joint"),
}
noise = tf.random.stateless_normal([DRAWS, 2, 2], seed=[1, 0], dtype=tf.float64)
drawn = {"HMC": hmc.draws}
for name, family in families.items():
    fit_to_posterior(family, reference, Y, target="exact", iterations=ITERATIONS)
    drawn[name] = family(tf.range(2, dtype=tf.int64), None, DRAWS, noise).samples.numpy()
    distance = mmd(drawn[name].reshape(DRAWS, -1), hmc.draws.reshape(len(hmc.draws), -1))
    print(f"{name:10s} MMD^2 to HMC {distance.value:.4f} [{distance.low:.4f}, {distance.high:.4f}]")

figure, axes = plt.subplots(1, 3, figsize=(11, 3.8), sharex=True, sharey=True)
for axis, (name, draws) in zip(axes, drawn.items()):
    for point, colour in zip(range(2), ("tab:blue", "tab:orange")):
        axis.scatter(*draws[:1000, point].T, s=1, alpha=0.3, color=colour)
    axis.set_title(name)
    axis.set_aspect("equal")

# %% [markdown]
# The Gaussian can only put a blob somewhere on each ring; the flow bends its draws round them.
#
# ## The same families inside the SVI bound
#
# `fit` trains q(X) together with q(u). For this linear kernel, given q(u), the best q(x_n) is a
# Gaussian: the data term E_q(f)[log p(y | f)] is quadratic in x. So a flow trained in the bound
# ends up Gaussian too, and the gap to the true posterior is the bound's (q(u) beside q(X)), not
# the family's. `target="model"` draws from that best q(x_n) given the model's q(u): comparing a
# trained q(x) with it measures the family alone.

# %%
model = toy_model(FlowBayesianGPLVM, flow_parameters="joint")
fit(model, Y, iterations=ITERATIONS, batch_size=2, progress=False)
own = posterior_draws(model, Y, target="model", num_draws=HMC_DRAWS, num_burnin=HMC_DRAWS)
trained = latent_draws(model, DRAWS, rows=[0, 1]).reshape(DRAWS, -1)
for name, other in [("exact posterior", hmc.draws), ("its own q(u) posterior", own.draws)]:
    distance = mmd(trained, other.reshape(len(other), -1))
    print(f"MMD^2 to the {name}: {distance.value:.4f} [{distance.low:.4f}, {distance.high:.4f}]")

# %% [markdown]
# ## Checking your own model
#
# For a trained model and some rows, `posterior_draws(model, rows)` (`target="model"`) draws
# from each row's posterior given the model's q(u) and hyperparameters, with any likelihood and
# missing entries; `latent_draws` draws from the model's own q(x), of training rows (`rows=`) or
# of new rows inferred as `infer_latents` does (`Y=`). Here: B-SVI and the flow model on the
# bundled digits, five training rows each.

# %%
digits = load_digits()
Y_digits = digits.Y[: 300 if FAST else 1797]
rows = np.arange(5)
for model_class in (BayesianSVIGPLVM, FlowBayesianGPLVM):
    model = model_class(Y_digits, 3, 20)
    fit(model, Y_digits, iterations=100 if FAST else 3000, progress=False)
    check = posterior_draws(model, Y_digits[rows], num_draws=HMC_DRAWS, num_burnin=HMC_DRAWS)
    draws = latent_draws(model, DRAWS, rows=rows)
    distances = [mmd(draws[:, n], check.draws[:, n]).value for n in range(len(rows))]
    print(
        f"{model_class.__name__:18s} MMD^2 per row {np.round(distances, 4)}; "
        f"R-hat <= {check.r_hat.max():.3f}, effective draws >= "
        f"{check.effective_sample_size.min():.0f}"
    )

# %% [markdown]
# A row whose distance stands out is one where the family (or the optimisation) misses the
# posterior; `benchmarks/flows.py` runs this check on oil flow, and `benchmarks/results/flows.md`
# ("Flow latents against HMC") has the numbers.
