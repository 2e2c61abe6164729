"""base_likelihood: one way to reach the likelihood of one entry, masked or not."""

from __future__ import annotations

import gpflow
import pytest

from gpflow_svi_gplvm.likelihoods import MaskedLikelihood, base_likelihood


def test_base_likelihood_unwraps_a_masked_likelihood_and_returns_others_as_they_are():
    gaussian = gpflow.likelihoods.Gaussian()
    assert base_likelihood(gaussian) is gaussian
    assert base_likelihood(MaskedLikelihood(gaussian)) is gaussian
    # Wrapping twice keeps one layer, so one unwrapping always reaches the entry's likelihood.
    assert base_likelihood(MaskedLikelihood(MaskedLikelihood(gaussian))) is gaussian


def test_masked_likelihood_refuses_a_likelihood_of_several_outputs():
    softmax = gpflow.likelihoods.Softmax(3)
    with pytest.raises(ValueError, match="wraps a gpflow ScalarLikelihood .* got Softmax"):
        MaskedLikelihood(softmax)
