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
# # MovieLens-100K: where the model is unsure
#
# 943 users have rated some of 1682 movies on a scale of 1 to 5; 93.7 % of the user x movie
# matrix is missing. Each user is a row y_n with a latent taste x_n, and each movie a column
# with its own GP output f_d. Only observed ratings enter the bound, so a movie that few users
# rated has few data points for its f_d: its q(u_d) stays close to the prior and its predictions
# should be less certain. The paper shows exactly that: predictive variance falls with the
# number of ratings a movie has.
#
# We hold out 10 % of the ratings, train a Bayesian GPLVM on the rest, score the held-out
# ratings and plot the predictive variance of each movie against its number of ratings. That
# needs a q(u_d) covariance for each movie (`shared_covariance=False`): with one covariance
# shared by all outputs, the default from D = 100 on, the GP's uncertainty about f_d(x) is the
# same for every movie, which is cheaper (a step costs D x M instead of D x M^2) but cannot show
# this effect. With M = 30 the per-movie covariances still train in seconds per hundred steps.

# %%
import os

import numpy as np

from gpflow_svi_gplvm import BayesianSVIGPLVM, fit
from gpflow_svi_gplvm.datasets import load_movielens100k, random_missing
from gpflow_svi_gplvm.metrics import rmse
from gpflow_svi_gplvm.plotting import keep_figures, plot_elbo, plot_variance_against

keep_figures("05_movielens")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut iterations and users
ITERATIONS = 100 if FAST else 3000
NUM_USERS = 200 if FAST else 943
NUM_SAMPLES = 16 if FAST else 64  # draws of x_n behind each predictive

movielens = load_movielens100k()
Y = movielens.Y[:NUM_USERS]
# Movies nobody among these users rated carry no information: leave them out.
Y = Y[:, ~np.isnan(Y).all(axis=0)]
print(f"{Y.shape[0]} users x {Y.shape[1]} movies, {np.isnan(Y).mean():.1%} missing")

# %% [markdown]
# ## Hold out 10 % of the ratings and train
#
# `random_missing` hides a fraction of the *observed* entries; `held_out` marks them. The model
# sees the remaining ratings with NaN everywhere else (it says that it wraps its likelihood in
# `MaskedLikelihood`; movies whose every rating was held out get a warning of their own).

# %%
Y_train, held_out = random_missing(Y, 0.1, seed=0)
model = BayesianSVIGPLVM(Y_train, latent_dim=5, num_inducing=30, shared_covariance=False)
history = fit(model, Y_train, iterations=ITERATIONS, batch_size=100, learning_rate=0.01)
_ = plot_elbo(history)

# %% [markdown]
# ## Predict every rating
#
# `reconstruct(..., rows=...)` uses each user's trained q(x_n) and integrates over it with
# `num_samples` draws. It processes the users in chunks whose intermediates (D x M x rows x
# draws numbers) stay bounded, so the 1682 outputs do not exhaust memory.

# %%
mean, variance = model.reconstruct(Y_train, rows=np.arange(len(Y)), num_samples=NUM_SAMPLES)
mean, variance = mean.numpy(), variance.numpy()

ratings_per_movie = np.sum(~np.isnan(Y_train), axis=0)
rated = ratings_per_movie > 0
movie_means = np.full(Y.shape[1], np.nanmean(Y_train))  # the overall mean for unrated movies
movie_means[rated] = np.nanmean(Y_train[:, rated], axis=0)
baseline = np.broadcast_to(movie_means, Y.shape)
print(f"held-out ratings: {held_out.sum()}")
print(f"  RMSE, GPLVM:               {rmse(Y, mean, mask=held_out):.3f}")
print(f"  RMSE, the movie's mean:    {rmse(Y, baseline, mask=held_out):.3f}")

# %% [markdown]
# ## Predictive variance against the number of ratings
#
# For each movie, the predictive variance averaged over all users, against how many training
# ratings it has (log scale; movies left with none are not drawn). Dots are movies, the line
# the mean of each bin with its standard error.

# %%
movie_variance = variance.mean(axis=0)
_ = plot_variance_against(
    ratings_per_movie[rated],
    movie_variance[rated],
    bins=8,
    xlabel="training ratings of the movie",
    ylabel="mean predictive variance",
    log_x=True,
)
fewest, most = np.quantile(ratings_per_movie[rated], [0.25, 0.75])
few_ratings = movie_variance[rated & (ratings_per_movie <= fewest)].mean()
many_ratings = movie_variance[ratings_per_movie >= most].mean()
print("mean predictive variance of the quarter of movies with")
print(f"  the fewest ratings (<= {fewest:.0f}): {few_ratings:.3f}")
print(f"  the most ratings (>= {most:.0f}):   {many_ratings:.3f}")

# %% [markdown]
# The variance holds the GP's uncertainty about f_d, the uncertainty of the latents and the
# Gaussian noise, which is shared by all movies; the decrease with the number of ratings comes
# from the first, so it needs the per-movie covariances chosen above.
# `benchmarks/missing_data.py movielens` runs the full experiment. Next:
# [new rows and serving](06_new_data_and_serving.py).
