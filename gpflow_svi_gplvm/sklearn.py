"""A scikit-learn transformer around the SVI GPLVMs: fit, transform, inverse_transform, score.

:class:`GPLVMEmbedding` embeds rows of Y [N, D] (NaN = missing) in Q latent dimensions, like
:class:`sklearn.decomposition.PCA` but non-linear and probabilistic, and plugs into pipelines,
``clone``, grid searches and ``set_output``::

    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from gpflow_svi_gplvm.sklearn import GPLVMEmbedding

    pipeline = make_pipeline(StandardScaler(), GPLVMEmbedding(n_components=2, iterations=2000))
    X = pipeline.fit_transform(Y)  # [N, 2]: the trained latent means of the training rows
    X_new = pipeline.transform(Y_new)  # [N*, 2]: q(x*) inferred for new rows
    Y_hat = pipeline.inverse_transform(X_new)  # [N*, D]: decoded means, on Y's scale

The fitted GPflow model is ``model_`` (for variances, ``reconstruct``, plotting, export).
"""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils import Tags
from sklearn.utils.validation import check_array, check_is_fitted, validate_data

from .defaults import BATCH_SIZE
from .metrics import nlpd
from .models import DEFAULT_NUM_INDUCING, MODELS, lookup_model
from .prediction.latent_inference import LatentInference
from .training.trainer import fit as fit_model

__all__ = ["GPLVMEmbedding", "MODELS"]

_DEFAULT_N_COMPONENTS = 2


