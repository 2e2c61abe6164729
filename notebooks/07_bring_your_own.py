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
# # Bring your own likelihood, kernel and latent family
#
# A model is `SVIGPLVM(Y, Q, num_inducing, kernel=..., likelihood=..., latent=...)`, and each of
# the three parts can be swapped without touching the bound:
#
# - **likelihood**: any GPflow scalar likelihood. The data term needs only its
#   `variational_expectations`, E_q(f)[log p(y | f)] (closed form or Gauss-Hermite quadrature).
# - **kernel**: any GPflow kernel on the Q latent dimensions; give it one lengthscale per
#   dimension to keep ARD.
# - **latent**: a function from the initial latents [N, Q] (PCA by default) to a latent module,
#   a subclass of `LatentVariables` that returns draws of x_n and the row term r_n.
#
# The data is scikit-learn's 8 x 8 digits, so this notebook needs no download.

# %%
import os

import gpflow
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.base import Parameter
from gpflow.utilities import positive

from gpflow_svi_gplvm import SVIGPLVM, BayesianSVIGPLVM, LatentBatch, fit
from gpflow_svi_gplvm.datasets import load_digits, random_missing
from gpflow_svi_gplvm.latents import RowLatentVariables
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import keep_figures, plot_ard, plot_image_grid, plot_latent_space

keep_figures("07_bring_your_own")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut iterations and rows
ITERATIONS = 200 if FAST else 3000
NUM_IMAGES = 400 if FAST else 1797
NUM_INDUCING = 20 if FAST else 50

digits = load_digits()
Y, labels = digits.Y[:NUM_IMAGES], digits.labels[:NUM_IMAGES]
image_shape = digits.metadata["image_shape"]

# %% [markdown]
# ## A likelihood: Student-t against outliers
#
# Flip 5 % of the pixels (y -> 1 - y): gross errors that a Gaussian likelihood, which charges the
# squared residual, tries to explain. A Student-t likelihood with few degrees of freedom charges
# only about the log of a large residual, so the fit can leave outliers alone. We train both and
# compare their reconstructions with the *clean* images.

# %%
rng = np.random.default_rng(0)
flipped = rng.random(Y.shape) < 0.05
Y_corrupted = np.where(flipped, 1.0 - Y, Y)

reconstructions = {}
for name, likelihood in [
    ("Gaussian", None),  # the default: a Gaussian with a tenth of the data's variance as noise
    ("Student-t", gpflow.likelihoods.StudentT(scale=0.1, df=3.0)),
]:
    model = BayesianSVIGPLVM(
        Y_corrupted, latent_dim=5, num_inducing=NUM_INDUCING, likelihood=likelihood
    )
    fit(model, Y_corrupted, iterations=ITERATIONS, batch_size=100, progress=False)
    mean, _ = model.reconstruct(Y_corrupted, rows=np.arange(len(Y)))
    reconstructions[name] = mean.numpy()
    print(
        f"{name:9s} RMSE against the clean images: on flipped pixels "
        f"{rmse(Y, reconstructions[name], mask=flipped):.3f}, on the others "
        f"{rmse(Y, reconstructions[name], mask=~flipped):.3f}"
    )

_ = plot_image_grid(
    [Y[:8], Y_corrupted[:8], reconstructions["Gaussian"][:8], reconstructions["Student-t"][:8]],
    image_shape,
    titles=["clean", "5 % flipped", "Gaussian", "Student-t"],
)

# %% [markdown]
# ## A latent family: Gaussian q(x) under a heavy-tailed prior
#
# The Bayesian GPLVM's prior p(x) = N(0, I) pulls every latent towards the origin with a force
# that grows with the distance, which can squeeze well-separated clusters together. A Student-t
# prior, p(x) = prod_q t_nu(x_q), lets a few rows sit far out. With it KL(q(x_n) ‖ p(x)) has no
# closed form, so the row term is estimated with the same draws x_n^(s) = mu_n + sqrt(s_n) eps
# that the data term uses:
#
#     r_n = -KL(q(x_n) ‖ p(x)) = E_q[log p(x_n)] + H[q(x_n)]
#         ≈ 1/S sum_s log p(x_n^(s)) + 1/2 sum_q log(2 pi e s_nq).
#
# A family with parameters of its own for every row subclasses `RowLatentVariables` and says:
#
# - `row_parameters`: its per-row tables [N, Q]. The trainer gives them an Adam that moves only
#   the rows of the minibatch, and new rows are inferred by optimising the same parameters.
# - `moments_of(rows)`: mean and marginal variance [B, Q] of q(x_n) from gathered rows.
# - `batch_of(rows, num_samples, noise)`: a `LatentBatch` of draws [S, B, Q] (from the standard
#   normal `noise`), the row term [B] and the moments.
# - `initial_rows(mean)`: where the parameters of a new row start, given a starting mean.
#
# An amortised family (an encoder of y_n, say) subclasses `LatentVariables` instead and
# implements `moments(idx, Y)` and `__call__(idx, Y, num_samples, noise, training)`.


