r"""How wrong is a q(x)? HMC draws of the posterior it approximates, and a distance between draws.

For rows :math:`y_n` of a trained model, with its kernel, likelihood and inducing points fixed,
two posteriors of the latents can be drawn from with NUTS (``tfp.mcmc``):

- ``target="model"``: :math:`p(x_n \mid y_n) \propto p(x_n) \exp \sum_{d \in O_n}
  E_{q(f_d(x_n))} \log p(y_{nd} \mid f_d)`, f integrated out under the trained q(u) exactly as in
  the bound's data term. It is the best :math:`q(x_n)` any family can reach in the bound for
  these globals (maximising :math:`E_q[\text{data term} + \log p(x) - \log q(x)]` over all
  densities gives it), so the distance of a trained q(x) to it measures the family alone. Rows are
  independent; any likelihood with a deterministic ``variational_expectations`` and missing
  entries work.
- ``target="exact"``: the exact GP posterior of the rows jointly, u and f integrated out,
  :math:`p(X \mid Y) \propto p(X) \prod_d \mathcal{N}(y_{:d}; m(X), K(X, X) + \sigma^2 I)`
  (Gaussian likelihood, complete rows; O(B^3), for a few rows): the "true posterior" of the
  paper's flow demonstration (a linear kernel gives probabilistic PCA).

:func:`posterior_draws` returns the draws with their diagnostics (acceptance, effective sample
size, split R-hat over chains); :func:`latent_draws` draws from a model's own q(x);
:func:`fit_to_posterior` fits a latent family to a target directly; :func:`mmd` and
:func:`sliced_wasserstein` measure the distance between two sets of draws, with a bootstrap
interval.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.config import default_float

from .latents import LatentVariables, MAPLatent, PointLatent
from .likelihoods import base_likelihood, likelihood_facts, masked
from .models import SVIGPLVM
from .prediction.latent_inference import LatentInference
from .prediction.new_row_model import check_new_row_model
from .training.optimizers import RowSparseAdam
from .validation import (
    check_fraction,
    check_integer,
    check_learning_rate,
    check_observations,
    check_seed,
)

__all__ = [
    "TARGETS",
    "PosteriorDraws",
    "posterior_draws",
    "log_posterior",
    "latent_draws",
    "fit_to_posterior",
]

TARGETS = ("model", "exact")
"""The posteriors :func:`posterior_draws` draws from (see the module docstring)."""

LogDensity = Callable[[tf.Tensor], tf.Tensor]


class PosteriorDraws(NamedTuple):
    """NUTS draws of the latents of B rows, with their diagnostics."""

    draws: np.ndarray
    """[C S, B, Q] the draws of all C chains (S each, chain after chain), burn-in dropped."""
    acceptance: np.ndarray
    """[B] mean acceptance probability of the NUTS steps after burn-in (the same for all rows
    under the joint ``"exact"`` target)."""
    effective_sample_size: np.ndarray
    """[B, Q] effective draws of each coordinate, over all chains."""
    r_hat: np.ndarray
    """[B, Q] split potential scale reduction over the chains (near 1 when they agree)."""
    step_size: np.ndarray
    """[B] the adapted leapfrog step size."""


def _log_prior(model: SVIGPLVM) -> LogDensity:
    """log p(x) over the last axis [..., Q] -> [...]: the MAP model's prior, else N(0, I)."""
    latent = model.latent
    if isinstance(latent, MAPLatent):
        return latent.prior.log_prob
    if isinstance(latent, PointLatent):
        raise ValueError(
            "A point-estimate model has no prior on x, so p(x | y) may not be a distribution: "
            "check a model with a prior (MAPGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM or "
            "FlowBayesianGPLVM)."
        )
    return lambda x: tfp.distributions.MultivariateNormalDiag(
        tf.zeros(model.latent_dim, x.dtype)
    ).log_prob(x)


def _model_data_term(model: SVIGPLVM, Y: tf.Tensor) -> LogDensity:
    """x [C, B, Q] -> [C, B]: each row's data term under q(u) at each chain's x."""
    if not likelihood_facts(model.likelihood).deterministic:
        raise ValueError(
            f"The data term of {type(base_likelihood(model.likelihood)).__name__} is itself a "
            "Monte Carlo estimate, so HMC would target a random density: use a likelihood whose "
            "variational_expectations is deterministic (closed form or quadrature)."
        )
    likelihood = masked(model.likelihood)

    def data_term(x: tf.Tensor) -> tf.Tensor:
        flat = tf.reshape(x, [1, -1, model.latent_dim])
        rows = tf.tile(Y, [tf.shape(x)[0], 1])
        return tf.reshape(model.data_term(flat, rows, likelihood), tf.shape(x)[:2])

    return data_term


