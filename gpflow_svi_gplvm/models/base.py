r"""GPLVMs trained by stochastic variational inference: SVGP with latent inputs.

Every model is :class:`SVIGPLVM` with a different latent module (the named ones are in
:mod:`~gpflow_svi_gplvm.models.gplvms`). On a minibatch B of rows
(indices idx, data Y_B, observed entries :math:`O_n` of row n) the bound is

.. math::

    \mathcal{L} = \frac{N}{|B|} \sum_{n \in B} \Big[ E_{q(x_n)} \sum_{d \in O_n}
    E_{q(f_d(x_n))} \log p(y_{nd} \mid f_d) + r_n \Big]
    - \sum_d \mathrm{KL}\big(q(u_d) \,\|\, p(u_d)\big),

with :math:`r_n` the latent module's row term (0, :math:`\log p(x_n)` or
:math:`-\mathrm{KL}(q(x_n) \| p(x_n))`) and :math:`E_{q(x_n)}` estimated by S reparameterised
draws, or taken in closed form (:mod:`gpflow_svi_gplvm.components.psi_statistics`). With
``num_importance`` K > 1 each row's part is instead the log of the mean of K importance weights
of draws of q(x_n), a tighter bound (:mod:`gpflow_svi_gplvm.components.importance`).
:math:`q(u_d) = N(m_d, S_d)` has a covariance per output, or one :math:`S` shared by all outputs
(``shared_covariance``, see :mod:`gpflow_svi_gplvm.components.shared_covariance`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import tensorflow as tf
from check_shapes import check_shapes, inherit_check_shapes
from gpflow.kernels import Kernel
from gpflow.likelihoods import Likelihood
from gpflow.mean_functions import MeanFunction
from numpy.typing import ArrayLike

from ..components.covariates import RowInputs, with_row_inputs, with_row_inputs_components
from ..components.importance import check_num_importance, importance_weighted_rows
from ..components.initialisation import (
    SHARED_COVARIANCE_MIN_OUTPUTS,
    check_sizes,
    default_components,
    default_shared_covariance,
    inducing_inputs,
    initial_latents,
)
from ..components.psi_statistics import (
    LATENT_EXPECTATIONS,
    closed_form_applies,
)
from ..components.shared_covariance import covariance_layout
from ..defaults import NUM_INDUCING
from ..distributed.owned import owned_by_worker, worker_owned_variables
from ..distributed.workers import Workers
from ..latents import (
    LatentBatch,
    LatentVariables,
)
from ..likelihoods import is_masked
from ..options import takes_options_of
from ..prediction import functions
from ..rows.shard import RowShard
from ..rows.sparse import RowReader
from ..validation import check_bools, check_observations, check_seed, takes_a_batch
from .building import HeldRows, check_latent, check_owned, held_rows, outline, row_inputs
from .data_term import DataTermSVGP
from .parameters import with_model_parameters

__all__ = [
    "DEFAULT_NUM_INDUCING",
    "SHARED_COVARIANCE_MIN_OUTPUTS",
    "SVIGPLVM",
    "covariance_layout",
    "with_model_parameters",
]

LatentFactory = Callable[[np.ndarray], LatentVariables]

DEFAULT_NUM_INDUCING = NUM_INDUCING
"""M unless given (:data:`gpflow_svi_gplvm.defaults.NUM_INDUCING`)."""


@with_model_parameters(
    """    :param latent: a function from the initial latents [N, Q] to the latent module (e.g.
        :class:`~gpflow_svi_gplvm.latents.PointLatent`); the named models fix it.
