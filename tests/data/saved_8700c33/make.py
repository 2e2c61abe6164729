"""Two tiny saved models of simulated counts, and what they transform query cells to, as the
package at commit 8700c33 (saved-model format 1, a digest without the training cells) wrote
them; tests/test_saving.py loads them with today's package. Made by running, from a checkout of
that commit, ``python tests/data/saved_8700c33/make.py tests/data/saved_8700c33``."""

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for builders
from builders import count_cells  # noqa: E402

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
cells = count_cells()
query = count_cells(seed=7)[:6].copy()
query.obs["batch"] = query.obs["batch"].astype(str)
query.obs.iloc[:2, query.obs.columns.get_loc("batch")] = "c"  # a batch the model learns
query.write_h5ad(out / "query.h5ad")

a = SingleCellGPLVM(2, layer="counts", batch_key="batch", num_inducing=8, seed=3)
a.fit(cells, iterations=20, batch_size=16, progress=False)
a.map_query(query.copy(), fit_cells=10, progress=False)
a.save(out / "bsvi_batch_library", adata=cells)
np.save(out / "bsvi_batch_library.npy", a.transform(query.copy()))

plain = query.copy()
plain.obs["batch"] = "a"
b = SingleCellGPLVM(
    2,
    layer="counts",
    covariate_keys=["depth"],
    likelihood="poisson",
    size_factors=None,
    model="aeb",
    num_inducing=8,
    seed=4,
    distil_cells=48,
)
b.fit(cells, iterations=20, batch_size=16, progress=False)
b.save(out / "aeb_poisson_covariate")
np.save(out / "aeb_poisson_covariate.npy", b.transform(plain.copy()))
