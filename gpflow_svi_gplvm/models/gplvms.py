"""The named models: :class:`~gpflow_svi_gplvm.models.base.SVIGPLVM` with a latent family each,
the paper's four (Point, MAP, B-SVI, AEB-SVI) and a normalising-flow one, and their registry.

Each is a thin class: its own options (those of its latent family) and, for every option the
models share, :class:`SVIGPLVM`'s own parameter, so that the shared options have one source
(:class:`SVIGPLVM`'s signature, and the parameters' descriptions in
:mod:`gpflow_svi_gplvm.models.base`), and ``help()``, the documentation and
``inspect.signature`` still list each with its default.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from gpflow.kernels import Kernel
from gpflow.likelihoods import Likelihood
from numpy.typing import ArrayLike

from ..components.initialisation import column_location_and_scale
from ..distributed.workers import Workers
from ..latents import EncoderLatent, GaussianLatent, LatentVariables, MAPLatent, PointLatent
from ..latents.flows import check_flow_options, flow_latent
from ..options import takes_options_of
from ..rows.facts import facts_of
from ..rows.shard import RowShard
from ..validation import check_bools
from .base import DEFAULT_NUM_INDUCING, SVIGPLVM, LatentFactory, with_model_parameters

__all__ = [
    "PointGPLVM",
    "MAPGPLVM",
    "BayesianSVIGPLVM",
    "AmortisedBayesianGPLVM",
    "FlowBayesianGPLVM",
    "MODELS",
    "PAPER_NAMES",
    "PAPER_MODELS",
    "lookup_model",
]


def _model(own: str = "") -> Callable[[type], type]:
    """A named model class whose ``__init__`` takes :class:`SVIGPLVM`'s options besides its own
    (``latent`` replaced by them; :func:`~gpflow_svi_gplvm.options.takes_options_of`), its
    docstrings listing the shared parameters after the class's ``own``."""

    def decorate(cls: type) -> type:
        takes_options_of(SVIGPLVM.__init__, omit=("latent",))(cls.__dict__["__init__"])
        return with_model_parameters(own)(cls)

    return decorate


@_model()
class PointGPLVM(SVIGPLVM):
    """Sparse GPLVM with point-estimated latents (the paper's "Point")."""

    def __init__(self, *args: Any, **options: Any):
        super().__init__(*args, latent=PointLatent, **options)


@_model(
    """    :param prior: the prior p(x_n) on each latent row, a TFP distribution with event shape
        [Q]; default N(0, I).
"""
)
class MAPGPLVM(SVIGPLVM):
    """GPLVM with MAP latents under a prior :math:`p(x)` (default N(0, I)) (the paper's "MAP")."""

    def __init__(
        self, *args: Any, prior: tfp.distributions.Distribution | None = None, **options: Any
    ):
        super().__init__(*args, latent=lambda initial: MAPLatent(initial, prior=prior), **options)


@_model(
    """    :param initial_variance: the starting variance of every q(x_n) (a float, or [N, Q]).
"""
)
class BayesianSVIGPLVM(SVIGPLVM):
    r"""Bayesian GPLVM with per-row :math:`q(x_n) = N(\mu_n, \mathrm{diag}\, s_n)` (the
    paper's "B-SVI")."""

    def __init__(self, *args: Any, initial_variance: float | np.ndarray = 0.1, **options: Any):
        super().__init__(
            *args, latent=lambda initial: GaussianLatent(initial, initial_variance), **options
        )


@dataclass(frozen=True)
class _EncoderOptions:
    """The options of :class:`AmortisedBayesianGPLVM`'s encoder, as given."""

    hidden_sizes: Sequence[int] | None
    activation: str
    covariance: str
    missing_aware: bool
    hide_fraction: float | None
    set_size: int | None
    mean_hidden_sizes: Sequence[int] | None
    covariance_hidden_sizes: Sequence[int] | None
    standardise_inputs: bool


