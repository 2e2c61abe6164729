"""Mapping a query onto a fitted reference: new batches' effects learnt with the model frozen
(the reference's embedding bit-identical), kept for later transforms and saved with the model,
genes aligned by name, and what cannot be mapped refused by name."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")
sp = pytest.importorskip("scipy.sparse")
optimize = pytest.importorskip("scipy.optimize")
tf = pytest.importorskip("tensorflow")

from gpflow.utilities import parameter_dict  # noqa: E402

from gpflow_svi_gplvm.likelihoods import masked  # noqa: E402
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.cell_mapper import INFERENCE_STEPS, CellMapper  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.novelty import Novelty  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.offsets import (  # noqa: E402
    OffsetUpdates,
    new_batch_prior_variance,
)

N, D, Q = 120, 30, 2
SHIFT = 1.2  # the new batch's effect on its genes, on the log scale


def _cells(
    seed: int, batches: list[str], shifted: str | None = None, kinds: int = 2
) -> anndata.AnnData:
    """Counts of ``kinds`` cell types (kind 1 raises the first ten genes, kind 2 the next ten);
    the batch ``shifted`` scales the last ten genes by e^SHIFT."""
    rng = np.random.default_rng(seed)
    kind = rng.integers(0, kinds, N)
    batch = np.array(batches)[np.arange(N) % len(batches)]
    genes = np.arange(D)
    log_rate = 1.0 + 1.5 * ((kind[:, None] == 1) & (genes < 10))
    log_rate = log_rate + 1.5 * ((kind[:, None] == 2) & (genes >= 10) & (genes < 20))
    log_rate = log_rate + SHIFT * ((batch == shifted)[:, None] & (np.arange(D) >= 20))
    counts = rng.poisson(rng.uniform(0.7, 1.4, N)[:, None] * np.exp(log_rate)).astype(np.float32)
    counts[:, 0] += 1
    obs = pd.DataFrame(
        {"batch": pd.Categorical(batch), "kind": kind}, index=[f"c{seed}-{i}" for i in range(N)]
    )
    cells = anndata.AnnData(X=sp.csr_matrix(counts), obs=obs)
    cells.var_names = [f"g{j}" for j in range(D)]
    return cells


@pytest.fixture(scope="module")
def mapped():
    reference = _cells(0, ["a", "b"])
    face = SingleCellGPLVM(Q, batch_key="batch", num_inducing=10, seed=0)
    face.fit(reference, iterations=300, batch_size=40, progress=False)
    before = {k: v.numpy().copy() for k, v in parameter_dict(face.model).items()}
    embedding = reference.obsm["X_gplvm"].copy()
    query = _cells(1, ["a", "new"], shifted="new")
    face.map_query(query, progress=False)
    return face, reference, embedding, before, query


def test_a_new_batchs_effect_is_learnt_and_the_reference_does_not_move(mapped):
    face, reference, embedding, before, query = mapped
    after = parameter_dict(face.model)
    assert all(np.array_equal(after[name].numpy(), value) for name, value in before.items())
    np.testing.assert_array_equal(face.model.latent_mean().numpy(), embedding)
    assert face.batch_offsets.categories == ["new"]
    offsets = face.batch_offsets.offsets[0]  # [D]
    # The shifted genes moved by about SHIFT against the others (on f's log scale).
    assert offsets[20:].mean() - offsets[:20].mean() == pytest.approx(SHIFT, abs=0.35)
    # Cells of the new batch land with the reference's cells of their kind.
    new = (query.obs["batch"] == "new").to_numpy()
    centres = [embedding[reference.obs["kind"] == k].mean(0) for k in (0, 1)]
    nearest = np.argmin(
        [np.linalg.norm(query.obsm["X_gplvm"][new] - c, axis=1) for c in centres], axis=0
    )
    assert np.mean(nearest == query.obs["kind"].to_numpy()[new]) > 0.9


def test_a_new_batchs_offsets_start_from_its_pooled_expression(mapped):
    """Reference: the candidates' rates by GPflow's predict_y at a size factor of one, and the
    chosen cells' pooled counts per unit size factor, in NumPy."""
    face, _, _, _, query = mapped
    mapper = CellMapper(face.model, seed=0)
    laplace = mapper.inference
    inputs = laplace._candidate_inputs.numpy().copy()
    inputs[:, -1] = 0.0  # log size factor: one
    at = np.concatenate([laplace._candidates_at.numpy(), inputs], axis=1)
    typical = face.model.predict_y(at)[0].numpy().mean(0)
    np.testing.assert_allclose(laplace.typical_rate(), typical, rtol=1e-4)
    read = face.fitted.read_query(query, learn=False)
    new = np.flatnonzero(read.batches == "new")
    Y, given = read.rows.take(new), read.inputs[new]
    start = mapper._start_offsets(Y, given, np.zeros(len(new), int), 1)[0]
    pooled = Y.sum(0) / np.exp(given[:, -1]).sum()
    np.testing.assert_allclose(start, np.log(pooled) - np.log(typical), rtol=1e-4, atol=1e-4)


