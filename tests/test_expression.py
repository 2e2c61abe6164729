"""Reading genes from a fitted single-cell model: normalised, batch-corrected expression against
a brute-force NumPy GP at the fitted parameters, change-mode DE and its FDR rule against hand
computations, label transfer's probabilities and the calibration error on toys whose
probabilities are known, the cells' held-out likelihood against the model's of the same rows
(needs anndata)."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")

import tensorflow as tf  # noqa: E402
from gpflow.config import default_jitter  # noqa: E402

from gpflow_svi_gplvm import BayesianSVIGPLVM  # noqa: E402
from gpflow_svi_gplvm.likelihoods import NegativeBinomial  # noqa: E402
from gpflow_svi_gplvm.metrics import expected_calibration_error  # noqa: E402
from gpflow_svi_gplvm.prediction.marginal_likelihood import marginal_log_likelihood  # noqa: E402
from gpflow_svi_gplvm.prediction.rates import paired_covariance  # noqa: E402
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes.differential import posterior_fdr_selection  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes.labels import LabelTransfer, transfer_labels  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.offsets import BatchOffsets  # noqa: E402

N, D, Q = 60, 8, 2


def _cells(seed: int = 0) -> anndata.AnnData:
    """Counts of two kinds of cells (genes 0-2 higher in kind "up") in two batches (genes 5-7
    higher in batch "b"), with library sizes."""
    rng = np.random.default_rng(seed)
    kind, batch = np.arange(N) % 2, (np.arange(N) // 2) % 2
    genes = np.arange(D)
    log_rate = 1.5 + 1.5 * kind[:, None] * (genes < 3) + 1.0 * batch[:, None] * (genes >= 5)
    rate = rng.uniform(0.6, 1.6, N)[:, None] * np.exp(log_rate)
    counts = rng.negative_binomial(10, 10 / (10 + rate)).astype(np.float32)
    counts[:, 3] += 1  # no cell without counts
    obs = pd.DataFrame(
        {
            "batch": pd.Categorical(np.array(["a", "b"])[batch]),
            "kind": pd.Categorical(np.array(["down", "up"])[kind]),
        },
        index=[f"cell{i}" for i in range(N)],
    )
    cells = anndata.AnnData(X=sp.csr_matrix(counts), obs=obs)
    cells.var_names = [f"gene{j}" for j in range(D)]
    return cells


@pytest.fixture(scope="module")
def fitted():
    cells = _cells()
    face = SingleCellGPLVM(Q, batch_key="batch", num_inducing=10, seed=1, shared_covariance=True)
    face.fit(cells, iterations=300, batch_size=30, progress=False)
    return face, cells


class _NumpyGP:
    """The fitted model's q(f) in NumPy from its parameters: an SE-ARD kernel on x plus a linear
    ARD kernel on the one-hot batch, a constant mean per gene plus the log size factor, q(u)
    whitened with one covariance shared by the genes."""

    def __init__(self, model):
        kernel = model.kernel
        self.variance = kernel.latent_kernel.variance.numpy()
        self.lengthscales = kernel.latent_kernel.lengthscales.numpy()
        self.weights = kernel.covariate_kernel.variance.numpy()
        self.constant = model.mean_function.base.c.numpy()
        self.Z = model.inducing_variable.Z.numpy()
        self.q_mu, self.L = model.q_mu.numpy(), np.tril(model.q_sqrt.numpy()[0])
        assert model.whiten and model.shared_covariance
        Kzz = self.kernel(self.Z, self.Z) + default_jitter() * np.eye(len(self.Z))
        self.Lz = np.linalg.cholesky(Kzz)

    def kernel(self, A, B):
        x, y = A[:, :Q] / self.lengthscales, B[:, :Q] / self.lengthscales
        squares = ((x[:, None] - y[None]) ** 2).sum(-1)
        return self.variance * np.exp(-squares / 2) + (A[:, Q:-1] * self.weights) @ B[:, Q:-1].T

    def mean_and_covariance(self, A, B):
        """Means [n, D] at A and B, and the covariances of f at the pairs (A_n, B_n) [n]."""
        alpha_a = np.linalg.solve(self.Lz, self.kernel(self.Z, A))
        alpha_b = np.linalg.solve(self.Lz, self.kernel(self.Z, B))
        prior = np.diag(self.kernel(A, B))
        shared = np.sum((self.L.T @ alpha_a) * (self.L.T @ alpha_b), axis=0)
        covariance = prior - np.sum(alpha_a * alpha_b, axis=0) + shared
        means = [
            a.T @ self.q_mu + self.constant + X[:, -1:] for a, X in ((alpha_a, A), (alpha_b, B))
        ]
        return means[0], means[1], covariance


def _inputs(latents: np.ndarray, batch: int) -> np.ndarray:
    """GP inputs [n, Q + 2 + 1]: latents, the one-hot batch, a log size factor of 0."""
    onehot = np.tile(np.eye(2)[batch], (len(latents), 1))
    return np.concatenate([latents, onehot, np.zeros((len(latents), 1))], axis=1)


def _point_latents(cells: anndata.AnnData) -> anndata.AnnData:
    """The cells with q(x) a point at its mean: the expression is then exact, no draws."""
    points = cells.copy()
    points.obsm["X_gplvm_var"] = np.zeros_like(points.obsm["X_gplvm_var"])
    return points


def test_rate_covariances_of_paired_inputs_are_gpflows_full_covariance():
    rng = np.random.default_rng(0)
    Y = rng.poisson(3.0, (20, 5)).astype(float)
    for shared, whiten in ((False, True), (False, False), (True, True)):
        model = BayesianSVIGPLVM(
            Y, 2, num_inducing=4, likelihood=NegativeBinomial(num_outputs=5), whiten=whiten,
            covariates=np.eye(2)[np.arange(20) % 2], shared_covariance=shared,
        )  # fmt: skip
        model.q_mu.assign(rng.normal(size=model.q_mu.shape))
        model.q_sqrt.assign(np.tril(rng.normal(size=model.q_sqrt.shape)) + np.eye(4))
        A, B = rng.normal(size=(6, model.input_dim)), rng.normal(size=(6, model.input_dim))
        found = paired_covariance(model, tf.constant(A), tf.constant(B)).numpy()  # [6, 5]
        diagonal = paired_covariance(model, tf.constant(A), tf.constant(A)).numpy()
        np.testing.assert_allclose(diagonal, model.predict_f(A)[1].numpy(), atol=1e-12)
        if not shared:  # GPflow's own conditional, per output; the shared layout is checked above
            joint = [
                model.predict_f(np.stack([a, b]), full_cov=True)[1].numpy() for a, b in zip(A, B)
            ]
            np.testing.assert_allclose(found, np.array([c[:, 0, 1] for c in joint]), atol=1e-12)


def test_expression_at_point_latents_is_the_lognormal_mean_of_a_numpy_gp(fitted):
    face, cells = fitted
    points = _point_latents(cells)
    gp, x = _NumpyGP(face.model), points.obsm["X_gplvm"]
    reference = face.model.size_factor_reference.numpy()
    found = face.normalized_expression(points, transform_batch="b", n_samples=3)
    mean, _, variance = gp.mean_and_covariance(_inputs(x, 1), _inputs(x, 1))
    expected = np.exp(mean + variance[:, None] / 2) / reference  # library size 1
    np.testing.assert_allclose(found.to_numpy(), expected, rtol=1e-10)
    assert list(found.index) == list(cells.obs_names) and list(found.columns) == face.gene_names
    # Its own size factor ("latent"), the batch averaged over both, and the variance of that
    # average: E[(l_a + l_b)^2 / 4] needs the covariance of f at the two batches.
    sizes = np.asarray(cells.X.astype(np.float64).sum(axis=1)).ravel() / reference
    mean, variance = face.normalized_expression(
        points, ["a", "b"], ["gene1", "gene6"], "latent", 3, True
    )
    moments = [gp.mean_and_covariance(_inputs(x, k), _inputs(x, j)) for k in (0, 1) for j in (0, 1)]
    (m_a, _, v_a), (_, _, c_ab), _, (m_b, _, v_b) = moments
    first = (np.exp(m_a + v_a[:, None] / 2) + np.exp(m_b + v_b[:, None] / 2)) / 2
    second = sum(
        np.exp(m_k + m_j + (v_k[:, None] + v_j[:, None]) / 2 + c[:, None])
        for (m_k, v_k), (m_j, v_j), c in (
            ((m_a, v_a), (m_a, v_a), v_a), ((m_b, v_b), (m_b, v_b), v_b),
            ((m_a, v_a), (m_b, v_b), c_ab), ((m_b, v_b), (m_a, v_a), c_ab),
        )
    ) / 4  # fmt: skip
    columns = [1, 6]
    np.testing.assert_allclose(mean.to_numpy(), sizes[:, None] * first[:, columns], rtol=1e-10)
    expected = sizes[:, None] ** 2 * (second - first**2)[:, columns]
    np.testing.assert_allclose(variance.to_numpy(), expected, rtol=1e-8)


def test_expression_over_q_x_agrees_with_brute_force_monte_carlo(fitted):
    face, cells = fitted
    rng = np.random.default_rng(3)
    cells = cells[:4].copy()
    cells.obsm["X_gplvm_var"] = np.full((4, Q), 0.3)  # wide enough to matter
    gp, S = _NumpyGP(face.model), 4000
    found, found_variance = face.normalized_expression(
        cells, "a", n_samples=S, return_variance=True, seed=11
    )
    reference = face.model.size_factor_reference.numpy()
    for n in range(4):  # independent draws of x, then of f given x
        x = cells.obsm["X_gplvm"][n] + np.sqrt(0.3) * rng.standard_normal((S, Q))
        mean, _, variance = gp.mean_and_covariance(_inputs(x, 0), _inputs(x, 0))
        f = mean + np.sqrt(variance)[:, None] * rng.standard_normal(mean.shape)
        rates = np.exp(f) / reference
        error = np.sqrt(2) * rates.std(axis=0) / np.sqrt(S)  # both estimates' draws
        assert np.all(np.abs(found.to_numpy()[n] - rates.mean(axis=0)) < 4 * error)
        np.testing.assert_allclose(found_variance.to_numpy()[n], rates.var(axis=0), rtol=0.2)


def test_a_batch_learnt_by_a_query_mapping_adds_its_offsets_to_f(fitted):
    face, cells = fitted
    learnt = np.random.default_rng(4).normal(0.0, 0.5, (1, D))
    saved, face.batch_offsets = face.batch_offsets, BatchOffsets(["c"], learnt)
    try:
        points = _point_latents(cells[:6])
        points.obs["batch"] = pd.Categorical(["c"] * 6)  # a batch the model was not fitted with
        own = face.normalized_expression(points, n_samples=2)
        swapped = face.normalized_expression(_point_latents(cells[:6]), "c", n_samples=2)
    finally:
        face.batch_offsets = saved
    x = points.obsm["X_gplvm"]
    inputs = np.concatenate([x, np.zeros((6, 3))], axis=1)  # its one-hot part zero
    mean, _, variance = _NumpyGP(face.model).mean_and_covariance(inputs, inputs)
    reference = face.model.size_factor_reference.numpy()
    expected = np.exp(mean + learnt + variance[:, None] / 2) / reference
    np.testing.assert_allclose(own.to_numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(swapped.to_numpy(), expected, rtol=1e-10)


def test_an_h5ad_path_is_read_a_block_at_a_time_and_written_to_output(fitted, tmp_path):
    face, cells = fitted
    path = tmp_path / "cells.h5ad"
    cells.write_h5ad(path)  # with its obsm: q(x) is read from the file
    options = dict(transform_batch="a", n_samples=5, return_variance=True)
    mean, variance = face.normalized_expression(cells, **options)
    written = face.normalized_expression(path, **options, output=tmp_path / "out", block_size=7)
    np.testing.assert_allclose(written[0], mean.to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(written[1], variance.to_numpy(), rtol=1e-12)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "normalized_expression.npy",
        "normalized_expression_variance.npy",
    ]


def test_cells_without_counts_or_embedding_get_finite_expression(fitted):
    face, cells = fitted
    new = cells[:3].copy()
    del new.obsm["X_gplvm"], new.obsm["X_gplvm_var"]  # inferred, as transform would
    new.X = sp.csr_matrix(new.X.toarray() * np.array([[0.0], [1.0], [1.0]]))
    mean, variance = face.normalized_expression(new, "a", None, "latent", 4, True)
    assert np.isfinite(mean.to_numpy()).all() and np.isfinite(variance.to_numpy()).all()
    assert (mean.to_numpy()[0] == 0).all()  # no counts: a size factor of 0, nothing expected
    # at library size 1 the empty cell sits at the prior, q(x) = N(0, I)
    at_one = face.normalized_expression(new, "a", n_samples=4)
    prior = new.copy()
    prior.obsm["X_gplvm"], prior.obsm["X_gplvm_var"] = np.zeros((3, Q)), np.ones((3, Q))
    expected = face.normalized_expression(prior, "a", n_samples=4)
    np.testing.assert_allclose(at_one.to_numpy()[0], expected.to_numpy()[0], rtol=1e-12)


@pytest.mark.parametrize(
    "options, message",
    [
        (dict(transform_batch="c"), r"transform_batch \['c'\].*map_query learnt\): \['a', 'b'\]"),
        (dict(transform_batch=[]), "transform_batch"),
        (dict(genes=["gene1", "CD4"]), r"genes= names \['CD4'\]"),
        (dict(genes=[]), "genes= is empty"),
        (dict(n_samples=0), "n_samples"),
        (dict(library_size=0.0), "library_size must be a positive number"),
        (dict(library_size="observed"), "library_size must be a positive number or 'latent'"),
        (dict(transform_covariates={"kind": "up"}), "transform_covariates names 'kind'"),
    ],
)
def test_bad_expression_requests_are_named(fitted, options, message):
    face, cells = fitted
    with pytest.raises(ValueError, match=message):
        face.normalized_expression(cells, **options)


def test_an_output_that_is_a_file_or_holds_earlier_arrays_is_refused(fitted, tmp_path):
    face, cells = fitted
    (tmp_path / "taken").write_text("mine")
    with pytest.raises(ValueError, match=r"output .*taken is a file: name a folder"):
        face.normalized_expression(cells, output=tmp_path / "taken")
    assert (tmp_path / "taken").read_text() == "mine"
    out = tmp_path / "out"
    first = np.array(face.normalized_expression(cells[:5], n_samples=2, output=out))
    with pytest.raises(ValueError, match="holds an earlier call's arrays .*pass overwrite=True"):
        face.normalized_expression(cells[5:9], n_samples=2, output=out)
    np.testing.assert_array_equal(np.load(out / "normalized_expression.npy"), first)
    again = face.normalized_expression(cells[5:9], n_samples=2, output=out, overwrite=True)
    assert again.shape == (4, first.shape[1])


def test_the_fdr_rule_keeps_the_longest_run_whose_mean_error_is_within_target():
    proba = np.array([0.99, 0.2, 0.97, 0.9, 0.5, 0.96])
    # Sorted: 0.99, 0.97, 0.96, 0.9, 0.5, 0.2; 1 - p: .01 .03 .04 .10 .50 .80; running means
    # .010 .020 .0267 .045 .136 .247: four genes at 0.05, three at 0.03, one at 0.015.
    assert posterior_fdr_selection(proba, 0.05).tolist() == [1, 0, 1, 1, 0, 1]
    assert posterior_fdr_selection(proba, 0.03).tolist() == [1, 0, 1, 0, 0, 1]
    assert posterior_fdr_selection(proba, 0.015).tolist() == [1, 0, 0, 0, 0, 0]
    assert not posterior_fdr_selection(proba, 0.005).any()


def test_lfc_samples_of_pairs_of_cells_are_their_joint_f_differences(fitted):
    from scipy.stats import norm

    face, cells = fitted
    source = _point_latents(cells)
    points = anndata.AnnData(  # each group a cell twice (of batches a and b)
        X=source.X[[0, 0, 3, 3]],
        obs=source.obs.iloc[[0, 0, 3, 3]].set_axis(["one0", "one1", "other0", "other1"]),
        obsm={k: v[[0, 0, 3, 3]] for k, v in source.obsm.items()},
    )
    points.var_names = source.var_names
    points.obs["pick"] = pd.Categorical(["one", "one", "other", "other"])
    table = face.differential_expression(
        points, "pick", "one", "other", estimator="pairs", batch_correction=False,
        n_samples=10000,
    ).loc[face.gene_names]  # fmt: skip
    x = points.obsm["X_gplvm"]
    A, B = _inputs(x[[0]], 0), _inputs(x[[2]], 1)
    gp = _NumpyGP(face.model)
    mean_a, mean_b, c = gp.mean_and_covariance(A, B)
    v_a, v_b = (gp.mean_and_covariance(X, X)[2] for X in (A, B))
    mean = (mean_a - mean_b)[0] / np.log(2)
    std = np.sqrt(v_a + v_b - 2 * c)[0] / np.log(2)
    np.testing.assert_allclose(table["lfc_mean"], mean, atol=4 * std.max() / np.sqrt(10000))
    np.testing.assert_allclose(table["lfc_std"], std, rtol=0.03)
    proba = np.maximum(norm.sf((0.25 - mean) / std), norm.cdf((-0.25 - mean) / std))
    np.testing.assert_allclose(table["proba_de"], proba, atol=0.015)
    reference = face.model.size_factor_reference.numpy()
    np.testing.assert_allclose(table["scale1"], np.exp(mean_a[0] + v_a / 2) / reference)


def test_batch_correction_compares_batches_at_one_reference_batch(fitted):
    face, cells = fitted
    with pytest.warns(UserWarning, match="share almost no batch"):  # the groups are the batches
        corrected = face.differential_expression(cells, "batch", "a", "b", batch_correction=True)
    observed = face.differential_expression(cells, "batch", "a", "b", batch_correction=False)
    corrected, observed = (t.loc[["gene5", "gene6", "gene7"]] for t in (corrected, observed))
    assert (np.abs(corrected["lfc_mean"]) < 0.3).all()  # the same kinds of cells in a and b
    assert (observed["lfc_mean"] < -0.6).all()  # genes 5-7 are higher in batch b
    kinds = face.differential_expression(cells, "kind")
    assert list(pd.unique(kinds["comparison"])) == ["down vs Rest", "up vs Rest"]
    up = kinds[kinds["group1"] == "up"]
    assert (up.loc[["gene0", "gene1", "gene2"], "lfc_mean"] > 0.5).all()
    assert up["proba_de"].is_monotonic_decreasing
    columns = {"proba_de", "lfc_mean", "lfc_std", "bayes_factor", "scale1", "raw_mean2"}
    assert columns <= set(up.columns) and "is_de_fdr_0.05" in up.columns
    counts = cells.X.toarray()
    np.testing.assert_allclose(up["raw_mean1"], counts[cells.obs["kind"] == "up"].mean(0)[
        [face.gene_names.index(g) for g in up.index]
    ])  # fmt: skip


@pytest.mark.parametrize(
    "arguments, options, message",
    [
        (("tissue",), {}, "obs has no column 'tissue'"),
        (("kind", "sideways"), {}, "no cell in group 'sideways'"),
        (("kind", "up", "up"), {}, "group1 and group2 are both 'up'"),
        (("kind", "up"), dict(delta=0.0), "delta must be a positive"),
        (("kind", "up"), dict(fdr_target=1.0), r"fdr_target must lie in \(0, 1\)"),
        (("kind", "up"), dict(n_samples=0), "n_samples"),
        (("kind", "up"), dict(genes=["CD4"]), r"genes= names \['CD4'\]"),
        (("kind", "up"), dict(delta=50.0), "at most 20"),
        (("kind", "up"), dict(estimator="change"), "estimator must be one of"),
        (("kind", "up"), dict(weights="heavy"), "weights must be one of"),
        (("kind", "up"), dict(prior_counts=-1.0), "prior_counts must be a count"),
        (("kind", "up"), dict(min_detection=1.0), r"min_detection must be a share"),
        (("kind", "up"), dict(batch_correction="no"), "batch_correction must be True or False"),
        (("kind", "up"), dict(batch_correction=1), "batch_correction must be True or False"),
        (("kind", "up"), dict(counts="yes"), "counts must be True or False"),
        (("kind", "up"), dict(counts=None), "counts must be True or False"),
        (("depth",), {}, "looks continuous"),
        (("label",), {}, r"cell\(s\) without a label"),
        (("single", "one", "many"), {}, "Group 'one' .* holds 1 cell"),
    ],
)
def test_bad_de_requests_are_named(fitted, arguments, options, message):
    face, cells = fitted
    cells = cells.copy()
    cells.obs["depth"] = np.linspace(0.0, 1.0, N)  # a number a cell: not groups
    cells.obs["label"] = pd.Categorical(np.where(np.arange(N) < 5, None, "x"))
    cells.obs["single"] = pd.Categorical(np.where(np.arange(N) == 0, "one", "many"))
    with pytest.raises(ValueError, match=message):
        face.differential_expression(cells, *arguments, **options)


def test_numpy_booleans_are_read_as_the_booleans_they_are(fitted):
    """``np.False_`` (what a comparison of arrays gives) means False, not "given, so True"."""
    face, cells = fitted
    options = dict(n_samples=20, seed=0)
    table = face.differential_expression(cells, "kind", "up", batch_correction=np.False_, **options)
    assert not table["batch_correction"].any()
    plain = face.differential_expression(cells, "kind", "up", batch_correction=False, **options)
    pd.testing.assert_frame_equal(table, plain)


def _thinned(cells, gene: int, kept: float, seed: int = 0):
    """The cells with the "down" cells split in two halves balanced over the batches
    (``obs["half"]``), gene ``gene``'s counts binomially thinned to ``kept`` in the first."""
    rng = np.random.default_rng(seed)
    changed = cells.copy()
    down = np.flatnonzero(changed.obs["kind"] == "down")
    first = np.concatenate(
        [cells_b[::2] for cells_b in (down[changed.obs["batch"].iloc[down] == b] for b in "ab")]
    )
    half = np.full(N, None, dtype=object)
    half[down], half[first] = "second", "first"
    changed.obs["half"] = pd.Categorical(half)
    counts = changed.X.toarray()
    counts[first, gene] = rng.binomial(counts[first, gene].astype(int), kept)
    changed.X = sp.csr_matrix(counts)
    return changed


