r"""q(x*) of many new rows at once by a Laplace approximation: Newton steps to each row's mode,
the curvature there for its spread.

For a new row y [D] (with its observed GP inputs c and a per-output offset o, e.g. a new batch's
effect) the frozen model gives, at a latent point x, the predictive
:math:`q(f_d \mid x) = N(m_d(x), v(x))` of every output (:mod:`.frozen_gp`). The row's mode
minimises

.. math::

    \phi(x) = -\sum_{d \in O} E_{q(f_d \mid x)} \log p(y_d \mid f_d) - \log p(x),

over its observed outputs O, by damped Newton steps
(:func:`~gpflow_svi_gplvm.latents.new_rows.newton_minimum`, every row its own step, all rows of
a block in one compiled graph) with

.. math::

    H = \sum_{d \in O} J_d^\top \Lambda_d J_d - \nabla^2 \log p(x), \quad
    J_d = \partial (m_d, v) / \partial x, \quad
    \Lambda_d = -\nabla^2_{(m_d, v)} E \log p(y_d \mid f_d),

plus the curvature of (m, v) themselves, the likelihood's derivatives in (m, v) elementwise.
At the mode :math:`\hat x` the Gaussian :math:`q(x^*) = N(\hat x, H^{-1})` gives the marginal
variances :math:`\mathrm{diag}(H^{-1})` (a full-covariance family, the encoder's, a flow's), or
:math:`1 / \mathrm{diag}(H)` for a mean-field Gaussian (B-SVI's q(x) family: the mean-field
optimum for a Gaussian posterior); point and MAP families return the mode with zero variance.

**Where the work goes.** A row's Jacobian of the means, Q x D numbers each a product of M, is
the largest piece; the likelihood's terms are D elementwise expressions. So:

- Rows start at their encoder's mean (amortised families) or at the mean of the latents of the
  fitted rows whose decoded rates fit the row's values best (taken in the rates' leading
  principal directions, :class:`_RateSummary`, the values brought to the rates' scale: a size
  factor of one and no offset): no :math:`\phi` is evaluated to start, and the
  start lies nearer the mode than any one of those latents, so fewer steps follow.
- The steps use a Hessian whose Gauss-Newton part sums the outputs that carry most of it
  (:func:`hessian_outputs`, scaled for the rest); the gradient is exact, so the steps still go
  to the mode, and stop at a decrement :data:`COARSE` times the tolerance. The point one step
  further is then evaluated exactly, with the whole Hessian, and accepted where the Newton
  decrement meets the tolerance, the test a row's steps stop at; the rows it fails take exact
  steps from there. The curvature given is the exact one at the point returned.
- With many outputs each evaluation runs in tiles of :data:`TILE_ROWS` rows compiled by XLA
  (a few fused loops over the D outputs, not dozens of passes), inside the steps' graph.
"""

from __future__ import annotations

from typing import cast

import numpy as np
import tensorflow as tf
from gpflow.config import default_float
from gpflow.inducing_variables import InducingPoints

from ..compiled import GraphFunction
from ..latents import GaussianLatent, MAPLatent, PointLatent
from ..latents.new_rows import Derivatives, NewtonResult, newton_decrement, newton_minimum
from ..likelihoods import (
    ExpectationDerivatives,
    expectation_derivatives,
    likelihood_facts,
    masked,
)
from ..validation import check_integer, check_seed
from .frozen_gp import LOW, LaplaceModel, frozen_gp
from .latent_inference import TOLERANCE
from .new_row_model import candidate_rows, check_new_row_model

__all__ = ["LaplaceLatents", "LaplaceModel", "laplace_applies", "hessian_outputs", "LOW"]

STARTS_AVERAGED = 20
"""Candidate latents per row (those whose decoded means fit its observed entries best) whose mean
is the row's start: no phi is evaluated to choose it, and a fifth less CPU a cell than the best
of three candidates by phi (``benchmarks/results/mapping.md``)."""

START_COMPONENTS = 64
"""The principal directions of the candidates' decoded rates in which each row's distance to
them is taken (:class:`_RateSummary`)."""