class GPLVMEmbedding(ClassNamePrefixFeaturesOutMixin, TransformerMixin, BaseEstimator):
    """Non-linear, probabilistic dimensionality reduction with a GPLVM trained by SVI.

    Parameters
    ----------
    model : {"point", "map", "bsvi", "aeb", "flow"}, default="bsvi"
        The latent family (a name of :data:`gpflow_svi_gplvm.models.gplvms.MODELS`): point estimates
        (:class:`~gpflow_svi_gplvm.PointGPLVM`), MAP under N(0, I)
        (:class:`~gpflow_svi_gplvm.MAPGPLVM`), Gaussian q(x_n) per row
        (:class:`~gpflow_svi_gplvm.BayesianSVIGPLVM`), an amortised MLP encoder
        (:class:`~gpflow_svi_gplvm.AmortisedBayesianGPLVM`) or a per-row Gaussian pushed through
        a normalising flow (:class:`~gpflow_svi_gplvm.FlowBayesianGPLVM`, its defaults).
    n_components : int, default=2
        Q, the number of latent dimensions (the output width of ``transform``; the models'
        ``latent_dim``).
    num_inducing : int, default=25
        M inducing inputs; at most the number of training rows.
    iterations : int, default=1000
        Adam steps of :func:`gpflow_svi_gplvm.fit`.
    batch_size : int, default=100
        Rows per minibatch (clipped to the number of rows).
    learning_rate : float, default=0.01
        Adam's learning rate for training.
    inference_iterations : int, default=300
        The most optimisation steps on q(x*) of new rows in ``transform`` and ``score``, as in
        :class:`~gpflow_svi_gplvm.LatentInference` ("aeb" starts them from its encoder).
    seed : int, default=0
        Seeds the latent initialisation, the minibatch order, the training samples and the
        inference of new rows: equal seeds give equal results.
    progress : bool, default=False
        Show a progress bar while training.
    shared_covariance : bool or None, default=None
        One q(u) covariance for all D outputs (True), one per output (False), or shared when
        D >= 100 (None); see :class:`~gpflow_svi_gplvm.SVIGPLVM`.
    latent_dim : int or None, default=None
        Deprecated alias of ``n_components`` (``fit`` warns with a ``FutureWarning``); giving it
        together with a non-default ``n_components`` is a ``ValueError``.

    Attributes
    ----------
    model_ : SVIGPLVM
        The trained GPflow model.
    history_ : History
        The training run: ``history_.elbo`` [iterations], ``seconds``, ``tracing_count``.
    n_features_in_ : int
        D, the number of columns seen in ``fit``.
    feature_names_in_ : ndarray of str, shape (``n_features_in_``,)
        Column names, when ``fit`` was given a DataFrame with string column names.

    Notes
    -----
    Inputs are converted to float64 (GPflow's default float); NaN marks a missing entry
    everywhere Y is accepted (``fit``, ``transform``, ``score``), infinities are rejected.
    Missing entries in ``fit`` make the model wrap its likelihood in ``MaskedLikelihood``, which
    it announces with a ``UserWarning``.

    ``inference_iterations`` and ``seed`` are read by ``fit``, like every parameter: after
    ``set_params`` refit. ``fit`` prepares the inference of new rows once, so only the first
    call of ``transform`` and of ``score`` pays for compiling its graph. A fitted estimator
    pickles and deep-copies (the compiled graphs are rebuilt on loading).

    Unlike most scikit-learn transformers, ``fit_transform(Y)`` is not ``fit(Y).transform(Y)``
    for the non-amortised models: it returns the latents learnt in training, while ``transform``
    infers q(x*) afresh from the frozen model (close, not equal, after enough training; equal
    for "aeb"). scikit-learn's ``check_estimator`` flags this in ``check_transformer_general`` and
    ``check_transformer_data_not_an_array``, and passes every other check.
    """

    def __init__(
        self,
        model: str = "bsvi",
        n_components: int = _DEFAULT_N_COMPONENTS,
        num_inducing: int = DEFAULT_NUM_INDUCING,
        iterations: int = 1000,
        batch_size: int = BATCH_SIZE,
        learning_rate: float = 0.01,
        inference_iterations: int = 300,
        seed: int = 0,
        progress: bool = False,
        shared_covariance: bool | None = None,
        latent_dim: int | None = None,
    ) -> None:
        # Stored as given (scikit-learn's convention for get_params, set_params and clone):
        # every check waits for fit.
        self.model = model
        self.n_components = n_components
        self.num_inducing = num_inducing
        self.iterations = iterations
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.inference_iterations = inference_iterations
        self.seed = seed
        self.progress = progress
        self.shared_covariance = shared_covariance
        self.latent_dim = latent_dim

    def __sklearn_tags__(self) -> Tags:
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = True
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags

    def fit(self, Y: ArrayLike, y: None = None) -> GPLVMEmbedding:
        """Build the model named by ``model`` on Y and train it.

        Parameters
        ----------
        Y : array-like of shape (N, D)
            Training rows; NaN = missing.
        y : None
            Ignored (present for the scikit-learn API).

        Returns
        -------
        self : GPLVMEmbedding
            The fitted estimator (``model_``, ``history_``, ``n_features_in_`` set).
        """
        model_class = lookup_model(self.model)
        num_components = self._num_components()
        Y = self._validate(Y, reset=True)
        model = model_class(
            Y,
            num_components,
            self.num_inducing,
            seed=self.seed,
            shared_covariance=self.shared_covariance,
        )
        self.history_ = fit_model(
            model,
            Y,
            iterations=self.iterations,
            batch_size=self.batch_size,
            learning_rate=self.learning_rate,
            seed=self.seed,
            progress=self.progress,
        )
        self.model_ = model
        self._n_features_out = int(num_components)
        self._inference = self._new_inference()
        return self

    def fit_transform(self, Y: ArrayLike, y: None = None) -> np.ndarray:
        """Fit on Y and return the trained latent means of its rows (not re-inferred).

        Parameters
        ----------
        Y, y
            As in :meth:`fit`.

        Returns
        -------
        X : ndarray of shape (N, n_components)
            Means of the trained q(x_n): ``model_.latent_mean()``, or ``model_.latent_mean(Y)``
            (one encoder pass) for the amortised model. ``transform(Y)`` would instead infer
            q(x*) afresh with the trained globals frozen, which gives close but not equal means.
        """
        self.fit(Y)
        if self.model_.latent.amortised:
            Y = self._validate(Y, reset=False)
            return self.model_.latent_mean(Y).numpy()
        return self.model_.latent_mean().numpy()

    def transform(self, Y: ArrayLike) -> np.ndarray:
        """Latent means of q(x*) for rows Y (NaN allowed), with the trained model frozen.

        Parameters
        ----------
        Y : array-like of shape (N*, D)
            Rows to embed; NaN = missing. A row with nothing observed maps to the prior mean 0
            (to the encoder's output for an empty row, for "aeb").

        Returns
        -------
        X : ndarray of shape (N*, n_components)
            Means of q(x*), fitted from the best-fitting candidate latent in at most
            ``inference_iterations`` steps (from the encoder's q(x*) for "aeb"), as
            ``model_.infer_latents``.
        """
        check_is_fitted(self)
        Y = self._validate(Y, reset=False)
        return self._inference.infer(Y)[0].numpy()

    def inverse_transform(self, X: ArrayLike) -> np.ndarray:
        """Decode latents X into the predictive means of Y (``model_.predict_y(X)[0]``).

        Parameters
        ----------
        X : array-like of shape (N*, n_components)
            Latent points, e.g. the output of ``transform``.

        Returns
        -------
        Y : ndarray of shape (N*, ``n_features_in_``)
            The likelihood's predictive mean of every column at X.
        """
        check_is_fitted(self)
        latents = check_array(X, dtype=np.float64)
        width = self.model_.latent_dim
        if latents.shape[1] != width:
            raise ValueError(
                f"X has {latents.shape[1]} columns but the model has latent_dim={width}: pass "
                f"latents with n_components={width} columns, e.g. the output of transform."
            )
        return self.model_.predict_y(tf.convert_to_tensor(latents))[0].numpy()

    def score(self, Y: ArrayLike, y: None = None) -> float:
        r"""Mean log predictive density of the observed entries of Y (higher is better).

        Each row's q(x*) is inferred from its observed entries (as in ``transform``), and every
        observed entry :math:`y_{nd}` is scored under the Gaussian whose mean :math:`m_{nd}` and
        variance :math:`v_{nd}` are those of ``model_.reconstruct``: the predictive integrated
        over q(x*), with latent, GP and noise uncertainty. Over the set O of observed entries,

        .. math::

            \mathrm{score}(Y) = \frac{1}{|O|} \sum_{(n, d) \in O}
                \log \mathcal{N}(y_{nd} \mid m_{nd}, v_{nd}),

        i.e. ``-gpflow_svi_gplvm.metrics.nlpd(Y, m, v)`` (pointwise). It rewards accurate *and*
        calibrated reconstructions, in nats per entry, so it depends on Y's scale: compare
        scores only on the same data (e.g. across a grid search's folds).

        Parameters
        ----------
        Y : array-like of shape (N*, D)
            Rows to score; NaN = missing (not scored). At least one entry must be observed.
        y : None
            Ignored.

        Returns
        -------
        score : float
            The average log predictive density per observed entry.
        """
        check_is_fitted(self)
        Y = self._validate(Y, reset=False)
        mean, variance = self._inference.reconstruct(Y)
        return -nlpd(Y, mean.numpy(), variance.numpy())

    def __getstate__(self) -> dict:
        # The inference object holds compiled graphs, which neither pickle nor deep-copy; the
        # model does both, and __setstate__ rebuilds the inference around it. A copy of the
        # state: object.__getstate__ returns the live __dict__, which must keep its inference.
        state = dict(super().__getstate__())
        state.pop("_inference", None)
        return state

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        if "model_" in state:
            self._inference = self._new_inference()

    def _validate(self, Y: ArrayLike, reset: bool) -> np.ndarray:
        """Y as float64 [N, D] with NaN allowed; ``reset`` records D (and needs two rows to
        learn from: one sample has no spread to embed), else checks it."""
        return validate_data(
            self,
            Y,
            reset=reset,
            dtype=np.float64,
            ensure_all_finite="allow-nan",
            ensure_min_samples=2 if reset else 1,
        )

    def _num_components(self) -> int:
        """Q: ``n_components``, or the deprecated alias ``latent_dim`` when that is given."""
        if self.latent_dim is None:
            return self.n_components
        if self.n_components != _DEFAULT_N_COMPONENTS:
            raise ValueError(
                f"Both n_components={self.n_components!r} and latent_dim={self.latent_dim!r} "
                "were given: latent_dim is a deprecated alias of n_components, pass only "
                "n_components."
            )
        warnings.warn(
            "GPLVMEmbedding(latent_dim=...) is deprecated: pass n_components=... instead "
            "(scikit-learn's name, as in PCA).",
            FutureWarning,
            stacklevel=3,
        )
        return self.latent_dim

    def _new_inference(self) -> LatentInference:
        """Inference of q(x*) for ``model_``; made in ``fit`` so that ``transform`` and
        ``score`` reuse its compiled graphs and leave the estimator's ``__dict__`` unchanged."""
        return LatentInference(self.model_, iterations=self.inference_iterations, seed=self.seed)