def test_group_sums_are_the_numpy_gps_rates_summed_over_each_groups_cells(fitted):
    from gpflow_svi_gplvm.singlecell.fitting.fitted import fitted_state
    from gpflow_svi_gplvm.singlecell.genes.group_expression import group_sums

    face, cells = fitted
    points = _point_latents(cells)  # exact: one draw a cell
    codes = (points.obs["kind"] == "up").to_numpy().astype(np.int64)
    columns = np.arange(D)
    rng = np.random.default_rng(0)
    down, up = group_sums(
        fitted_state(face.fitted), points, codes, 2, columns, ["a", "b"], 4000, "uniform", rng
    )
    gp, x = _NumpyGP(face.model), points.obsm["X_gplvm"]
    level = face.model.size_factor_reference.numpy()
    library = points.X.toarray().sum(axis=1)
    batch = (points.obs["batch"] == "b").to_numpy().astype(int)
    normalised = (
        np.mean(
            [
                np.exp(m + v[:, None] / 2)
                for m, _, v in (
                    gp.mean_and_covariance(X, X) for X in (_inputs(x, 0), _inputs(x, 1))
                )
            ],
            axis=0,
        )
        / level
    )
    own = np.concatenate([x, np.eye(2)[batch], np.zeros((N, 1))], axis=1)
    m, _, v = gp.mean_and_covariance(own, own)
    expected = library[:, None] / level * np.exp(m + v[:, None] / 2)
    counts = points.X.toarray()
    for sums, mine in ((down, codes == 0), (up, codes == 1)):
        assert sums.cells == mine.sum()
        np.testing.assert_allclose(sums.normalised, normalised[mine].sum(0), rtol=1e-6)
        np.testing.assert_allclose(sums.expected, expected[mine].sum(0), rtol=1e-6)
        np.testing.assert_allclose(sums.cross, (counts * expected)[mine].sum(0), rtol=1e-6)
        np.testing.assert_allclose(sums.counts_squared, (counts**2)[mine].sum(0))
        # the Bayesian bootstrap of the mean: its mean and its variance
        h, n = normalised[mine], mine.sum()
        draws = sums.resampled_means()
        np.testing.assert_allclose(draws.mean(0), h.mean(0), rtol=0.01)
        variance = ((h - h.mean(0)) ** 2).sum(0) / (n * (n + 1))
        np.testing.assert_allclose(draws.var(0), variance, rtol=0.1)


