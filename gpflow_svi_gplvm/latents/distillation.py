r"""Amortisation by distillation: an encoder trained to reproduce a fitted model's q(x_n), not
jointly with the GP on the ELBO.

A latent table (B-SVI) fitted to S rows gives the GP and each row's :math:`q(x_n) =
\mathcal{N}(m_n, \operatorname{diag} v_n)`. :func:`copy_global_parameters` hands the GP to an
amortised model of the same form, and :func:`distil_encoder` trains its encoder
:math:`q(x_n \mid y_n) = \mathcal{N}(G(y_n), L(y_n) L(y_n)^\top)` on those rows to minimise

.. math::

    \frac{1}{B} \sum_{n \in \text{batch}} \lVert G(y_n) - m_n \rVert^2
    + \mathrm{KL}\big(\mathcal{N}(m_n, \operatorname{diag} v_n) \,\Vert\,
    \mathcal{N}(\lfloor G(y_n) \rfloor, L(y_n) L(y_n)^\top)\big),

:math:`\lfloor\cdot\rfloor` holding the means fixed in the KL, so the factor network L learns
the covariance and the mean network G a regression on the means. On a hard simulated atlas,
ELBO training of the encoder lost the cell types however it started, while an encoder fitted to
B-SVI's means kept them for cells it never saw (benchmarks/results/single_cell.md).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from gpflow.base import Module
from gpflow.config import default_float
from gpflow.utilities import multiple_assign, parameter_dict
from tqdm.auto import trange

from ..rows.sparse import RowReader
from ..validation import check_integer
from .encoder import EncoderLatent

__all__ = [
    "copy_global_parameters",
    "distil_encoder",
    "gaussian_kl",
    "ROW_STATE",
    "DISTIL_LEARNING_RATE",
]

ROW_STATE = (".latent", ".row_inputs", ".size_factor_reference")
"""The parts of a model (as :func:`gpflow.utilities.parameter_dict` names them) that describe its
training rows, not the GP: its latents, the rows' observed inputs, and the library size that
new rows' size factors are taken against."""

DISTIL_LEARNING_RATE = 1e-3
"""Adam's step in :func:`distil_encoder`: at 1e-2 the first steps, whose loss is in the
thousands, saturated the mean network's tanh units and it returned one point for every row."""


def copy_global_parameters(source: Module, target: Module) -> list[str]:
    """Assign ``source``'s GP (kernel, inducing points, q(u), likelihood, mean function: every
    parameter and variable outside :data:`ROW_STATE`) to ``target`` (two models of this
    package, e.g. B-SVI's and the amortised one's); returns their names. A
    ``ValueError`` when the two differ in which such parameters they have or in a shape."""
    given, wanted = parameter_dict(source), parameter_dict(target)
    names = sorted(n for n in wanted if not n.startswith(ROW_STATE))
    missing = [n for n in names if n not in given or given[n].shape != wanted[n].shape]
    extra = [n for n in given if not n.startswith(ROW_STATE) and n not in wanted]
    if missing or extra:
        raise ValueError(
            f"The models' GPs differ: {missing + extra} (name or shape). Build both with the same "
            "latent_dim, num_inducing, kernel, likelihood, covariates and layout."
        )
    multiple_assign(target, {n: given[n].numpy() for n in names})
    return names


def distil_encoder(
    encoder: EncoderLatent,
    rows: RowReader,
    means: np.ndarray,
    variances: np.ndarray,
    iterations: int,
    batch_size: int = 256,
    learning_rate: float = DISTIL_LEARNING_RATE,
    seed: int = 0,
    progress: bool = False,
) -> np.ndarray:
    """Train ``encoder`` (in place) by Adam on minibatches of ``rows`` [S, D] so that its q(x_n |
    y_n) reproduces N(``means``, diag ``variances``) [S, Q] (the module's loss); returns the
    squared error of the means, a value a step [iterations]."""
    iterations = check_integer(iterations, "iterations", minimum=0, hint="e.g. 2000")
    batch_size = check_integer(batch_size, "batch_size", hint="e.g. 256")
    means, variances = np.asarray(means, np.float64), np.asarray(variances, np.float64)
    S, Q = rows.shape[0], encoder.latent_dim
    finite = np.all(np.isfinite(means)) and np.all(np.isfinite(variances))
    if means.shape != (S, Q) or variances.shape != (S, Q) or not (finite and np.all(variances > 0)):
        bad = "" if finite else " (some not finite)"
        raise ValueError(
            f"distil_encoder needs finite means and positive, finite variances [S, Q] = [{S}, "
            f"{Q}] (a row of each per row of data, Q the encoder's), got {means.shape} and "
            f"{variances.shape}{bad}."
        )
    optimizer = tf.optimizers.Adam(learning_rate)
    step = _distillation_step(encoder, optimizer, rows.shape[1])
    order = np.random.default_rng(seed)
    errors = np.empty(iterations)
    for i in trange(iterations, disable=not progress, desc="distil encoder"):
        batch = np.sort(order.choice(S, min(batch_size, S), replace=False))
        errors[i] = step(rows.take(batch), means[batch], variances[batch]).numpy()
    return errors


def _distillation_step(encoder: EncoderLatent, optimizer, num_columns: int):
    """One compiled Adam step on the module's loss for a minibatch (Y [B, D], m [B, Q], v [B, Q]);
    returns the mean squared error of the means."""
    float_type, Q = default_float(), encoder.latent_dim
    signature = [tf.TensorSpec([None, num_columns], float_type)]
    signature += [tf.TensorSpec([None, Q], float_type)] * 2

    @tf.function(input_signature=signature)
    def step(Y: tf.Tensor, m: tf.Tensor, v: tf.Tensor) -> tf.Tensor:
        with tf.GradientTape() as tape:
            inputs = encoder.encoder_input(Y, training=True)
            G, L = encoder.mean_network(inputs), encoder.scale_tril(inputs)
            error = tf.reduce_sum(tf.square(G - m), axis=-1)
            loss = tf.reduce_mean(error + gaussian_kl(m, v, tf.stop_gradient(G), L))
        variables = encoder.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return tf.reduce_mean(error)

    return step


def gaussian_kl(m: tf.Tensor, v: tf.Tensor, G: tf.Tensor, L: tf.Tensor) -> tf.Tensor:
    r""":math:`\mathrm{KL}(\mathcal{N}(m, \operatorname{diag} v) \Vert \mathcal{N}(G, L L^\top))`
    [B] for means m, G [B, Q], variances v [B, Q] and lower-triangular factors L [B, Q, Q]:
    :math:`\frac{1}{2}(\lVert L^{-1} \operatorname{diag} \sqrt{v} \rVert_F^2 + \lVert L^{-1}(G -
    m) \rVert^2 - Q + 2 \sum_q \log L_{qq} - \sum_q \log v_q)`."""
    root = tf.linalg.triangular_solve(L, tf.linalg.diag(tf.sqrt(v)))
    gap = tf.linalg.triangular_solve(L, (G - m)[..., None])[..., 0]
    log_det = 2.0 * tf.reduce_sum(tf.math.log(tf.linalg.diag_part(L)), axis=-1)
    Q = tf.cast(tf.shape(m)[-1], m.dtype)
    return 0.5 * (
        tf.reduce_sum(tf.square(root), axis=[-2, -1])
        + tf.reduce_sum(tf.square(gap), axis=-1)
        - Q
        + log_det
        - tf.reduce_sum(tf.math.log(v), axis=-1)
    )
