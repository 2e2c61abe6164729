"""What a model needs for its new rows to be fitted, checked at the boundary, and the training
rows whose latents new rows start from."""

from __future__ import annotations

from typing import Protocol

import numpy as np
import tensorflow as tf
from gpflow.inducing_variables import InducingVariables
from gpflow.likelihoods import Likelihood

from ..latents import LatentBatch, LatentVariables

__all__ = ["MAX_CANDIDATES", "candidate_rows", "NewRowModel", "check_new_row_model"]

MAX_CANDIDATES = 2000
"""Training rows whose latents :class:`LatentInference` considers as starts, at most
(:func:`candidate_rows`)."""


def candidate_rows(num_rows: int, seed: int, count: int = MAX_CANDIDATES) -> np.ndarray:
    """The training rows whose latents new rows may start from: ``count`` of the ``num_rows``
    drawn from ``seed``, in increasing order (all of them, in order, when there are fewer)."""
    return np.sort(np.random.default_rng(seed).permutation(num_rows)[:count])


class NewRowModel(Protocol):
    """What inference for new rows (and serving) reads from a trained model, such as
    :class:`~gpflow_svi_gplvm.SVIGPLVM`."""

    latent: LatentVariables
    likelihood: Likelihood
    inducing_variable: InducingVariables
    num_data: int | tf.Tensor | None
    num_table_rows: int
    """The rows of the latent tables (N, or this worker's rows on several workers)."""
    data_dim: int
    latent_dim: int
    num_samples: int
    shared_covariance: bool
    row_inputs: tf.Variable | None
    """[N, R] the training rows' observed inputs (covariates, log size factor), or None."""
    num_covariates: int
    size_factor_reference: tf.Variable | None

    def predict_f(self, Xnew: tf.Tensor, /) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [B, D] of q(f(Xnew)) for Xnew [B, Q]."""
        ...

    def predict_y(self, Xnew: tf.Tensor, /) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and variance [B, D] of the likelihood's predictive at Xnew [B, Q]."""
        ...

    def expected_data_term(
        self,
        batch: LatentBatch,
        Y: tf.Tensor,
        likelihood: Likelihood | None = None,
        closed_form: bool | None = None,
        /,
    ) -> tf.Tensor:
        """Each row's expected log likelihood [B] of Y [B, D] under a latent ``batch`` (in closed
        form over q(x) when ``closed_form``; None: as the model trains)."""
        ...

    def latent_batch(
        self, idx: tf.Tensor, Y: tf.Tensor, num_samples: int, noise: tf.Tensor | None = None, /
    ) -> LatentBatch:
        """The batch of training rows ``idx`` [B], their observed inputs appended."""
        ...


def check_new_row_model(model: object) -> None:
    """A ``ValueError`` unless ``model`` is what new rows are inferred from (a trained GPLVM of
    this package, see :class:`NewRowModel`), e.g. not None, a name or another GPflow model."""
    if not isinstance(getattr(model, "latent", None), LatentVariables) or not all(
        hasattr(model, name) for name in ("likelihood", "inducing_variable", "data_dim")
    ):
        raise ValueError(
            f"model must be a GPLVM of this package (SVIGPLVM or a subclass, trained by fit), got "
            f"{type(model).__name__}: build one, e.g. BayesianSVIGPLVM(Y, latent_dim=2)."
        )
