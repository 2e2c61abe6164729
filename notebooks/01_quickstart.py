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
# # Quickstart: a Bayesian GPLVM of handwritten digits
#
# We reduce scikit-learn's 8 x 8 digits (1797 images, D = 64 pixels) to Q = 5 latent
# dimensions with `BayesianSVIGPLVM` (the paper's B-SVI): each image y_n gets a Gaussian
# q(x_n) = N(mu_n, diag s_n), and D Gaussian processes that share one ARD kernel map latents to
# pixels. Training uses minibatches, so the cost of a step does not depend on N.

# %%
import os

import gpflow
import matplotlib.pyplot as plt
import numpy as np

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
from gpflow_svi_gplvm.datasets import load_digits
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import plot_ard, plot_elbo, plot_latent_space

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the iterations
ITERATIONS = 200 if FAST else 4000

digits = load_digits()
Y, labels = digits.Y, digits.labels
print(Y.shape)

# %% [markdown]
# ## Build and train
#
# Latents start from PCA, the M = 50 inducing inputs from 50 of those latents.
# `fit` compiles one training step (it traces once), runs 100 steps per call inside the graph and
# shows the minibatch ELBO in a progress bar.

# %%
model = BayesianSVIGPLVM(Y, latent_dim=5, num_inducing=50)
history = fit(model, Y, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)
_ = plot_elbo(history)
# %%
gpflow.utilities.print_summary(model, fmt="notebook")

# %% [markdown]
# ## The latent space
#
# The two most relevant latent dimensions (widest spread of the means, in lengthscales), each
# image's q(x_n) drawn as a one-standard-deviation ellipse and coloured by its digit.

# %%
_ = plot_latent_space(model, labels=labels)
# %%
_ = plot_ard(model)
# %% [markdown]
# ## New images with missing pixels
#
# Hide half of the pixels of a few images, infer their latents with the trained model frozen,
# and reconstruct every pixel with its predictive uncertainty.

# %%
rng = np.random.default_rng(0)
rows = rng.choice(len(Y), size=6, replace=False)
hidden = rng.random((6, Y.shape[1])) < 0.5
partial = np.where(hidden, np.nan, Y[rows])
mean, variance = model.reconstruct(partial)
column_means = np.broadcast_to(Y.mean(0), partial.shape)
print(f"RMSE on the hidden pixels: {rmse(Y[rows], mean.numpy(), mask=hidden):.3f}")
print(f"column-mean imputation:    {rmse(Y[rows], column_means, mask=hidden):.3f}")

# %%
figure, axes = plt.subplots(4, 6, figsize=(9, 6))
panels = [
    ("original", Y[rows]),
    ("observed", partial),
    ("reconstruction", mean.numpy()),
    ("predictive sd", np.sqrt(variance.numpy())),
]
for row_axes, (title, images) in zip(axes, panels):
    for ax, image in zip(row_axes, images):
        ax.imshow(image.reshape(8, 8), cmap="grey")
        ax.set_xticks([])
        ax.set_yticks([])
    row_axes[0].set_ylabel(title)
figure.tight_layout()
