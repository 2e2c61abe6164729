"""The AnnData face: fit from a layer with batch covariates, obsm and uns written, sparse and
backed matrices read in row blocks, new cells embedded, bad input named (needs anndata)."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")

import gpflow  # noqa: E402
import tensorflow as tf  # noqa: E402
from builders import count_cells  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM, RowShard, fit  # noqa: E402
from gpflow_svi_gplvm.prediction.laplace import LaplaceLatents  # noqa: E402
from gpflow_svi_gplvm.rows.sparse import SparseRows  # noqa: E402
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.face import (  # noqa: E402
    ENCODER_LEARNING_RATE,
    TABLE_LEARNING_RATE,
)
from gpflow_svi_gplvm.singlecell.fitting.spread import EmbeddingSpread  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.cell_mapper import INFERENCE_STEPS  # noqa: E402

N, D, Q = 48, 10, 2


@pytest.fixture(scope="module")
def fitted():
    cells = count_cells()
    model = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=1)
    return model.fit(cells, iterations=20, batch_size=16, progress=False), cells


def test_fit_writes_the_embedding_and_its_record(fitted):
    model, cells = fitted
    assert cells.obsm["X_gplvm"].shape == cells.obsm["X_gplvm_var"].shape == (N, Q)
    assert (cells.obsm["X_gplvm_var"] > 0).all()
    record = cells.uns["gplvm"]
    assert record["settings"]["likelihood"] == "negative_binomial"
    assert record["settings"]["learning_rate"] == TABLE_LEARNING_RATE == 0.03  # a latent table's
    assert len(record["elbo"]) == 20 and np.isfinite(record["elbo"]).all()
    assert record["ard_lengthscales"].shape == (Q,)
    assert list(record["covariates"]) == ["batch=a", "batch=b"]
    assert record["covariate_variances"].shape == (2,)
    assert model.model.input_dim == Q + 2 + 1  # latents, one-hot batch, log size factor
    assert record["collapsed"] is False


def test_new_cells_are_embedded_by_gene_name(fitted):
    model, cells = fitted
    new = count_cells(seed=5)[:6]
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


@pytest.mark.filterwarnings("ignore:The embedding collapsed")  # 20 steps on 48 cells
def test_an_encoders_embedding_is_each_cells_q_x_refined_from_the_encoders(capsys):
    cells = count_cells()
    options = dict(layer="counts", batch_key="batch", num_inducing=8, seed=1, model="aeb")
    face = SingleCellGPLVM(Q, encoder_training="joint", **options).fit(
        cells, iterations=20, batch_size=16
    )
    shown = capsys.readouterr().err
    assert "refine q(x): 100%" in shown and f"| {N}/{N} [" in shown.split("refine q(x)")[-1]
    model, counts = face.model, cells.layers["counts"].toarray().astype(np.float64)
    # The Laplace inference of the package's public API, from the encoder's q(x) by Newton steps.
    inputs = model.row_inputs.numpy()
    mean, variance = LaplaceLatents(model, INFERENCE_STEPS, seed=1).infer(counts, inputs)
    np.testing.assert_allclose(cells.obsm["X_gplvm"], mean, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(cells.obsm["X_gplvm_var"], variance, rtol=1e-8)
    encoders, _ = model.latent.moments(tf.range(N, dtype=tf.int64), tf.constant(counts))
    assert np.abs(cells.obsm["X_gplvm"] - encoders.numpy()).max() > 1e-3  # moved from there
    assert cells.uns["gplvm"]["settings"]["refine_latents"] is True
    assert cells.uns["gplvm"]["settings"]["learning_rate"] == ENCODER_LEARNING_RATE == 0.01
    # New cells are refined alike: the training cells given as new ones land where fit put them.
    again = face.transform(cells.copy())
    np.testing.assert_allclose(again, cells.obsm["X_gplvm"], rtol=1e-8, atol=1e-10)
    with pytest.raises(ValueError, match="refine_latents must be True or False"):
        SingleCellGPLVM(Q, model="aeb", refine_latents="yes")


def test_sparse_and_backed_matrices_are_read_in_row_blocks(tmp_path):
    cells = count_cells()
    dense = cells.layers["counts"].toarray().astype(float)
    path = tmp_path / "cells.h5ad"
    anndata.AnnData(X=cells.layers["counts"], obs=cells.obs, var=cells.var).write_h5ad(path)
    backed = anndata.read_h5ad(path, backed="r")
    columns = np.array([3, 1, 7])
    rows = SparseRows.from_matrix(backed.X, columns, rows_per_block=7)
    backed.file.close()
    np.testing.assert_array_equal(rows[5:30], dense[5:30][:, columns])
    np.testing.assert_array_equal(rows.row_sums(), dense[:, columns].sum(1))


def test_a_sparse_shard_trains_exactly_as_its_dense_rows():
    counts = count_cells().layers["counts"]
    dense = counts.toarray().astype(float)
    shard = RowShard(SparseRows.from_matrix(counts), np.arange(N), N)
    assert shard.sparse  # held as CSR, each minibatch densified on its own
    histories = []
    for data in (dense, shard):
        model = BayesianSVIGPLVM(dense, Q, num_inducing=8, likelihood=gpflow.likelihoods.Poisson())
        histories.append(fit(model, data, 30, batch_size=16, progress=False))
    np.testing.assert_allclose(histories[0].elbo, histories[1].elbo, rtol=1e-12)
    assert histories[1].tracing_count == 1


def test_layer_raw_reads_adata_raw_with_its_own_genes(tmp_path):
    """scanpy's habit: X filtered to fewer genes and normalised, the counts of all in .raw, and
    the highly variable genes marked in adata.var (not in adata.raw.var); in memory and from
    the .h5ad's path alike."""
    cells = count_cells()
    counts = anndata.AnnData(X=cells.layers["counts"], obs=cells.obs, var=cells.var)
    filtered = cells[:, : D - 2].copy()
    filtered.raw = counts
    model = SingleCellGPLVM(Q, layer="raw", num_inducing=4, seed=1)
    model.fit(filtered, iterations=1, batch_size=16, progress=False)
    assert model.gene_names == list(counts.var_names)  # all D genes of .raw, not X's D - 2
    assert filtered.obsm["X_gplvm"].shape == (N, Q)

    filtered.var["highly_variable"] = np.arange(D - 2) % 2 == 0
    path = tmp_path / "cells.h5ad"
    filtered.write_h5ad(path)
    options = dict(layer="raw", genes="highly_variable", num_inducing=4, seed=1)
    in_memory = SingleCellGPLVM(Q, **options).fit(filtered, iterations=0)
    on_disk = SingleCellGPLVM(Q, **options).fit(path, iterations=0, output=tmp_path / "o")
    assert in_memory.gene_names == on_disk.gene_names == list(filtered.var_names[::2])
    for ours, theirs in zip(on_disk.model.trainable_variables, in_memory.model.trainable_variables):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_bad_single_cell_input_is_named():
    cells = count_cells()
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


