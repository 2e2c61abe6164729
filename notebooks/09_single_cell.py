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
# # Single cells: counts as counts, batches in the kernel
#
# A single-cell analysis as it is usually run with scanpy, with the GPLVM as the embedding.
# The counts live in an `AnnData` (raw counts in `layers["counts"]`, batch and cell type in
# `obs`); the model reads them there and writes the embedding to `obsm["X_gplvm"]`, ready for
# `scanpy.pp.neighbors(adata, use_rep="X_gplvm")`.
#
# The model, per cell n and gene d:
#
#     y_nd ~ NegativeBinomial(mean s_n exp(f_d(x_n, c_n)), dispersion phi_d)
#     k([x, c], [x', c']) = k_SE-ARD(x, x') + sum_p w_p c_p c'_p
#
# with s_n the cell's size factor (its library size over the mean), c_n its one-hot batch and
# x_n its latent position. The linear kernel on c gives each gene an additive batch effect on
# the log scale, so the latent holds what the batch does not explain.
#
# Needs `pip install "gpflow_svi_gplvm[singlecell]"` (anndata, scanpy and igraph). The data are a
# simulated atlas (`gpflow_svi_gplvm.datasets.simulate_atlas`): gamma-Poisson counts of seven
# cell types seen through two batches, each batch shifting every gene and having its own
# library sizes.

# %%
import importlib.util
import os

import anndata
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import scanpy as sc

from gpflow_svi_gplvm.datasets import simulate_atlas
from gpflow_svi_gplvm.metrics import embedding_scores, expected_calibration_error, scib_scores
from gpflow_svi_gplvm.plotting import keep_figures
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM

keep_figures("09_single_cell")  # as a script: figures saved to a folder it prints

FAST = bool(os.environ.get("GPFLOW_SVI_GPLVM_FAST"))  # set in CI to cut the work
CELLS, GENES = (600, 100) if FAST else (3000, 500)
ITERATIONS = 100 if FAST else 2000

atlas = simulate_atlas(CELLS, GENES, seed=0)
obs = pd.DataFrame(
    {
        "cell_type": pd.Categorical([f"type {t}" for t in atlas.cell_type]),
        "batch": pd.Categorical([f"batch {b}" for b in atlas.batch]),
    },
    index=[f"cell{i}" for i in range(CELLS)],
)
adata = anndata.AnnData(X=atlas.counts.copy(), obs=obs)
adata.var_names = [f"gene{j}" for j in range(GENES)]
adata.layers["counts"] = atlas.counts
print(adata)
print(f"{atlas.counts.nnz / np.prod(atlas.counts.shape):.0%} of the counts are non-zero")

# %% [markdown]
# ## Fit, with and without the batch in the kernel
#
# `SingleCellGPLVM` keeps the counts sparse and densifies one minibatch at a time. Latents
# start at a PCA of log(1 + y / s). Both fits use B-SVI (a Gaussian q(x_n) per cell), Q = 10
# with ARD, 50 inducing points; the first has no covariates, the second the batch.

# %%
plain = adata.copy()
SingleCellGPLVM(10, layer="counts", num_inducing=50, shared_covariance=True).fit(
    plain, iterations=ITERATIONS, batch_size=256, progress=False
)
model = SingleCellGPLVM(
    10, layer="counts", batch_key="batch", num_inducing=50, shared_covariance=True
)
model.fit(adata, iterations=ITERATIONS, batch_size=256, progress=False)
print(adata.obsm["X_gplvm"].shape, list(adata.uns["gplvm"]))

figure, ax = plt.subplots()
ax.plot(adata.uns["gplvm"]["elbo"], lw=0.5)
ax.set(xlabel="step", ylabel="minibatch ELBO", yscale="symlog", title="training")
plt.show()

# %% [markdown]
# ## Neighbours and UMAP, coloured by batch and by cell type
#
# Without covariates the batch is one of the things the latent must explain; with the batch in
# the kernel, cells of one type from the two batches should mix.

# %%
figure, axes = plt.subplots(2, 2, figsize=(9, 8))
for row, (name, data) in enumerate([("no covariates", plain), ("batch in the kernel", adata)]):
    sc.pp.neighbors(data, use_rep="X_gplvm", random_state=0)
    sc.tl.umap(data, random_state=0)
    for column, key in enumerate(["batch", "cell_type"]):
        sc.pl.umap(data, color=key, ax=axes[row, column], show=False, title=f"{name}: {key}")
figure.tight_layout()
plt.show()

