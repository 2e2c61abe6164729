"""The simulated atlas: its defaults, type shares, batch composition and programmes inside
types, checked by statistics of large draws."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.stats import chi2_contingency

from gpflow_svi_gplvm.datasets import atlas_blocks, simulate_atlas

DATA = Path(__file__).parent / "data"


def _table(atlas) -> np.ndarray:
    """[batches, types] cell counts."""
    return np.array(
        [np.bincount(atlas.cell_type[atlas.batch == b]) for b in np.unique(atlas.batch)]
    )


def test_the_defaults_draw_the_atlas_they_drew_before_the_options_for_harder_atlases():
    # The atlas these defaults drew before type shares, composition and programmes existed, so
    # seeds keep giving the atlases results were reported on. Compared by value, not by a digest
    # of the bytes: NumPy's exp and log differ in the last bit between CPUs (AVX-512 or not),
    # and a library size one ulp off is the same atlas.
    atlas = simulate_atlas(300, 50, seed=3, de_scale=0.7, block=128)
    drawn = np.load(DATA / "atlas_300x50_seed3.npz")
    np.testing.assert_array_equal(atlas.cell_type, drawn["cell_type"])
    np.testing.assert_array_equal(atlas.batch, drawn["batch"])
    np.testing.assert_allclose(atlas.library_size, drawn["library_size"], rtol=1e-9)
    differ = atlas.counts.toarray() != drawn["counts"]
    assert differ.mean() < 1e-3  # a Poisson draw at a rate one ulp off may rarely flip
    assert not atlas.programme.any()


def test_types_take_their_shares_in_every_batch_alike():
    shares = np.array([0.7, 0.2, 0.05, 0.05])
    atlas = simulate_atlas(20_000, 20, num_types=4, num_batches=3, type_proportions=shares * 7)
    counts = np.bincount(atlas.cell_type, minlength=4)
    sd = np.sqrt(20_000 * shares * (1 - shares))
    assert np.all(np.abs(counts - 20_000 * shares) < 4 * sd)
    assert chi2_contingency(_table(atlas)).pvalue > 1e-3  # the batches' shares are one


def test_a_composition_gives_each_batch_type_shares_of_its_own():
    atlas = simulate_atlas(20_000, 20, num_types=4, num_batches=3, composition=2.0)
    assert chi2_contingency(_table(atlas) + 1).pvalue < 1e-12


def test_cells_of_one_type_and_batch_vary_along_their_programme():
    atlas = simulate_atlas(
        6000, 400, num_types=2, num_batches=1, programme_scale=2.0, de_fraction=0.2, seed=1
    )
    cells = atlas.cell_type == 0
    assert atlas.programme.min() >= -1 and atlas.programme.max() <= 1
    counts = atlas.counts[cells].toarray()
    normalised = np.log1p(1e3 * counts / counts.sum(axis=1, keepdims=True))
    centred = normalised - normalised.mean(axis=0)
    first = np.linalg.svd(centred, full_matrices=False)[0][:, 0]
    assert abs(np.corrcoef(first, atlas.programme[cells])[0, 1]) > 0.8


def test_blocks_are_drawn_as_consumed_and_stack_to_the_atlas():
    cell_type, batch, library, position, blocks = atlas_blocks(
        250, 30, block=100, type_proportions=[3, 1], num_types=2, programme_scale=0.5
    )
    shapes = [b.shape for b in blocks]
    assert shapes == [(100, 30), (100, 30), (50, 30)]
    atlas = simulate_atlas(250, 30, block=100, type_proportions=[3, 1], num_types=2)
    assert len(cell_type) == len(batch) == len(library) == len(position) == 250
    assert np.array_equal(atlas.cell_type, cell_type)  # the programme is drawn after the cells


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(type_proportions=[1.0, 2.0]), "num_types = 3 positive"),
        (dict(type_proportions=[1.0, 0.0, 2.0]), "positive numbers"),
        (dict(composition=0.0), "composition must be a positive"),
        (dict(programme_scale=-1.0), "programme_scale must be"),
    ],
)
def test_bad_options_are_refused_by_name(options, message):
    with pytest.raises(ValueError, match=message):
        simulate_atlas(50, 10, num_types=3, **options)


def test_the_effects_give_each_batchs_expected_shares_and_the_batch_free_ones():
    atlas = simulate_atlas(20_000, 40, num_types=2, num_batches=2, seed=1, programme_scale=0.5)
    cells = (atlas.cell_type == 0) & (atlas.batch == 1)
    expected = atlas.effects.proportions(
        atlas.cell_type[cells], atlas.programme[cells], atlas.batch[cells]
    )
    observed = np.asarray(atlas.counts[cells].sum(axis=0)).ravel() / atlas.library_size[cells].sum()
    means = (atlas.library_size[cells, None] * expected).sum(axis=0) / atlas.library_size[
        cells
    ].sum()
    assert np.allclose(observed, means, rtol=0.1, atol=2e-4)
    free = atlas.batch_free_proportions(cells)
    assert np.allclose(free.sum(axis=1), 1.0)
    shift = atlas.effects.batch_shifts[1]  # the batch multiplies each gene's share, renormalised
    ratio = expected * np.exp(-shift) / free
    assert np.allclose(ratio, ratio[:, :1])