def test_an_h5ad_path_is_fitted_out_of_core_from_the_same_start(tmp_path, exchanges):
    cells = count_cells()
    path = tmp_path / "cells.h5ad"
    cells.write_h5ad(path)
    options = dict(layer="counts", batch_key="batch", num_inducing=8, seed=1)
    in_memory = SingleCellGPLVM(Q, **options).fit(cells.copy(), iterations=0, progress=False)
    on_disk = SingleCellGPLVM(Q, **options).fit(path, iterations=0, output=tmp_path / "built")
    # Read from disk a block at a time: the model starts exactly as from the AnnData in memory.
    for ours, theirs in zip(on_disk.model.trainable_variables, in_memory.model.trainable_variables):
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10, atol=1e-12)
    fitted = SingleCellGPLVM(Q, **options).fit(
        path, iterations=20, batch_size=16, progress=False, output=tmp_path / "fitted"
    )
    assert exchanges[-1] == "finish"  # after the embedding's assembly
    mean = np.load(tmp_path / "fitted" / "X_gplvm.npy")
    np.testing.assert_array_equal(mean, fitted.model.latent_mean().numpy())
    assert np.isfinite(fitted.history.elbo).all() and fitted.history.tracing_count == 1
    assert anndata.read_h5ad(path).obsm_keys() == []  # the user's file is left as it was
    cells.write_h5ad(path)  # and closed: the user may write it again in this process
    with pytest.raises(ValueError, match="is not a file"):
        SingleCellGPLVM(Q, **options).fit(tmp_path / "no.h5ad", iterations=1, output=tmp_path)
    (tmp_path / "text.h5ad").write_text("a,b\n1,2\n")
    with pytest.raises(
        ValueError, match=r"not a readable AnnData \(HDF5\) file: it may be truncated"
    ):
        SingleCellGPLVM(Q, **options).fit(tmp_path / "text.h5ad", output=tmp_path / "o")
    with pytest.raises(ValueError, match="Pass output=, a folder"):
        SingleCellGPLVM(Q, **options).fit(path, iterations=1)