# %% [markdown]
# ## Leiden clusters of the neighbour graph
#
# scanpy's Leiden (igraph's, which the `singlecell` extra installs) on the neighbour graph of
# the embedding with the batch in the kernel, set beside the simulated cell types.

# %%
sc.tl.leiden(adata, flavor="igraph", n_iterations=2, directed=False, random_state=0)
print(pd.crosstab(adata.obs["leiden"], adata.obs["cell_type"]).to_string())

# %% [markdown]
# ## Scores: cell types kept apart, batches mixed
#
# The scores single-cell benchmarks use (`gpflow_svi_gplvm.metrics.embedding_scores`), beside
# PCA's of the log-normalised counts: NMI and ARI of k-means against the cell types (and of
# Leiden clusters at the resolution that best matches them, as scIB takes them); cell-type ASW
# (1: types apart); batch ASW (1: batches mixed within each type); graph connectivity (1: each
# type one connected piece of the neighbour graph).

# %%
normalised = adata.copy()
normalised.X = normalised.layers["counts"].copy()
sc.pp.normalize_total(normalised)
sc.pp.log1p(normalised)
sc.pp.pca(normalised, n_comps=10, random_state=0)
embeddings = {
    "PCA": normalised.obsm["X_pca"],
    "GPLVM, no covariates": plain.obsm["X_gplvm"],
    "GPLVM, batch in the kernel": adata.obsm["X_gplvm"],
}
scores = pd.DataFrame(
    {
        name: embedding_scores(embedding, atlas.cell_type, atlas.batch, leiden=True)
        for name, embedding in embeddings.items()
    }
).T
print(scores.round(3).to_string())

# %% [markdown]
# ## The scIB benchmark's own scores
#
# With scib-metrics installed (`pip install 'gpflow-svi-gplvm[scib]'`), `scib_scores` runs its
# `Benchmarker` on the same embeddings: bio conservation (isolated labels, Leiden and k-means
# NMI/ARI, silhouette, cLISI), batch correction (BRAS, iLISI, kBET, graph connectivity, PCR
# comparison against PCA's unintegrated embedding) and scIB's Total (40 % batch correction,
# 60 % bio conservation). The scores are raw, not min-max scaled across the embeddings as
# scIB's plots are.

# %%
if importlib.util.find_spec("scib_metrics") is not None:
    scib = scib_scores(embeddings, atlas.cell_type, atlas.batch, normalised.obsm["X_pca"])
    print(scib.round(3).T.to_string())
else:
    print("scib-metrics is not installed: pip install 'gpflow-svi-gplvm[scib]'")

# %% [markdown]
# ## Which latent dimensions are used: ARD
#
# The inverse lengthscales of the latent kernel; dimensions the model does not need get long
# lengthscales (small bars).

# %%
lengthscales = adata.uns["gplvm"]["ard_lengthscales"]
figure, ax = plt.subplots()
ax.bar(np.arange(len(lengthscales)), 1.0 / lengthscales)
ax.set(xlabel="latent dimension", ylabel="1 / lengthscale", title="ARD")
plt.show()

# %% [markdown]
# ## The batch effect the kernel found
#
# The linear kernel's variance per covariate column says how far each batch moves expression
# (on the log scale); the batch effect of gene d is the change of f_d when a cell's batch is
# switched with its latent kept: decode every cell's latent mean under each batch (size factor
# 1) and take the mean difference of the log-means.

# %%
print(dict(zip(adata.uns["gplvm"]["covariates"], adata.uns["gplvm"]["covariate_variances"])))
gp = model.model
latents = adata.obsm["X_gplvm"]
log_means = []
for batch in np.eye(2):
    inputs = np.concatenate([latents, np.tile(batch, (CELLS, 1)), np.zeros((CELLS, 1))], axis=1)
    log_means.append(gp.predict_f(inputs)[0].numpy())
effect = (log_means[1] - log_means[0]).mean(axis=0)
figure, ax = plt.subplots()
ax.hist(effect, bins=40)
ax.set(xlabel="batch 1 - batch 0: change of log mean expression per gene", ylabel="genes")
ax.set_title("batch effect")
plt.show()

# %% [markdown]
# ## New cells
#
# Cells measured later (another AnnData with the same genes, in any order, and the same `obs`
# column for the batch) are embedded with the model frozen, and land in `obsm` the same way.

# %%
new = adata[:50].copy()
new_embedding = model.transform(new, iterations=50 if FAST else 300)
print(new_embedding.shape, np.abs(new_embedding - adata.obsm["X_gplvm"][:50]).mean())

