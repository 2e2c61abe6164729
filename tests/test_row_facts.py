"""The facts of rows from one pass (rows/facts.py) against brute-force numpy, and their use."""

from __future__ import annotations

import hashlib

import anndata
import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from gpflow_svi_gplvm.rows.facts import facts_of, read_facts, scan_rows
from gpflow_svi_gplvm.rows.h5ad import DiskRows
from gpflow_svi_gplvm.rows.sparse import ROWS_PER_BLOCK, SparseRows
from gpflow_svi_gplvm.singlecell.cells.reading import opened, scan_cells
from gpflow_svi_gplvm.training.checkpoints import TrainingData


def brute_force_hash(Y: np.ndarray) -> str:
    """The hash of values and gaps a checkpoint recorded before the facts held it."""
    digest = hashlib.blake2b(digest_size=16)
    for start in range(0, len(Y), ROWS_PER_BLOCK):
        block = Y[start : start + ROWS_PER_BLOCK]
        missing = np.isnan(block)
        digest.update(np.packbits(missing).tobytes())
        digest.update(np.where(missing, 0.0, block).tobytes())
    return digest.hexdigest()


def test_the_facts_of_one_pass_equal_numpys_separate_computations():
    rng = np.random.default_rng(0)
    Y = rng.poisson(2.0, (2 * ROWS_PER_BLOCK + 5, 5)).astype(float)
    Y[rng.random(Y.shape) < 0.2] = np.nan
    Y[3] = np.nan
    facts = read_facts(Y, digest=True)
    observed = ~np.isnan(Y)
    np.testing.assert_array_equal(facts.observed, observed.sum(axis=0))
    np.testing.assert_allclose(facts.mean, np.nanmean(Y, axis=0), rtol=1e-13)
    np.testing.assert_allclose(facts.variance, np.nanvar(Y, axis=0), rtol=1e-10)
    expected_totals = np.nansum(Y, axis=1) * 5 / np.maximum(observed.sum(axis=1), 1)
    np.testing.assert_allclose(facts.totals, expected_totals, rtol=1e-13)
    assert facts.empty_rows == int((~observed).all(axis=1).sum()) >= 1
    assert (facts.counts, facts.binary, facts.gaps) == (True, False, True)
    assert facts.digest == brute_force_hash(Y)
    complete = np.nan_to_num(Y)
    assert not read_facts(complete).gaps
    assert read_facts(np.array([[0.0, 1.0], [1.0, np.nan]])).binary
    assert not read_facts(complete - 0.5).counts


def test_a_checkpoints_record_from_the_facts_equals_the_one_read_from_the_rows():
    rng = np.random.default_rng(1)
    Y = rng.normal(size=(300, 4))
    Y[rng.random(Y.shape) < 0.1] = np.nan
    facts = read_facts(Y, digest=True)
    names = {"genes": ["a", "b", "c", "d"]}
    read = TrainingData.of(Y, 16, names=names).current
    assert TrainingData.of(Y, 16, names=names, facts=facts).current == read
    assert read["values and gaps"] == brute_force_hash(Y)
    rows = np.arange(300)[::-1].copy()  # rows hashed too: the facts' hash cannot serve
    assert TrainingData.of(Y, 16, rows, facts=facts).current == TrainingData.of(Y, 16, rows).current


@pytest.fixture(scope="module")
def cells_file(tmp_path_factory):
    rng = np.random.default_rng(3)
    counts = rng.poisson(1.5, (700, 9)).astype(np.float32)
    counts[:, 0] += 1  # every cell has counts
    obs = pd.DataFrame(index=[f"cell{i}" for i in range(700)])
    var = pd.DataFrame(index=[f"gene{j}" for j in range(9)])
    path = tmp_path_factory.mktemp("facts") / "cells.h5ad"
    anndata.AnnData(X=sp.csr_matrix(counts), obs=obs, var=var).write_h5ad(path)
    return path, counts.astype(np.float64)


def test_the_cells_scan_of_an_h5ad_learns_the_facts_of_the_chosen_genes(cells_file):
    path, counts = cells_file
    genes = ["gene7", "gene0", "gene3"]
    rows, scan = scan_cells(opened(path), None, genes, counts=True, digest=True)
    with rows:
        assert isinstance(rows, DiskRows)
        chosen = counts[:, [7, 0, 3]]
        facts = scan.across()
        np.testing.assert_allclose(facts.totals, chosen.sum(axis=1))
        np.testing.assert_allclose(facts.mean, chosen.mean(axis=0), rtol=1e-13)
        np.testing.assert_allclose(facts.variance, chosen.var(axis=0), rtol=1e-10)
        assert facts.digest == brute_force_hash(chosen)
        assert (facts.counts, facts.gaps, facts.empty_rows) == (True, False, 0)
    # A count that is not an integer is refused in the same pass, naming its cell.
    bad = counts.copy()
    bad[5, 3] = 0.5
    adata = anndata.AnnData(X=sp.csr_matrix(bad))
    with pytest.raises(ValueError, match="cell '5'"):
        scan_cells(adata, None, ["3"], counts=True)


def test_rows_that_keep_their_facts_are_not_read_again():
    rows = SparseRows.from_matrix(sp.csr_matrix(np.arange(12.0).reshape(4, 3)))
    rows.facts = read_facts(rows)
    taken = []
    original = rows.take

    def counted(index):
        taken.append(len(index))
        return original(index)

    rows.take = counted  # type: ignore[method-assign]
    assert facts_of(rows) is rows.facts and taken == []
    assert scan_rows(rows).totals.tolist() == [3.0, 12.0, 21.0, 30.0] and sum(taken) == 4
    assert facts_of(rows.view(lambda block, index: block + 1)).mean.tolist() == [5.5, 6.5, 7.5]
