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
import numpy as np

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
from gpflow_svi_gplvm.datasets import load_digits, train_test_split
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import (
    keep_figures,
    plot_ard,
    plot_elbo,
    plot_image_grid,
    plot_latent_space,
)

keep_figures("01_quickstart")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the iterations
ITERATIONS = 200 if FAST else 4000

digits = load_digits()
# 80% of the images train the model; the other 20% stay unseen until the end.
split = train_test_split(digits.Y, test_fraction=0.2, seed=0, labels=digits.labels)
Y, labels = split.Y_train, split.labels_train
print(Y.shape, split.Y_test.shape)

# %% [markdown]
# ## Build and train
#
# Latents start from PCA, the M = 25 inducing inputs (the default) from 25 of those latents.
# By default the expectation over q(x_n) is taken in closed form and q(u) takes natural-gradient
# steps while Adam trains the rest (see the tutorial "The bound").
# `fit` compiles one training step (it traces once), runs 100 steps per call inside the graph and
# shows the minibatch ELBO in a progress bar.

# %%
model = BayesianSVIGPLVM(Y, latent_dim=5)
history = fit(model, Y, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)
_ = plot_elbo(history)
# %%
gpflow.utilities.print_summary(model)

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
# Six of the held-out images, which the model has never seen: hide half of their pixels, infer
# their latents with the trained model frozen, and reconstruct every pixel with its predictive
# uncertainty.

# %%
rng = np.random.default_rng(0)
new_images = split.Y_test[:6]
hidden = rng.random(new_images.shape) < 0.5
partial = np.where(hidden, np.nan, new_images)
mean, variance = model.reconstruct(partial)
column_means = np.broadcast_to(np.mean(Y, axis=0), partial.shape)  # from the training images
print(f"RMSE on the hidden pixels: {rmse(new_images, mean.numpy(), mask=hidden):.3f}")
print(f"column-mean imputation:    {rmse(new_images, column_means, mask=hidden):.3f}")

# %% [markdown]
# One grey scale for the originals, the observed pixels (the hidden ones in red) and the
# reconstructions, so they compare; the predictive standard deviations on their own scale.

# %%
_ = plot_image_grid(
    [new_images, partial, mean.numpy()],
    image_shape=(8, 8),
    titles=["original", "observed", "reconstruction"],
    value_label="grey level",
)
_ = plot_image_grid(
    [np.sqrt(variance.numpy())], image_shape=(8, 8), titles=["predictive sd"], value_label="sd"
)