def _exact_data_term(model: SVIGPLVM, Y: tf.Tensor) -> LogDensity:
    r"""X [C, B, Q] -> [C]: :math:`\sum_d \log \mathcal{N}(y_{:d}; m(X), K(X, X) + \sigma^2 I)`."""
    variance = likelihood_facts(model.likelihood).noise_variance
    if variance is None:
        raise ValueError(
            f"target='exact' integrates f out in closed form, which needs a Gaussian likelihood "
            f"with one noise variance (this model's is "
            f"{type(base_likelihood(model.likelihood)).__name__}): use target='model'."
        )
    if bool(tf.reduce_any(tf.math.is_nan(Y))):
        raise ValueError(
            "target='exact' needs complete rows (no NaN): use target='model', which skips "
            "missing entries."
        )

    def data_term(X: tf.Tensor) -> tf.Tensor:
        num_rows = tf.shape(X)[1]
        noise = variance * tf.eye(num_rows, dtype=X.dtype)
        chol = tf.linalg.cholesky(model.kernel.K(X) + noise)  # [C, B, B]
        mean = tf.reshape(model.mean_function(tf.reshape(X, [-1, model.latent_dim])), [-1])
        residual = Y - tf.reshape(mean, tf.concat([tf.shape(X)[:2], [-1]], 0))  # [C, B, D]
        whitened = tf.linalg.triangular_solve(chol, residual)
        log_det = tf.reduce_sum(tf.math.log(tf.linalg.diag_part(chol)), -1)
        D, size = tf.cast(tf.shape(Y)[1], X.dtype), tf.cast(num_rows, X.dtype)
        return -0.5 * tf.reduce_sum(tf.square(whitened), [-2, -1]) - D * (
            log_det + 0.5 * size * np.log(2.0 * np.pi)
        )

    return data_term


def _data_term(model: SVIGPLVM, Y: tf.Tensor, target: str) -> LogDensity:
    if target not in TARGETS:
        raise ValueError(f"target must be one of {', '.join(map(repr, TARGETS))}, got {target!r}.")
    return _model_data_term(model, Y) if target == "model" else _exact_data_term(model, Y)


def log_posterior(model: SVIGPLVM, Y, target: str = "model", mask=None) -> LogDensity:
    r"""The unnormalised :math:`\log p(x \mid y)` of rows Y [B, D] (NaN = missing) as a function of
    latents x [C, B, Q]: [C, B] per row for ``target="model"``, [C] for the rows jointly for
    ``target="exact"`` (see the module docstring)."""
    rows = tf.constant(check_observations(Y, "Y", model.data_dim, mask))
    prior, data_term = _log_prior(model), _data_term(model, rows, target)
    if target == "model":
        return lambda x: prior(x) + data_term(x)
    return lambda x: tf.reduce_sum(prior(x), -1) + data_term(x)


def posterior_draws(
    model: SVIGPLVM,
    Y,
    target: str = "model",
    num_draws: int = 1000,
    num_burnin: int = 1000,
    num_chains: int = 4,
    seed: int = 0,
    mask=None,
    target_accept: float = 0.8,
    num_candidates: int = 64,
) -> PosteriorDraws:
    r"""NUTS draws of the latents of rows Y [B, D] (NaN = missing) under ``target`` (module
    docstring), with the model's globals fixed.

    Each of ``num_chains`` chains starts at the most probable of ``num_candidates`` draws of
    N(0, I) of its own (a start in a basin of negligible mass can hold a chain there for good), and
    takes ``num_burnin`` steps, the first 80%
    adapting the step size (dual averaging towards ``target_accept``; one step size per row
    under ``"model"``), then ``num_draws`` kept steps each. Check the diagnostics before trusting
    the draws: R-hat below 1.01 and a few hundred effective draws per coordinate.
    """
    num_draws = check_integer(num_draws, "num_draws")
    num_burnin = check_integer(num_burnin, "num_burnin", minimum=0)
    num_chains = check_integer(num_chains, "num_chains", minimum=2, hint="R-hat compares chains")
    num_candidates = check_integer(num_candidates, "num_candidates")
    seed = check_seed(seed)
    target_accept = check_fraction(
        target_accept, "target_accept", "an acceptance probability", "0.6 to 0.9 is typical"
    )
    log_density = log_posterior(model, Y, target, mask)
    num_rows = np.shape(Y)[0]
    step_shape = [num_rows, 1] if target == "model" else []
    shape = [num_chains, num_rows, model.latent_dim]
    initial = _initial_states(log_density, shape, num_candidates, seed)

    sample = _nuts_sampler(log_density, initial, step_shape, num_draws, num_burnin, target_accept)
    draws, (log_accept, step_sizes) = sample(_sampler_seed(seed))
    return _with_diagnostics(draws, log_accept, step_sizes[-1], num_rows)