def test_a_new_batchs_offsets_are_the_map_of_their_objective_from_any_start(mapped):
    """Reference: scipy's maximum, in double precision, of sum_n GPflow's variational
    expectations (the masked likelihood at predict_f + gamma) - |gamma|^2 / (2 w). From a start
    far below it (a gene the fitted cells hardly express: the exp link flat there), the damped
    steps reach the same offsets, where undamped ones jumped to w * sum_n y and overflowed."""
    face, _, _, _, query = mapped
    read = face.fitted.read_query(query, learn=False)
    new = np.flatnonzero(read.batches == "new")[:30]
    Y, given = read.rows.take(new), read.inputs[new]
    latents = query.obsm["X_gplvm"][new]
    w = new_batch_prior_variance(face.model, 2)
    updates = OffsetUpdates(face.model, w)
    which = np.zeros(len(new), int)
    near = updates(Y, given, latents, which, np.zeros((1, D)))[0]
    far = updates(Y, given, latents, which, np.full((1, D), -15.0))[0]
    X = np.concatenate([latents, given], axis=1)
    mean, var = (t.numpy() for t in face.model.predict_f(X))
    likelihood = masked(face.model.likelihood)

    def objective(gamma: np.ndarray) -> tuple[float, np.ndarray]:
        gamma_t = tf.constant(gamma)
        with tf.GradientTape() as tape:
            tape.watch(gamma_t)
            terms = likelihood.variational_expectations(X, mean + gamma_t, var, Y)
            value = -tf.reduce_sum(terms) + tf.reduce_sum(gamma_t**2) / (2 * w)
        return float(value), tape.gradient(value, gamma_t).numpy()

    best = optimize.minimize(objective, np.zeros(D), jac=True, method="BFGS", tol=1e-12).x
    np.testing.assert_allclose(near, best, atol=2e-3)
    np.testing.assert_allclose(far, best, atol=2e-3)


def test_learnt_batches_are_kept_for_transform_and_saved_with_the_model(mapped, tmp_path):
    face, _, _, _, query = mapped
    again = query.copy()
    np.testing.assert_array_equal(face.transform(again), query.obsm["X_gplvm"])
    loaded = SingleCellGPLVM.load(face.save(tmp_path / "model"))
    np.testing.assert_array_equal(loaded.transform(query.copy()), query.obsm["X_gplvm"])
    other = _cells(2, ["other"])
    with pytest.raises(ValueError, match=r"\['other'\].*map_query"):
        face.transform(other)


def test_query_genes_are_aligned_by_name_and_missing_ones_named(mapped):
    face, _, _, _, query = mapped
    reordered = query[:, list(reversed(query.var_names))].copy()
    reordered.var_names = list(reversed(query.var_names))
    np.testing.assert_array_equal(face.transform(reordered), query.obsm["X_gplvm"])
    extra = anndata.concat([query, query[:, :3]], axis=1, merge="first")
    extra.var_names = list(query.var_names) + ["x1", "x2", "x3"]
    np.testing.assert_array_equal(face.transform(extra), query.obsm["X_gplvm"])
    with pytest.raises(ValueError, match=r"lack 2 of the fitted genes .*'g3', 'g7'"):
        face.map_query(query[:, [g for g in query.var_names if g not in ("g3", "g7")]].copy())


def test_what_cannot_be_mapped_is_refused_by_name(mapped):
    face, _, _, _, query = mapped
    twice = query.copy()
    twice.var_names = ["g0"] + list(query.var_names[1:-1]) + ["g0"]
    with pytest.raises(ValueError, match="var_names repeat"):
        face.map_query(twice)
    halves = query.copy()
    halves.X = halves.X * 0.5
    with pytest.raises(ValueError, match="non-negative integers"):
        face.map_query(halves)
    no_key = query.copy()
    del no_key.obs["batch"]
    with pytest.raises(ValueError, match="obs has no column 'batch'"):
        face.map_query(no_key)
    with pytest.raises(ValueError, match="fit_cells must be a positive integer"):
        face.map_query(query, fit_cells=0)
    with pytest.raises(ValueError, match="Fit the model first"):
        SingleCellGPLVM(Q, batch_key="batch").map_query(query)
    assert new_batch_prior_variance(face.model, 2) > 0