def test_an_output_holding_an_earlier_embedding_is_replaced_only_with_overwrite(tmp_path):
    path = tmp_path / "cells.h5ad"
    count_cells().write_h5ad(path)
    options = dict(layer="counts", num_inducing=8, seed=1)
    output = tmp_path / "out"
    SingleCellGPLVM(Q, **options).fit(path, iterations=0, output=output)
    first = np.load(output / "X_gplvm.npy")
    with pytest.raises(ValueError, match="holds an earlier run's embedding .*overwrite=True"):
        SingleCellGPLVM(Q, **options).fit(path, iterations=2, output=output)
    np.testing.assert_array_equal(np.load(output / "X_gplvm.npy"), first)
    SingleCellGPLVM(Q, **options).fit(path, iterations=2, output=output, overwrite=True)
    assert not np.array_equal(np.load(output / "X_gplvm.npy"), first)
    with pytest.raises(ValueError, match="key_added names obsm keys and files"):
        SingleCellGPLVM(Q, key_added="runs/a")


def test_a_resume_on_other_covariates_or_another_likelihood_is_refused_naming_them(tmp_path):
    cells = count_cells()
    cells.obs["donor"] = pd.Categorical(np.where(np.arange(N) % 3 == 0, "x", "y"))
    options = dict(layer="counts", num_inducing=8, seed=1)
    run = dict(batch_size=16, progress=False, checkpoint_dir=tmp_path / "ckpt")
    SingleCellGPLVM(Q, batch_key="batch", **options).fit(cells.copy(), 2, **run)
    with pytest.raises(
        ValueError, match=r"covariates 2 \(batch=a, batch=b; \w+\) there, 2 \(donor"
    ):
        SingleCellGPLVM(Q, batch_key="donor", **options).fit(cells.copy(), 4, resume=True, **run)
    poisson = SingleCellGPLVM(Q, batch_key="batch", likelihood="poisson", **options)
    with pytest.raises(ValueError, match="likelihood NegativeBinomial there, Poisson here"):
        poisson.fit(cells.copy(), 4, resume=True, **run)


def test_the_means_and_variances_are_replaced_as_a_pair(tmp_path, monkeypatch):
    """A run stopped between moving its means and its variances into place leaves the means
    without variances: never this run's means beside an earlier run's variances."""
    from pathlib import Path

    from gpflow_svi_gplvm.distributed.workers import Workers
    from gpflow_svi_gplvm.singlecell.fitting.assembly import assembled

    def moments(value: float):
        return [(np.full((4, Q), value), np.full((4, Q), value))]

    assembled(tmp_path, "gplvm", moments(1.0), np.arange(4), Workers())
    moves = []
    original = Path.replace

    def stopped(self, target):
        moves.append(target)
        if len(moves) == 2:
            raise KeyboardInterrupt  # the second move never happens
        return original(self, target)

    monkeypatch.setattr(Path, "replace", stopped)
    with pytest.raises(KeyboardInterrupt):
        assembled(tmp_path, "gplvm", moments(2.0), np.arange(4), Workers())
    assert (np.load(tmp_path / "X_gplvm.npy") == 2.0).all()
    assert not (tmp_path / "X_gplvm_var.npy").exists()


