"""Initial values read the data in row blocks: checked against whole-array numpy references."""

from __future__ import annotations

import warnings

import gpflow
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM
from gpflow_svi_gplvm.components.initialisation import (
    SHARED_COVARIANCE_MIN_OUTPUTS,
    check_sizes,
    column_moments,
    column_summary,
    default_components,
    default_shared_covariance,
    initial_latents,
    pca_latents,
    random_latents,
)
from gpflow_svi_gplvm.components.pca import PCA_SAMPLE_ROWS, PCA_SAMPLE_RUN, pca_sample
from gpflow_svi_gplvm.likelihoods import MaskedLikelihood, NegativeBinomial
from gpflow_svi_gplvm.rows.sparse import ROWS_PER_BLOCK
from gpflow_svi_gplvm.validation import check_observations


def exact_pca_scores(Y: np.ndarray, latent_dim: int) -> np.ndarray:
    """Reference: full SVD of the mean-imputed, centred data, scaled by the first score's sd."""
    means = np.nanmean(Y, axis=0)
    centred = np.where(np.isnan(Y), means, Y) - means
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    scores = centred @ vt[:latent_dim].T
    return scores / scores[:, 0].std()


def assert_equal_up_to_column_signs(actual, expected, atol: float = 1e-9) -> None:
    signs = np.sign(np.sum(actual * expected, axis=0))
    np.testing.assert_allclose(actual, expected * signs, rtol=1e-7, atol=atol)