"""
)
class SVIGPLVM(DataTermSVGP):
    r"""An SVGP whose inputs are latent: Y [N, D] = f(X [N, Q]) + noise, X treated by ``latent``.

    D GPs share one kernel and M inducing inputs Z [M, Q]; q(u) is GPflow's uncollapsed,
    whitened :math:`q(u_d) = N(m_d, S_d)`, ``q_sqrt`` [D, M, M], or with
    ``shared_covariance=True`` one :math:`S = L L^\top` for all outputs, ``q_sqrt`` [1, M, M]: a
    step then costs O(B M D) instead of O(B M^2 D), at the price of a smaller variational family
    (exact at the optimum for complete data with a Gaussian likelihood) in which
    :math:`f_d(x)`'s variance is the same for every output.
    The default (None) shares it when D >= 100 (:data:`SHARED_COVARIANCE_MIN_OUTPUTS`; both
    layouts' steps at the MNIST shape: ``benchmarks/speed.py --high-d``). Choose ``False`` at
    large D when each output's own uncertainty matters (e.g. outputs observed unequally often).
    ``latent`` builds the latent module from the initial latents [N, Q]; the named models
    (:mod:`~gpflow_svi_gplvm.models.gplvms`) fix it, and a new latent family is used without a
    class of its own as ``SVIGPLVM(Y, Q, latent=MyLatent)``. A subclass whose module is built
    from the data (as ``AmortisedBayesianGPLVM``'s encoder) overrides :meth:`_build_latent`
    instead; the checked ``seed`` the model was built with is :attr:`seed`.

    ``latent_expectation``: how the data term's expectation over :math:`q(x_n)` is taken.
    "closed-form" (psi statistics, :mod:`gpflow_svi_gplvm.components.psi_statistics`: no Monte Carlo
    variance) needs a SquaredExponential kernel, a Gaussian likelihood, a constant mean function
    and a Gaussian q(x); "monte-carlo" uses ``num_samples`` reparameterised draws; "auto"
    (default) takes the closed form where it applies, except on data with gaps under a shared
    q(u) covariance, where it costs O(B M^2 D) against Monte Carlo's O(B M D).

    Data for ``elbo`` / ``training_loss`` is ``(idx, Y_batch)``: int64 row indices [B] and the
    rows [B, D] (NaN where missing, or give ``mask`` [N, D], True = observed). Defaults for the
    kernel, likelihood and mean function come from
    :func:`~gpflow_svi_gplvm.components.initialisation.default_components`.

    ``data`` may be a :class:`~gpflow_svi_gplvm.rows.shard.RowShard` (this worker's rows of
    a data set split over the workers of a ``tf.distribute.MultiWorkerMirroredStrategy``): built
    inside ``strategy.scope()`` on every worker, the model is the one built from all the rows (the
    same statistics, PCA and initial latents), while no worker reads another's rows."""

    def __init__(
        self,
        data: ArrayLike | RowShard | RowReader,
        latent_dim: int,
        num_inducing: int = DEFAULT_NUM_INDUCING,
        kernel: Kernel | None = None,
        likelihood: Likelihood | None = None,
        num_samples: int = 1,
        *,
        latent: LatentFactory | None = None,
        latent_init: str | np.ndarray = "pca",
        mean_function: MeanFunction | None = None,
        whiten: bool = True,
        seed: int = 0,
        mask: ArrayLike | None = None,
        shared_covariance: bool | None = None,
        latent_expectation: str = "auto",
        covariates: ArrayLike | None = None,
        size_factors: ArrayLike | None = None,
        num_importance: int = 1,
        doubly_reparameterised: bool = True,
        workers: Workers | None = None,
    ):
        seed = self.seed = check_seed(seed)
        check_bools(whiten=whiten, doubly_reparameterised=doubly_reparameterised)
        held = held_rows(data, mask, workers)
        inputs = row_inputs(covariates, size_factors, held)
        D, workers = held.Y.shape[1], held.workers
        shared = default_shared_covariance(shared_covariance, D)
        latent_dim, num_inducing, num_samples = check_sizes(
            held.num_data, latent_dim, num_inducing, num_samples
        )
        # Before any variable exists: a worker's variables are the chief's, copied by shape.
        workers.agree("built other models", outline(type(self), locals(), inputs))
        initial = initial_latents(
            held.Y, latent_dim, latent_init, seed, held.rows, workers, held.owned
        )
        defaults = default_components(
            held.Y, latent_dim, kernel, likelihood, mean_function, workers, held.facts
        )
        components = with_row_inputs_components(defaults, latent_dim, inputs)
        # Z's columns of the observed inputs keep it as wide as the GP inputs (even unread ones).
        Z = inducing_inputs(initial, num_inducing, seed, held.table_rows, workers, inputs.table)
        # SVGP's checks admit no [1, M, M]: a shared layout replaces a diagonal [M, D].
        svgp: dict[str, Any] = dict(whiten=whiten, num_data=held.num_data, q_diag=shared)
        svgp.update(mean_function=components.mean_function, num_latent_gps=D)
        super().__init__(components.kernel, components.likelihood, Z, **svgp)
        self._share_q_sqrt(shared, num_inducing)
        self.data_dim, self.latent_dim, self.num_samples = D, latent_dim, num_samples
        self._build_row_tables(latent, initial, held, inputs)
        _set_bound(self, latent_expectation, num_importance, doubly_reparameterised)

    def _build_row_tables(
        self, latent: LatentFactory | None, initial: np.ndarray, held: HeldRows, inputs: RowInputs
    ) -> None:
        """The latent module and the rows' observed inputs, from the initial latents [n, Q]: of
        all N rows, or, when each worker owns its ``held`` rows' tables, of this worker's rows
        alone (its own variables, :attr:`table_rows`)."""
        self.table_rows = held.table_rows
        with worker_owned_variables(held.owned):
            module = self._build_latent(latent, initial, held.Y, held.workers)
            self.latent = check_latent(module, len(initial), self.latent_dim)
            check_owned(self.latent, held.owned)
            self._set_row_inputs(inputs)

    def _set_row_inputs(self, inputs: RowInputs) -> None:
        """Keep the training rows' observed inputs [N, R] (a non-trainable variable, so
        checkpoints and exports carry it) and the size factors' reference library size."""
        self.num_covariates = inputs.num_covariates
        table = inputs.table
        self.row_inputs = None
        if table is not None:
            self.row_inputs = owned_by_worker(lambda: tf.Variable(table, trainable=False))
        self.size_factor_reference = None
        if inputs.size_factors is not None:
            self.size_factor_reference = tf.Variable(inputs.reference, dtype=tf.float64)

    @property
    def input_dim(self) -> int:
        """The GP input's width: Q latents, then the observed inputs (covariates, log size
        factor)."""
        extra = 0 if self.row_inputs is None else int(self.row_inputs.shape[1])
        return self.latent_dim + extra

    def latent_batch(
        self, idx: tf.Tensor, Y: tf.Tensor, num_samples: int, noise=None, training: bool = False
    ) -> LatentBatch:
        """The latent module's batch for training rows ``idx`` [B] (data Y [B, D]), with the rows'
        observed inputs appended (:func:`~gpflow_svi_gplvm.components.covariates.with_row_inputs`).
        """
        batch = self.latent(idx, Y, num_samples, noise, training=training)
        if self.row_inputs is None:
            return batch
        return with_row_inputs(batch, tf.gather(self.row_inputs, idx))

    def _build_latent(
        self,
        latent: LatentFactory | None,
        initial_latents: np.ndarray,
        Y: np.ndarray | tf.Tensor,
        workers: Workers,
    ) -> LatentVariables:
        """The latent module: ``latent(initial_latents)``, from the initial latents [N, Q].

        A subclass whose module is built from the data overrides this; it receives the checked data
        Y [N, D] (NaN where missing, ``mask`` applied) besides, or, when the model is built from a
        :class:`~gpflow_svi_gplvm.rows.shard.RowShard`, this worker's rows of it and the
        ``workers`` to sum statistics over (see :mod:`gpflow_svi_gplvm.distributed.workers`)."""
        if latent is None:
            raise ValueError(
                "SVIGPLVM needs latent=, a function from the initial latents [N, Q] to a latent "
                "module (e.g. latent=PointLatent); or use PointGPLVM, MAPGPLVM, BayesianSVIGPLVM "
                "or AmortisedBayesianGPLVM."
            )
        return latent(initial_latents)

    @check_shapes(
        "idx: [batch]",
        "Y: [batch, D]",
        "return: [batch]",
    )
    def row_bounds(self, idx: tf.Tensor, Y: tf.Tensor, training: bool = False) -> tf.Tensor:
        """Each row's part of the bound [B], unscaled: the data term plus the row term
        :math:`r_n`; with :attr:`num_importance` K > 1 the log of the mean of K importance
        weights (:func:`~gpflow_svi_gplvm.components.importance.importance_weighted_rows`)."""
        if self.num_importance > 1:
            return importance_weighted_rows(self, idx, Y, training)
        batch = self.latent_batch(idx, Y, self.num_samples, training=training)
        return self.expected_data_term(batch, Y) + batch.row_term

    @takes_a_batch
    @check_shapes(
        "data[0]: [batch]",
        "data[1]: [batch, D]",
        "return: []",
    )
    def elbo(self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """The doubly stochastic bound on a minibatch ``(idx [B], Y [B, D])``: a scalar.

        ``training=True`` (what ``fit`` uses) lets the latent module regularise itself, e.g. the
        encoder hides random inputs; evaluation leaves it False.
        """
        idx, Y = data
        rows = self.row_bounds(idx, Y, training=training)
        scale = tf.cast(self.num_data, rows.dtype) / tf.cast(tf.shape(idx)[0], rows.dtype)
        return scale * tf.reduce_sum(rows) - self.prior_kl()

    @inherit_check_shapes
    def maximum_log_likelihood_objective(
        self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False
    ) -> tf.Tensor:
        return self.elbo(data, training)

    @takes_a_batch
    @check_shapes(
        "data[0]: [batch]",
        "data[1]: [batch, D]",
        "return: []",
    )
    def training_loss(self, data: tuple[tf.Tensor, tf.Tensor], training: bool = False) -> tf.Tensor:
        """-(ELBO + log prior of the hyperparameters) on ``(idx [B], Y [B, D])``.

        Overridden because GPflow's version shape-checks data as (X [N, D], Y [N, P]).
        """
        return self._training_loss(data, training=training)

    def _all_rows(self, Y) -> tuple[tf.Tensor, tf.Tensor | None]:
        """Indices of all training rows [N] and, for an amortised q(x), their data [N, D]."""
        if self.latent.amortised:
            if Y is None:
                raise ValueError(
                    "An amortised model computes q(x) from the data: pass the training rows, "
                    "e.g. model.latent_mean(Y)."
                )
            Y = tf.convert_to_tensor(check_observations(Y, "Y", self.data_dim))
            return tf.range(tf.shape(Y)[0], dtype=tf.int64), Y
        return tf.range(self.num_table_rows, dtype=tf.int64), None

    @property
    def table_variables(self) -> list[tf.Variable]:
        """The latent module's per-row tables (their unconstrained variables, [rows, ...]); none
        for an amortised module."""
        return [p.unconstrained_variable for p in getattr(self.latent, "row_parameters", ())]

    @property
    def num_table_rows(self) -> int:
        """The rows of the latent tables: N, or, when the model was built from a shard on several
        workers, this worker's rows (:attr:`table_rows` [n], their numbers among the N)."""
        return int(self.num_data or 0) if self.table_rows is None else len(self.table_rows)

    @check_shapes("return: [Q]")
    def ard_relevance(self) -> np.ndarray:
        """1 / lengthscale of each latent dimension [Q]: large = the dimension is used."""
        lengthscales = getattr(self.kernel, "lengthscales", None)
        if lengthscales is None:
            raise ValueError(
                f"ARD relevances need a kernel with lengthscales; {type(self.kernel).__name__} "
                "has none."
            )
        return np.broadcast_to(1.0 / lengthscales.numpy(), (self.latent_dim,)).copy()

    @check_shapes("return: [Q]")
    def latent_relevance(self, Y=None) -> np.ndarray:
        r"""How many lengthscales the latent means span along each dimension [Q]:
        :math:`\mathrm{std}_n(E[x_{nq}]) / l_q`; near zero for a dimension the model does not use.

        Unlike :meth:`ard_relevance` it does not depend on the scale of the latents (a point
        estimate can shrink :math:`x_q` and :math:`l_q` together), and a dimension that q(x)
        leaves at the prior, with means near zero, scores near zero however short its
        lengthscale. ``Y`` (the training rows) is needed for amortised models only.
        """
        spread = np.std(self.latent_mean(Y).numpy(), axis=0)
        return spread * self.ard_relevance()

    @check_shapes("return: [N, Q]")
    def latent_mean(self, Y=None) -> tf.Tensor:
        """Mean of q(x_n) [N, Q] for the training rows (amortised models need those rows Y)."""
        return self.latent.moments(*self._all_rows(Y))[0]

    @check_shapes("return: [N, Q]")
    def latent_variance(self, Y=None) -> tf.Tensor:
        """Marginal variances of q(x_n) [N, Q] (zeros for point and MAP estimates)."""
        return self.latent.moments(*self._all_rows(Y))[1]

    # check_shapes inside takes_options_of binds the method's own **options: an unknown option
    # then meets Python's TypeError naming it, not check_shapes' "Error calling wrapped function".
    @takes_options_of(functions.infer_latents, omit=("model",))
    @check_shapes("return[0]: [N, Q]", "return[1]: [N, Q]")
    def infer_latents(self, Y_new, **options: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [N*, Q] of q(x*) for new rows [N*, D] (NaN allowed); the options
        are :func:`gpflow_svi_gplvm.prediction.functions.infer_latents`'. The model is not
        modified."""
        return functions.infer_latents(self, Y_new, **options)

    @takes_options_of(functions.reconstruct, omit=("model",))
    @check_shapes("return[0]: [N, D]", "return[1]: [N, D]")
    def reconstruct(self, Y, rows=None, **options: Any) -> tuple[tf.Tensor, tf.Tensor]:
        """Predictive mean and variance [N, D] of every entry of Y, integrating over q(x);
        ``rows`` = training-row indices of Y's rows (else latents are inferred). Options as in
        :func:`gpflow_svi_gplvm.prediction.functions.reconstruct`."""
        return functions.reconstruct(self, Y, rows, **options)


def _set_bound(
    model: SVIGPLVM, latent_expectation: str, num_importance: int, doubly_reparameterised: bool
) -> None:
    """Which bound ``model`` trains on: ``num_importance`` K draws of each row
    (:mod:`~gpflow_svi_gplvm.components.importance`; K = 1 is the ELBO) and ``closed_form``, whether
    the
    ELBO's expectation over q(x) is taken in closed form (never with K > 1)."""
    model.num_importance = check_num_importance(num_importance, model.latent, latent_expectation)
    model.doubly_reparameterised = bool(doubly_reparameterised)
    model.closed_form = model.num_importance == 1 and _closed_form(model, latent_expectation)


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
    gaps = is_masked(model.likelihood)
    return reason is None and not (gaps and model.shared_covariance)