def test_importance_weights_are_the_posterior_of_x_by_quadrature(fitted):
    from scipy.stats import nbinom

    from gpflow_svi_gplvm.likelihoods import base_likelihood
    from gpflow_svi_gplvm.singlecell.genes.latent_weights import log_importance_weights

    face, cells = fitted
    rng = np.random.default_rng(1)
    mean, variance = cells.obsm["X_gplvm"][:2], cells.obsm["X_gplvm_var"][:2]
    x = mean + np.sqrt(variance) * rng.standard_normal((3, 2, Q))
    counts = cells.X.toarray()[:2]
    sizes = counts.sum(axis=1) / face.model.size_factor_reference.numpy()
    observed = np.concatenate([np.eye(2)[[0, 0]], np.zeros((2, 1))], axis=1)  # batch a, log s 0
    found = log_importance_weights(face.model, x, mean, variance, observed, None, sizes, counts)
    gp = _NumpyGP(face.model)
    r = 1.0 / base_likelihood(face.model.likelihood).dispersion.numpy()
    nodes, weights = np.polynomial.hermite_e.hermegauss(80)
    for t in range(3):
        inputs = np.concatenate([x[t], np.eye(2)[[0, 0]], np.log(sizes)[:, None]], axis=1)
        m, _, v = gp.mean_and_covariance(inputs, inputs)
        f = m[..., None] + np.sqrt(v)[:, None, None] * nodes  # [cell, gene, node]
        rate = np.exp(f)
        log_pmf = nbinom.logpmf(counts[..., None], r[:, None], r[:, None] / (r[:, None] + rate))
        data = (log_pmf @ weights / np.sqrt(2 * np.pi)).sum(axis=1)
        prior = norm_logpdf(x[t]).sum(axis=1)
        q = norm_logpdf((x[t] - mean) / np.sqrt(variance)).sum(axis=1) - 0.5 * np.log(variance).sum(
            axis=1
        )
        np.testing.assert_allclose(found[t], data + prior - q, rtol=1e-4, atol=1e-3)


