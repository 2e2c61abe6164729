"""Initial values read the data in row blocks: checked against whole-array numpy references."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM
from gpflow_svi_gplvm.initialisation import column_moments, pca_latents
from gpflow_svi_gplvm.validation import ROWS_PER_BLOCK, check_observations


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