@_model(
    """    :param hidden_sizes: the hidden layers of both encoder networks; default
        :func:`~gpflow_svi_gplvm.latents.default_encoder_sizes` (sized to D and Q).
    :param activation: the hidden layers' activation (a ``tf.keras`` activation name).
    :param covariance: ``"triangular"`` (L lower triangular, positive diagonal) or ``"dense"``
        (the paper's dense factor H).
    :param missing_aware: whether the encoder reads the observation mask besides the values.
    :param hide_fraction: the share of observed inputs hidden at random while training; default
        (None) 0.2 when the data have gaps and the encoder sees the mask, else 0.
    :param set_size: read each row as the set of its observed (value, column) pairs, pooled into
        this many features (a permutation-invariant encoder); None reads the row as a vector.
    :param mean_hidden_sizes: the mean network's hidden layers, apart from ``hidden_sizes``.
    :param covariance_hidden_sizes: the factor network's hidden layers, apart.
    :param standardise_inputs: whether the encoder reads each column standardised by the
        training data's (NaN-aware) mean and standard deviation.
"""
)
class AmortisedBayesianGPLVM(SVIGPLVM):
    r"""Bayesian GPLVM with :math:`q(x_n) = N(G(y_n), L(y_n) L(y_n)^\top)` from an MLP encoder
    ("AEB-SVI").

    The encoder is an :class:`~gpflow_svi_gplvm.latents.EncoderLatent`. By default it reads
    the observation mask and, when the training data has gaps, hides 20% of the observed inputs
    while training, which keeps q(x) honest for rows with gaps. On complete data nothing is
    hidden (hiding costs accuracy there); pass ``hide_fraction=0.2`` if complete training rows
    will meet new rows with gaps (both measured by ``benchmarks/missing_data.py``).
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
        *args: Any,
        hidden_sizes: Sequence[int] | None = None,
        activation: str = "tanh",
        covariance: str = "triangular",
        missing_aware: bool = True,
        hide_fraction: float | None = None,
        set_size: int | None = None,
        mean_hidden_sizes: Sequence[int] | None = None,
        covariance_hidden_sizes: Sequence[int] | None = None,
        standardise_inputs: bool = True,
        **options: Any,
    ):
        check_bools(missing_aware=missing_aware, standardise_inputs=standardise_inputs)
        # Read by _build_latent, which SVIGPLVM.__init__ calls once the data is checked.
        self._encoder_options = _EncoderOptions(
            hidden_sizes,
            activation,
            covariance,
            missing_aware,
            hide_fraction,
            set_size,
            mean_hidden_sizes,
            covariance_hidden_sizes,
            standardise_inputs,
        )
        super().__init__(*args, **options)

    def _build_latent(
        self,
        latent: LatentFactory | None,
        initial_latents: np.ndarray,
        Y: np.ndarray | tf.Tensor,
        workers: Workers,
    ) -> LatentVariables:
        """The encoder for the checked data Y [N, D] (of all ``workers``); the initial latents
        give only Q."""
        options = self._encoder_options
        location, scale = (
            column_location_and_scale(Y, workers) if options.standardise_inputs else (None, None)
        )
        hide_fraction = options.hide_fraction
        if hide_fraction is None:
            sees_mask = options.missing_aware or options.set_size is not None
            gaps = facts_of(Y, workers).gaps  # those the rows keep, or one pass's
            hide_fraction = 0.2 if sees_mask and gaps else 0.0
        return EncoderLatent(
            Y.shape[1],
            initial_latents.shape[1],
            hidden_sizes=options.hidden_sizes,
            activation=options.activation,
            covariance=options.covariance,
            missing_aware=options.missing_aware,
            hide_fraction=hide_fraction,
            seed=self.seed,
            input_location=location,
            input_scale=scale,
            set_size=options.set_size,
            mean_hidden_sizes=options.mean_hidden_sizes,
            covariance_hidden_sizes=options.covariance_hidden_sizes,
        )


@_model(
    """    :param flow: ``"planar"`` or ``"iaf"`` (:data:`~gpflow_svi_gplvm.latents.flows.FLOWS`).
    :param num_layers: K, the flow layers (at least 1).
    :param flow_parameters: ``"shared"``, ``"per-row"`` or ``"joint"``
        (:data:`~gpflow_svi_gplvm.latents.flows.FLOW_PARAMETERS`).
    :param initial_variance: the starting variance of every base Gaussian (a float).
    :param hidden_sizes: the hidden layers of the autoregressive networks (``"iaf"`` only).
    :param context_size: the length of each row's context vector (``"iaf"`` only).
    :param moment_draws: the fixed draws that estimate the mean and variance of q(x_n).