COARSE = 10.0
"""The Newton steps on the approximate Hessian stop once their decrement falls below this many
times the tolerance; the point one step further then meets the tolerance for most rows, which
an exact evaluation checks (:meth:`LaplaceLatents._coarse`)."""

INFORMATION_POINTS = 256
"""Fitted latents over which the outputs' shares of the Hessian are measured, at most."""

TILE_ROWS = 32
"""Rows per tile of an evaluation compiled by XLA (one compilation serves every block)."""

TILED_OUTPUTS = 256
"""Models of at least this many outputs evaluate rows in tiles compiled by XLA by default (below
it the compilation costs more than it saves)."""

ROW_NUMBERS = 1e7
"""The Jacobians of a block of rows, Q x rows x D numbers, stay near this size (rows per block)."""

_ZERO = tf.UnconnectedGradients.ZERO  # a point estimate's prior is 0 everywhere


def hessian_outputs(num_outputs: int) -> int:
    """The outputs whose terms the Newton steps' Gauss-Newton Hessian sums by default: all of up
    to 512, else a fifth, at least 512 (on a simulated atlas of 2,000 genes, a fifth held about
    three quarters of the Hessian's trace at the fitted latents)."""
    return num_outputs if num_outputs <= 512 else max(512, num_outputs // 5)


def laplace_applies(model: LaplaceModel) -> str | None:
    """Why :class:`LaplaceLatents` cannot serve ``model``, or None: it needs inducing points and
    one q(u) covariance shared by the outputs (where a row's D predictive variances are one)."""
    if not isinstance(model.inducing_variable, InducingPoints):
        return f"its inducing variable is a {type(model.inducing_variable).__name__}"
    if not model.shared_covariance:
        return "its q(u) has a covariance per output (shared_covariance=False)"
    return None


class LaplaceLatents(tf.Module):
    """Compiled Laplace inference of q(x*) for new rows of a trained model (see the module), the
    model as it is when this is made (its parameters are read once).

    ``iterations``: the most Newton steps a row takes; ``tolerance``: a row stops once a step
    would lower :math:`\\phi` by less than this relative amount. ``candidates`` [C, Q] and
    ``candidate_inputs`` [C, R] (default: the inducing inputs and the training rows' latents with
    their observed inputs of :func:`~gpflow_svi_gplvm.prediction.new_row_model.candidate_rows`
    drawn from ``seed``) are where rows of a latent-table model start: at the mean of the
    :data:`STARTS_AVERAGED` whose decoded means fit a row's observed entries best.
    ``chunk_size``: rows per compiled call (default: Q x rows x D near :data:`ROW_NUMBERS`).
    ``hessian_outputs``: the outputs the steps' Hessian sums (default :func:`hessian_outputs`);
    ``tiled``: evaluate rows in tiles compiled by XLA (default: with at least
    :data:`TILED_OUTPUTS` outputs)."""

    def __init__(
        self,
        model: LaplaceModel,
        iterations: int = 50,
        tolerance: float = TOLERANCE,
        candidates: np.ndarray | None = None,
        candidate_inputs: np.ndarray | None = None,
        chunk_size: int | None = None,
        seed: int = 0,
        hessian_outputs: int | None = None,
        tiled: bool | None = None,
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
        self.link = likelihood_facts(model.likelihood).inverse_link
        Q, D = model.latent_dim, model.data_dim
        width = 0 if model.row_inputs is None else int(model.row_inputs.shape[1])
        self.width = width
        self.chunk_size = chunk_size or max(16, int(ROW_NUMBERS // (Q * D)))
        self.gp = frozen_gp(model)
        if not latent.amortised:
            candidates, candidate_inputs = self._candidates(candidates, candidate_inputs)
            self._candidates_at = tf.constant(candidates, default_float())
            self._candidate_inputs = tf.constant(candidate_inputs, default_float())
            rates = self.gp.rate(self._candidates_at, self._unit_size_inputs(), self.likelihood)
            self._rates = _RateSummary(tf.cast(rates, default_float()).numpy(), self.seed)
        self.hessian_genes, self.hessian_scale = self._hessian_outputs(hessian_outputs)
        self.tiled = D >= TILED_OUTPUTS if tiled is None else bool(tiled)
        dtype = default_float()
        tile = [
            tf.TensorSpec([TILE_ROWS, D], LOW),  # values, NaN where missing
            tf.TensorSpec([TILE_ROWS, D], LOW),  # means of f
            tf.TensorSpec([TILE_ROWS, 1], LOW),  # its variance
        ]
        self._tile_terms = GraphFunction(self._row_terms, tile, jit_compile=True)
        spec = [
            tf.TensorSpec([None, D], dtype),  # rows, NaN where missing
            tf.TensorSpec([None, width], dtype),  # their observed inputs (covariates, log s)
            tf.TensorSpec([None, D], dtype),  # their offsets on f
        ]
        # One graph from the rows alone (served), and in Python the steps from a start given or
        # found by the small ``start``, so that mapping's rounds (from the last round's modes)
        # and its first (from the candidates) share one trace of the steps.
        self.fit = GraphFunction(self._fit, spec)
        starts = tf.TensorSpec([None, Q], dtype)  # where the rows' steps start
        self.fit_from = GraphFunction(self._fit, spec + [starts])
        self.start = GraphFunction(lambda *rows: self._start(_Rows.of(*rows)), spec)

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
        [N*, Q] when given (e.g. a fit's modes before its offsets changed). No rows give empty
        moments [0, Q]."""
        none = np.zeros((0, self.model.latent_dim))  # the moments of no rows
        means, variances = [none], [none]
        for first in range(0, len(Y), self.chunk_size):
            part = slice(first, first + self.chunk_size)
            block = np.asarray(Y[part], dtype=np.float64)
            given = np.zeros((len(block), self.width)) if inputs is None else inputs[part]
            shift = np.zeros_like(block) if offsets is None else offsets[part]
            begin = self.start(block, given, shift) if start is None else start[part]
            mean, variance = self.fit_from(block, given, shift, begin)
            means.append(mean.numpy())
            variances.append(variance.numpy())
        return np.concatenate(means), np.concatenate(variances)

    def typical_rate(self) -> np.ndarray | None:
        """The likelihood's predictive mean [D] averaged over the candidate latents, at a size
        factor of one: the fitted rows' typical value of each output (None for an amortised
        family, which has no candidates)."""
        if self.model.latent.amortised:
            return None
        return self._rates.typical.copy()

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

    def _hessian_outputs(self, count: int | None) -> tuple[tf.Tensor | None, float]:
        r"""The outputs whose terms the steps' Gauss-Newton Hessian sums (None: all) and its
        scale: the ``count`` (default :func:`hessian_outputs`) carrying the most of
        :math:`w_d \sum_q J_{qd}^2` (the Hessian's trace, with the Fisher weights
        :math:`w_d = -\partial^2_m E \log p(y_d \mid f_d)` at the likelihood's mean) over up to
        :data:`INFORMATION_POINTS` fitted latents (an amortised model's: the inducing inputs),
        and the median over them of the whole trace over the chosen outputs' share."""
        model = self.model
        D = model.data_dim
        count = hessian_outputs(D) if count is None else check_integer(count, "hessian_outputs")
        if count >= D:
            return None, 1.0
        if model.latent.amortised:
            at = model.inducing_variable.Z.numpy()
            Q = model.latent_dim
            x = tf.constant(at[:, :Q], default_float())
            inputs = tf.constant(at[:, Q : Q + self.width], default_float())
        else:
            x = self._candidates_at[:INFORMATION_POINTS]
            inputs = self._unit_size_inputs()[:INFORMATION_POINTS]
        (mean, variance), slopes = self.gp.with_jacobians(x, inputs, tf.zeros([1, 1], LOW))
        wide = tf.broadcast_to(variance, tf.shape(mean))
        rate = self.gp.rate(x, inputs, self.likelihood)
        fisher = -expectation_derivatives(self.likelihood, rate, mean, wide).mean_mean
        jacobian = self.gp.mean_jacobian(slopes)
        information = tf.reduce_sum(tf.square(jacobian), axis=1) * fisher  # [C, D]
        information = tf.cast(information, default_float()).numpy()
        chosen = np.sort(np.argsort(-information.sum(axis=0))[:count])
        share = information[:, chosen].sum(axis=1) / information.sum(axis=1)
        return tf.constant(chosen, tf.int64), float(1.0 / np.median(share))

    def _fit(
        self,
        Y: tf.Tensor,
        inputs: tf.Tensor,
        offsets: tf.Tensor,
        start: tf.Tensor | None = None,
    ) -> tuple[tf.Tensor, tf.Tensor]:
        """Mean and marginal variance [B, Q] of q(x*) of a block of rows, their steps from
        ``start`` (default :meth:`_start`'s): Newton steps on :meth:`_derivatives` until their
        decrement falls below :data:`COARSE` times the tolerance, then one step further, where
        the point is accepted if its decrement meets the tolerance; the rows it fails step on
        until it does. The curvature there is exact (:meth:`_evaluate`). An empty block gives
        empty moments [0, Q] (a served batch of no cells: the steps' batch Jacobians would
        divide by its size)."""
        empty = tf.zeros([0, self.model.latent_dim], default_float())
        return tf.cond(
            tf.shape(Y)[0] > 0,
            lambda: self._fit_rows(_Rows.of(Y, inputs, offsets), start),
            lambda: (empty, empty),
        )

    def _fit_rows(self, block: _Rows, start: tf.Tensor | None) -> tuple[tf.Tensor, tf.Tensor]:
        """:meth:`_fit` of a block of at least one row."""
        if start is None:
            start = self._start(block)
        steps = self._newton(block, start, COARSE * self.tolerance)
        mode = tf.where(steps.stopped[:, None], steps.next_point, steps.point)
        value, gradient, hessian, curvature = self._evaluate(mode, block, curvature=True)
        decrement = newton_decrement(gradient, hessian)
        # (Comparisons that hold for NaN as no other value: the graph's optimiser may turn a
        # negated comparison into its opposite, which is not one with NaN.)
        finite = tf.math.is_finite(value)
        accepted = finite & (decrement < self.tolerance * (1.0 + tf.abs(value)))
        rest = tf.where(tf.logical_not(accepted))[:, 0]
        # A point one step further that is worse than the best evaluated (or not finite) is
        # dropped: those rows go on from their best point.
        better = finite & (value <= steps.value)
        restart = tf.where(better[:, None], mode, steps.point)

        def finish() -> tuple[tf.Tensor, tf.Tensor]:
            rows = block.gathered(rest)
            found = self._newton(rows, tf.gather(restart, rest), self.tolerance).point
            at = rest[:, None]
            exact = self._evaluate(found, rows, curvature=True)[3]
            return (
                tf.tensor_scatter_nd_update(mode, at, found),
                tf.tensor_scatter_nd_update(curvature, at, exact),
            )

        more = tf.size(rest) > 0
        mode, curvature = tf.cond(more, finish, lambda: (mode, curvature))
        return self._moments(mode, curvature)

    def _newton(self, block: _Rows, start: tf.Tensor, tolerance: float) -> NewtonResult:
        """:func:`~gpflow_svi_gplvm.latents.new_rows.newton_minimum` of the rows of ``block``
        from ``start`` on :meth:`_derivatives`, to ``tolerance``."""

        def derivatives(theta: tf.Tensor, rows: tf.Tensor) -> Derivatives:
            return self._derivatives(theta, block.gathered(rows))

        return newton_minimum(derivatives, start, tolerance, self.iterations)

    def _moments(self, mode: tf.Tensor, curvature: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """q(x*)'s mean and marginal variance [B, Q] from its mode and :meth:`_evaluate`'s
        curvature there."""
        if self.point:
            return mode, tf.zeros_like(mode)
        if self.mean_field:
            return mode, 1.0 / curvature
        return mode, tf.linalg.diag_part(tf.linalg.inv(curvature))

    def _start(self, rows: _Rows) -> tf.Tensor:
        """Each row's start [B, Q]: its encoder's mean, or the mean of its nearest candidates."""
        model = self.model
        if model.latent.amortised:
            idx = tf.zeros(tf.shape(rows.values)[:1], tf.int64)
            Y = tf.cast(rows.targets(), default_float())
            return cast(tf.Tensor, model.latent.moments(idx, Y)[0])
        errors = self._rates.distances(self._unit_rates(rows), rows.observed)  # [B, C]
        count = min(STARTS_AVERAGED, int(self._candidates_at.shape[0]))
        nearest = tf.gather(self._candidates_at, tf.math.top_k(-errors, count).indices)  # [B, K, Q]
        return tf.reduce_mean(nearest, axis=1)

    def _unit_rates(self, rows: _Rows) -> tf.Tensor:
        r"""The rows' values [B, D] on the scale of the candidates' rates (a size factor of one,
        no offset): under a log link :math:`y / (s\, e^{o})`, under the identity :math:`y - o`
        (a new batch's offsets o on f, zero for fitted batches; without them a strong batch
        effect sent a new batch's cells to distant starts, ``benchmarks/results/mapping.md``),
        else the values as they are."""
        values = rows.values / tf.cast(tf.exp(_log_size(self.model, rows.inputs)), LOW)
        if self.link == "exp":
            return values * tf.exp(-rows.offsets)
        if self.link == "identity":
            return values - rows.offsets
        return values

    def _log_prior(self, x: tf.Tensor) -> tf.Tensor:
        latent = self.model.latent
        if isinstance(latent, (MAPLatent, PointLatent)):
            return latent.row_term(x)  # log p(x), or 0 for a point estimate
        return -0.5 * tf.reduce_sum(tf.square(x), axis=1)  # N(0, I), up to a constant

    def _derivatives(self, x: tf.Tensor, rows: _Rows) -> Derivatives:
        """:meth:`_evaluate`'s value, gradient and Hessian, for the steps."""
        return cast(Derivatives, self._evaluate(x, rows)[:3])

    def _evaluate(self, x: tf.Tensor, rows: _Rows, curvature: bool = False):
        r""":math:`\phi` [A], its gradient [A, Q] and a Hessian [A, Q, Q] at x [A, Q] of
        ``rows``, and with ``curvature`` the exact Hessian: its diagonal [A, Q] for a mean-field
        family (zeros for a point estimate), else whole [A, Q, Q] (without: None). The
        likelihood's part goes through the Jacobians of (m, v) (v is one for every output) plus
        the curvature of (m, v) themselves; the gradient is exact, and the Hessian's
        Gauss-Newton part, :math:`\sum_d w_d J_d J_d^\top`, sums :attr:`hessian_genes` alone,
        scaled by :attr:`hessian_scale`."""
        gp = self.gp
        (mean, variance), slopes = gp.with_jacobians(x, rows.inputs, rows.offsets)
        d = self._terms(rows.targets(), mean, variance)
        with tf.GradientTape() as outer:
            outer.watch(x)
            with tf.GradientTape() as inner:
                inner.watch(x)
                log_prior = self._log_prior(x)
                prior_total = tf.reduce_sum(log_prior)
            prior_gradient = inner.gradient(prior_total, x, unconnected_gradients=_ZERO)
        prior_hessian = outer.batch_jacobian(prior_gradient, x, unconnected_gradients=_ZERO)
        high = x.dtype
        first, cross_weights = d.mean, -d.mean_variance
        reduced = gp.reduced(tf.concat([first, cross_weights], axis=0))  # [2A, M]
        reduced_first, reduced_cross = tf.split(reduced, 2)
        v_first, v_curve = tf.cast(d.variance, high), -tf.cast(d.variance_variance, high)  # [A]
        vj = slopes.variance  # [A, Q]
        gradient = -gp.along(slopes, reduced_first, first) - vj * v_first[:, None]
        cross = gp.along(slopes, reduced_cross, cross_weights)  # [A, Q]
        others = (  # the Hessian but for its Gauss-Newton part
            cross[:, :, None] * vj[:, None, :]
            + vj[:, :, None] * cross[:, None, :]
            + v_curve[:, None, None] * vj[:, :, None] * vj[:, None, :]
            - gp.curvature(x, rows.inputs, first, reduced_first, v_first)
            - prior_hessian
        )
        genes, weights = self.hessian_genes, -d.mean_mean
        whole = gp.mean_jacobian(slopes) if curvature or genes is None else None  # [A, Q, D]
        if genes is None:
            jacobian, chosen = whole, weights
        else:  # the chosen columns of W in a product: gathering them from `whole` runs slower
            jacobian, chosen = gp.mean_jacobian(slopes, genes), tf.gather(weights, genes, axis=1)
        products = tf.matmul(jacobian * chosen[:, None, :], jacobian, transpose_b=True)
        hessian = self.hessian_scale * tf.cast(products, high) + others
        value = -tf.cast(d.value, high) - log_prior
        exact = None
        if curvature and self.point:
            exact = tf.zeros_like(x)  # a point estimate has no spread
        elif curvature:
            if self.mean_field:  # diag(J^T diag(w) J) without the off-diagonal products
                gauss_newton = tf.linalg.matvec(tf.square(whole), weights)
                exact = tf.cast(gauss_newton, high) + tf.linalg.diag_part(others)
            elif genes is None:
                exact = hessian
            else:
                products = tf.matmul(whole * weights[:, None, :], whole, transpose_b=True)
                exact = tf.cast(products, high) + others
        return value, gradient - prior_gradient, hessian, exact

    def _terms(
        self, targets: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
    ) -> ExpectationDerivatives:
        """The likelihood's terms of rows (:meth:`_row_terms`), in tiles compiled by XLA where
        :attr:`tiled`."""
        if self.tiled:
            return ExpectationDerivatives(
                *self._in_tiles(self._tile_terms, targets, mean, variance)
            )
        return self._row_terms(targets, mean, variance)

    def _row_terms(
        self, targets: tf.Tensor, mean: tf.Tensor, variance: tf.Tensor
    ) -> ExpectationDerivatives:
        """:func:`~gpflow_svi_gplvm.likelihoods.expectation_derivatives` of rows' ``targets``
        [A, D] (NaN where missing) at q(f) = N(``mean`` [A, D], ``variance`` [A, 1]), those of
        the variance summed over the outputs (one variance serves them all) [A], the others
        [A, D]."""
        wide = tf.broadcast_to(variance, tf.shape(mean))
        d = expectation_derivatives(self.likelihood, targets, mean, wide)
        sums = [tf.reduce_sum(t, axis=1) for t in (d.value, d.variance, d.variance_variance)]
        return ExpectationDerivatives(
            sums[0], d.mean, sums[1], d.mean_mean, d.mean_variance, sums[2]
        )

    def _in_tiles(self, function: GraphFunction, *parts: tf.Tensor) -> tuple[tf.Tensor, ...]:
        """``function`` of tiles of :data:`TILE_ROWS` rows of ``parts`` [A, ...] (the last tile
        padded with NaN: nothing observed), joined: its results [A, ...]."""
        count = tf.shape(parts[0])[0]
        tiles = (count + TILE_ROWS - 1) // TILE_ROWS  # may be 0: the shapes say so, not -1
        padding = tiles * TILE_ROWS - count
        tiled = []
        for part in parts:
            widths = [[0, padding]] + [[0, 0]] * (part.shape.rank - 1)
            padded = tf.pad(part, widths, constant_values=tf.constant(np.nan, part.dtype))
            shape = tf.concat([[tiles, TILE_ROWS], tf.shape(part)[1:]], axis=0)
            tiled.append(tf.reshape(padded, shape))
        outputs = function.get_concrete_function().structured_outputs
        signature = tf.nest.map_structure(lambda t: tf.TensorSpec(t.shape, t.dtype), outputs)
        found = tf.map_fn(lambda tile: function(*tile), tuple(tiled), fn_output_signature=signature)
        return tuple(
            tf.reshape(f, tf.concat([[tiles * TILE_ROWS], tf.shape(f)[2:]], axis=0))[:count]
            for f in tf.nest.flatten(found)
        )


class _RateSummary:
    r"""The candidates' decoded rates [C, D] as the starts are chosen by them: each row's
    squared distance to every candidate's rates, :math:`\lVert y / s - \mu_c \rVert^2` over
    its observed entries, taken in the span of the rates' :data:`START_COMPONENTS` leading
    principal directions V [D, k] (a product of k, not C, numbers a gene per row), plus each
    candidate's own remainder outside it; a missing entry counts as the candidates' mean."""

    def __init__(self, rates: np.ndarray, seed: int):
        self.typical = rates.mean(axis=0)  # [D]
        centred = rates - self.typical
        basis = _leading_directions(centred, START_COMPONENTS, seed)  # [D, k]
        features = centred @ basis  # [C, k]
        self.centre = tf.constant(self.typical, LOW)
        self.basis = tf.constant(basis, LOW)
        self.features = tf.constant(features, LOW)
        self.constant = tf.constant(np.sum(np.square(centred), axis=1), LOW)

    def distances(self, scaled: tf.Tensor, observed: tf.Tensor) -> tf.Tensor:
        """Each row's distance [B, C] to every candidate (up to a term of the row alone), from
        its values over its size factor ``scaled`` [B, D] and their mask ``observed``."""
        centred = tf.where(observed, scaled - self.centre, tf.zeros_like(scaled))
        features = tf.matmul(centred, self.basis)  # [B, k]
        return self.constant - 2.0 * tf.matmul(features, self.features, transpose_b=True)


def _leading_directions(centred: np.ndarray, count: int, seed: int) -> np.ndarray:
    """The ``count`` leading right singular vectors [D, k] of ``centred`` [C, D], by a randomised
    range finder with two power iterations (Halko, Martinsson & Tropp 2011, algorithm 4.4)."""
    C, D = centred.shape
    k = min(count, C, D)
    sketch = centred.T @ np.random.default_rng(seed).normal(size=(C, min(k + 10, C)))
    for _ in range(2):
        sketch = np.linalg.qr(sketch)[0]
        sketch = centred.T @ (centred @ sketch)
    basis = np.linalg.qr(sketch)[0]  # [D, k + p], orthonormal
    _, _, vt = np.linalg.svd(centred @ basis, full_matrices=False)
    return basis @ vt[:k].T


class _Rows:
    """A block of rows in :data:`LOW` precision: values [A, D] (0 where missing), observed
    [A, D], offsets [A, D]; and their observed inputs [A, R] in the model's."""

    def __init__(self, values, observed, inputs, offsets):
        self.values, self.observed, self.inputs, self.offsets = values, observed, inputs, offsets

    @classmethod
    def of(cls, Y: tf.Tensor, inputs: tf.Tensor, offsets: tf.Tensor) -> _Rows:
        """Rows Y [A, D] (NaN where missing) with their ``inputs`` and ``offsets``."""
        observed = tf.logical_not(tf.math.is_nan(Y))
        values = tf.cast(tf.where(observed, Y, tf.zeros_like(Y)), LOW)
        return cls(values, observed, inputs, tf.cast(offsets, LOW))

    def gathered(self, rows: tf.Tensor) -> _Rows:
        return _Rows(*(tf.gather(t, rows) for t in self.parts()))

    def targets(self) -> tf.Tensor:
        """The values with NaN where missing."""
        return _targets(self.values, self.observed)

    def parts(self) -> tuple[tf.Tensor, ...]:
        """Values, observed, inputs and offsets, in that order."""
        return self.values, self.observed, self.inputs, self.offsets


def _targets(values: tf.Tensor, observed: tf.Tensor) -> tf.Tensor:
    """Values [A, D] with NaN where not ``observed``."""
    missing = tf.fill(tf.shape(values), tf.constant(np.nan, values.dtype))
    return tf.where(observed, values, missing)


def _log_size(model: LaplaceModel, inputs: tf.Tensor) -> tf.Tensor:
    """Each row's log size factor [A, 1] (0 without size factors)."""
    if model.size_factor_reference is None:
        return tf.zeros_like(inputs[:, :1]) if inputs.shape[1] else tf.zeros([1, 1], inputs.dtype)
    return inputs[:, -1:]
