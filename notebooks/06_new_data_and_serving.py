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
# # New rows, and serving a trained model with TensorFlow alone
#
# A trained GPLVM answers three questions about rows it has never seen:
#
# - **encode**: q(x*) for a new row y* (NaN = missing). For the point, MAP and B-SVI models,
#   q(x*) maximises that row's part of the bound,
#   E_q(x*)[sum_{d observed} E_q(f_d(x*)) log p(y*_d | f_d)] + r(x*), with the kernel,
#   likelihood, Z and q(u) frozen; the amortised model starts from one pass of its encoder.
# - **reconstruct**: the predictive of every entry of y*, observed or not,
#   p(y*_d) = E_q(x*)[p(y*_d | x*)], estimated by sampling q(x*). Its variance holds the
#   uncertainty of the latent as well as the GP's and the noise.
# - **decode**: the predictive of y at a given latent point x.
#
# `export_saved_model` writes all three into a SavedModel that loads and runs without GPflow or
# this package. The data is scikit-learn's 8 x 8 digits, so this notebook needs no download.

# %%
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from gpflow_svi_gplvm import BayesianSVIGPLVM, export_saved_model, fit
from gpflow_svi_gplvm.datasets import load_digits, random_missing, train_test_split
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import keep_figures, plot_image_grid, plot_latent_space

keep_figures("06_new_data_and_serving")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the iterations
ITERATIONS = 200 if FAST else 4000
INFERENCE_ITERATIONS = 50 if FAST else 300  # the most steps on q(x*) of new rows

digits = load_digits()
split = train_test_split(digits.Y, test_fraction=0.2, seed=0, labels=digits.labels)
Y_train, Y_test = split.Y_train, split.Y_test
image_shape = digits.metadata["image_shape"]

model = BayesianSVIGPLVM(Y_train, latent_dim=5)
_ = fit(model, Y_train, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)

# %% [markdown]
# ## Latents of new rows
#
# `infer_latents` fits q(x*) for all test rows at once (rows are independent, so this is one
# batched optimisation inside one compiled loop). The crosses are the test digits, placed among
# the training digits of the same class.

# %%
X_mean, X_variance = model.infer_latents(Y_test, iterations=INFERENCE_ITERATIONS)
figure = plot_latent_space(model, labels=split.labels_train)
ax = figure.axes[0]
dims = [int(d) for d in np.argsort(-model.latent_relevance())[:2]]
ax.scatter(*X_mean.numpy()[:, dims].T, c=split.labels_test, cmap="tab10", marker="x", s=25)
ax.set_title("training digits (dots) and test digits (crosses)")
print(f"q(x*): mean {X_mean.shape}, mean variance {X_variance.numpy().mean():.3f}")

# %% [markdown]
# ## Reconstructions of new rows with gaps
#
# Hide half of the pixels of the test digits. `reconstruct` infers q(x*) from the observed half
# and predicts every pixel. If the predictive is calibrated, about 95 % of the hidden pixels lie
# within two predictive standard deviations of the mean.

# %%
Y_gaps, hidden = random_missing(Y_test, 0.5, seed=1)
mean, variance = model.reconstruct(Y_gaps, iterations=INFERENCE_ITERATIONS)
mean, sd = mean.numpy(), np.sqrt(variance.numpy())
inside = np.abs(Y_test - mean) <= 2 * sd
print(f"RMSE on the hidden pixels:          {rmse(Y_test, mean, mask=hidden):.3f}")
print(f"hidden pixels within 2 sd:          {inside[hidden].mean():.1%}")
_ = plot_image_grid(
    [Y_test[:8], Y_gaps[:8], mean[:8]],
    image_shape,
    titles=["original", "half hidden", "reconstruction"],
    value_label="grey level",
)

# %% [markdown]
# `gpflow_svi_gplvm.LatentInference(model, iterations=...)` holds the compiled graphs of both
# calls; keep one when you call them repeatedly, to trace once.
#
# ## Export
#
# The SavedModel holds the model's variables and four signatures: `decode` (input `X`, float64
# [None, Q]), `encode` and `reconstruct` (input `Y`, float64 [None, D], NaN = missing) and
# `serving_default` (= `reconstruct`); each returns a dict with `mean` and `variance`. The
# optimisation of q(x*) behind `encode` and `reconstruct` is compiled into the graph, with
# `encode_iterations` steps. `dtype=tf.float32` exports a copy that takes and returns float32.

# %%
export_folder = Path(tempfile.mkdtemp())
path = export_saved_model(
    model, export_folder / "digits_gplvm", encode_iterations=INFERENCE_ITERATIONS
)
print(sorted(p.name for p in path.iterdir()))

# %% [markdown]
# ## Serve, from a process that has only TensorFlow
#
# The serving code below runs in a fresh Python process, as a server would: it imports
# TensorFlow alone (it checks that neither GPflow nor this package was loaded), reads the test
# rows with gaps from a file, and writes what the export answers.

# %%
SERVER = """
import sys
import numpy as np
import tensorflow as tf

path, requests, answers = sys.argv[1:]
loaded = tf.saved_model.load(path)
for name, signature in loaded.signatures.items():
    print(f"{name:16s} {signature.structured_input_signature[1]}")
Y = tf.constant(np.load(requests))
served = loaded.signatures["reconstruct"](Y=Y)
encoded = loaded.signatures["encode"](Y=Y)
np.savez(answers, mean=served["mean"].numpy(), latent_mean=encoded["mean"].numpy())
assert "gpflow" not in sys.modules and "gpflow_svi_gplvm" not in sys.modules
print("served with", ", ".join(sorted(m for m in ("tensorflow", "gpflow") if m in sys.modules)))
"""
np.save(export_folder / "requests.npy", Y_gaps)
answers = export_folder / "answers.npz"
server = subprocess.run(
    [sys.executable, "-c", SERVER, str(path), str(export_folder / "requests.npy"), str(answers)],
    capture_output=True,
    text=True,
    env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
)
print(server.stdout or server.stderr[-2000:])
served = np.load(answers)
difference = np.max(np.abs(served["mean"] - mean))
print(f"largest difference from the in-process reconstruction: {difference:.2e}")
print(f"encode: latent means {served['latent_mean'].shape}")

# %% [markdown]
# Back in this process: `decode` maps latent points to images. Walking along the most relevant
# latent dimension, from two standard deviations of the training latents below their mean to two
# above, with the other dimensions at their mean, shows what that dimension encodes.

# %%
training_latents = model.latent_mean().numpy()
walk = np.tile(training_latents.mean(axis=0), (8, 1))
centre, spread = training_latents[:, dims[0]].mean(), training_latents[:, dims[0]].std()
walk[:, dims[0]] = np.linspace(centre - 2 * spread, centre + 2 * spread, 8)
loaded = tf.saved_model.load(str(path))
decoded = loaded.signatures["decode"](X=tf.constant(walk))
_ = plot_image_grid(
    [decoded["mean"].numpy()],
    image_shape,
    titles=[f"latent dim {dims[0]}"],
    value_label="grey level",
)

# %%
shutil.rmtree(export_folder)

# %% [markdown]
# Next: [your own likelihood, kernel and latent family](07_bring_your_own.py).