# %%
class StudentTPriorLatent(RowLatentVariables):
    """q(x_n) = N(mu_n, diag s_n) under the prior p(x) = prod_q StudentT(x_q; nu, 0, 1).

    The row term -KL(q || p) = E_q[log p(x)] + H[q] uses a Monte Carlo estimate of the first term
    (the training draws) and the exact Gaussian entropy.
    """

    def __init__(
        self,
        initial_mean: np.ndarray,
        degrees_of_freedom: float = 3.0,
        initial_variance: float = 0.1,
        name: str | None = None,
    ):
        initial_mean = np.asarray(initial_mean)
        super().__init__(*initial_mean.shape, name=name)
        self.initial_variance = initial_variance
        self.mean = Parameter(initial_mean, name="latent_mean")
        self.variance = Parameter(
            np.full(initial_mean.shape, initial_variance),
            transform=positive(),
            name="latent_variance",
        )
        zero, one = tf.constant(0.0, tf.float64), tf.constant(1.0, tf.float64)
        self.prior = tfp.distributions.StudentT(
            df=tf.constant(degrees_of_freedom, tf.float64), loc=zero, scale=one
        )

    @property
    def row_parameters(self) -> tuple[Parameter, ...]:
        return (self.mean, self.variance)

    def moments_of(self, rows: tuple[tf.Tensor, ...]) -> tuple[tf.Tensor, tf.Tensor]:
        mean, variance = rows
        return mean, variance

    def batch_of(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor
    ) -> LatentBatch:
        mean, variance = rows
        samples = mean + tf.sqrt(variance) * noise  # [S, B, Q]
        log_prior = tf.reduce_mean(tf.reduce_sum(self.prior.log_prob(samples), axis=-1), axis=0)
        entropy = 0.5 * tf.reduce_sum(tf.math.log(2.0 * np.pi * np.e * variance), axis=-1)
        return LatentBatch(samples, log_prior + entropy, mean, variance)

    def initial_rows(self, mean: tf.Tensor) -> tuple[tf.Tensor, ...]:
        return mean, tf.fill(tf.shape(mean), tf.constant(self.initial_variance, mean.dtype))


# %% [markdown]
# ## All three together: binary images
#
# Binarise the digits (pixel > 0.5) and hide 30 % of the pixels. A Bernoulli likelihood with the
# probit link, p(y = 1 | f) = Phi(f), models the binary pixels; a Matérn-5/2 kernel with one
# lengthscale per latent dimension replaces the squared exponential; and the latent family
# above replaces the Gaussian prior. `latent=` takes any callable from the initial latents
# [N, Q] to a module, so the class itself will do.

# %%
Q = 5
Y_binary = (Y > 0.5).astype(float)
Y_binary_gaps, hidden = random_missing(Y_binary, 0.3, seed=0)
model = SVIGPLVM(
    Y_binary_gaps,
    latent_dim=Q,
    num_inducing=NUM_INDUCING,
    kernel=gpflow.kernels.Matern52(lengthscales=np.ones(Q)),
    likelihood=gpflow.likelihoods.Bernoulli(),
    latent=StudentTPriorLatent,
)
history = fit(model, Y_binary_gaps, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)
gpflow.utilities.print_summary(model)

# %% [markdown]
# The predictive mean of a Bernoulli pixel is the probability that it is on. Thresholding it at
# 0.5 classifies the hidden pixels; the baseline gives each hidden pixel the value most common in
# its column.

# %%
probability, _ = model.reconstruct(Y_binary_gaps, rows=np.arange(len(Y)))
probability = probability.numpy()
majority = np.broadcast_to(np.nanmean(Y_binary_gaps, axis=0) > 0.5, Y.shape)
model_accuracy = np.mean((probability > 0.5)[hidden] == Y_binary[hidden])
majority_accuracy = np.mean(majority[hidden] == Y_binary[hidden])
print(f"hidden pixels classified right: {model_accuracy:.1%}")
print(f"column majority:                {majority_accuracy:.1%}")
_ = plot_image_grid(
    [Y_binary[:8], Y_binary_gaps[:8], probability[:8]],
    image_shape,
    titles=["binary", "30 % hidden", "P(pixel on)"],
)

# %% [markdown]
# The plotting helpers read the new parts through the same interface: the latent space from the
# module's moments, the ARD bars from the Matérn kernel's lengthscales.

# %%
_ = plot_latent_space(model, labels=labels)
_ = plot_ard(model)

# %% [markdown]
# `infer_latents`, `reconstruct` of new rows and `export_saved_model` work with the new family
# too: they optimise its `row_parameters`, starting from `initial_rows`. The tutorial
# [The bound, and the four latent treatments](../tutorials/01_the_bound.md) has the math, and
# [Latent treatments](../tutorials/04_latent_treatments.md) compares the built-in families.