def norm_logpdf(z: np.ndarray) -> np.ndarray:
    return -0.5 * z**2 - 0.5 * np.log(2 * np.pi)


def test_a_change_no_latent_axis_carries_is_found_by_the_counts_term(fitted):
    """The model fitted before gene 4 was thinned in half of the "down" cells (no latent axis
    can carry it): f at the cells' q(x) does not see the change, the counts do."""
    face, cells = fitted
    changed = _thinned(cells, gene=4, kept=0.2)
    found = face.differential_expression(changed, "half", "first", "second")
    gp_only = face.differential_expression(changed, "half", "first", "second", counts=False)
    pairs = face.differential_expression(changed, "half", "first", "second", estimator="pairs")
    assert found.loc["gene4", "is_de_fdr_0.05"] and found.loc["gene4", "lfc_mean"] < -1.5
    assert found["is_de_fdr_0.05"].sum() == 1  # the other genes are alike in both halves
    assert not gp_only["is_de_fdr_0.05"].any() and not pairs["is_de_fdr_0.05"].any()
    assert abs(gp_only.loc["gene4", "lfc_mean"]) < 0.5


def test_q_u_shares_one_covariance_so_a_gene_of_one_count_looked_certain(fitted):
    """The cause of sparse genes declared: f's posterior variance is the same for every gene
    (one q(u) covariance), so the GP's view of a gene with one count is as sure as of any. The
    counts term leaves such a gene at no change."""
    face, cells = fitted
    X = tf.constant(_inputs(cells.obsm["X_gplvm"], 0))
    _, variance = face.model.predict_f(X)
    assert np.ptp(variance.numpy(), axis=1).max() == 0.0  # alike for every gene
    sparse = cells.copy()
    counts = sparse.X.toarray()
    counts[:, 0] = 0.0
    counts[np.flatnonzero(sparse.obs["kind"] == "up")[0], 0] = 1.0  # one count in all
    sparse.X = sp.csr_matrix(counts)
    gp_only = face.differential_expression(sparse, "kind", "up", "down", counts=False)
    found = face.differential_expression(sparse, "kind", "up", "down")
    assert gp_only.loc["gene0", "proba_de"] > 0.95  # the GP still sees gene 0 up
    assert found.loc["gene0", "proba_de"] < 0.5 and not found.loc["gene0", "is_de_fdr_0.05"]
    assert found.loc[["gene1", "gene2"], "is_de_fdr_0.05"].all()


