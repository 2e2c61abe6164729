"""GPLVMs trained by stochastic variational inference: SVGP with latent inputs.

All four models are :class:`SVIGPLVM` with a different latent module; the bound on a minibatch B of
rows (indices idx, data Y_B) is

    L = N/|B| sum_{n in B} [ E_q(x_n) sum_{d observed} E_q(f_d(x_n)) log p(y_nd | f_d) + r_n ]
        - sum_d KL(q(u_d) || p(u_d)),

with r_n the latent module's row term (0, log p(x_n) or -KL(q(x_n) || p(x_n))) and E_q(x_n)
estimated by S reparameterised samples. q(u_d) = N(m_d, S_d) has a covariance per output, or one
S shared by all outputs (``shared_covariance``, see :mod:`gpflow_svi_gplvm.shared_covariance`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence

import gpflow
import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.config import default_float
from gpflow.kernels import Kernel
from gpflow.likelihoods import Likelihood
from gpflow.mean_functions import MeanFunction
from gpflow.models import SVGP
from gpflow.posteriors import PrecomputeCacheType, create_posterior
from gpflow.utilities import triangular

from . import inference
from .initialisation import (
    column_location_and_scale,
    column_moments,
    inducing_inputs,
    initial_offset,
    pca_latents,
    random_latents,
)
from .latent_expectations import LATENT_EXPECTATIONS, closed_form_applies, closed_form_data_term
from .latents import (
    EncoderLatent,
    GaussianLatent,
    LatentBatch,
    LatentVariables,
    MAPLatent,
    PointLatent,
)
from .likelihoods import MaskedLikelihood, check_likelihood_support
from .shared_covariance import shared_conditional, shared_prior_kl
from .validation import check_integer, check_observations

__all__ = [
    "SVIGPLVM",
    "PointGPLVM",
    "MAPGPLVM",
    "BayesianSVIGPLVM",
    "AmortisedBayesianGPLVM",
    "SHARED_COVARIANCE_MIN_OUTPUTS",
]

SHARED_COVARIANCE_MIN_OUTPUTS = 100
"""``shared_covariance=None`` shares one q(u) covariance when D is at least this."""

LatentFactory = Callable[[np.ndarray], LatentVariables]


class SVIGPLVM(SVGP):
    """An SVGP whose inputs are latent: Y [N, D] = f(X [N, Q]) + noise, X treated by ``latent``.

    D GPs share one kernel and M inducing inputs Z [M, Q]; q(u) is GPflow's uncollapsed,
    whitened q(u_d) = N(m_d, S_d), ``q_sqrt`` [D, M, M], or with ``shared_covariance=True`` one
    S = L L^T for all outputs, ``q_sqrt`` [1, M, M]: a step then costs O(B M D) instead of
    O(B M^2 D), at the price of a smaller variational family (exact at the optimum for complete
    data with a Gaussian likelihood) in which f_d(x)'s variance is the same for every output.
    The default (None) shares it when D >= 100 (:data:`SHARED_COVARIANCE_MIN_OUTPUTS`):
    measured at the MNIST shape (N=2000, D=784, M=100, B=100, one thread) a B-SVI step takes
    0.0036 s shared against 0.38 s per output (``benchmarks/speed.py --high-d``); below D=100
    per-output covariances cost little. Choose ``False`` at large D when each output's own
    uncertainty matters (e.g. outputs observed very unequally often). ``latent`` builds the
    latent module from the initial latents [N, Q]; the four public models fix it, and a new
    latent family needs only a new module: ``SVIGPLVM(Y, Q, latent=MyLatent)``.

    ``latent_expectation``: how the data term's expectation over q(x_n) is taken. "closed-form"
    (psi statistics, :mod:`gpflow_svi_gplvm.latent_expectations`: no Monte Carlo variance) needs
    a SquaredExponential kernel, a Gaussian likelihood, a constant mean function and a Gaussian
    q(x); "monte-carlo" uses ``num_samples`` reparameterised draws; "auto" (default) takes the
    closed form where it applies, except on data with gaps under a shared q(u) covariance, where
    it costs O(B M^2 D) against Monte Carlo's O(B M D).

    Data for ``elbo`` / ``training_loss`` is ``(idx, Y_batch)``: int64 row indices [B] and the
    rows [B, D] (NaN where missing, or give ``mask`` [N, D], True = observed).
    """

    def __init__(
        self,
        data,
        latent_dim: int,
        num_inducing: int = 25,
        kernel: Kernel | None = None,
        likelihood: Likelihood | None = None,
        num_samples: int = 1,
        *,
        latent: LatentFactory,
        latent_init: str = "pca",
        mean_function: MeanFunction | None = None,
        whiten: bool = True,
        seed: int = 0,
        mask=None,
        shared_covariance: bool | None = None,
        latent_expectation: str = "auto",
    ):
        Y = check_observations(data, "data", mask=mask)
        num_data, data_dim = Y.shape
        if shared_covariance is None:
            shared_covariance = data_dim >= SHARED_COVARIANCE_MIN_OUTPUTS
        elif not isinstance(shared_covariance, (bool, np.bool_)):
            raise ValueError(
                f"shared_covariance must be True (one q(u) covariance for all outputs), False "
                f"(one per output) or None (shared when D >= {SHARED_COVARIANCE_MIN_OUTPUTS}), "
                f"got {shared_covariance!r}."
            )
        latent_dim = check_integer(
            latent_dim, "latent_dim", hint="a latent_dim of 2 to 10 is typical"
        )
        num_inducing = check_integer(num_inducing, "num_inducing", hint="25 to 100 is typical")
        num_samples = check_integer(num_samples, "num_samples", hint="1 usually suffices")
        if num_inducing > num_data:
            raise ValueError(
                f"num_inducing ({num_inducing}) exceeds the number of rows N ({num_data}): "
                f"choose num_inducing <= {num_data}."
            )
        if latent_init == "pca":
            initial_latents = pca_latents(Y, latent_dim, seed=seed)
        elif latent_init == "random":
            initial_latents = random_latents(num_data, latent_dim, seed=seed)
        else:
            raise ValueError(f"latent_init must be 'pca' or 'random', got {latent_init!r}.")

        count, _, variance = column_moments(Y)
        # Columns with no observed entry have no variance; _warn_unobserved names them.
        data_variance = max(float(np.mean(variance[count > 0])), 1e-3)
        if likelihood is None:
            likelihood = gpflow.likelihoods.Gaussian(variance=0.1 * data_variance)
        if kernel is None:
            # For a Gaussian likelihood f lives on the data's scale; otherwise on the link's.
            base = getattr(likelihood, "base", likelihood)
            gaussian = isinstance(base, gpflow.likelihoods.Gaussian)
            kernel = gpflow.kernels.SquaredExponential(
                variance=data_variance if gaussian else 1.0, lengthscales=np.ones(latent_dim)
            )
        if np.isnan(Y).any() and not isinstance(likelihood, MaskedLikelihood):
            warnings.warn(
                f"{np.isnan(Y).mean():.1%} of the entries of data are missing (NaN): the "
                "likelihood is wrapped in MaskedLikelihood so that only observed entries count.",
                stacklevel=3,
            )
            likelihood = MaskedLikelihood(likelihood)
        check_likelihood_support(likelihood, Y)
        _warn_unobserved(Y)
        if mean_function is None:
            mean_function = gpflow.mean_functions.Constant(initial_offset(likelihood, Y))

        super().__init__(
            kernel,
            likelihood,
            inducing_inputs(initial_latents, num_inducing, seed=seed),
            mean_function=mean_function,
            num_latent_gps=data_dim,
            whiten=whiten,
            num_data=num_data,
            # SVGP's shape checks admit one factor per output; a shared layout starts from its
            # small diagonal placeholder [M, D] instead of D identity factors, then replaces it.
            q_diag=bool(shared_covariance),
        )
        self.shared_covariance = bool(shared_covariance)
        if self.shared_covariance:
            self.q_diag = False
            self.q_sqrt = gpflow.Parameter(np.eye(num_inducing)[None], transform=triangular())
        self.latent = latent(initial_latents)
        if getattr(self.latent, "num_data", num_data) != num_data:
            raise ValueError(
                f"The latent module holds {self.latent.num_data} rows but data has {num_data}."
            )
        if self.latent.latent_dim != latent_dim:
            raise ValueError(
                f"The latent module has {self.latent.latent_dim} dims but latent_dim={latent_dim}."
            )
        self.data_dim = data_dim
        self.latent_dim = latent_dim
        self.num_samples = num_samples
        self.closed_form = _closed_form(self, latent_expectation)

    @property
    def covariance_layout(self) -> str:
        """How q(u) stores its covariance, in words (used in error messages)."""
        return covariance_layout(self.shared_covariance, self.data_dim)

    def predict_f(
        self, Xnew: tf.Tensor, full_cov: bool = False, full_output_cov: bool = False
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean [B, D] and variance of q(f(Xnew)), as GPflow's SVGP.

        With a shared covariance the marginal variance is one [B] vector for all outputs,
        broadcast to [B, D]; full covariances fall back to GPflow's conditional.
        """
        if not self.shared_covariance or full_cov or full_output_cov:
            return super().predict_f(Xnew, full_cov=full_cov, full_output_cov=full_output_cov)
        mean, variance = shared_conditional(
            Xnew,
            self.inducing_variable,
            self.kernel,
            self.q_mu,
            self.q_sqrt,
            gpflow.config.default_jitter(),
            self.whiten,
        )
        mean += self.mean_function(Xnew)
        return mean, tf.broadcast_to(variance[:, None], tf.shape(mean))

    def prior_kl(self) -> tf.Tensor:
        """sum_d KL(q(u_d) || p(u_d)): a scalar."""
        if not self.shared_covariance:
            return super().prior_kl()
        return shared_prior_kl(
            self.inducing_variable,
            self.kernel,
            self.q_mu,
            self.q_sqrt,
            gpflow.config.default_jitter(),
            self.whiten,
        )

    def posterior(self, precompute_cache: PrecomputeCacheType = PrecomputeCacheType.TENSOR):
        """GPflow's posterior object; a shared covariance is given to it repeated per output
        (D M^2 numbers), since GPflow's posteriors hold one factor per output."""
        if not self.shared_covariance:
            return super().posterior(precompute_cache)
        M = self.inducing_variable.num_inducing
        return create_posterior(
            self.kernel,
            self.inducing_variable,
            self.q_mu,
            tf.broadcast_to(self.q_sqrt, [self.data_dim, M, M]),
            whiten=self.whiten,
            mean_function=self.mean_function,
            precompute_cache=precompute_cache,
        )

    def data_term(
        self, samples: tf.Tensor, Y: tf.Tensor, likelihood: Likelihood | None = None
    ) -> tf.Tensor:
        """E_q(x_n)[sum_{d observed} E_q(f_d(x_n)) log p(y_nd | f_d)] per row [B], averaged over
        the draws ``samples`` [S, B, Q]; ``likelihood`` replaces the model's (e.g. a masked view).
        """
        likelihood = self.likelihood if likelihood is None else likelihood
        num_draws = tf.shape(samples)[0]
        X = tf.reshape(samples, [-1, self.latent_dim])  # [S * B, Q], draw-major
        f_mean, f_var = self.predict_f(X)
        Y_tiled = tf.tile(Y, [num_draws, 1])
        expected_log_lik = likelihood.variational_expectations(X, f_mean, f_var, Y_tiled)
        return tf.reduce_mean(tf.reshape(expected_log_lik, [num_draws, -1]), axis=0)

    def expected_data_term(
        self, batch: LatentBatch, Y: tf.Tensor, likelihood: Likelihood | None = None
    ) -> tf.Tensor:
        """The data term per row [B] for a latent ``batch``: in closed form over q(x_n) when
        :attr:`closed_form` (see ``latent_expectation``), else from the batch's samples."""
        likelihood = self.likelihood if likelihood is None else likelihood
        if not self.closed_form:
            return self.data_term(batch.samples, Y, likelihood)
        covariance = batch.variance
        if batch.scale is not None:
            covariance = tf.linalg.matmul(batch.scale, batch.scale, transpose_b=True)
        return closed_form_data_term(self, likelihood, batch.mean, covariance, Y)

    def row_bounds(self, idx: tf.Tensor, Y: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Each row's part of the bound [B], unscaled: the data term plus the row term r_n."""
        batch = self.latent(idx, Y, self.num_samples, training=training)
        return self.expected_data_term(batch, Y) + batch.row_term

    def elbo(self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """The doubly stochastic bound on a minibatch ``(idx [B], Y [B, D])``: a scalar.

        ``training=True`` (what ``fit`` uses) lets the latent module regularise itself, e.g. the
        encoder hides random inputs; evaluation leaves it False.
        """
        idx, Y = data
        rows = self.row_bounds(idx, Y, training=training)
        scale = tf.cast(self.num_data, rows.dtype) / tf.cast(tf.shape(idx)[0], rows.dtype)
        return scale * tf.reduce_sum(rows) - self.prior_kl()

    def maximum_log_likelihood_objective(
        self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False
    ) -> tf.Tensor:
        return self.elbo(data, training)

    def training_loss(self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """-(ELBO + log prior of the hyperparameters) on ``(idx [B], Y [B, D])``.

        Overridden because GPflow's version shape-checks data as (X [N, D], Y [N, P]).
        """
        return self._training_loss(data, training=training)

    def _all_rows(self, Y) -> tuple[tf.Tensor, tf.Tensor]:
        if self.latent.amortised:
            if Y is None:
                raise ValueError(
                    "An amortised model computes q(x) from the data: pass the training rows, "
                    "e.g. model.latent_mean(Y)."
                )
            Y = tf.convert_to_tensor(check_observations(Y, "Y", self.data_dim))
            return tf.range(tf.shape(Y)[0], dtype=tf.int64), Y
        empty = tf.zeros([self.num_data, self.data_dim], dtype=default_float())
        return tf.range(self.num_data, dtype=tf.int64), empty

    def ard_relevance(self) -> np.ndarray:
        """1 / lengthscale of each latent dimension [Q]: large = the dimension is used."""
        lengthscales = getattr(self.kernel, "lengthscales", None)
        if lengthscales is None:
            raise ValueError(
                f"ARD relevances need a kernel with lengthscales; {type(self.kernel).__name__} "
                "has none."
            )
        return np.broadcast_to(1.0 / lengthscales.numpy(), (self.latent_dim,)).copy()

    def latent_relevance(self, Y=None) -> np.ndarray:
        """How many lengthscales the latent means span along each dimension [Q]:
        std_n(E[x_nq]) / l_q; near zero for a dimension the model does not use.

        Unlike :meth:`ard_relevance` it does not depend on the scale of the latents (a point
        estimate can shrink x_q and l_q together), and a dimension that q(x) leaves at the
        prior, with means near zero, scores near zero however short its lengthscale.
        ``Y`` (the training rows) is needed for amortised models only.
        """
        spread = np.std(self.latent_mean(Y).numpy(), axis=0)
        return spread * self.ard_relevance()

    def latent_mean(self, Y=None) -> tf.Tensor:
        """Mean of q(x_n) [N, Q] for the training rows (amortised models need those rows Y)."""
        return self.latent.moments(*self._all_rows(Y))[0]

    def latent_variance(self, Y=None) -> tf.Tensor:
        """Marginal variances of q(x_n) [N, Q] (zeros for point and MAP estimates)."""
        return self.latent.moments(*self._all_rows(Y))[1]

    def infer_latents(self, Y_new, **options) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [N*, Q] of q(x*) for new rows [N*, D] (NaN allowed); options
        (``iterations``, ``learning_rate``, ``seed``, ``mask``, ``chunk_size``) as in
        :func:`gpflow_svi_gplvm.inference.infer_latents`. The model is not modified."""
        return inference.infer_latents(self, Y_new, **options)

    def reconstruct(self, Y, rows=None, **options) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [N, D] of every entry of Y, integrating over q(x);
        ``rows`` = training-row indices of Y's rows (else latents are inferred). Options as in
        :func:`gpflow_svi_gplvm.inference.reconstruct`."""
        return inference.reconstruct(self, Y, rows, **options)


class PointGPLVM(SVIGPLVM):
    """Sparse GPLVM with point-estimated latents (the paper's "Point")."""

    def __init__(self, data, latent_dim: int, num_inducing: int = 25, *args, **kwargs):
        super().__init__(data, latent_dim, num_inducing, *args, latent=PointLatent, **kwargs)


class MAPGPLVM(SVIGPLVM):
    """GPLVM with MAP latents under a prior p(x) (default N(0, I)) (the paper's "MAP")."""

    def __init__(
        self,
        data,
        latent_dim: int,
        num_inducing: int = 25,
        *args,
        prior: tfp.distributions.Distribution | None = None,
        **kwargs,
    ):
        super().__init__(
            data,
            latent_dim,
            num_inducing,
            *args,
            latent=lambda initial: MAPLatent(initial, prior=prior),
            **kwargs,
        )


class BayesianSVIGPLVM(SVIGPLVM):
    """Bayesian GPLVM with per-row q(x_n) = N(mu_n, diag s_n) (the paper's "B-SVI")."""

    def __init__(
        self,
        data,
        latent_dim: int,
        num_inducing: int = 25,
        *args,
        initial_variance: float = 0.1,
        **kwargs,
    ):
        super().__init__(
            data,
            latent_dim,
            num_inducing,
            *args,
            latent=lambda initial: GaussianLatent(initial, initial_variance),
            **kwargs,
        )


class AmortisedBayesianGPLVM(SVIGPLVM):
    """Bayesian GPLVM with q(x_n) = N(G(y_n), L(y_n) L(y_n)^T) from an MLP encoder ("AEB-SVI").

    Encoder options (``hidden_sizes``, or ``mean_hidden_sizes`` and ``covariance_hidden_sizes``
    apart, default :func:`~gpflow_svi_gplvm.latents.default_encoder_sizes`, ``activation``,
    ``covariance``, ``missing_aware``, ``hide_fraction``, ``set_size``) go
    to :class:`EncoderLatent`. By default the encoder reads
    the observation mask and, when the training data has gaps, hides 20% of the observed inputs
    while training, which keeps q(x) honest for rows with gaps (on held-out rows with 30%
    missing: 95% intervals cover ~93% instead of ~68%). On complete data nothing is hidden
    (hiding costs accuracy there: oil-flow test RMSE 0.115 with, 0.084 without, measured with
    the earlier (10, 5) encoder); pass
    ``hide_fraction=0.2`` if complete training rows will meet new rows with gaps.
    ``**paper_encoder_options(D, Q)`` (:func:`~gpflow_svi_gplvm.latents.paper_encoder_options`)
    builds the paper's networks: they read y_n only, with a wider covariance network and a dense
    factor (their inputs are still standardised unless ``standardise_inputs=False``);
    ``set_size=64``, say, reads each row as the set of its observed (value, column) pairs instead
    (a permutation-invariant set encoder). The encoder reads each column standardised by the
    training data's (NaN-aware) mean and standard deviation; ``standardise_inputs=False`` feeds
    it the raw values, as the paper does.
    """

    def __init__(
        self,
        data,
        latent_dim: int,
        num_inducing: int = 25,
        *args,
        hidden_sizes: Sequence[int] | None = None,
        activation: str = "tanh",
        covariance: str = "triangular",
        missing_aware: bool = True,
        hide_fraction: float | None = None,
        set_size: int | None = None,
        mean_hidden_sizes: Sequence[int] | None = None,
        covariance_hidden_sizes: Sequence[int] | None = None,
        standardise_inputs: bool = True,
        **kwargs,
    ):
        Y = check_observations(data, "data", mask=kwargs.get("mask"))
        location, scale = column_location_and_scale(Y) if standardise_inputs else (None, None)
        if hide_fraction is None:
            sees_mask = missing_aware or set_size is not None
            hide_fraction = 0.2 if sees_mask and np.isnan(Y).any() else 0.0
        encoder = EncoderLatent(
            Y.shape[1],
            check_integer(latent_dim, "latent_dim", hint="a latent_dim of 2 to 10 is typical"),
            hidden_sizes=hidden_sizes,
            activation=activation,
            covariance=covariance,
            missing_aware=missing_aware,
            hide_fraction=hide_fraction,
            seed=kwargs.get("seed", 0),
            input_location=location,
            input_scale=scale,
            set_size=set_size,
            mean_hidden_sizes=mean_hidden_sizes,
            covariance_hidden_sizes=covariance_hidden_sizes,
        )
        super().__init__(Y, latent_dim, num_inducing, *args, latent=lambda _: encoder, **kwargs)


def _closed_form(model: SVIGPLVM, choice: str) -> bool:
    """Whether ``model`` takes the data term's expectation over q(x) in closed form."""
    if choice not in LATENT_EXPECTATIONS:
        raise ValueError(
            f"latent_expectation must be one of {', '.join(map(repr, LATENT_EXPECTATIONS))}, "
            f"got {choice!r}."
        )
    reason = closed_form_applies(model)
    if not model.latent.gaussian:
        reason = f"q(x) of {type(model.latent).__name__} is not a Gaussian"
    if choice == "closed-form" and reason is not None:
        raise ValueError(
            f"latent_expectation='closed-form' needs a SquaredExponential kernel, a Gaussian "
            f"likelihood, a constant mean function and a Gaussian q(x), but {reason}: use "
            "'monte-carlo' or 'auto'."
        )
    if choice != "auto":
        return choice == "closed-form"
    # With gaps and a shared q(u) covariance the closed form costs O(B M^2 D), Monte Carlo
    # O(B M D): leave that case to Monte Carlo.
    gaps = isinstance(model.likelihood, MaskedLikelihood)
    return reason is None and not (gaps and model.shared_covariance)


def covariance_layout(shared: bool, num_outputs: int) -> str:
    """The q(u) covariance layout in words, with its ``shared_covariance`` value."""
    if shared:
        return "one q(u) covariance shared by all outputs (shared_covariance=True)"
    return f"one q(u) covariance per output, {num_outputs} in all (shared_covariance=False)"


def _warn_unobserved(Y: np.ndarray) -> None:
    """Rows or columns with no observed entry are legal but learn nothing: say so."""
    observed = ~np.isnan(Y)
    empty_rows = int((~observed.any(axis=1)).sum())
    empty_columns = int((~observed.any(axis=0)).sum())
    if empty_rows:
        warnings.warn(
            f"{empty_rows} row(s) of data have no observed entry: they contribute only their "
            "prior term, so their latents stay at the prior.",
            stacklevel=4,
        )
    if empty_columns:
        warnings.warn(
            f"{empty_columns} column(s) of data have no observed entry: their GP outputs are "
            "fitted to nothing and predict from the prior.",
            stacklevel=4,
        )


MODELS: dict[str, type[SVIGPLVM]] = {
    "point": PointGPLVM,
    "map": MAPGPLVM,
    "bsvi": BayesianSVIGPLVM,
    "aeb": AmortisedBayesianGPLVM,
}
"""The model names that the command line (``--model``) and ``GPLVMEmbedding(model=...)`` accept,
and the classes they build."""

PAPER_NAMES: dict[str, str] = {
    "point": "Point",
    "map": "MAP",
    "bsvi": "B-SVI",
    "aeb": "AEB-SVI",
}
"""Each name of :data:`MODELS` as the paper (Lalchand et al., 2022) writes it, for tables."""


def lookup_model(name: object) -> Callable[..., SVIGPLVM]:
    """The model class that ``name`` (a key of :data:`MODELS`) names, to be called as
    ``model_class(Y, latent_dim, num_inducing, **options)``; a ValueError listing the valid names
    for anything else (another string, a class, None)."""
    found = MODELS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"Unknown model {name!r}: choose one of {', '.join(map(repr, MODELS))}.")
    return found
