"""Amortised Gaussian latents: q(x_n | y_n) computed by encoder networks from the row's data, the
AEB-SVI family."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import tensorflow as tf
import tensorflow_probability as tfp
from check_shapes import inherit_check_shapes
from gpflow.config import default_float
from gpflow.utilities import positive

from ..validation import check_integer, check_layer_sizes
from .base import LatentVariables
from .batch import LatentBatch, NewRowFit
from .gaussian import diagonal_gaussian_batch
from .networks import MLP, SetPooling
from .new_rows import fit_rows

__all__ = ["EncoderLatent", "default_encoder_sizes", "paper_encoder_options"]


class EncoderLatent(LatentVariables):
    r"""Amortised :math:`q(x_n) = \mathcal{N}(G(y_n), L(y_n) L(y_n)^\top)` with MLPs G and L
    (AEB-SVI).

    The mean network G has ``mean_hidden_sizes`` hidden layers and the factor network L
    ``covariance_hidden_sizes``; ``hidden_sizes`` sets both where they are not given (default
    :func:`default_encoder_sizes`: two layers whose width grows with D and Q). The paper's
    networks are wider for the covariance than for the mean: :func:`paper_encoder_options` gives
    them.

    ``covariance="triangular"`` (default): L is lower triangular with a softplus-positive
    diagonal (plus ``jitter``), which trains stably. ``covariance="dense"``: the paper's dense
    Q x Q factor H, with :math:`L = \operatorname{chol}(H H^\top + \text{jitter}\, I)`.
    The row term is

    .. math::

        -\mathrm{KL} = -\frac{1}{2} \left(\operatorname{tr}(L L^\top) + \lVert G \rVert^2 - Q
        - 2 \sum_q \log L_{qq}\right).

    The encoder reads the observed values of y_n standardised per column, :math:`(y_{nd} -
    \text{input\_location}_d) / \text{input\_scale}_d` (identity by default; the amortised model
    sets the training data's column means and standard deviations, so raw counts in the thousands do
    not saturate the first layer), with missing entries (NaN) set to zero, the column mean; with
    ``missing_aware=True`` it also reads the 0/1 observation mask, so it can tell a zero from a gap,
    and ``hide_fraction`` > 0 hides that share of the observed inputs at random while training, so
    that q(x) widens honestly for rows with gaps (the likelihood still sees every observed entry).
    With ``set_size`` the MLPs read instead a permutation-invariant pooling of the observed (value,
    column) pairs (:class:`~gpflow_svi_gplvm.latents.networks.SetPooling`, ``set_size`` features):
    missing-aware by construction, and its input size does not grow with the share of gaps.
    """

    amortised = True
    gaussian = True
    has_density = True

    def __init__(
        self,
        data_dim: int,
        latent_dim: int,
        hidden_sizes: Sequence[int] | None = None,
        activation: str = "tanh",
        covariance: str = "triangular",
        missing_aware: bool = False,
        hide_fraction: float = 0.0,
        jitter: float = 1e-6,
        seed: int = 0,
        input_location: np.ndarray | None = None,
        input_scale: np.ndarray | None = None,
        set_size: int | None = None,
        mean_hidden_sizes: Sequence[int] | None = None,
        covariance_hidden_sizes: Sequence[int] | None = None,
        name: str | None = None,
    ):
        super().__init__(latent_dim, name=name)
        if hidden_sizes is None:
            hidden_sizes = default_encoder_sizes(data_dim, latent_dim)
        mean_sizes = check_layer_sizes(
            hidden_sizes if mean_hidden_sizes is None else mean_hidden_sizes, "mean_hidden_sizes"
        )
        covariance_sizes = check_layer_sizes(
            hidden_sizes if covariance_hidden_sizes is None else covariance_hidden_sizes,
            "covariance_hidden_sizes",
        )
        if set_size is not None:
            set_size = check_integer(set_size, "set_size", hint="or None for the MLP encoder")
        # The set holds only observed pairs: a set encoder always knows the gaps.
        missing_aware = missing_aware or set_size is not None
        _check_encoder_options(covariance, missing_aware, hide_fraction)
        self.data_dim = int(data_dim)
        self.covariance = covariance
        self.missing_aware = bool(missing_aware)
        self.hide_fraction = float(hide_fraction)
        self.jitter = jitter
        location, scale = _standardisation(self.data_dim, input_location, input_scale)
        # Variables (not trainable) so that checkpoints and exports carry them.
        self.input_location = tf.Variable(location, dtype=default_float(), trainable=False)
        self.input_scale = tf.Variable(scale, dtype=default_float(), trainable=False)
        self._build_networks(activation, seed, set_size, mean_sizes, covariance_sizes)

    def _build_networks(
        self,
        activation: str,
        seed: int,
        set_size: int | None,
        mean_sizes: tuple[int, ...],
        covariance_sizes: tuple[int, ...],
    ) -> None:
        """The mean network G, the factor network L and, with ``set_size``, the set pooling
        that both read."""
        q = self.latent_dim
        factor_size = q * (q + 1) // 2 if self.covariance == "triangular" else q * q
        self.set_network: SetPooling | None = None
        if set_size is not None:
            self.set_network = SetPooling(self.data_dim, set_size, activation, seed=seed + 2)
            input_size = self.set_network.output_size
        else:
            input_size = 2 * self.data_dim if self.missing_aware else self.data_dim
        self.mean_network = MLP(input_size, mean_sizes, q, activation, seed=seed)
        self.factor_network = MLP(
            input_size, covariance_sizes, factor_size, activation, seed=seed + 1
        )

    def encoder_input(self, Y: tf.Tensor, training: bool = False) -> tf.Tensor:
        """[B, D] (or [B, 2D] with the mask, or [B, set_size + 1] pooled by the set encoder):
        NaNs replaced by zero before any arithmetic.

        When training, each observed entry is hidden with probability ``hide_fraction``.
        """
        observed = tf.math.is_finite(Y)
        if training and self.hide_fraction > 0:
            kept = self.generator.uniform(tf.shape(Y), dtype=Y.dtype) >= self.hide_fraction
            observed = tf.logical_and(observed, kept)
        standardised = (tf.where(observed, Y, self.input_location) - self.input_location) / (
            self.input_scale
        )
        values = tf.where(observed, standardised, tf.zeros_like(Y))
        if self.set_network is not None:
            return self.set_network(values, observed)
        if not self.missing_aware:
            return values
        return tf.concat([values, tf.cast(observed, Y.dtype)], axis=-1)

    def scale_tril(self, inputs: tf.Tensor) -> tf.Tensor:
        """L(y) [B, Q, Q], lower triangular with a positive diagonal."""
        raw = self.factor_network(inputs)
        q = self.latent_dim
        if self.covariance == "triangular":
            shift = tf.constant(self.jitter, dtype=raw.dtype)
            return tfp.bijectors.FillScaleTriL(diag_shift=shift).forward(raw)
        factor = tf.reshape(raw, [-1, q, q])
        covariance = tf.matmul(factor, factor, transpose_b=True)
        return tf.linalg.cholesky(covariance + self.jitter * tf.eye(q, dtype=raw.dtype))

    def _mean_and_scale(self, Y: tf.Tensor, training: bool = False) -> tuple[tf.Tensor, tf.Tensor]:
        inputs = self.encoder_input(Y, training)
        return self.mean_network(inputs), self.scale_tril(inputs)

    @inherit_check_shapes
    def moments(self, idx: tf.Tensor, Y: tf.Tensor | None = None) -> tuple[tf.Tensor, tf.Tensor]:
        if Y is None:
            raise ValueError(
                "An amortised q(x) is computed from the data: pass the rows Y with their indices."
            )
        mean, scale = self._mean_and_scale(Y)
        return mean, tf.reduce_sum(tf.square(scale), axis=-1)

    @inherit_check_shapes
    def __call__(
        self,
        idx: tf.Tensor,
        Y: tf.Tensor,
        num_samples: int,
        noise: tf.Tensor | None = None,
        training: bool = False,
    ) -> LatentBatch:
        mean, scale = self._mean_and_scale(Y, training)
        eps = self.noise(idx, num_samples) if noise is None else noise
        eps = tf.broadcast_to(eps, tf.stack([tf.shape(eps)[0], tf.shape(mean)[0], self.latent_dim]))
        samples = mean + tf.einsum("bij,sbj->sbi", scale, eps)
        variance = tf.reduce_sum(tf.square(scale), axis=-1)
        trace = tf.reduce_sum(variance, axis=-1)
        log_det = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(scale)), axis=-1)
        kl = 0.5 * (trace + tf.reduce_sum(tf.square(mean), -1) - self.latent_dim - log_det)
        log_density = -0.5 * (
            tf.reduce_sum(tf.square(eps), -1) + log_det + self.latent_dim * np.log(2.0 * np.pi)
        )
        return LatentBatch(samples, -kl, mean, variance, scale, log_density, -_solve_t(scale, eps))

    def new_row_parameters(self, Y: tf.Tensor, fit: NewRowFit) -> tuple[tf.Tensor, ...]:
        """The encoder's q(x*) of new rows Y [B, D]; with ``fit.tolerance`` (where the row bound
        has no draws), refined from there row by row by damped Newton steps on that bound, as
        a diagonal Gaussian starting at the encoder's means and marginal variances [B, Q]
        (:func:`fit_rows`; semi-amortised inference: the encoder's q(x*) is a start, not the
        optimum of the row's bound)."""
        if fit.tolerance is None:
            return super().new_row_parameters(Y, fit)
        start = self.moments(tf.range(tf.shape(Y, out_type=tf.int64)[0]), Y)
        return fit_rows(diagonal_gaussian_batch, [None, positive()], start, Y, fit)

    def new_row_batch(
        self, rows: tuple[tf.Tensor, ...], num_samples: int, noise: tf.Tensor, fit: NewRowFit
    ) -> LatentBatch:
        if fit.tolerance is None:
            return super().new_row_batch(rows, num_samples, noise, fit)
        return diagonal_gaussian_batch(rows, num_samples, noise)


def _solve_t(scale: tf.Tensor, eps: tf.Tensor) -> tf.Tensor:
    r""":math:`L^{-\top} \epsilon` [S, B, Q] for factors L [B, Q, Q] and draws eps [S, B, Q]: at
    :math:`x = \mu + L \epsilon`, the gradient in x of :math:`\log N(x; \mu, L L^\top)` is
    :math:`-L^{-\top} \epsilon`."""
    columns = tf.transpose(eps, [1, 2, 0])  # [B, Q, S]
    solved = tf.linalg.triangular_solve(scale, columns, lower=True, adjoint=True)
    return tf.transpose(solved, [2, 0, 1])


def _check_encoder_options(covariance: str, missing_aware: bool, hide_fraction: float) -> None:
    if covariance not in ("triangular", "dense"):
        raise ValueError(f"covariance must be 'triangular' or 'dense', got {covariance!r}.")
    if not 0.0 <= hide_fraction < 1.0:
        raise ValueError(f"hide_fraction must lie in [0, 1), got {hide_fraction}.")
    if hide_fraction > 0 and not missing_aware:
        raise ValueError(
            "hide_fraction > 0 needs missing_aware=True (or a set_size): the encoder must "
            "see the mask."
        )


def _standardisation(
    data_dim: int, location: np.ndarray | None, scale: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray]:
    """The encoder's per-column input location and scale [D] (default 0 and 1), checked."""
    location = np.zeros(data_dim) if location is None else location
    scale = np.ones(data_dim) if scale is None else scale
    location, scale = (np.asarray(a, dtype=np.float64) for a in (location, scale))
    if location.shape != (data_dim,) or scale.shape != (data_dim,):
        raise ValueError(
            f"input_location and input_scale must have shape ({data_dim},), got "
            f"{location.shape} and {scale.shape}."
        )
    if not (np.all(np.isfinite(location)) and np.all(np.isfinite(scale)) and np.all(scale > 0)):
        raise ValueError("input_location must be finite and input_scale finite and positive.")
    return location, scale


def default_encoder_sizes(data_dim: int, latent_dim: int) -> tuple[int, int]:
    """Hidden widths (H, H) of each encoder network, H = D + Q (Q + 1) / 2 (the input width plus
    the factor's outputs) clipped to [32, 128].

    Chosen by held-out RMSE (measured by ``benchmarks/encoder_width.py``): wider than the
    paper's (10, 5) did better on oil flow, qPCR and MNIST, and wider than 128 did worse on
    MNIST, so the width stops growing at 128.
    """
    width = int(data_dim) + int(latent_dim) * (int(latent_dim) + 1) // 2
    width = min(128, max(32, width))
    return width, width


def paper_encoder_options(data_dim: int, latent_dim: int) -> dict:
    """The AEB-SVI encoder of the paper's supplement, as options of :class:`EncoderLatent` (and
    of :class:`~gpflow_svi_gplvm.models.gplvms.AmortisedBayesianGPLVM`).

    Two tanh MLPs with two hidden layers each, reading y_n only: the mean network
    (D, 10, 5, Q) and the covariance network (D, H, H, Q^2) with H = (D + Q^2) / 2 (rounded
    down), whose Q^2 outputs form the dense factor of the covariance. This is the supplement's
    rule and its oil-flow and qPCR networks (its taxi mean network is (3, 3, 3, 2); its oil-flow
    layer sizes are written for Q=12 where its configuration table gives Q=10).
    """
    width = (int(data_dim) + int(latent_dim) ** 2) // 2
    return dict(
        mean_hidden_sizes=(10, 5),
        covariance_hidden_sizes=(width, width),
        covariance="dense",
        activation="tanh",
        missing_aware=False,
        hide_fraction=0.0,
    )