def test_pairs_of_cells_spread_with_the_cells_the_groups_estimator_with_the_mean(fitted):
    face, cells = fitted
    pairs = face.differential_expression(cells, "kind", "up", "down", estimator="pairs")
    groups = face.differential_expression(cells, "kind", "up", "down")
    genes = ["gene0", "gene1", "gene2"]
    assert (pairs.loc[genes, "lfc_std"] > 2 * groups.loc[genes, "lfc_std"]).all()
    assert groups.loc[genes, "is_de_fdr_0.05"].all()


def test_a_group_of_a_mapped_batch_is_compared_at_its_own_batch_with_a_warning(fitted):
    face, cells = fitted
    learnt = np.where(np.arange(D) < 3, 2.0, 0.0)[None]  # the new batch's effect: genes 0-2
    saved, face.batch_offsets = face.batch_offsets, BatchOffsets(["c"], learnt)
    try:
        mapped = cells.copy()
        batch = mapped.obs["batch"].astype(str).to_numpy()
        batch[:20] = "c"
        mapped.obs["batch"] = pd.Categorical(batch)
        with pytest.warns(UserWarning, match="map_query learnt.*own batch instead"):
            own = face.differential_expression(mapped, "batch", "c", "a")
        with pytest.warns(UserWarning, match="removes the contrast"):
            corrected = face.differential_expression(
                mapped, "batch", "c", "a", batch_correction=True
            )
    finally:
        face.batch_offsets = saved
    assert not own["batch_correction"].any() and corrected["batch_correction"].all()


