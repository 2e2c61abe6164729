"""Observed inputs beside the latents: the kernel on [x, c], the size-factor offset, the bound
against GPflow's SVGP on the same inputs, and new rows that bring their covariates."""

from __future__ import annotations

import gpflow
import numpy as np
import pytest
import tensorflow as tf

from gpflow_svi_gplvm import (
    MAPGPLVM,
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    LatentInference,
    NegativeBinomial,
    PointGPLVM,
    export_saved_model,
    fit,
)
from gpflow_svi_gplvm.components.covariates import (
    CovariateKernel,
    SizeFactorOffset,
    cell_cycle_kernel,
    latent_lengthscales,
    new_row_inputs,
    with_row_inputs,
)
from gpflow_svi_gplvm.latents import LatentBatch

RNG = np.random.default_rng(0)
N, D, Q = 24, 4, 2
BATCH = np.arange(N) % 2
COVARIATES = np.stack([np.eye(2)[BATCH][:, 1], RNG.normal(size=N)], axis=1)  # [N, P=2]
SIZE = RNG.uniform(0.5, 2.0, N)
Y = RNG.poisson(SIZE[:, None] * np.exp(1.0 + 0.7 * BATCH[:, None] + RNG.normal(size=(N, D))))
Y = Y.astype(float)


@pytest.fixture(scope="module")
def point_model() -> PointGPLVM:
    likelihood = NegativeBinomial(num_outputs=D)
    return PointGPLVM(
        Y, Q, 6, likelihood=likelihood, covariates=COVARIATES, size_factors=SIZE, seed=1
    )


def test_covariate_kernel_is_gpflows_sum_and_product_on_the_columns_it_reads():
    X = RNG.normal(size=(5, Q + 2 + 1))  # latents, covariates, and a column it must ignore
    X2 = RNG.normal(size=(3, Q + 2 + 1))
    latent = gpflow.kernels.SquaredExponential(lengthscales=[0.7, 1.3])
    linear = gpflow.kernels.Linear(variance=[0.5, 2.0])
    reference_latent = gpflow.kernels.SquaredExponential(
        lengthscales=[0.7, 1.3], active_dims=[0, 1]
    )
    reference_linear = gpflow.kernels.Linear(variance=[0.5, 2.0], active_dims=[2, 3])
    for combination, reference in [
        ("sum", reference_latent + reference_linear),
        ("product", reference_latent * reference_linear),
    ]:
        kernel = CovariateKernel(latent, Q, 2, linear, combination=combination)
        np.testing.assert_allclose(kernel(X, X2), reference(X, X2), rtol=1e-12)
        np.testing.assert_allclose(kernel(X, full_cov=False), reference(X, full_cov=False))
    np.testing.assert_allclose(kernel.lengthscales, [0.7, 1.3])
    with pytest.raises(ValueError, match="combination must be 'sum' or 'product'"):
        CovariateKernel(latent, Q, 2, combination="max")


def test_cell_cycle_kernel_is_periodic_on_one_dimension_and_ard_on_the_others():
    kernel = cell_cycle_kernel(3, periodic_dim=1)
    X = RNG.normal(size=(4, 3))
    shifted = X.copy()
    shifted[:, 1] += 2 * np.pi  # one period along the cell-cycle dimension
    np.testing.assert_allclose(kernel(X), kernel(shifted, X), rtol=1e-9)
    np.testing.assert_allclose(latent_lengthscales(kernel, 3), [1.0, 1.0, 1.0])


def test_size_factor_offset_adds_the_log_size_factor_column():
    base = gpflow.mean_functions.Constant(np.array([1.0, -2.0]))
    X = np.concatenate([RNG.normal(size=(3, 4)), np.log([[0.5], [1.0], [3.0]])], axis=1)
    np.testing.assert_allclose(SizeFactorOffset(base, 4)(X), base(X) + X[:, 4:], rtol=1e-12)


def test_with_row_inputs_appends_the_inputs_with_zero_variance():
    mean, inputs = RNG.normal(size=(3, Q)), RNG.normal(size=(3, 2))
    scale = np.tril(RNG.normal(size=(3, Q, Q)))
    batch = LatentBatch(RNG.normal(size=(5, 3, Q)), np.zeros(3), mean, np.ones((3, Q)), scale)
    joined = with_row_inputs(batch, tf.constant(inputs))
    np.testing.assert_allclose(joined.samples[:, :, Q:], np.broadcast_to(inputs, (5, 3, 2)))
    np.testing.assert_allclose(joined.mean, np.concatenate([mean, inputs], 1))
    np.testing.assert_allclose(joined.variance[:, Q:], 0.0)
    np.testing.assert_allclose(joined.scale[:, :Q, :Q], scale)
    np.testing.assert_allclose(joined.scale[:, Q:], 0.0)


def test_the_bound_with_covariates_is_svgps_on_the_joined_inputs(point_model):
    """Point latents: the model's ELBO on all rows is GPflow's SVGP ELBO at [x, c, log s]."""
    model = point_model
    X = np.concatenate([model.latent_mean().numpy(), COVARIATES, np.log(SIZE)[:, None]], 1)
    svgp = gpflow.models.SVGP(
        model.kernel,
        model.likelihood,
        model.inducing_variable,
        mean_function=model.mean_function,
        num_latent_gps=D,
        q_mu=model.q_mu.numpy(),
        q_sqrt=model.q_sqrt.numpy(),
        whiten=True,
        num_data=N,
    )
    elbo = model.elbo((tf.range(N, dtype=tf.int64), tf.constant(Y)))
    np.testing.assert_allclose(elbo, svgp.elbo((X, Y)), rtol=1e-10)
    assert model.input_dim == Q + 3 and model.inducing_variable.Z.shape == (6, Q + 3)
    assert not model.closed_form
    assert all(v is not model.row_inputs for v in model.trainable_variables)
    # The training rows' reconstruction predicts at their joined inputs.
    mean, _ = model.reconstruct(Y[:3], rows=np.arange(3), num_samples=2)
    np.testing.assert_allclose(mean, model.predict_y(X[:3])[0], rtol=1e-10)