def low_rank_data(num_data: int, data_dim: int, rank: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    spectrum = 2.0 ** -np.arange(rank)  # well separated directions
    return (rng.standard_normal((num_data, rank)) * spectrum) @ rng.standard_normal(
        (rank, data_dim)
    ) + 1e-3 * rng.standard_normal((num_data, data_dim))


def test_pca_over_row_blocks_equals_the_full_svd():
    Y = low_rank_data(ROWS_PER_BLOCK + 904, 30, rank=4)  # two blocks
    Y[np.random.default_rng(1).random(Y.shape) < 0.2] = np.nan
    # Subspace iteration approximates the leading directions: scores agree to 1e-5 of sd 1.
    assert_equal_up_to_column_signs(pca_latents(Y, 3), exact_pca_scores(Y, 3), atol=1e-5)


def test_pca_with_fewer_rows_than_columns_equals_the_full_svd():
    Y = low_rank_data(12, 50, rank=6)
    assert_equal_up_to_column_signs(pca_latents(Y, 4), exact_pca_scores(Y, 4))


def test_pca_of_many_rows_takes_its_directions_from_a_sample_and_scores_every_row():
    Y = low_rank_data(PCA_SAMPLE_ROWS + 7000, 12, rank=3, seed=2)
    Y[np.random.default_rng(3).random(Y.shape) < 0.1] = np.nan
    reads = []

    class Rows:  # counts the rows each slice reads
        shape = Y.shape

        def __getitem__(self, rows):
            reads.append(len(Y[rows]))
            return Y[rows]

        def take(self, rows):
            reads.append(len(rows))
            return Y[rows]

    scores = pca_latents(Rows(), 3)
    # The sample's directions are all rows' up to sampling error: scores within 0.05 of sd 1.
    assert_equal_up_to_column_signs(scores, exact_pca_scores(Y, 3), atol=0.05)
    np.testing.assert_array_equal(scores, pca_latents(Y, 3))  # an array reads as the reader
    # One pass over every row; the sample's 7 (moments, 5 products, projection) read it alone.
    sample = pca_sample(Y, len(Y), None, seed=0).index
    assert PCA_SAMPLE_ROWS - PCA_SAMPLE_RUN < len(sample) <= PCA_SAMPLE_ROWS  # a run cut at N
    assert sum(reads) == len(Y) + 7 * len(sample)


def test_pca_sample_is_the_same_rows_split_over_workers():
    num_data = 5 * PCA_SAMPLE_ROWS + 123
    everything = pca_sample(np.zeros((num_data, 1)), num_data, None, seed=4).index
    assert len(np.unique(everything)) == len(everything) > PCA_SAMPLE_ROWS - PCA_SAMPLE_RUN
    assert np.sum(np.diff(everything) != 1) < PCA_SAMPLE_ROWS // PCA_SAMPLE_RUN  # in runs
    bounds = [0, 40_000, 100_001, num_data]  # three workers' blocks of rows
    parts = []
    for first, last in zip(bounds, bounds[1:]):
        rows = np.arange(first, last)
        local = pca_sample(np.zeros((len(rows), 1)), num_data, rows, seed=4).index
        parts.append(rows[local])
    np.testing.assert_array_equal(np.concatenate(parts), everything)
    small = np.zeros((PCA_SAMPLE_ROWS, 2))
    assert pca_sample(small, PCA_SAMPLE_ROWS, None, seed=0) is small  # no sample needed


def test_column_summary_merges_row_blocks_and_checks_what_values_are():
    rng = np.random.default_rng(5)
    Y = rng.poisson(3.0, (2 * ROWS_PER_BLOCK + 17, 4)).astype(float) + 1e6  # far from 0
    Y[rng.random(Y.shape) < 0.3] = np.nan
    Y[7] = np.nan
    summary = column_summary(Y)
    empty_rows = int(np.isnan(Y).all(axis=1).sum())
    np.testing.assert_array_equal(summary.observed, (~np.isnan(Y)).sum(axis=0))
    np.testing.assert_allclose(summary.mean, np.nanmean(Y, axis=0), rtol=1e-14)
    np.testing.assert_allclose(summary.variance, np.nanvar(Y, axis=0), rtol=1e-9)
    assert (summary.counts, summary.binary, summary.empty_rows) == (True, False, empty_rows)
    Y[100, 2] = 0.5
    assert not column_summary(Y).counts
    assert column_summary(np.array([[0.0, 1.0], [np.nan, 1.0]])).binary


def test_pca_signs_are_fixed_and_dims_beyond_the_rank_are_small_noise():
    Y = low_rank_data(200, 8, rank=2) * 1e3  # rank 2 up to the 1e-3 noise, which is kept
    Y = np.round(Y)  # integers: exact rank questions aside, the two directions dominate
    scores = pca_latents(Y, 2)
    np.testing.assert_array_equal(scores, pca_latents(Y.copy(), 2))
    flat = np.tile(np.arange(10.0), (30, 1)).T  # rank 1 after centring
    scores = pca_latents(flat, 3)
    assert abs(scores[:, 0].std() - 1.0) < 1e-12
    assert np.all(np.abs(scores[:, 1:]).std(axis=0) < 0.05)


@settings(max_examples=25, deadline=None)
@given(
    arrays(
        np.float64,
        st.tuples(st.integers(1, 12), st.integers(1, 5)),
        elements=st.one_of(st.just(np.nan), st.floats(-1e3, 1e3)),
    )
)
def test_column_moments_equal_numpys_nan_aware_moments(Y):
    count, mean, variance = column_moments(Y)
    observed = ~np.isnan(Y)
    np.testing.assert_array_equal(count, observed.sum(axis=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # columns with nothing observed
        expected_mean = np.nan_to_num(np.nanmean(Y, axis=0))
        expected_variance = np.nan_to_num(np.nanvar(Y, axis=0))
    np.testing.assert_allclose(mean, expected_mean, rtol=1e-10, atol=1e-9)
    np.testing.assert_allclose(variance, expected_variance, rtol=1e-8, atol=1e-6)


@pytest.mark.parametrize("model_class", [BayesianSVIGPLVM, AmortisedBayesianGPLVM])
def test_data_whose_variance_overflows_is_a_value_error_with_a_hint(model_class):
    Y = np.random.default_rng(0).standard_normal((20, 3))
    Y[4, 1] = 1e200  # its square overflows float64
    with pytest.raises(ValueError, match="overflow float64 .* Rescale Y before training"):
        model_class(Y, 2, 5)
    Y[4, 1] = 1e150  # large but representable: the moments are exact
    _, mean, variance = column_moments(Y)
    np.testing.assert_allclose(mean[1], 1e150 / 20)
    np.testing.assert_allclose(variance[1], 1e300 / 20 * (1 - 1 / 20))


def test_observations_are_not_copied_unless_a_mask_rewrites_them():
    Y = np.arange(6.0).reshape(3, 2)
    assert check_observations(Y) is Y
    hidden = check_observations(Y, mask=np.array([[True, False]] * 3))
    assert np.isnan(hidden[:, 1]).all() and not np.isnan(Y).any()


def test_default_components_are_set_on_the_datas_scale():
    Y = np.random.default_rng(0).normal(3.0, 2.0, (40, 3))
    data_variance = np.var(Y, axis=0).mean()
    kernel, likelihood, mean_function = default_components(Y, 2)
    np.testing.assert_allclose(likelihood.variance.numpy(), 0.1 * data_variance)
    np.testing.assert_allclose(kernel.variance.numpy(), data_variance)
    np.testing.assert_array_equal(kernel.lengthscales.numpy(), np.ones(2))
    np.testing.assert_allclose(mean_function.c.numpy(), Y.mean(axis=0))


def test_default_components_keep_what_is_given_and_put_f_on_the_links_scale():
    Y = np.random.default_rng(0).poisson(4.0, (30, 3)).astype(float)
    poisson = gpflow.likelihoods.Poisson()
    kernel, likelihood, _ = default_components(Y, 2, likelihood=poisson)
    assert likelihood is poisson
    assert kernel.variance.numpy() == 1.0
    given_kernel, zero = gpflow.kernels.Matern52(), gpflow.mean_functions.Zero()
    components = default_components(Y, 2, given_kernel, poisson, zero)
    assert components.kernel is given_kernel and components.mean_function is zero


def test_default_components_mask_a_likelihood_for_data_with_gaps():
    Y = np.random.default_rng(0).standard_normal((20, 3))
    Y[0, 1] = np.nan
    with pytest.warns(UserWarning, match=r"1\.7% of the entries of data are missing"):
        _, likelihood, _ = default_components(Y, 2)
    assert isinstance(likelihood, MaskedLikelihood)
    assert isinstance(likelihood.base, gpflow.likelihoods.Gaussian)
    masked = MaskedLikelihood(gpflow.likelihoods.Gaussian())
    assert default_components(Y, 2, likelihood=masked).likelihood is masked
    Y_counts = np.where(np.isnan(Y), np.nan, -1.0)
    with pytest.raises(ValueError, match="non-negative integer counts"):
        default_components(Y_counts, 2, likelihood=MaskedLikelihood(gpflow.likelihoods.Poisson()))


def test_check_sizes_returns_ints_and_refuses_more_inducing_inputs_than_rows():
    assert check_sizes(10, np.int64(2), 5, 1) == (2, 5, 1)
    assert all(type(size) is int for size in check_sizes(10, np.int64(2), np.int32(5), 1))
    with pytest.raises(ValueError, match=r"num_inducing \(11\) exceeds the number of rows N"):
        check_sizes(10, 2, 11, 1)
    with pytest.raises(ValueError, match="num_samples must be a positive integer"):
        check_sizes(10, 2, 5, 0)


def test_default_shared_covariance_shares_from_the_threshold_on():
    assert not default_shared_covariance(None, SHARED_COVARIANCE_MIN_OUTPUTS - 1)
    assert default_shared_covariance(None, SHARED_COVARIANCE_MIN_OUTPUTS)
    assert default_shared_covariance(np.bool_(True), 1) is True
    with pytest.raises(ValueError, match="shared_covariance must be True"):
        default_shared_covariance("yes", 3)


def test_initial_latents_are_pca_or_prior_draws():
    Y = np.random.default_rng(0).standard_normal((20, 4))
    np.testing.assert_array_equal(initial_latents(Y, 2, "pca", seed=3), pca_latents(Y, 2, seed=3))
    np.testing.assert_array_equal(initial_latents(Y, 2, "random", seed=3), random_latents(20, 2, 3))
    with pytest.raises(ValueError, match="latent_init must be 'pca', 'random' or an array"):
        initial_latents(Y, 2, "zeros")


def test_components_that_are_not_gpflow_ones_are_refused_at_the_constructor():
    Y = low_rank_data(20, 4, rank=2)
    for option, value in (("kernel", "rbf"), ("likelihood", "poisson"), ("mean_function", 0.0)):
        with pytest.raises(ValueError, match=f"{option} must be a GPflow .* got"):
            BayesianSVIGPLVM(Y, 2, num_inducing=5, **{option: value})
    counts = np.random.default_rng(0).poisson(3.0, (20, 4)).astype(float)
    with pytest.raises(ValueError, match="parameters for 7 outputs but the data has D=4"):
        BayesianSVIGPLVM(counts, 2, num_inducing=5, likelihood=NegativeBinomial(num_outputs=7))
