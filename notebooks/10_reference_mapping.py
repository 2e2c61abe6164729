# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # A reference that lives on: save, load, map new batches, serve
#
# A model of single cells is usually trained once, on a reference atlas, and then used for
# months: new experiments are placed onto it, often from batches (donors, runs, labs) the
# reference never saw. scvi-tools users know this as `model.save` / `SCVI.load` and
# `load_query_data` (scArches). Here the same with `SingleCellGPLVM`:
#
# 1. fit a reference and `save` it to one folder, with its cells' embedding (no counts);
# 2. `load` it (in another process, months later) and `map_query` a query whose batch is new:
#    the new batch's effect on each gene is learnt with every parameter of the reference
#    frozen, so the reference's embedding does not move;
# 3. look at reference and query on one UMAP and transfer the reference's cell types;
# 4. export the model for TensorFlow Serving: raw counts in, embedding out.
#
# Needs `pip install "gpflow_svi_gplvm[singlecell]"`. The data are a simulated atlas of ten
# cell types of very unequal sizes in four batches, each with its own composition and gene
# shifts (`gpflow_svi_gplvm.datasets.simulate_atlas`); the fourth batch is the query.

# %%
import os
import tempfile
from pathlib import Path

import anndata
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import scanpy as sc
import tensorflow as tf
from sklearn.neighbors import KNeighborsClassifier

from gpflow_svi_gplvm.datasets import simulate_atlas
from gpflow_svi_gplvm.plotting import keep_figures
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

keep_figures("10_reference_mapping")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the work
CELLS, GENES = (800, 100) if FAST else (6000, 1000)
ITERATIONS = 150 if FAST else 3000

shares = (0.25, 0.2, 0.15, 0.12, 0.09, 0.07, 0.05, 0.04, 0.015, 0.015)
atlas = simulate_atlas(
    CELLS, GENES, num_types=10, type_proportions=shares, num_batches=4, composition=50.0, seed=0
)
obs = pd.DataFrame(
    {
        "cell_type": pd.Categorical([f"type {t}" for t in atlas.cell_type]),
        "batch": pd.Categorical([f"batch {b}" for b in atlas.batch]),
    },
    index=[f"cell{i}" for i in range(CELLS)],
)
cells = anndata.AnnData(X=atlas.counts, obs=obs)
cells.var_names = [f"gene{j}" for j in range(GENES)]
is_query = (cells.obs["batch"] == "batch 3").to_numpy()
reference, query = cells[~is_query].copy(), cells[is_query].copy()
print(f"reference: {reference.n_obs} cells of batches 0-2; query: {query.n_obs} cells of batch 3")

# %% [markdown]
# ## 1. Fit the reference and save it
#
# `save` writes one folder: a JSON manifest (format version, options, the registration: which
# genes in which order, the batch categories, how size factors are made), the GP's variables,
# and, given the AnnData, the reference cells' `obs` and q(x) moments (a "minified" AnnData, no
# counts). The folder is written beside its place and moved there when whole, so a killed save
# never leaves half a model.

# %%
model = SingleCellGPLVM(batch_key="batch")
model.fit(reference, iterations=ITERATIONS, progress=False)
folder = Path(tempfile.mkdtemp()) / "reference_model"
model.save(folder, adata=reference)
print(sorted(p.name for p in folder.iterdir()))

# %% [markdown]
# ## 2. Load it and map the query
#
# The loaded model embeds new cells to the same numbers as the one that was saved. The query's
# batch is new: `transform` would refuse it, `map_query` learns it. Each new batch gets an
# offset per gene on the log scale, fitted (by MAP, with the prior of the reference's batch
# effects) from up to 2,000 of its cells with every parameter of the reference frozen; then
# every query cell's q(x) is found by Newton steps to its mode, a block of cells at a time.

# %%
loaded = SingleCellGPLVM.load(folder)
loaded.map_query(query, progress=False)
offsets = loaded.batch_offsets.offsets[0]
print(f"batch 3's effect per gene: mean {offsets.mean():+.2f}, sd {offsets.std():.2f} (log scale)")

# %% [markdown]
# ## 3. Reference and query on one UMAP, cell types transferred
#
# The reference's embedding comes from the saved model's minified cells (`loaded.reference`);
# the query's from the mapping. Cells of one type should sit together whichever side they
# come from, and a query cell's nearest reference cells should say its type.

# %%
sides = {"reference": loaded.reference, "query": query}
joint = anndata.AnnData(
    obs=pd.concat([part.obs.assign(side=side) for side, part in sides.items()]),
    obsm={"X_gplvm": np.concatenate([part.obsm["X_gplvm"] for part in sides.values()])},
)
sc.pp.neighbors(joint, use_rep="X_gplvm", random_state=0)
sc.tl.umap(joint, random_state=0)
figure, axes = plt.subplots(1, 2, figsize=(11, 4.5))
for ax, key in zip(axes, ["side", "cell_type"]):
    sc.pl.umap(joint, color=key, ax=ax, show=False, title=key)
figure.tight_layout()
plt.show()

# %%
classifier = KNeighborsClassifier(15).fit(
    loaded.reference.obsm["X_gplvm"], loaded.reference.obs["cell_type"].astype(str)
)
predicted = classifier.predict(query.obsm["X_gplvm"])
accuracy = np.mean(predicted == query.obs["cell_type"].astype(str).to_numpy())
print(f"cell types of the query from its 15 nearest reference cells: {accuracy:.1%} right")

# %% [markdown]
# ## 4. Export and serve
#
# `export_saved_model` writes a SavedModel into `path/1/` (TensorFlow Serving's layout: the
# versions of a model side by side). Its signature `embed` takes each cell's raw counts of the
# model's genes, in the order the export's `gpflow_svi_gplvm_export.json` lists, and its batch
# by name (the one `map_query` learnt included); it returns the mean and variance of q(x), the
# numbers `transform` gives, computed by TensorFlow alone.

# %%
exported = loaded.export_saved_model(folder.parent / "served")
served = tf.saved_model.load(str(exported))
some = query[:5]
answer = served.signatures["embed"](
    counts=tf.constant(some.X.toarray(), tf.float64), batch=tf.constant(["batch 3"] * 5)
)
print(np.abs(answer["mean"].numpy() - query.obsm["X_gplvm"][:5]).max())
