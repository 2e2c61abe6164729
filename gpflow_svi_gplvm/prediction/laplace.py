r"""q(x*) of many new rows at once by a Laplace approximation: Gauss-Newton steps to each row's
mode, the curvature there for its spread.

For a new row y [D] (with its observed GP inputs c and a per-output offset o, e.g. a new batch's
effect) the frozen model gives, at a latent point x, the predictive
:math:`q(f_d \mid x) = N(m_d(x), v_d(x))` of every output, with
:math:`m(x) = K_{x Z} W + \mu_0(x) + o` and :math:`v(x) = k_{xx} - K_{xZ} P K_{Zx}` (whitened:
:math:`W = L^{-\top} m_u`, :math:`P = L^{-\top}(I - S) L^{-1}`, :math:`K_{ZZ} = L L^\top`). The
row's mode minimises

.. math::

    \phi(x) = -\sum_{d \in O} E_{q(f_d \mid x)} \log p(y_d \mid f_d) - \log p(x),

over its observed outputs O, by damped Gauss-Newton steps
(:func:`~gpflow_svi_gplvm.latents.new_rows.newton_rows`, every row its own step, all rows of a
block in one compiled graph) with

.. math::

    H = \sum_{d \in O} J_d^\top \Lambda_d J_d - \nabla^2 \log p(x), \quad
    J_d = \partial (m_d, v_d) / \partial x, \quad
    \Lambda_d = -\nabla^2_{(m_d, v_d)} E \log p(y_d \mid f_d),

the Jacobians from Q forward-mode passes through the kernel (no [D, Q] reverse pass per output),
the likelihood's derivatives in (m, v) elementwise. At the mode :math:`\hat x` the Gaussian
:math:`q(x^*) = N(\hat x, H^{-1})` gives the marginal variances :math:`\mathrm{diag}(H^{-1})`
(a full-covariance family, the encoder's, a flow's), or :math:`1 / \mathrm{diag}(H)` for a
mean-field Gaussian (B-SVI's q(x) family: the mean-field optimum for a Gaussian posterior);
point and MAP families return the mode with zero variance. Rows start at their encoder's mean
(amortised families) or at the best of a few candidate latents (those whose decoded means fit
the row's observed entries best, then the lowest :math:`\phi`).
"""

from __future__ import annotations

from typing import Protocol, cast

import numpy as np
import tensorflow as tf
from gpflow.base import Parameter
from gpflow.config import default_float, default_jitter
from gpflow.inducing_variables import InducingPoints
from gpflow.kernels import Kernel
from gpflow.mean_functions import MeanFunction

from ..compiled import GraphFunction
from ..latents import GaussianLatent, MAPLatent, PointLatent
from ..latents.new_rows import Derivatives, newton_minimum
from ..likelihoods import expectation_derivatives, masked
from ..validation import check_integer, check_seed
from .latent_inference import TOLERANCE
from .new_row_model import NewRowModel, candidate_rows, check_new_row_model

__all__ = ["LaplaceLatents", "laplace_applies"]

STARTS_TRIED = 3
r"""Candidate latents per row (those whose decoded means fit its observed entries best) at which
:math:`\phi` is evaluated; the row starts at the lowest."""

_ZERO = tf.UnconnectedGradients.ZERO  # a point estimate's prior is 0 everywhere

LOW = tf.float32
r"""The precision of the work over the D outputs (their means, Jacobians and the likelihood's
terms), which CPUs with wide vector units run at several times double precision's throughput;
the latents, the steps and q(x*) stay in the model's. A row's :math:`\phi` is then known to about
:math:`10^{-7}` of its terms' size, which places its mode to a small fraction of q(x*)'s spread
(steps below that cannot be judged)."""

ROW_NUMBERS = 1e7
"""The Jacobians of a block of rows, Q x rows x D numbers, stay near this size (rows per block)."""


