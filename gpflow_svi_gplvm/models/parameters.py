"""The parameters every model shares, written once and appended to each model's docstring."""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["with_model_parameters"]

_PARAMETERS = """
    :param data: Y [N, D], NaN where an entry is missing; or a
        :class:`~gpflow_svi_gplvm.rows.shard.RowShard`, this worker's rows under a
        ``MultiWorkerMirroredStrategy`` (build the model inside ``strategy.scope()``); or
        rows read a block at a time (a :class:`~gpflow_svi_gplvm.rows.sparse.RowReader`: a
        sparse matrix in memory, or :class:`~gpflow_svi_gplvm.rows.h5ad.DiskRows` on disk;
        train on it with a dataset of its rows, as :mod:`gpflow_svi_gplvm.singlecell` does).
    :param latent_dim: Q, the latent dimensions.
    :param num_inducing: M, the inducing inputs Z [M, Q], chosen among the initial latents.
    :param kernel: a GPflow kernel on the latents; default a squared exponential with one
        lengthscale per latent dimension (ARD) and, under a Gaussian likelihood, the variance of
        the data (:func:`~gpflow_svi_gplvm.components.initialisation.default_components`).
    :param likelihood: any GPflow scalar likelihood; default Gaussian with a noise variance of 10%
        of the data's. Wrapped in :class:`~gpflow_svi_gplvm.likelihoods.masked.MaskedLikelihood`
        when the data have gaps; data outside its support (negative counts, say) is a
        ``ValueError``.
    :param num_samples: S, the draws of q(x_n) per row when the expectation over q(x) is taken by
        Monte Carlo (``latent_expectation``).
    :param latent_init: how the latents start: ``"pca"`` (a NaN-aware PCA), ``"random"``
        (draws from the prior N(0, I), as the paper does) or an array [N, Q] of starting values.
    :param mean_function: default a per-output constant starting at the data's level.
    :param whiten: whether q(u) is whitened (GPflow's ``whiten``).
    :param seed: seeds the random initial latents, the choice of Z and the encoder's weights.
    :param mask: [N, D] booleans, True where observed, instead of NaNs in ``data``.
    :param shared_covariance: one q(u) covariance for all outputs (True), one per output
        (False), or None: shared when D >= :data:`SHARED_COVARIANCE_MIN_OUTPUTS` (100).
    :param latent_expectation: ``"auto"``, ``"closed-form"`` or ``"monte-carlo"``: how the data
        term's expectation over q(x_n) is taken (see :class:`SVIGPLVM`).
    :param covariates: C [N, P], observed covariates of each row (one-hot batch, technical
        covariates) that join the latents in the GP input [x_n, c_n]; ``kernel`` is then a
        :class:`~gpflow_svi_gplvm.components.covariates.CovariateKernel`, or a kernel on the latents
        that is summed with a linear ARD kernel on C (see
        :mod:`gpflow_svi_gplvm.components.covariates`).
    :param size_factors: s [N], a positive size factor (library size) per row for a count
        likelihood with a log link: the rate of y_nd is s_n exp(f_d).
    :param num_importance: K, the draws of q(x_n) per row of the importance-weighted bound
        (:mod:`~gpflow_svi_gplvm.components.importance`), each S times (``num_samples``); 1
        (default) is the ELBO. K > 1 needs a q(x) with a density (B-SVI, AEB-SVI, a flow).
    :param doubly_reparameterised: with K > 1, whether q(x)'s parameters take the doubly
        reparameterised gradient (DReG, default) instead of the plain estimator's.
    :param workers: the :class:`~gpflow_svi_gplvm.distributed.workers.Workers` holding a
        :class:`~gpflow_svi_gplvm.rows.shard.RowShard`'s rows (default: those of the
        strategy in scope), for a caller that made them once already.
"""


def with_model_parameters(own: str = "") -> Callable[[type], type]:
    """Append the parameters every model shares, after a class's ``own``, to its docstring (and
    its ``__init__``'s, which ``help`` shows), in GPflow's ``:param name:`` style."""

    def decorate(cls: type) -> type:
        cls.__doc__ = f"{cls.__doc__}\n{_PARAMETERS}{own}"
        cls.__init__.__doc__ = f"Build the model.\n{_PARAMETERS}{own}"  # type: ignore[misc]
        return cls

    return decorate