def _nuts_sampler(
    log_density: LogDensity,
    initial: tf.Tensor,
    step_shape: list[int],
    num_draws: int,
    num_burnin: int,
    target_accept: float,
) -> Callable[[tf.Tensor], tuple]:
    """A compiled NUTS run from ``initial`` whose step sizes (of ``step_shape``) adapt in the
    first 80% of ``num_burnin`` steps: its draws, log acceptance ratios and step sizes, from a
    seed."""
    first_step = tf.constant(0.1, initial.dtype)

    @tf.function(autograph=False)
    def sample(seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        kernel = tfp.mcmc.DualAveragingStepSizeAdaptation(
            tfp.mcmc.NoUTurnSampler(log_density, tf.fill(step_shape, first_step)),
            num_adaptation_steps=int(0.8 * num_burnin),
            target_accept_prob=tf.constant(target_accept, initial.dtype),
        )
        return tfp.mcmc.sample_chain(
            num_draws,
            initial,
            kernel=kernel,
            num_burnin_steps=num_burnin,
            trace_fn=lambda _, results: (
                results.inner_results.log_accept_ratio,
                results.new_step_size,
            ),
            seed=seed,
        )

    return sample


def _sampler_seed(seed: int) -> tf.Tensor:
    """TensorFlow Probability's int32 seed pair for ``seed`` in [0, 2**63): ``[seed, 1]`` below
    2**31, the higher bits folded into the second number above."""
    return tf.constant([seed % 2**31, (seed // 2**31 * 4 + 1) % 2**31], tf.int32)


def _initial_states(
    log_density: LogDensity, shape: list[int], num_candidates: int, seed: int
) -> tf.Tensor:
    """Starts [C, B, Q]: for each chain (and each row, when rows are independent) the candidate
    of highest ``log_density`` among ``num_candidates`` standard normal draws of its own."""
    candidates = tf.random.stateless_normal(
        [num_candidates, *shape], seed=[seed, 0], dtype=default_float()
    ).numpy()
    values = log_density(tf.reshape(candidates, [-1, *shape[1:]])).numpy()
    values = np.nan_to_num(values.reshape(num_candidates, shape[0], -1), nan=-np.inf)  # [K, C, B|1]
    best = np.broadcast_to(values.argmax(axis=0)[None, ..., None], (1, *shape))
    return tf.constant(np.take_along_axis(candidates, best, axis=0)[0])


def _with_diagnostics(
    draws: tf.Tensor, log_accept: tf.Tensor, step_size: tf.Tensor, num_rows: int
) -> PosteriorDraws:
    """:class:`PosteriorDraws` from draws [S, C, B, Q], log acceptance ratios [S, C(, B)] and
    the last step size."""
    acceptance = tf.reduce_mean(tf.exp(tf.minimum(log_accept, 0.0)), axis=[0, 1])
    ess = tfp.mcmc.effective_sample_size(draws, cross_chain_dims=1)
    r_hat = tfp.mcmc.potential_scale_reduction(draws, independent_chain_ndims=1, split_chains=True)
    flat = tf.reshape(tf.transpose(draws, [1, 0, 2, 3]), [-1, *draws.shape[2:]])
    return PosteriorDraws(
        draws=flat.numpy(),
        acceptance=np.broadcast_to(acceptance.numpy(), (num_rows,)).copy(),
        effective_sample_size=ess.numpy(),
        r_hat=r_hat.numpy(),
        step_size=np.broadcast_to(np.reshape(step_size.numpy(), (-1,)), (num_rows,)).copy(),
    )


def latent_draws(
    model: SVIGPLVM,
    num_draws: int,
    rows=None,
    Y=None,
    seed: int = 0,
    iterations: int = 300,
    learning_rate: float = 0.05,
) -> np.ndarray:
    """Draws [num_draws, B, Q] of the model's own q(x): of training rows ``rows`` [B] (an
    amortised model needs their data ``Y`` besides), or, without ``rows``, of q(x*) inferred for new
    rows ``Y`` [B, D] as :func:`~gpflow_svi_gplvm.prediction.functions.infer_latents` does
    (``iterations``, ``learning_rate``)."""
    num_draws = check_integer(num_draws, "num_draws")
    seed = check_seed(seed)
    if rows is None:
        if Y is None:
            raise ValueError("Give the training rows' indices (rows=) or new rows (Y=).")
        new = check_observations(Y, "Y", model.data_dim)
        inference = LatentInference(model, iterations, learning_rate, seed=seed)
        return inference.draws(new, num_draws).numpy()
    rows = np.asarray(rows)
    num_data = int(model.num_data or 0)
    if (
        rows.ndim != 1
        or not np.issubdtype(rows.dtype, np.integer)
        or not (len(rows) and 0 <= rows.min() and rows.max() < num_data)
    ):
        raise ValueError(f"rows must be a vector of training-row indices in [0, {num_data}).")
    idx = tf.constant(rows.astype(np.int64))
    data = None if Y is None else tf.constant(check_observations(Y, "Y", model.data_dim))
    if model.latent.amortised and data is None:
        raise ValueError("An amortised q(x) is computed from the data: pass the rows' Y too.")
    shape = [num_draws, int(idx.shape[0]), model.latent_dim]
    noise = tf.random.stateless_normal(shape, seed=[seed, 3], dtype=default_float())
    return model.latent(idx, data, num_draws, noise).samples.numpy()


def fit_to_posterior(
    latent: LatentVariables,
    model: SVIGPLVM,
    Y,
    target: str = "exact",
    iterations: int = 2000,
    learning_rate: float = 0.01,
    num_samples: int = 16,
    seed: int = 0,
) -> np.ndarray:
    r"""Fit the q(X) of ``latent`` (a family over the B rows of Y [B, D], e.g. built from
    initial means [B, Q]) to the posterior of ``target`` directly, maximising

    .. math::

        E_{q(X)}[\log p(Y \mid X)] + \sum_n r_n, \qquad r_n \text{ the family's row term},

    with :math:`\log p(Y \mid X)` the target's data term (q(u) and the globals of ``model``
    fixed), by Adam on the family's parameters only, ``num_samples`` draws a step. Under
    ``target="exact"`` nothing stands between q(X) and the true posterior but the family (no
    q(u)), so this shows what a family can reach. Returns the bound at every step
    [iterations]; ``latent`` is trained in place.
    """
    iterations = check_integer(iterations, "iterations")
    learning_rate = check_learning_rate(learning_rate)
    num_samples = check_integer(num_samples, "num_samples")
    seed = check_seed(seed)
    check_new_row_model(model)
    rows = tf.constant(check_observations(Y, "Y", model.data_dim))
    _check_family(latent, rows.shape[0], model.latent_dim)
    data_term = _data_term(model, rows, target)
    idx = tf.range(tf.shape(rows)[0], dtype=tf.int64)
    variables = list(latent.trainable_variables)
    optimizer = RowSparseAdam(variables, learning_rate)
    latent.generator.reset_from_seed(seed)

    @tf.function
    def step() -> tf.Tensor:
        with tf.GradientTape() as tape:
            batch = latent(idx, rows, num_samples)
            data = data_term(batch.samples)
            bound = tf.reduce_sum(tf.reduce_mean(data, axis=0)) + tf.reduce_sum(batch.row_term)
            loss = -bound
        optimizer.apply_gradients(tape.gradient(loss, variables))
        return bound

    return _repeated(step, iterations).numpy()


def _repeated(step: Callable[[], tf.Tensor], iterations: int) -> tf.Tensor:
    """``step()`` run ``iterations`` times in one compiled loop: its values [iterations]."""

    # The step is a function of its own, whose updates run before it returns; the loop is an
    # explicit while loop, left to no AutoGraph conversion.
    @tf.function(autograph=False)
    def run() -> tf.Tensor:
        def body(i: tf.Tensor, bounds: tf.TensorArray) -> tuple[tf.Tensor, tf.TensorArray]:
            return i + 1, bounds.write(i, step())

        start = (tf.constant(0), tf.TensorArray(default_float(), size=iterations))
        _, bounds = tf.while_loop(lambda i, _: i < iterations, body, start)
        return bounds.stack()

    return run()


def _check_family(latent: LatentVariables, num_rows: int, latent_dim: int) -> None:
    """A ``ValueError`` unless ``latent`` is a family of q(X) [num_rows, latent_dim]."""
    if not isinstance(latent, LatentVariables):
        raise ValueError(
            f"latent must be a family of q(X) (a LatentVariables, e.g. GaussianLatent(X0) from "
            f"initial means X0 [len(Y), Q]), got a {type(latent).__name__}."
        )
    if latent.latent_dim != latent_dim:
        raise ValueError(
            f"The family has Q={latent.latent_dim} latent dimensions but the model has "
            f"Q={latent_dim}: build it from initial means [len(Y), {latent_dim}]."
        )
    family_rows = getattr(latent, "num_data", None)  # None: amortised, any rows
    if family_rows is not None and family_rows != num_rows:
        raise ValueError(
            f"The family has {family_rows} rows of latents and Y has {num_rows} rows: build "
            "the family over exactly the rows of Y (e.g. from initial means [len(Y), Q])."
        )