def test_genes_a_query_lacks_are_left_out_of_each_cells_likelihood(mapped):
    """Reference: each cell's mode of phi(x) = -sum over its measured genes of GPflow's
    variational expectations (the masked likelihood, NaN for the genes lacking) at predict_f
    + |x|^2 / 2, by scipy; its size factor the measured genes' counts over their share of the
    typical expression (the module's formula)."""
    face, _, _, _, query = mapped
    cells = query[(query.obs["batch"] == "a").to_numpy()][:2].copy()
    lacking = ["g3", "g7", "g25"]
    present = np.array([g not in lacking for g in cells.var_names])
    kept = cells[:, present].copy()
    with pytest.raises(ValueError, match="lack 3 of the fitted genes.*missing_genes='marginalise'"):
        face.transform(kept.copy())
    with pytest.raises(ValueError, match="missing_genes must be one of"):
        face.transform(kept.copy(), missing_genes="zeros")
    with pytest.raises(ValueError, match="share 5 of the 30 fitted genes"):
        face.transform(cells[:, :5].copy(), missing_genes="marginalise")
    silent = kept.copy()
    silent.X = sp.csr_matrix(np.asarray(silent.X.todense()) * (np.arange(2) == 1)[:, None])
    with pytest.raises(
        ValueError, match=r"cell 'c1-.*' has no counts in the fitted genes the query"
    ):
        face.transform(silent, missing_genes="marginalise")
    found = face.transform(kept, missing_genes="marginalise")
    spread = kept.obsm["X_gplvm_var"]
    typical = face.fitted.mapper(INFERENCE_STEPS).typical_rate()
    share = typical[present].sum() / typical.sum()
    full = face.fitted.read_query(cells, learn=False)
    inputs = full.inputs[:]
    Y = np.asarray(cells.X.todense(), dtype=np.float64)
    Y[:, ~present] = np.nan
    library = np.nansum(Y, axis=1) / share
    inputs[:, -1] = np.log(library / float(face.model.size_factor_reference.numpy()))
    likelihood = masked(face.model.likelihood)
    for y, c, mode, variance in zip(Y, inputs, found, spread):

        def phi(x: np.ndarray, y: np.ndarray = y, c: np.ndarray = c) -> float:
            X = np.concatenate([x, c])[None]
            mean, var = face.model.predict_f(X)
            terms = likelihood.variational_expectations(X, mean, var, y[None])
            return float(-np.sum(terms)) + 0.5 * float(x @ x)

        best = optimize.minimize(phi, mode + 0.3, method="BFGS", tol=1e-10).x
        # The steps stop at a relative decrease of 1e-4: the mode to a small share of its spread.
        assert np.all(np.abs(mode - best) < 0.05 * np.sqrt(variance)), (mode, best, variance)


def test_a_new_batch_lacking_genes_is_learnt_from_the_genes_it_has(mapped, tmp_path):
    """The batch "new" mapped again under another name, lacking three genes: its offsets on the
    genes it has are those learnt from every gene, within the noise of a fit from 60 cells."""
    face, _, _, _, query = mapped
    loaded = SingleCellGPLVM.load(face.save(tmp_path / "model"))
    cells = query[(query.obs["batch"] == "new").to_numpy()].copy()
    cells.obs["batch"] = pd.Categorical(["newer"] * cells.n_obs)
    lacking = ["g3", "g12", "g25"]
    present = np.array([g not in lacking for g in cells.var_names])
    found = loaded.map_query(cells[:, present].copy(), progress=False, missing_genes="marginalise")
    assert loaded.batch_offsets.categories == ["new", "newer"]
    full, partial = loaded.batch_offsets.offsets
    assert np.all(np.isfinite(partial))
    np.testing.assert_allclose(partial[present], full[present], atol=0.25)
    before = query.obsm["X_gplvm"][(query.obs["batch"] == "new").to_numpy()]
    assert np.median(np.linalg.norm(found - before, axis=1)) < 0.25 * np.median(
        np.linalg.norm(before - before.mean(0), axis=1)
    )