def test_an_out_of_core_fit_resumes_where_an_uninterrupted_one_ends(tmp_path):
    path = tmp_path / "cells.h5ad"
    count_cells().write_h5ad(path)
    options = dict(layer="counts", batch_key="batch", num_inducing=8, seed=1)
    run = dict(batch_size=16, progress=False, checkpoint_every=5)
    whole = SingleCellGPLVM(Q, **options).fit(path, 20, output=tmp_path / "a", **run)
    folder = tmp_path / "checkpoints"
    SingleCellGPLVM(Q, **options).fit(path, 10, output=tmp_path / "b", checkpoint_dir=folder, **run)
    resumed = SingleCellGPLVM(Q, **options).fit(
        path, 20, output=tmp_path / "b", checkpoint_dir=folder, resume=True, **run
    )
    # The batches from disk follow from the seed and the step: the stream restarts at step 10.
    np.testing.assert_allclose(resumed.history.elbo, whole.history.elbo, rtol=1e-10)
    np.testing.assert_allclose(
        np.load(tmp_path / "b" / "X_gplvm.npy"), np.load(tmp_path / "a" / "X_gplvm.npy"), rtol=1e-9
    )


@pytest.mark.parametrize(
    "change, said",
    [("append", "changed while being read"), ("truncate", "changed"), ("remove", "was removed")],
)
def test_a_file_changed_while_its_rows_stream_stops_training_with_a_clear_error(
    tmp_path, change, said
):
    import os

    from gpflow_svi_gplvm import Trainer
    from gpflow_svi_gplvm.rows.h5ad import DiskRows

    path = tmp_path / "cells.h5ad"
    count_cells().write_h5ad(path)
    rows = DiskRows.open(path, layer="counts")
    model = BayesianSVIGPLVM(rows, Q, num_inducing=8, likelihood=gpflow.likelihoods.Poisson())
    with Trainer(model, rows, batch_size=16) as trainer:
        assert trainer.rows.batches().options().autotune.enabled is False  # as held rows'
        trainer.train(3, progress=False)
        if change == "append":  # another program writes the file
            path.write_bytes(path.read_bytes() + b"\0")
        elif change == "truncate":
            os.truncate(path, path.stat().st_size // 2)
        else:
            path.unlink()
        with pytest.raises(
            ValueError, match=f"Reading the rows on disk failed: The file .*{said}"
        ) as error:
            trainer.train(30, progress=False)
    assert "Traceback" not in str(error.value) and "Graph execution" not in str(error.value)


def test_a_gene_never_observed_and_a_batch_of_one_cell_fit_to_finite_latents():
    """Kept, as the class documents: the gene's rate goes to 0, the batch is warned of."""
    cells = count_cells()
    counts = cells.layers["counts"].toarray()
    counts[:, 5] = 0  # gene5: no count in any cell
    cells.layers["counts"] = sp.csr_matrix(counts)
    cells.obs["batch"] = pd.Categorical(["a", "b"] * (N // 2 - 1) + ["a", "c"])
    model = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=1)
    with pytest.warns(UserWarning, match=r"'batch' has 1 categories of a single cell \(\['c'\]\)"):
        model.fit(cells, iterations=10, batch_size=16, progress=False)
    assert np.isfinite(cells.obsm["X_gplvm"]).all() and (cells.obsm["X_gplvm_var"] > 0).all()
    assert np.isfinite(model.history.elbo).all()


def test_a_category_without_cells_is_dropped_with_a_warning_and_refused_at_transform(fitted):
    _, cells = fitted
    cells = cells.copy()
    cells.obs["batch"] = cells.obs["batch"].cat.add_categories(["empty"])  # used by no cell
    model = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=1)
    with pytest.warns(UserWarning, match=r"'batch' has 1 categories without cells \(\['empty'\]"):
        model.fit(cells, iterations=2, batch_size=16, progress=False)
    assert model.encoding.names == ["batch=a", "batch=b"]
    assert model.model.input_dim == Q + 2 + 1  # no covariate column for it
    new = cells[:4].copy()
    new.obs["batch"] = pd.Categorical(["empty"] * 4)
    with pytest.raises(ValueError, match=r"not fitted with: \['empty'\]"):
        model.transform(new)


@pytest.mark.parametrize("splits", [[], [1], [5, 17], [3, 4, 30]])
def test_the_embeddings_spread_is_summed_over_blocks_as_over_the_whole(splits):
    rng = np.random.default_rng(0)
    mean, variance = rng.normal(3.0, 0.5, (40, 3)), rng.uniform(0.01, 0.02, (40, 3))
    mean[:, 1] = 3.0 + 1e-3 * rng.normal(size=40)  # a dimension with no spread
    spread = EmbeddingSpread(3)
    blocks = list(zip(np.split(mean, splits), np.split(variance, splits)))
    passed = list(spread.tracked(blocks))
    assert all(a[0] is b[0] and a[1] is b[1] for a, b in zip(passed, blocks))
    np.testing.assert_allclose(spread.sums[1:3], [mean.sum(0), (mean**2).sum(0)])
    assert spread.collapsed() is None  # dimensions 0 and 2 spread 0.5
    # Collapsed: spread under a hundredth of the prior's scale however sure each cell is, or
    # spread 0.5 under cells ten times as uncertain.
    for squeeze, scale in [(1e-3, 1e-10), (1.0, 1e4)]:
        collapsed = EmbeddingSpread(3)
        list(collapsed.tracked([(3.0 + squeeze * (mean - 3.0), scale * variance)]))
        message = collapsed.collapsed()
        assert message is not None and "collapsed: across the 40 cells" in message


def test_a_collapsed_embedding_is_written_with_a_warning_and_marked(monkeypatch):
    cells = count_cells()
    model = SingleCellGPLVM(Q, layer="counts", num_inducing=8, seed=1)

    def one_point(fitted, rows, progress=False):
        yield np.full((rows.shape[0], Q), 0.3), np.full((rows.shape[0], Q), 0.5)

    from gpflow_svi_gplvm.singlecell.fitting import assembly

    monkeypatch.setattr(assembly, "training_moments", one_point)
    with pytest.warns(UserWarning, match="The embedding collapsed: across the 48 cells"):
        model.fit(cells, iterations=2, batch_size=16, progress=False)
    assert cells.uns["gplvm"]["collapsed"] and (cells.obsm["X_gplvm"] == 0.3).all()


def test_single_cell_inputs_that_would_be_misread_are_refused(fitted):
    cells = count_cells()
    twice = cells.copy()
    twice.var_names = ["gene0", "gene0"] + [f"gene{j}" for j in range(2, D)]
    with pytest.raises(ValueError, match=r"var_names repeat \['gene0'\] .*var_names_make_unique"):
        SingleCellGPLVM(Q, layer="counts").fit(twice, iterations=1)
    texts = cells.copy()
    texts.var["chosen"] = ["True", "False"] * (D // 2)  # any non-empty text would read as True
    with pytest.raises(ValueError, match="'chosen' holds object values, not True/False"):
        SingleCellGPLVM(Q, layer="counts", genes="chosen").fit(texts, iterations=1)
    texts.var["chosen"] = False
    with pytest.raises(ValueError, match="'chosen' marks no gene"):
        SingleCellGPLVM(Q, layer="counts", genes="chosen").fit(texts, iterations=1)
    with pytest.raises(ValueError, match="genes= is empty"):
        SingleCellGPLVM(Q, layer="counts", genes=[]).fit(cells, iterations=1)
    mask = np.arange(D) < 4
    for given in (mask, pd.Series(mask, index=cells.var_names), list(mask)):
        with pytest.raises(ValueError, match=r"genes= is a boolean mask \(10 values\)"):
            SingleCellGPLVM(Q, layer="counts", genes=given).fit(cells, iterations=1)
    with pytest.raises(ValueError, match=r"genes= names \['gene1'\] more than once"):
        SingleCellGPLVM(Q, layer="counts", genes=["gene1", "gene2", "gene1"]).fit(cells)
    nullable = cells.copy()
    nullable.var["chosen"] = pd.array([True, False] * (D // 2), dtype="boolean")
    chosen = SingleCellGPLVM(Q, layer="counts", genes="chosen", num_inducing=8)
    assert chosen.fit(nullable, iterations=0, progress=False).gene_names == [
        f"gene{j}" for j in range(0, D, 2)
    ]
    one_key = SingleCellGPLVM(Q, layer="counts", covariate_keys="depth")  # a name, not letters
    assert one_key.encoding.columns == ["depth"]
    with pytest.raises(ValueError, match=r"obs column\(s\) \['batch'\] given more than once"):
        SingleCellGPLVM(Q, batch_key="batch", covariate_keys=["batch", "depth"])
    infinite = cells.copy()
    infinite.obs.loc["cell3", "depth"] = np.inf
    with pytest.raises(ValueError, match="'depth' holds inf for cell 'cell3'"):
        SingleCellGPLVM(Q, layer="counts", covariate_keys=["depth"]).fit(infinite, iterations=1)
    for wrong, match in [
        (cells.layers["counts"].toarray(), "adata is a ndarray: give an AnnData"),
        (cells.to_df(), "adata is a DataFrame: give an AnnData"),
        (cells[:0].copy(), "adata holds no cells"),
    ]:
        with pytest.raises(ValueError, match=match):
            SingleCellGPLVM(Q, layer="counts").fit(wrong, iterations=1)
    with pytest.raises(ValueError, match="seed"):
        SingleCellGPLVM(Q, seed=-3)
    with pytest.raises(ValueError, match="batch_size"):
        SingleCellGPLVM(Q, layer="counts").fit(cells, batch_size="8")
    with pytest.raises(ValueError, match=r"obs has no column 'libsize'.*as size_factors"):
        SingleCellGPLVM(Q, layer="counts", size_factors="libsize").fit(cells, iterations=1)
    worded = cells.copy()
    worded.obs["sizes"] = "x"
    with pytest.raises(ValueError, match="obs column 'sizes' is not numbers"):
        SingleCellGPLVM(Q, layer="counts", size_factors="sizes").fit(worded, iterations=1)
    model, _ = fitted
    with pytest.raises(ValueError, match="adata is a ndarray"):
        model.transform(cells.layers["counts"].toarray())
    with pytest.raises(ValueError, match="no cells to embed"):
        model.transform(cells[:0].copy())
    with pytest.raises(ValueError, match="iterations must be"):
        model.transform(cells[:3].copy(), iterations=0)


def test_a_batch_key_of_integer_codes_is_read_as_categories():
    cells = count_cells()
    cells.obs["batch"] = np.arange(N) % 3  # codes 0, 1, 2: batches, not a trend
    model = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8)
    model.fit(cells, iterations=0, progress=False)
    assert model.encoding.names == ["batch=0", "batch=1", "batch=2"]


def test_an_out_of_core_build_reads_the_file_twice(tmp_path, monkeypatch):
    from gpflow_svi_gplvm.components.pca import PCA_SAMPLE_ROWS, pca_sample
    from gpflow_svi_gplvm.rows.h5ad import DiskRows
    from gpflow_svi_gplvm.training.trainer import Trainer

    rng = np.random.default_rng(2)
    num_cells = PCA_SAMPLE_ROWS + 3000  # the PCA's directions come from a sample
    counts = sp.csr_matrix(rng.poisson(1.0, (num_cells, 6)).astype(np.float32) + np.eye(1, 6))
    obs = pd.DataFrame({"batch": pd.Categorical(np.arange(num_cells) % 2)})
    obs.index = obs.index.astype(str)
    anndata.AnnData(X=counts, obs=obs).write_h5ad(tmp_path / "cells.h5ad")
    read = []
    original = DiskRows._read

    def counted(self, start: int, stop: int):
        read.append(stop - start)
        return original(self, start, stop)

    class Built(Exception):
        pass

    def stop(*args, **kwargs):
        raise Built

    monkeypatch.setattr(DiskRows, "_read", counted)
    monkeypatch.setattr(Trainer, "train", stop)  # the first step: the build is done
    with pytest.raises(Built):
        SingleCellGPLVM(Q, batch_key="batch", num_inducing=8).fit(
            tmp_path / "cells.h5ad",
            output=tmp_path / "out",
            checkpoint_dir=tmp_path / "checkpoints",
        )
    # One pass for the checks, library sizes, column summary, support, gaps and the
    # checkpoint's hash, one for the PCA's scores; the PCA sample's eight (the covariates'
    # effects, then the directions) read its rows alone.
    sample = len(pca_sample(np.zeros((num_cells, 1)), num_cells, None, seed=0).index)
    assert sum(read) == 2 * num_cells + 8 * sample


def test_a_genes_column_with_missing_values_names_them_and_the_fix():
    cells = count_cells()
    cells.var["chosen"] = pd.array([True, None] + [False] * (D - 2), dtype="boolean")
    missing = r"'chosen' has no value \(NA\) for 1 gene\(s\), e.g. \['gene1'\].*fillna\(False\)"
    with pytest.raises(ValueError, match=missing):
        SingleCellGPLVM(Q, layer="counts", genes="chosen").fit(cells, iterations=1)


def test_a_truncated_h5ad_is_named_and_nothing_is_written(tmp_path):
    path = tmp_path / "cells.h5ad"
    count_cells().write_h5ad(path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError, match=r"cells.h5ad is not a readable AnnData \(HDF5\) file"):
        SingleCellGPLVM(Q, layer="counts").fit(path, iterations=1, output=tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_output_that_cannot_be_a_folder_is_refused_before_training(tmp_path):
    path = tmp_path / "cells.h5ad"
    count_cells().write_h5ad(path)
    (tmp_path / "mine").write_text("a user's file")
    face = SingleCellGPLVM(Q, layer="counts")
    with pytest.raises(ValueError, match=r"output .*mine is a file: name a folder"):
        face.fit(path, iterations=1, output=tmp_path / "mine")
    assert (tmp_path / "mine").read_text() == "a user's file" and face.model is None
    with pytest.raises(ValueError, match=r"output must be a non-empty str or pathlib.Path"):
        face.fit(path, iterations=1, output="")
    with pytest.raises(ValueError, match=r"output 'bad\\x00name' holds a NUL character"):
        face.fit(path, iterations=1, output="bad\0name")


def test_new_cells_numeric_covariates_that_are_not_finite_numbers_are_named():
    from gpflow_svi_gplvm.singlecell.cells.encoding import CovariateEncoding

    obs = pd.DataFrame({"depth": [1.0, 2.0, 3.0]}, index=["a", "b", "c"])
    encoding = CovariateEncoding(["depth"]).fit(obs)
    expected = (obs["depth"].to_numpy() - 2.0) / np.sqrt(2.0 / 3.0)
    np.testing.assert_allclose(encoding.transform(obs)[:, 0], expected)
    for values, message in [
        ([1.0, np.inf, 2.0], "obs column 'depth' holds inf for cell 'b'"),
        (["1", "x", "2"], "obs column 'depth' is a numeric covariate but holds values that are"),
    ]:
        with pytest.raises(ValueError, match=message):
            encoding.transform(pd.DataFrame({"depth": values}, index=obs.index))


def test_a_new_category_is_sent_to_map_query_only_when_it_is_a_batch():
    from gpflow_svi_gplvm.singlecell.cells.encoding import CovariateEncoding

    obs = pd.DataFrame({"batch": ["a", "b"], "donor": ["x", "y"]}, index=["c1", "c2"])
    encoding = CovariateEncoding(["batch", "donor"], ["batch"]).fit(obs)
    new = pd.DataFrame({"batch": ["c", "a"], "donor": ["x", "x"]}, index=obs.index)
    with pytest.raises(ValueError, match=r"'batch' .* \['c'\] .* with map_query\(adata\)"):
        encoding.transform(new)
    new = pd.DataFrame({"batch": ["a", "a"], "donor": ["z", "x"]}, index=obs.index)
    with pytest.raises(ValueError, match=r"'donor' .* \['z'\] .* the batch key only"):
        encoding.transform(new)
