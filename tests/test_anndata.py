"""The AnnData face: fit from a layer with batch covariates, obsm and uns written, sparse and
backed matrices read in row blocks, new cells embedded, bad input named (needs anndata)."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM, rows_dataset  # noqa: E402
from gpflow_svi_gplvm.sparse_rows import SparseRows  # noqa: E402

N, D, Q = 48, 10, 2


def _cells(seed: int = 0) -> anndata.AnnData:
    """Negative binomial counts of two cell types in two batches, with library sizes."""
    rng = np.random.default_rng(seed)
    kind, batch = rng.integers(0, 2, N), np.arange(N) % 2
    rate = rng.uniform(0.5, 2.0, N)[:, None] * np.exp(
        1.0 + 1.5 * kind[:, None] * (np.arange(D) < 4) + 0.8 * batch[:, None] * (np.arange(D) >= 6)
    )
    counts = rng.negative_binomial(5, 5 / (5 + rate)).astype(np.float32)
    counts[:, 0] += 1  # no cell without counts
    obs = pd.DataFrame(
        {"batch": pd.Categorical(np.array(["a", "b"])[batch]), "depth": rate[:, 0]},
        index=[f"cell{i}" for i in range(N)],
    )
    cells = anndata.AnnData(X=sp.csr_matrix(np.log1p(counts)), obs=obs)
    cells.var_names = [f"gene{j}" for j in range(D)]
    cells.layers["counts"] = sp.csr_matrix(counts)
    return cells


@pytest.fixture(scope="module")
def fitted():
    cells = _cells()
    model = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=1)
    return model.fit(cells, iterations=20, batch_size=16, progress=False), cells


def test_fit_writes_the_embedding_and_its_record(fitted):
    model, cells = fitted
    assert cells.obsm["X_gplvm"].shape == cells.obsm["X_gplvm_var"].shape == (N, Q)
    assert (cells.obsm["X_gplvm_var"] > 0).all()
    record = cells.uns["gplvm"]
    assert record["settings"]["likelihood"] == "negative_binomial"
    assert len(record["elbo"]) == 20 and np.isfinite(record["elbo"]).all()
    assert record["ard_lengthscales"].shape == (Q,)
    assert list(record["covariates"]) == ["batch=a", "batch=b"]
    assert record["covariate_variances"].shape == (2,)
    assert model.model.input_dim == Q + 2 + 1  # latents, one-hot batch, log size factor


def test_new_cells_are_embedded_by_gene_name(fitted):
    model, cells = fitted
    new = _cells(seed=5)[:6]
    shuffled = new[:, list(reversed(new.var_names))].copy()  # other gene order, same genes
    first = model.transform(new.copy(), iterations=5)
    np.testing.assert_allclose(model.transform(shuffled, iterations=5), first, rtol=1e-8)
    with pytest.raises(ValueError, match="lack 1 of the fitted genes .*gene3"):
        model.transform(new[:, [g for g in new.var_names if g != "gene3"]].copy())
    unseen = new.copy()
    unseen.obs["batch"] = pd.Categorical(["c"] * 6)
    with pytest.raises(ValueError, match="categories the model was not fitted with: \\['c'\\]"):
        model.transform(unseen)
    no_batch = new.copy()
    del no_batch.obs["batch"]
    with pytest.raises(ValueError, match="obs has no column 'batch'"):
        model.transform(no_batch)


def test_sparse_and_backed_matrices_are_read_in_row_blocks(tmp_path):
    cells = _cells()
    dense = cells.layers["counts"].toarray().astype(float)
    path = tmp_path / "cells.h5ad"
    anndata.AnnData(X=cells.layers["counts"], obs=cells.obs, var=cells.var).write_h5ad(path)
    backed = anndata.read_h5ad(path, backed="r")
    columns = np.array([3, 1, 7])
    rows = SparseRows.from_matrix(backed.X, columns, rows_per_block=7)
    backed.file.close()
    np.testing.assert_array_equal(rows[5:30], dense[5:30][:, columns])
    np.testing.assert_array_equal(rows.row_sums(), dense[:, columns].sum(1))
    idx, batch = next(iter(rows_dataset(rows, 8, seed=3)))
    np.testing.assert_array_equal(batch, dense[idx.numpy()][:, columns])


def test_layer_raw_reads_adata_raw_with_its_own_genes():
    """scanpy's habit: X filtered to fewer genes and normalised, the counts of all in .raw."""
    cells = _cells()
    counts = anndata.AnnData(X=cells.layers["counts"], obs=cells.obs, var=cells.var)
    filtered = cells[:, : D - 2].copy()
    filtered.raw = counts
    model = SingleCellGPLVM(Q, layer="raw", num_inducing=4, seed=1)
    model.fit(filtered, iterations=1, batch_size=16, progress=False)
    assert model.gene_names == list(counts.var_names)  # all D genes of .raw, not X's D - 2
    assert filtered.obsm["X_gplvm"].shape == (N, Q)


def test_bad_single_cell_input_is_named():
    cells = _cells()
    with pytest.raises(ValueError, match="holds [0-9.]+ for cell 'cell0', gene 'gene0'"):
        SingleCellGPLVM(Q).fit(cells, iterations=1)  # X holds log1p values, not counts
    with pytest.raises(ValueError, match="no adata.raw; its layers are \\['counts'\\]"):
        SingleCellGPLVM(Q, layer="raw").fit(cells, iterations=1)
    gap = cells.copy()
    gap.obs.loc["cell4", "depth"] = np.nan
    with pytest.raises(ValueError, match="'depth' is missing \\(NaN\\) for cell 'cell4'"):
        SingleCellGPLVM(Q, layer="counts", covariate_keys=["depth"]).fit(gap, iterations=1)
    empty = cells.copy()
    empty.layers["counts"][2] = 0
    with pytest.raises(ValueError, match="cell 'cell2' has no counts in the chosen genes"):
        SingleCellGPLVM(Q, layer="counts").fit(empty, iterations=1)
    with pytest.raises(ValueError, match="obs has no column 'donor'"):
        SingleCellGPLVM(Q, layer="counts", batch_key="donor").fit(cells, iterations=1)