@pytest.fixture(scope="module")
def one_kind():
    """A reference of one batch category ("a") holding cells of kinds 0 and 1, and a query of
    that batch holding kind 2 as well."""
    cells = _cells(3, ["a"], kinds=3)
    kind = cells.obs["kind"].to_numpy()
    reference, query = cells[kind < 2].copy(), _cells(4, ["a"], kinds=3)
    face = SingleCellGPLVM(Q, batch_key="batch", num_inducing=10, seed=0)
    face.fit(reference, iterations=200, batch_size=40, progress=False)
    return face, reference, query


def test_a_reference_of_one_batch_or_none_maps_a_new_batch_with_a_warning(one_kind):
    face, reference, _ = one_kind
    query = _cells(5, ["a", "new"], shifted="new")
    with pytest.warns(UserWarning, match=r"one batch category \('a'\).*\['new'\].*two or more"):
        face.map_query(query, progress=False)
    assert face.batch_offsets.categories == ["new"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # cells of the fitted batch: nothing to warn of
        face.transform(_cells(6, ["a"]))
    plain = SingleCellGPLVM(Q, num_inducing=10, seed=0)
    plain.fit(reference[:, :10].copy(), iterations=20, batch_size=30, progress=False)
    with pytest.warns(UserWarning, match=r"without a batch \(batch_key=None\).*batch_key="):
        plain.map_query(query[:, :10].copy(), progress=False)


def test_novelty_is_the_share_of_reference_cells_less_isolated():
    """Reference: each cell's mean distance to its k nearest reference cells in lengthscale
    units, and each reference cell's to its k nearest others, by brute force in NumPy."""
    rng = np.random.default_rng(0)
    reference, new = rng.normal(size=(60, 3)), rng.normal(size=(25, 3)) * 2.0
    lengthscales, k = np.array([0.5, 1.0, 4.0]), 4
    novelty = Novelty(reference, lengthscales, neighbours=k)

    def isolation(cells: np.ndarray, leave_out_self: bool) -> np.ndarray:
        distances = np.linalg.norm(
            (cells[:, None] - reference[None]) / lengthscales, axis=-1
        )  # [n, S]
        ordered = np.sort(distances, axis=1)[:, int(leave_out_self) :]
        return ordered[:, :k].mean(axis=1)

    own, found = isolation(reference, True), isolation(new, False)
    expected = (own[None, :] < found[:, None]).mean(axis=1)
    np.testing.assert_allclose(novelty.isolation(new), found, rtol=1e-12)
    np.testing.assert_allclose(novelty(new), expected, rtol=0, atol=0)
    assert novelty(reference[:1] + 100.0)[0] == 1.0  # beyond every reference cell
    with pytest.raises(ValueError, match="two or more reference cells"):
        Novelty(reference[:1], lengthscales)


def test_cells_of_a_type_the_reference_lacks_are_more_novel_and_left_unassigned(one_kind, tmp_path):
    face, reference, query = one_kind
    query = query.copy()
    face.transform(query)
    novelty, kind = query.obs["gplvm_novelty"].to_numpy(), query.obs["kind"].to_numpy()
    assert np.all((novelty >= 0) & (novelty <= 1))
    # Ranked: each held-out cell against each known one (the AUROC).
    auroc = np.mean(novelty[kind == 2][:, None] > novelty[kind < 2][None, :])
    assert auroc > 0.9, auroc
    assert np.median(novelty[kind < 2]) < 0.9
    loaded = SingleCellGPLVM.load(face.save(tmp_path / "model"))
    again = query.copy()
    loaded.transform(again)  # the same reference cells after a save: the same novelty
    np.testing.assert_allclose(again.obs["gplvm_novelty"], novelty, atol=1e-12)
    reference.obs["type"] = reference.obs["kind"].astype(str)
    face.transfer_labels(reference, query, "type", novel_above=0.99, unassigned_below=0.0)
    left = (query.obs["type_transferred"] == "unassigned").to_numpy()
    np.testing.assert_array_equal(left, novelty > 0.99)
    with pytest.raises(ValueError, match=r"novel_above must be a novelty in \[0, 1\]"):
        face.transfer_labels(reference, query, "type", novel_above=99)
    del query.obs["gplvm_novelty"]
    with pytest.raises(ValueError, match="no column 'gplvm_novelty'.*transform or map_query"):
        face.transfer_labels(reference, query, "type", novel_above=0.99)
