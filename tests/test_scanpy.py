"""The scanpy steps the single-cell docs show, on an embedding of 12,000 cells, as the
``singlecell`` extra installs them: neighbours (scanpy searches with pynndescent from 8,192
cells), UMAP and Leiden. A version of a dependency that breaks one of them fails here."""

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
sc = pytest.importorskip("scanpy")
pytest.importorskip("igraph")

CELLS, Q, TYPES = 12_000, 10, 6


@pytest.mark.slow
def test_neighbours_umap_and_leiden_run_on_an_embedding_of_12000_cells():
    from sklearn.metrics import adjusted_rand_score

    rng = np.random.default_rng(0)
    kind = rng.integers(0, TYPES, CELLS)
    centres = 6.0 * rng.standard_normal((TYPES, Q))
    adata = anndata.AnnData(obs={"cell_type": kind.astype(str)}, shape=(CELLS, 0))
    adata.obsm["X_gplvm"] = centres[kind] + rng.standard_normal((CELLS, Q))

    sc.pp.neighbors(adata, use_rep="X_gplvm", random_state=0)
    sc.tl.umap(adata, random_state=0)
    sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False, random_state=0)

    assert adata.obsp["connectivities"].shape == (CELLS, CELLS)
    assert adata.obsm["X_umap"].shape == (CELLS, 2) and np.isfinite(adata.obsm["X_umap"]).all()
    # Types far apart in the embedding: Leiden finds them (a cluster may split in two).
    assert adjusted_rand_score(kind, adata.obs["leiden"]) > 0.8
