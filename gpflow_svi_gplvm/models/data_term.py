r"""The data term of the bound at uncertain GP inputs: an SVGP evaluated at draws of its inputs.

For a row n with draws :math:`x_n^{(s)}` of q(x_n), the data term is
:math:`\sum_{d \in O_n} E_{q(f_d(x_n))} \log p(y_{nd} \mid f_d)`, averaged over the draws or,
where it applies, taken in closed form over q(x_n)
(:mod:`gpflow_svi_gplvm.components.psi_statistics`).
"""

from __future__ import annotations

import tensorflow as tf
from check_shapes import check_shapes
from gpflow.likelihoods import Likelihood

from ..components.psi_statistics import closed_form_data_term
from ..components.shared_covariance import SharedCovarianceSVGP
from ..latents import LatentBatch

__all__ = ["DataTermSVGP"]


class DataTermSVGP(SharedCovarianceSVGP):
    """An SVGP whose inputs are uncertain: f's moments at draws of the inputs and the data term
    of rows at them (:class:`~gpflow_svi_gplvm.models.base.SVIGPLVM` builds on it).
    :attr:`closed_form` says whether the expectation over q(x) is taken in closed form."""

    closed_form: bool

    @check_shapes(
        "samples: [S, batch, Q]",
        "return[0]: [S, batch, D]",
        "return[1]: [S, batch, D]",
    )
    def predict_f_at_draws(self, samples: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        r"""Mean and marginal variance [S, B, D] of :math:`q(f(x_n^{(s)}))` at draws ``samples``
        [S, B, Q] of the GP inputs: one :meth:`predict_f` on the draws flattened draw-major."""
        f_mean, f_var = self.predict_f(tf.reshape(samples, [-1, tf.shape(samples)[-1]]))
        shape = tf.concat([tf.shape(samples)[:2], tf.shape(f_mean)[-1:]], axis=0)
        return tf.reshape(f_mean, shape), tf.reshape(f_var, shape)

    @check_shapes(
        "samples: [S, batch, Q]",
        "Y: [batch, D]",
        "return: [S, batch]",
    )
    def draw_data_terms(
        self, samples: tf.Tensor, Y: tf.Tensor, likelihood: Likelihood | None = None
    ) -> tf.Tensor:
        r"""The data term of each row at each draw ``samples`` [S, B, Q]: [S, B],
        :math:`\sum_{d \in O_n} E_{q(f_d(x_n^{(s)}))} \log p(y_{nd} \mid f_d)`; ``likelihood``
        replaces the model's (e.g. a masked view)."""
        likelihood = self.likelihood if likelihood is None else likelihood
        f_mean, f_var = self.predict_f_at_draws(samples)
        Y_draws = tf.broadcast_to(Y, tf.shape(f_mean))
        return likelihood.variational_expectations(samples, f_mean, f_var, Y_draws)

    @check_shapes(
        "samples: [S, batch, Q]",
        "Y: [batch, D]",
        "return: [batch]",
    )
    def data_term(
        self, samples: tf.Tensor, Y: tf.Tensor, likelihood: Likelihood | None = None
    ) -> tf.Tensor:
        r"""The data term per row [B], averaged over the draws ``samples`` [S, B, Q]:
        :math:`\frac1S \sum_s` of :meth:`draw_data_terms`."""
        return tf.reduce_mean(self.draw_data_terms(samples, Y, likelihood), axis=0)

    @check_shapes(
        "batch.samples: [S, batch, Q]",
        "batch.mean: [batch, Q]",
        "Y: [batch, D]",
        "return: [batch]",
    )
    def expected_data_term(
        self,
        batch: LatentBatch,
        Y: tf.Tensor,
        likelihood: Likelihood | None = None,
        closed_form: bool | None = None,
    ) -> tf.Tensor:
        """The data term per row [B] for a latent ``batch``: in closed form over q(x_n) when
        ``closed_form`` (default :attr:`closed_form`, see ``latent_expectation``), else from the
        batch's samples."""
        likelihood = self.likelihood if likelihood is None else likelihood
        if not (self.closed_form if closed_form is None else closed_form):
            return self.data_term(batch.samples, Y, likelihood)
        return closed_form_data_term(self, likelihood, batch.mean, batch.covariance, Y)