def test_new_rows_bring_their_covariates_and_size_factors(point_model, tmp_path):
    model = point_model
    with pytest.raises(ValueError, match="fitted with covariates or size factors.*not supported"):
        export_saved_model(model, tmp_path / "export")
    with pytest.raises(ValueError, match="pass the new rows' covariates, covariates=\\[2, 2\\]"):
        model.infer_latents(Y[:2], iterations=2)
    with pytest.raises(ValueError, match="must have the 2 columns the model was fitted with"):
        model.infer_latents(Y[:2], covariates=COVARIATES[:2, :1], iterations=2)
    with pytest.raises(ValueError, match="size factor of row 1 is 0.0"):
        model.infer_latents(Y[:2], covariates=COVARIATES[:2], size_factors=[1.0, 0.0])
    zeros = np.zeros((1, D))  # no counts: no library size, so no default size factor
    with pytest.raises(ValueError, match="size factor of row 0 is 0.0"):
        model.infer_latents(zeros, covariates=COVARIATES[:1])
    mean, variance = model.infer_latents(Y[:3], covariates=COVARIATES[:3], iterations=5)
    assert mean.shape == variance.shape == (3, Q)


def test_every_latent_family_builds_and_bounds_with_covariates():
    for model_class in (MAPGPLVM, BayesianSVIGPLVM, AmortisedBayesianGPLVM):
        model = model_class(Y, Q, 5, likelihood=gpflow.likelihoods.Poisson(), covariates=COVARIATES)
        elbo = model.elbo((tf.range(6, dtype=tf.int64), tf.constant(Y[:6])))
        assert np.isfinite(elbo.numpy()) and model.input_dim == Q + 2


def test_bad_covariates_and_size_factors_are_named():
    with pytest.raises(ValueError, match="covariate column 1 is NaN or infinite in row 3"):
        bad = COVARIATES.copy()
        bad[3, 1] = np.nan
        PointGPLVM(Y, Q, 5, covariates=bad)
    with pytest.raises(ValueError, match="size factor of row 0 is -1.42"):
        PointGPLVM(Y, Q, 5, likelihood=gpflow.likelihoods.Poisson(), size_factors=-SIZE)
    with pytest.raises(ValueError, match="need a count likelihood with a log link"):
        PointGPLVM(Y, Q, 5, size_factors=SIZE)


def test_new_rows_with_covariates_stop_one_by_one_and_fit_as_they_would_alone():
    """A point x* has no sampling: each row stops when its bound does, and the rows still moving
    keep their own covariates (checked against each row fitted alone)."""
    Y_log = np.log1p(Y)
    model = PointGPLVM(Y_log, Q, 6, covariates=COVARIATES, seed=1)
    fit(model, Y_log, iterations=200, batch_size=20, progress=False)
    inference = LatentInference(model)
    assert inference.tolerance is not None
    inputs = tf.constant(new_row_inputs(model, Y_log[:4], COVARIATES[:4], None))
    together = inference.latents(tf.constant(Y_log[:4]), inputs)[0].numpy()
    assert len(np.unique(together.round(6), axis=0)) == 4
    for n in range(4):
        alone = inference.latents(tf.constant(Y_log[n : n + 1]), inputs[n : n + 1])[0].numpy()
        np.testing.assert_allclose(alone[0], together[n], rtol=1e-7, atol=1e-9)


def test_single_cell_latents_start_from_what_the_batch_does_not_explain():
    """A batch that shifts half the genes dominates the PCA of log counts; with the batch as a
    covariate the starting latents separate the cell types and not the batches."""
    import scipy.sparse

    from gpflow_svi_gplvm.rows.sparse import SparseRows
    from gpflow_svi_gplvm.singlecell.fitting.start import initial_latents

    rng = np.random.default_rng(0)
    cells, genes = 400, 30
    kind, batch = rng.integers(0, 2, cells), rng.integers(0, 2, cells)
    log_rate = 1.0 + 0.8 * kind[:, None] * (np.arange(genes) < 5)
    log_rate = log_rate + 2.0 * batch[:, None] * (np.arange(genes) >= 15)
    counts = scipy.sparse.csr_matrix(rng.poisson(np.exp(log_rate)).astype(float))
    sizes = np.ones(cells)

    def separation(latents: np.ndarray, labels: np.ndarray) -> float:
        """The gap between the groups' mean latents in units of the latents' spread."""
        x = latents[:, 0]
        return abs(x[labels == 1].mean() - x[labels == 0].mean()) / x.std()

    plain = initial_latents(SparseRows(counts), 1, sizes=sizes)
    assert separation(plain, batch) > 1.5 > separation(plain, kind)
    residual = initial_latents(SparseRows(counts), 1, sizes=sizes, covariates=batch[:, None] * 1.0)
    assert separation(residual, kind) > 1.5 and separation(residual, batch) < 0.1