def test_de_reads_an_h5ad_path_as_the_anndata_and_weighs_pairs_by_importance(fitted, tmp_path):
    face, cells = fitted
    path = tmp_path / "cells.h5ad"
    cells.write_h5ad(path)
    from_file = face.differential_expression(str(path), "kind", "up", "down")
    in_memory = face.differential_expression(cells, "kind", "up", "down")
    pd.testing.assert_frame_equal(from_file, in_memory)
    some = face.differential_expression(cells, "kind", "up", "down", genes=["gene4", "gene0"])
    pd.testing.assert_series_equal(some["proba_de"], in_memory.loc[some.index, "proba_de"])
    weighed = face.differential_expression(
        cells, "kind", "up", "down", estimator="pairs", weights="importance"
    )
    uniform = face.differential_expression(cells, "kind", "up", "down", estimator="pairs")
    genes = ["gene0", "gene1", "gene2"]
    np.testing.assert_allclose(
        weighed.loc[genes, "lfc_mean"], uniform.loc[genes, "lfc_mean"], atol=0.3
    )
    assert weighed.loc[genes, "lfc_mean"].min() > 0.5


def test_the_table_reports_detection_low_expression_and_its_expected_fdr(fitted):
    from gpflow_svi_gplvm.singlecell.genes.differential import de_summary

    face, cells = fitted
    table = face.differential_expression(cells, "kind", min_detection=0.99, delta=None)
    low = table["low_expression"].to_numpy()
    detected = table[["non_zeros_proportion1", "non_zeros_proportion2"]].max(axis=1)
    np.testing.assert_array_equal(low, detected < 0.99)
    assert not table["is_de_fdr_0.05"][low].any()
    summary = de_summary(table)
    assert list(summary.index) == ["down vs Rest", "up vs Rest"]
    for name, part in table.groupby("comparison"):
        declared = part["is_de_fdr_0.05"].to_numpy(bool)
        assert summary.loc[name, "declared"] == declared.sum()
        assert summary.loc[name, "expected_fdr"] <= 0.05
        assert (part["expected_fdr"][declared] <= 0.05).all()
        assert part["delta"].nunique() == 1 and part["delta"].iloc[0] >= 0.1  # from the data