"""
)
class FlowBayesianGPLVM(SVIGPLVM):
    r"""Bayesian GPLVM whose :math:`q(x_n)` is a base :math:`N(\mu_n, \mathrm{diag}\, s_n)`
    pushed through ``num_layers`` normalising-flow layers (the paper's supplement, "Flexible
    Variational Families using Normalising Flows"; :mod:`gpflow_svi_gplvm.latents.flows`).

    ``flow``: "planar" or "iaf" (inverse autoregressive layers, TFP's masked autoregressive flow
    inverted; ``hidden_sizes`` and ``context_size`` shape its networks). ``flow_parameters``:
    "shared" by all rows (default), "per-row" (each row's own, updated row-sparsely), or "joint"
    (one flow over vec(X) of all rows: a few rows only, and no new rows). The data term and the
    row term are Monte Carlo estimates over ``num_samples`` draws of each row's x_n, 4 by default
    (the other models' default is 1; ``benchmarks/results/flows.md`` compares one and four draws
    on oil flow). Mean and variance of q(x_n) (:meth:`latent_mean`,
    :meth:`latent_variance`) are estimated from ``moment_draws`` fixed draws.
    """

    def __init__(
        self,
        data: ArrayLike | RowShard,
        latent_dim: int,
        num_inducing: int = DEFAULT_NUM_INDUCING,
        kernel: Kernel | None = None,
        likelihood: Likelihood | None = None,
        num_samples: int = 4,
        *,
        flow: str = "planar",
        num_layers: int = 10,
        flow_parameters: str = "shared",
        initial_variance: float = 0.1,
        hidden_sizes: Sequence[int] | None = None,
        context_size: int | None = None,
        moment_draws: int = 256,
        **options: Any,
    ):
        check_flow_options(flow, num_layers, flow_parameters)
        flow_options = (flow, num_layers, flow_parameters, initial_variance)
        sizes = (hidden_sizes, context_size, moment_draws)

        def latent(initial: np.ndarray) -> LatentVariables:
            # Called by SVIGPLVM.__init__ once it has checked the seed.
            return flow_latent(initial, *flow_options, *sizes, self.seed)

        positional = (data, latent_dim, num_inducing, kernel, likelihood, num_samples)
        super().__init__(*positional, latent=latent, **options)


MODELS: dict[str, type[SVIGPLVM]] = {
    "point": PointGPLVM,
    "map": MAPGPLVM,
    "bsvi": BayesianSVIGPLVM,
    "aeb": AmortisedBayesianGPLVM,
    "flow": FlowBayesianGPLVM,
}
"""The model names that the command line (``--model``) and ``GPLVMEmbedding(model=...)`` accept,
and the classes they build."""

PAPER_NAMES: dict[str, str] = {
    "point": "Point",
    "map": "MAP",
    "bsvi": "B-SVI",
    "aeb": "AEB-SVI",
    "flow": "B-SVI (flow)",
}
"""Each name of :data:`MODELS` as the paper (Lalchand et al., 2022) writes it, for tables (the
paper's supplement names no flow model: "B-SVI (flow)" is this package's)."""

PAPER_MODELS: tuple[str, ...] = ("point", "map", "bsvi", "aeb")
"""The names of :data:`MODELS` whose models fill the paper's tables (the flow family appears
only in its supplement's demonstration)."""


def lookup_model(name: object) -> Callable[..., SVIGPLVM]:
    """The model class that ``name`` (a key of :data:`MODELS`) names, to be called as
    ``model_class(Y, latent_dim, num_inducing, **options)``; a ValueError listing the valid names
    for anything else (another string, a class, None)."""
    found = MODELS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ValueError(f"Unknown model {name!r}: choose one of {', '.join(map(repr, MODELS))}.")
    return found