# %% [markdown]
# ## Reading genes: batch-corrected expression
#
# `normalized_expression` gives each gene's expected rate at each cell's q(x) with the batch
# set to a reference (`transform_batch`; a list averages over several, as scVI's does): the
# expectation over q(x) by draws, over q(f | x) exactly, exp(m + v / 2) under the log link.
# `library_size=1e4` scales it to a cell of 10,000 counts; `return_variance=True` adds its
# variance. Here the gene that type 0 moves most, coloured on the UMAP: raw (log-normalised
# counts, batch effect and all) beside corrected to batch 0. The simulator knows each cell's
# batch-free share of its library, so we can say how close each comes to it.

# %%
effects = atlas.effects.type_effects
gene = adata.var_names[int(np.argmax(np.abs(effects[0])))]
corrected, uncertainty = model.normalized_expression(
    adata, transform_batch="batch 0", genes=[gene], library_size=1e4, return_variance=True
)
adata.obs["raw"] = np.asarray(normalised[:, gene].X.todense()).ravel()
adata.obs["corrected"] = np.log1p(corrected[gene].to_numpy())
truth = np.log(atlas.batch_free_proportions()[:, list(adata.var_names).index(gene)])
for name in ("raw", "corrected"):
    correlation = np.corrcoef(adata.obs[name], truth)[0, 1]
    print(f"{name}: correlation with the batch-free truth {correlation:.3f}")
spread = np.median(np.sqrt(uncertainty) / corrected)
print(f"the corrected rate's standard deviation over its mean: {spread:.3f} (median over cells)")
sc.pl.umap(adata, color=["raw", "corrected"], title=[f"{gene}: raw", f"{gene}: batch 0"])

# %% [markdown]
# ## Differential expression with a posterior FDR: a volcano plot
#
# `differential_expression` compares the two groups' expression as a whole: the model's
# batch-corrected expression averaged over each group's cells (the batch set to each batch in
# turn), with the groups' observed counts entering its posterior, so the size of a change comes
# from the counts; the probability that a gene's |LFC| exceeds `delta` (0.25) under a prior the
# genes share, and the genes declared while the posterior expected FDR stays at most
# `fdr_target` (0.05). (`estimator="pairs"` is scVI's change mode, pairs of single cells.) The
# simulator's truth colours the volcano: a gene is truly DE when the two types' mean
# batch-free shares differ by more than delta.

# %%
de = model.differential_expression(adata, "cell_type", "type 0", "type 1")
print(de.head()[["proba_de", "lfc_mean", "lfc_std", "bayes_factor", "is_de_fdr_0.05"]])
shares = atlas.batch_free_proportions()
ratio = shares[atlas.cell_type == 0].mean(axis=0) / shares[atlas.cell_type == 1].mean(axis=0)
truly = pd.Series(np.abs(np.log2(ratio)) > 0.25, index=adata.var_names)[de.index]
declared = de["is_de_fdr_0.05"].to_numpy()
print(
    f"{declared.sum()} genes declared, of which {np.sum(declared & ~truly.to_numpy())} not truly "
    f"DE; {truly.sum()} truly DE"
)
plt.figure()
plt.scatter(de["lfc_mean"], de["proba_de"], c=np.where(truly, "tab:red", "tab:grey"), s=8)
plt.axhline(de["proba_de"][declared].min() if declared.any() else 1.0, ls="--", c="k", lw=0.8)
plt.xlabel("mean log2 fold change, type 0 against type 1")
plt.ylabel("P(|LFC| > 0.25)")
plt.title("red: truly DE; dashed: the least probable gene declared at FDR 0.05")
plt.show()

# %% [markdown]
# ## Label transfer with probabilities
#
# The cell types of batch 0 carried to batch 1's cells as if batch 1 were unlabelled: a kernel
# density of each type over the reference cells' q(x), the query cell's own q(x) averaged
# over, its bandwidth chosen on held-out reference cells. The probabilities should be
# calibrated: among cells given 0.8, four in five right. The expected calibration error
# measures the gap.

# %%
reference = adata[adata.obs["batch"] == "batch 0"].copy()
query = adata[adata.obs["batch"] == "batch 1"].copy()
probabilities = model.transfer_labels(reference, query, "cell_type")
right = query.obs["cell_type_transferred"].astype(str) == query.obs["cell_type"].astype(str)
labels = np.array(
    [list(probabilities.columns).index(t) for t in query.obs["cell_type"].astype(str)]
)
error = expected_calibration_error(probabilities.to_numpy(), labels)
print(f"accuracy {right.mean():.3f}, expected calibration error {error:.3f}")
sc.pl.umap(query, color=["cell_type_transferred", "cell_type_transferred_probability"])