class LaplaceModel(NewRowModel, Protocol):
    """What :class:`LaplaceLatents` reads of a trained model, such as
    :class:`~gpflow_svi_gplvm.SVIGPLVM`: new-row inference's reads, and the SVGP's prior and
    q(u), which it projects once."""

    kernel: Kernel
    mean_function: MeanFunction
    q_mu: Parameter
    q_sqrt: Parameter
    whiten: bool


def laplace_applies(model: LaplaceModel) -> str | None:
    """Why :class:`LaplaceLatents` cannot serve ``model``, or None: it needs inducing points and
    one q(u) covariance shared by the outputs (where a row's D predictive variances are one)."""
    if not isinstance(model.inducing_variable, InducingPoints):
        return f"its inducing variable is a {type(model.inducing_variable).__name__}"
    if not model.shared_covariance:
        return "its q(u) has a covariance per output (shared_covariance=False)"
    return None


class LaplaceLatents(tf.Module):
    """Compiled Laplace inference of q(x*) for new rows of a trained model (see the module).

    ``iterations``: the most Gauss-Newton steps a row takes; ``tolerance``: a row stops once a step
    would lower :math:`\\phi` by less than this relative amount. ``candidates`` [C, Q] and
    ``candidate_inputs`` [C, R] (default: the inducing inputs and the training rows' latents with
    their observed inputs of :func:`~gpflow_svi_gplvm.prediction.new_row_model.candidate_rows`
    drawn from ``seed``) are where rows of a latent-table model may start; the
    :data:`~gpflow_svi_gplvm.prediction.latent_inference.START_CANDIDATES` whose decoded means fit a
    row's observed entries best are tried, and it starts at the one of lowest :math:`\\phi`.
    ``chunk_size``: rows per compiled call (default: Q x rows x D near :data:`ROW_NUMBERS`)."""

    def __init__(
        self,
        model: LaplaceModel,
        iterations: int = 50,
        tolerance: float = TOLERANCE,
        candidates: np.ndarray | None = None,
        candidate_inputs: np.ndarray | None = None,
        chunk_size: int | None = None,
        seed: int = 0,
    ):
        super().__init__()
        self.seed = check_seed(seed)
        check_new_row_model(model)
        reason = laplace_applies(model)
        if reason is not None:
            raise ValueError(
                f"Laplace inference of new rows needs inducing points and a shared q(u) "
                f"covariance, but {reason}: use LatentInference (infer_latents) instead."
            )
        self.model = model
        self.iterations = check_integer(iterations, "iterations")
        self.tolerance = float(tolerance)
        latent = model.latent
        self.point = isinstance(latent, PointLatent)
        self.mean_field = isinstance(latent, GaussianLatent)
        self.likelihood = masked(model.likelihood)
        Q, D = model.latent_dim, model.data_dim
        width = 0 if model.row_inputs is None else int(model.row_inputs.shape[1])
        self.width = width
        self.chunk_size = chunk_size or max(16, int(ROW_NUMBERS // (Q * D)))
        if not latent.amortised:
            candidates, candidate_inputs = self._candidates(candidates, candidate_inputs)
            self._candidates_at = tf.constant(candidates, default_float())
            self._candidate_inputs = tf.constant(candidate_inputs, default_float())
        dtype = default_float()
        spec = [
            tf.TensorSpec([None, D], dtype),  # rows, NaN where missing
            tf.TensorSpec([None, width], dtype),  # their observed inputs (covariates, log s)
            tf.TensorSpec([None, D], dtype),  # their offsets on f
        ]
        self.fit = GraphFunction(self._fit, spec)
        starts = tf.TensorSpec([None, Q], dtype)  # where the rows' steps start
        self.fit_from = GraphFunction(self._fit, spec + [starts])

    def infer(
        self,
        Y: np.ndarray,
        inputs: np.ndarray | None = None,
        offsets: np.ndarray | None = None,
        start: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Mean and marginal variance [N*, Q] of q(x*) for rows Y [N*, D] (NaN = missing), with
        their observed ``inputs`` [N*, R] (where the model has them) and ``offsets`` [N*, D] on
        f (default 0), in blocks of :attr:`chunk_size` rows; their steps start at ``start``
        [N*, Q] when given (e.g. a fit's modes before its offsets changed)."""
        means, variances = [], []
        for first in range(0, len(Y), self.chunk_size):
            part = slice(first, first + self.chunk_size)
            block = np.asarray(Y[part], dtype=np.float64)
            given = np.zeros((len(block), self.width)) if inputs is None else inputs[part]
            shift = np.zeros_like(block) if offsets is None else offsets[part]
            if start is None:
                mean, variance = self.fit(block, given, shift)
            else:
                mean, variance = self.fit_from(block, given, shift, start[part])
            means.append(mean.numpy())
            variances.append(variance.numpy())
        return np.concatenate(means), np.concatenate(variances)

    def typical_rate(self) -> np.ndarray | None:
        """The likelihood's predictive mean [D] averaged over the candidate latents, at a size
        factor of one: the fitted rows' typical value of each output (None for an amortised
        family, which has no candidates)."""
        if self.model.latent.amortised:
            return None
        rates = _Predictive(self.model).rate(
            self._candidates_at, self._unit_size_inputs(), self.likelihood
        )
        return tf.reduce_mean(tf.cast(rates, default_float()), axis=0).numpy()

    def _unit_size_inputs(self) -> tf.Tensor:
        """The candidates' observed inputs [C, R] with a size factor of one."""
        own = self._candidate_inputs
        if self.model.size_factor_reference is None:
            return own
        return tf.pad(own[:, :-1], [[0, 0], [0, 1]])

    def _candidates(
        self, candidates: np.ndarray | None, inputs: np.ndarray | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """The candidate latents [C, Q] and their observed inputs [C, R]: the inducing inputs'
        and those given (default: training rows' of the model's table)."""
        model = self.model
        Z = model.inducing_variable.Z.numpy()
        if candidates is None:
            idx = tf.constant(candidate_rows(model.num_table_rows, self.seed), tf.int64)
            candidates = model.latent.moments(idx)[0].numpy()
            if model.row_inputs is not None:
                inputs = tf.gather(model.row_inputs, idx).numpy()
        inputs = np.zeros((len(candidates), self.width)) if inputs is None else inputs
        Q = model.latent_dim
        return (
            np.concatenate([Z[:, :Q], candidates]),
            np.concatenate([Z[:, Q : Q + self.width], inputs]),
        )

    def _fit(
        self,
        Y: tf.Tensor,
        inputs: tf.Tensor,
        offsets: tf.Tensor,
        start: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [B, Q] of q(x*) of a block of rows (from ``start``, or
        from :meth:`_start`'s)."""
        observed = tf.logical_not(tf.math.is_nan(Y))
        values = tf.cast(tf.where(observed, Y, tf.zeros_like(Y)), LOW)
        block = _Rows(values, observed, inputs, tf.cast(offsets, LOW))
        gp = _Predictive(self.model)

        def derivatives(theta: tf.Tensor, rows: tf.Tensor) -> Derivatives:
            return self._derivatives(gp, theta, block.gathered(rows))

        if start is None:
            start = self._start(gp, block)
        mode, hessian = newton_minimum(derivatives, start, self.tolerance, self.iterations)
        if self.point:
            return mode, tf.zeros_like(mode)
        if self.mean_field:
            return mode, 1.0 / tf.linalg.diag_part(hessian)
        return mode, tf.linalg.diag_part(tf.linalg.inv(hessian))

    def _start(self, gp: _Predictive, rows: _Rows) -> tf.Tensor:
        """Each row's start [B, Q]: its encoder's mean, or the best of its candidates."""
        model = self.model
        if model.latent.amortised:
            idx = tf.zeros(tf.shape(rows.values)[:1], tf.int64)
            Y = tf.cast(rows.targets(), default_float())
            return cast(tf.Tensor, model.latent.moments(idx, Y)[0])
        decoded = gp.rate(self._candidates_at, self._unit_size_inputs(), self.likelihood)  # [C, D]
        scale = tf.cast(tf.exp(_log_size(model, rows.inputs)), LOW)
        mask = tf.cast(rows.observed, LOW)
        scaled = rows.values / scale * mask
        errors = (
            tf.reduce_sum(tf.square(scaled), axis=1, keepdims=True)
            - 2.0 * tf.matmul(scaled, decoded, transpose_b=True)
            + tf.matmul(mask, tf.square(decoded), transpose_b=True)
        )  # [B, C], the squares expanded: no [B, C, D] tensor
        count = min(STARTS_TRIED, int(self._candidates_at.shape[0]))
        starts = tf.gather(self._candidates_at, tf.math.top_k(-errors, count).indices)  # [B, K, Q]
        flat = tf.reshape(starts, [-1, model.latent_dim])
        losses = tf.reshape(self._loss(gp, flat, rows.repeated(count)), [-1, count])
        return tf.gather(starts, tf.argmin(losses, axis=1), batch_dims=1)

    def _loss(self, gp: _Predictive, x: tf.Tensor, rows: _Rows) -> tf.Tensor:
        r""":math:`\phi` [A] (up to a term of each row's values alone) at latent points x [A, Q]."""
        mean, variance = gp.at(x, rows.inputs, rows.offsets)
        wide = tf.broadcast_to(variance, tf.shape(mean))
        # Only the value is read: the derivatives are pruned from the graph.
        terms = expectation_derivatives(self.likelihood, rows.targets(), mean, wide).value
        return -tf.cast(tf.reduce_sum(terms, axis=1), x.dtype) - self._log_prior(x)

    def _log_prior(self, x: tf.Tensor) -> tf.Tensor:
        latent = self.model.latent
        if isinstance(latent, (MAPLatent, PointLatent)):
            return latent.row_term(x)  # log p(x), or 0 for a point estimate
        return -0.5 * tf.reduce_sum(tf.square(x), axis=1)  # N(0, I), up to a constant

    def _derivatives(self, gp: _Predictive, x: tf.Tensor, rows: _Rows) -> Derivatives:
        r""":math:`\phi` [A], its gradient [A, Q] and Hessian [A, Q, Q] at x [A, Q]: the
        likelihood's part through the Jacobians of (m, v) [A, Q, D] and [A, Q] (v is one for
        every output) plus the curvature of (m, v) themselves, and the prior's."""
        (mean, variance), (mean_jac, variance_jac) = gp.with_jacobians(x, rows.inputs, rows.offsets)
        wide = tf.broadcast_to(variance, tf.shape(mean))
        d = expectation_derivatives(self.likelihood, rows.targets(), mean, wide)
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                log_prior = self._log_prior(x)
                prior_total = tf.reduce_sum(log_prior)
            prior_gradient = inner.gradient(prior_total, x, unconnected_gradients=_ZERO)
        prior_hessian = outer.batch_jacobian(prior_gradient, x, unconnected_gradients=_ZERO)
        high = x.dtype

        def summed(terms: tf.Tensor) -> tf.Tensor:  # over the outputs, in the model's precision
            return tf.cast(tf.reduce_sum(terms, axis=-1), high)

        def along(weights: tf.Tensor) -> tf.Tensor:  # sum_d J_qd w_d [A, Q], no [A, Q, D] product
            return tf.cast(tf.linalg.matvec(mean_jac, weights), high)

        v_first, v_curve = summed(d.variance), summed(-d.variance_variance)  # [A]
        vj = variance_jac  # [A, Q]
        gradient = -along(d.mean) - vj * v_first[:, None]
        cross = along(-d.mean_variance)  # [A, Q]
        weighted = mean_jac * -d.mean_mean[:, None, :]
        hessian = (
            tf.cast(tf.matmul(weighted, mean_jac, transpose_b=True), high)
            + cross[:, :, None] * vj[:, None, :]
            + vj[:, :, None] * cross[:, None, :]
            + v_curve[:, None, None] * vj[:, :, None] * vj[:, None, :]
            - gp.curvature(x, rows.inputs, d.mean, v_first)
            - prior_hessian
        )
        return -summed(d.value) - log_prior, gradient - prior_gradient, hessian


class _Rows:
    """A block of rows in :data:`LOW` precision: values [A, D] (0 where missing), observed
    [A, D], offsets [A, D]; and their observed inputs [A, R] in the model's."""

    def __init__(self, values, observed, inputs, offsets):
        self.values, self.observed, self.inputs, self.offsets = values, observed, inputs, offsets

    def gathered(self, rows: tf.Tensor) -> _Rows:
        return _Rows(*(tf.gather(t, rows) for t in self._parts()))

    def repeated(self, count: int) -> _Rows:
        return _Rows(*(tf.repeat(t, count, axis=0) for t in self._parts()))

    def targets(self) -> tf.Tensor:
        """The values with NaN where missing."""
        missing = tf.fill(tf.shape(self.values), tf.constant(np.nan, self.values.dtype))
        return tf.where(self.observed, self.values, missing)

    def _parts(self) -> tuple[tf.Tensor, ...]:
        return self.values, self.observed, self.inputs, self.offsets


def _log_size(model: LaplaceModel, inputs: tf.Tensor) -> tf.Tensor:
    """Each row's log size factor [A, 1] (0 without size factors)."""
    if model.size_factor_reference is None:
        return tf.zeros_like(inputs[:, :1]) if inputs.shape[1] else tf.zeros([1, 1], inputs.dtype)
    return inputs[:, -1:]


class _Predictive:
    """The frozen model's q(f | x) at GP inputs [x, c]: mean [A, D] in :data:`LOW` precision
    and one variance [A, 1]."""

    def __init__(self, model: LaplaceModel):
        self.model = model
        Z = model.inducing_variable.Z
        Kzz = model.kernel.K(Z) + default_jitter() * tf.eye(tf.shape(Z)[0], dtype=Z.dtype)
        L = tf.linalg.cholesky(Kzz)
        q_mu = tf.convert_to_tensor(model.q_mu)
        S_factor = tf.convert_to_tensor(model.q_sqrt)[0]  # [M, M], shared by the outputs
        eye = tf.eye(tf.shape(L)[0], dtype=L.dtype)
        L_inv = tf.linalg.triangular_solve(L, eye, lower=True)  # L^-1
        if model.whiten:
            W = tf.linalg.matmul(L_inv, q_mu, transpose_a=True)  # L^-T m_u
            inner = eye - tf.matmul(S_factor, S_factor, transpose_b=True)
        else:
            W = tf.linalg.cholesky_solve(L, q_mu)  # Kzz^-1 m_u
            S = tf.matmul(S_factor, S_factor, transpose_b=True)
            inner = eye - tf.matmul(L_inv, tf.matmul(S, L_inv, transpose_b=True))
        self.P = tf.matmul(L_inv, tf.matmul(inner, L_inv), transpose_a=True)  # [M, M]
        self.W = tf.cast(W, LOW)  # [M, D]
        self.Z = Z

    def _parts(self, X: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
        model = self.model
        return model.kernel.K(X, self.Z), model.kernel.K_diag(X), model.mean_function(X)

    def _joined(self, x: tf.Tensor, inputs: tf.Tensor) -> tf.Tensor:
        return tf.concat([x, inputs], axis=1) if inputs.shape[1] else x

    def at(
        self, x: tf.Tensor, inputs: tf.Tensor, offsets: tf.Tensor
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean [A, D] and variance [A, 1] of f at latent points x [A, Q] of rows with observed
        ``inputs`` [A, R] and ``offsets`` [A, D]."""
        K, diag, prior_mean = self._parts(self._joined(x, inputs))
        return self._moments(K, diag, prior_mean, offsets)

    def _moments(self, K, diag, prior_mean, offsets) -> tuple[tf.Tensor, tf.Tensor]:
        mean = tf.matmul(tf.cast(K, LOW), self.W) + tf.cast(prior_mean, LOW) + offsets
        variance = diag - tf.reduce_sum(tf.matmul(K, self.P) * K, axis=1)
        return mean, tf.cast(tf.maximum(variance, 1e-12), LOW)[:, None]

    def rate(self, x: tf.Tensor, inputs: tf.Tensor, likelihood) -> tf.Tensor:
        """The likelihood's predictive mean [C, D] at latent points x [C, Q] with ``inputs``."""
        mean, variance = self.at(x, inputs, tf.zeros([1, 1], LOW))
        wide = tf.cast(tf.broadcast_to(variance, tf.shape(mean)), x.dtype)
        return tf.cast(likelihood.predict_mean_and_var(x, tf.cast(mean, x.dtype), wide)[0], LOW)

    def curvature(
        self, x: tf.Tensor, inputs: tf.Tensor, mean_weights: tf.Tensor, variance_weight: tf.Tensor
    ) -> tf.Tensor:
        r""":math:`\sum_d a_d \nabla^2 m_d(x) + b \nabla^2 v(x)` [A, Q, Q] per row, for weights
        a [A, D] (``mean_weights``) and b [A] (``variance_weight``): the second-order part of
        the Hessian of :math:`\sum_d \ell_d(m_d(x), v(x))`, of a scalar per row whose cost is
        the kernel's, not the D outputs' (:math:`\sum_d a_d m_d = K_{xZ} W a + \mu_0^\top a`)."""
        high = x.dtype
        reduced = tf.cast(tf.matmul(mean_weights, self.W, transpose_b=True), high)  # [A, M]
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                K, diag, prior_mean = self._parts(self._joined(x, inputs))
                variance = diag - tf.reduce_sum(tf.matmul(K, self.P) * K, axis=1)
                weighted = (
                    tf.reduce_sum(K * reduced, axis=1)
                    + tf.reduce_sum(prior_mean * tf.cast(mean_weights, high), axis=1)
                    + variance_weight * variance
                )
                total = tf.reduce_sum(weighted)
            gradient = inner.gradient(total, x)
        return outer.batch_jacobian(gradient, x)

    def with_jacobians(self, x: tf.Tensor, inputs: tf.Tensor, offsets: tf.Tensor):
        """:meth:`at` and the Jacobians in x of its mean [A, Q, D] (in :data:`LOW` precision)
        and variance [A, Q]: the kernel's and the mean function's by one forward-mode pass per
        latent dimension, then the mean's in one product with W [M, D]."""
        X = self._joined(x, inputs)
        K, diag, prior_mean = self._parts(X)
        mean, variance = self._moments(K, diag, prior_mean, offsets)
        kernel_rows, diag_rows, prior_rows = [], [], []
        for q in range(self.model.latent_dim):
            tangent = tf.one_hot(tf.fill(tf.shape(x)[:1], q), tf.shape(X)[1], dtype=X.dtype)
            with tf.autodiff.ForwardAccumulator(X, tangent) as accumulator:
                K_q, diag_q, prior_q = self._parts(X)
            kernel_rows.append(accumulator.jvp(K_q))
            diag_rows.append(accumulator.jvp(diag_q))
            prior_rows.append(accumulator.jvp(prior_q))
        dK = tf.stack(kernel_rows, axis=1)  # [A, Q, M]
        mean_jac = tf.matmul(tf.cast(dK, LOW), self.W)  # [A, Q, D]
        if all(row is not None for row in prior_rows):  # a mean function that reads x
            mean_jac += tf.cast(tf.stack(prior_rows, axis=1), LOW)
        variance_jac = -2.0 * tf.reduce_sum(dK * tf.matmul(K, self.P)[:, None, :], axis=2)
        if all(row is not None for row in diag_rows):  # a kernel whose k(x, x) moves with x
            variance_jac += tf.stack(diag_rows, axis=1)
        return (mean, variance), (mean_jac, variance_jac)