def _two_classes(rng, count: int):
    """x ~ N(+-1, 1) [count, 1] by class [count]: the true p(class 1 | x) is sigmoid(2 x)."""
    classes = rng.integers(0, 2, count)
    return rng.normal(2.0 * classes - 1.0, 1.0)[:, None], classes


def test_calibration_error_is_near_zero_for_true_probabilities_and_the_gap_otherwise():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0.5, 1.0, 40000)
    labels = (rng.uniform(size=40000) > truth).astype(int)  # class 0 with probability truth
    honest = np.stack([truth, 1 - truth], axis=1)
    assert expected_calibration_error(honest, labels) < 0.01
    overconfident = np.stack([np.full(40000, 0.9), np.full(40000, 0.1)], axis=1)
    flat = (rng.uniform(size=40000) > 0.7).astype(int)  # right 70% of the time, sure of 90%
    assert expected_calibration_error(overconfident, flat) == pytest.approx(0.2, abs=0.01)


def test_transferred_probabilities_match_the_true_ones_and_average_over_q_x():
    rng = np.random.default_rng(1)
    x, classes = _two_classes(rng, 3000)
    batches = rng.integers(0, 3, len(x))  # mixed in x, as batches after integration
    transfer = LabelTransfer(num_neighbours=40).fit(x, np.zeros_like(x), classes, batches)
    query, truth = _two_classes(rng, 4000)
    found = transfer.predict_proba(query, np.zeros_like(query))
    exact = 1 / (1 + np.exp(-2 * query[:, 0]))
    assert np.abs(found[:, 1] - exact).mean() < 0.05
    assert expected_calibration_error(found, truth) < 0.04
    # A query with q(x*) = N(m, s^2): its probabilities average those of the points it may be
    # at (Gauss-Hermite over x*), here with every reference cell a neighbour.
    small = LabelTransfer(200, 4000, bandwidth=0.3, floor=0.01, calibration=None)
    small.fit(x[:200], np.zeros((200, 1)), classes[:200])
    nodes, weights = np.polynomial.hermite_e.hermegauss(40)
    for m, s in ((0.2, 0.5), (-1.0, 1.5)):
        at_nodes = small.predict_proba((m + s * nodes)[:, None], np.zeros((40, 1)))
        expected = weights @ at_nodes / weights.sum()
        found = small.predict_proba(np.array([[m]]), np.array([[s**2]]))[0]
        np.testing.assert_allclose(found, expected, atol=0.01)


