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
# # Training when most entries are missing: MNIST and the Brendan faces
#
# The paper trains on images with 10 % to 60 % of their pixels removed at random and shows the
# reconstructions. Missing entries are NaN in Y. The model then sums the likelihood over the
# observed entries O_n of each row only,
#
#     E_q(x_n) sum_{d in O_n} E_q(f_d(x_n)) log p(y_nd | f_d),
#
# so a hidden pixel neither helps nor hurts the fit. The D Gaussian processes still share one
# latent x_n per image, and that is what lets the observed pixels of a row predict its hidden
# ones: the reconstruction of a hidden pixel is the predictive p(y_nd | q(x_n)) of a pixel the
# model never saw for that image.
#
# Here 60 % of the pixels of every training image are hidden. Both data sets are read from the
# folder named by `GPFLOW_SVI_GPLVM_DATA`.

# %%
import os

import numpy as np

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
from gpflow_svi_gplvm.datasets import load_brendan_faces, load_mnist, random_missing
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import keep_figures, plot_elbo, plot_image_grid, plot_latent_space

keep_figures("03_missing_data")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut iterations and rows
ITERATIONS = 100 if FAST else 3000
NUM_IMAGES = 300 if FAST else 2000  # MNIST training images (the paper uses 15,000)
NUM_FACES = 300 if FAST else 1965  # Brendan faces frames (1965 in all)
NUM_INDUCING = 20 if FAST else 100
MISSING_FRACTION = 0.6
SHOWN = 8  # images per row of the figures

# %% [markdown]
# ## One recipe for both data sets
#
# Hide a fraction of the pixels with `datasets.random_missing` (it returns the data with NaNs
# and the mask of what it hid), build the model on the incomplete data (it wraps its likelihood
# in `MaskedLikelihood` and says so), train, and reconstruct the training images from their
# trained q(x_n): `rows=` names the training rows, so no latent has to be inferred again.


# %%
def train_with_gaps(Y: np.ndarray, latent_dim: int, seed: int = 0):
    """Hide MISSING_FRACTION of Y at random, train a B-SVI GPLVM on the rest, reconstruct."""
    Y_missing, hidden = random_missing(Y, MISSING_FRACTION, seed=seed)
    model = BayesianSVIGPLVM(Y_missing, latent_dim=latent_dim, num_inducing=NUM_INDUCING)
    history = fit(model, Y_missing, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)
    mean, variance = model.reconstruct(Y_missing, rows=np.arange(len(Y)))
    return model, history, Y_missing, hidden, mean.numpy(), variance.numpy()


def report(name: str, Y: np.ndarray, Y_missing: np.ndarray, hidden: np.ndarray, mean):
    """RMSE on the hidden pixels, beside filling each pixel with its observed column mean."""
    column_means = np.broadcast_to(np.nanmean(Y_missing, axis=0), Y.shape)
    print(f"{name}: {hidden.mean():.0%} of the pixels hidden")
    print(f"  RMSE on the hidden pixels, GPLVM:       {rmse(Y, mean, mask=hidden):.4f}")
    print(f"  RMSE on the hidden pixels, column mean: {rmse(Y, column_means, mask=hidden):.4f}")


# %% [markdown]
# ## MNIST
#
# 28 x 28 digits (D = 784), grey levels scaled to [0, 1], Q = 5 latent dimensions.

# %%
mnist = load_mnist(num_train=NUM_IMAGES, num_test=0)
Y = mnist.Y
model, history, Y_missing, hidden, mean, variance = train_with_gaps(Y, latent_dim=5)
report("MNIST", Y, Y_missing, hidden, mean)
_ = plot_elbo(history)

# %% [markdown]
# Original, the 60 % the model was trained without (hidden pixels in red) and the reconstruction,
# the predictive mean of every pixel:

# %%
_ = plot_image_grid(
    [Y[:SHOWN], Y_missing[:SHOWN], mean[:SHOWN]],
    mnist.metadata["image_shape"],
    titles=["original", "60 % missing", "reconstruction"],
)

# %% [markdown]
# The latent space, coloured by digit, although the labels were never used: the two most
# relevant dimensions (widest spread of the means, in lengthscales), each image's q(x_n) drawn
# as a one-standard-deviation ellipse.

# %%
_ = plot_latent_space(model, labels=mnist.labels)

# %% [markdown]
# ## Brendan faces
#
# 1965 video frames of one face, 28 x 20 pixels (D = 560), scaled to [0, 1]. Consecutive frames
# are similar, so a few latent dimensions carry pose and expression.

# %%
faces = load_brendan_faces(scale=True)
Y = faces.Y[:NUM_FACES]
model, history, Y_missing, hidden, mean, variance = train_with_gaps(Y, latent_dim=5)
report("Brendan faces", Y, Y_missing, hidden, mean)

# %% [markdown]
# Below the reconstructions, the predictive standard deviation of each pixel on a grey scale of
# its own: brighter where the model is less sure (the variance integrates over q(x_n) as well as
# the GP and the noise).

# %%
shown = np.linspace(0, len(Y) - 1, SHOWN).astype(int)
_ = plot_image_grid(
    [Y[shown], Y_missing[shown], mean[shown]],
    faces.metadata["image_shape"],
    titles=["original", "60 % missing", "reconstruction"],
)
_ = plot_image_grid(
    [np.sqrt(variance[shown])], faces.metadata["image_shape"], titles=["predictive sd"]
)

# %% [markdown]
# `benchmarks/missing_data.py` measures the error on hidden pixels of held-out images for 10 %,
# 30 % and 60 % missing (the paper's Table 5).
#
# Next: [counts with a Poisson likelihood](04_taxi_counts.py).