def test_labels_are_transferred_between_anndatas_and_bad_input_named(fitted):
    face, cells = fitted
    reference, query = cells[:40].copy(), cells[40:].copy()
    table = transfer_labels(reference, query, "kind", groups_key="batch", num_neighbours=10)
    assert list(table.columns) == ["down", "up"] and np.allclose(table.sum(axis=1), 1.0)
    assert (query.obs["kind_transferred"] == table.idxmax(axis=1)).all()
    assert (query.obs["kind_transferred_probability"] == table.max(axis=1)).all()
    with pytest.raises(ValueError, match="no column 'celltype'"):
        transfer_labels(reference, query, "celltype")
    del query.obsm["X_gplvm_var"]
    with pytest.raises(ValueError, match=r"query cells have no obsm\['X_gplvm'\]"):
        transfer_labels(reference, query, "kind")
    with pytest.raises(ValueError, match="one label only"):
        LabelTransfer().fit(np.zeros((5, 2)), np.zeros((5, 2)), ["t"] * 5)
    unlabelled = reference.copy()
    unlabelled.obs["none"] = pd.Series([None] * 40, index=unlabelled.obs_names, dtype=object)
    with pytest.raises(ValueError, match=r"obs\['none'\] has no label: every value is missing"):
        transfer_labels(unlabelled, query, "none")
    # Through the model, the query's q(x) is inferred as transform would, and the reference's
    # batches are held out in turn.
    probabilities = face.transfer_labels(reference, query, "kind", num_neighbours=10)
    assert probabilities.shape == (20, 2) and "X_gplvm_var" not in query.obsm
    assert (query.obs["kind_transferred"] == query.obs["kind"]).mean() > 0.8


def test_a_gaussian_models_expression_is_its_mean_through_the_identity():
    cells = _cells(1)
    cells.X = sp.csr_matrix(np.log1p(cells.X.toarray()))
    face = SingleCellGPLVM(Q, batch_key="batch", likelihood="gaussian", size_factors=None)
    face.fit(cells, iterations=30, batch_size=30, progress=False)
    points = _point_latents(cells)
    mean, variance = face.normalized_expression(points, ["a", "b"], return_variance=True)
    x = points.obsm["X_gplvm"]
    A, B = (np.concatenate([x, np.tile(np.eye(2)[k], (N, 1))], axis=1) for k in (0, 1))
    (m_a, v_a), (m_b, v_b) = (face.model.predict_f(X) for X in (A, B))
    c = paired_covariance(face.model, tf.constant(A), tf.constant(B))
    np.testing.assert_allclose(mean.to_numpy(), (m_a + m_b).numpy() / 2, rtol=1e-10)
    np.testing.assert_allclose(variance.to_numpy(), (v_a + v_b + 2 * c).numpy() / 4, rtol=1e-8)
    with pytest.raises(ValueError, match="a Gaussian likelihood has no library"):
        face.normalized_expression(points, library_size="latent")
    with pytest.raises(ValueError, match="count likelihood"):
        face.differential_expression(points, "kind", "up")


def test_the_held_out_likelihood_of_cells_is_the_models_of_their_rows(fitted, tmp_path):
    face, cells = fitted
    new = cells[:5].copy()
    new.X = sp.csr_matrix(new.X.toarray() * np.array([[1.0], [0.0], [1.0], [1.0], [1.0]]))
    options = dict(n_samples=16, iterations=20, seed=3)
    found = face.marginal_log_likelihood(new[:, ::-1].copy(), **options, block_size=2)
    assert list(found.columns) == ["log_likelihood", "standard_error"]
    assert list(found.index) == list(new.obs_names)
    # The model's estimate of the rows with counts, their one-hot batch and library size factor.
    scored = [0, 2, 3, 4]
    counts = new.X.toarray()[scored]
    expected = marginal_log_likelihood(
        face.model,
        counts,
        num_samples=16,
        iterations=20,
        seed=3,
        covariates=np.eye(2)[(new.obs["batch"] == "b").to_numpy()[scored].astype(int)],
        size_factors=counts.sum(axis=1) / face.model.size_factor_reference.numpy(),
    )
    np.testing.assert_allclose(found.log_likelihood.to_numpy()[scored], expected[0], rtol=1e-10)
    np.testing.assert_allclose(found.standard_error.to_numpy()[scored], expected[1], rtol=1e-8)
    assert found.iloc[1].tolist() == [0.0, 0.0]  # no counts at a size factor of 0: p = 1
    assert (found.log_likelihood.to_numpy()[scored] < 0).all()
    new.write_h5ad(tmp_path / "new.h5ad")
    from_file = face.marginal_log_likelihood(tmp_path / "new.h5ad", **options)
    np.testing.assert_allclose(from_file.to_numpy(), found.to_numpy(), rtol=1e-10)


def test_bad_held_out_likelihood_requests_are_named(fitted):
    face, cells = fitted
    for options, message in [
        (dict(n_samples=0), "n_samples"),
        (dict(n_samples=1), r"n_samples must be an integer >= 2"),  # no standard error of one
        (dict(widening=0.5), "widening must be a number >= 1"),
        (dict(iterations=-1), "iterations"),
    ]:
        with pytest.raises(ValueError, match=message):
            face.marginal_log_likelihood(cells[:3], **options)
    unknown = cells[:3].copy()
    unknown.obs["batch"] = pd.Categorical(["c"] * 3)
    with pytest.raises(ValueError, match="categories the model was not fitted with"):
        face.marginal_log_likelihood(unknown, n_samples=2, iterations=1)
    saved, face.batch_offsets = face.batch_offsets, BatchOffsets(["c"], np.zeros((1, D)))
    try:
        with pytest.raises(ValueError, match="whose effect map_query learnt"):
            face.marginal_log_likelihood(unknown, n_samples=2, iterations=1)
    finally:
        face.batch_offsets = saved
