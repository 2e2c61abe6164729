"""Label transfer's calibration map against known maps, rare types, the warning of a reference
of one batch, and cells left unassigned (numpy toys and AnnDatas with a stored q(x): no model)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")
pd = pytest.importorskip("pandas")

from scipy.special import softmax  # noqa: E402

from gpflow_svi_gplvm.metrics import expected_calibration_error  # noqa: E402
from gpflow_svi_gplvm.singlecell.genes.labels import (  # noqa: E402
    UNASSIGNED,
    LabelTransfer,
    assigned_labels,
    calibrated,
    fit_calibration,
    label_mixing,
    transfer_labels,
)


def _known_map(rng, count: int, slope: float, biases: np.ndarray):
    """Probabilities [count, T] and classes drawn from softmax(slope log p + biases)."""
    probabilities = rng.dirichlet(np.ones(len(biases)), count)
    truth = softmax(slope * np.log(probabilities) + biases, axis=1)
    classes = (rng.uniform(size=(count, 1)) > truth.cumsum(axis=1)).sum(axis=1)
    return probabilities, classes


def test_the_calibration_map_is_recovered_from_draws_of_a_known_one():
    rng = np.random.default_rng(0)
    slope, biases = 0.5, np.array([0.8, -0.4, 0.0])  # the last bias is the fixed reference
    probabilities, truth = _known_map(rng, 20000, slope, biases)
    weights = np.full(len(truth), 1 / len(truth))
    _, found_slope, found_biases = fit_calibration(probabilities, truth, weights, "bias")
    assert found_slope == pytest.approx(slope, abs=0.03)
    np.testing.assert_allclose(found_biases, biases, atol=0.05)
    # The loss is the weighted mean -log p(truth) of the map: computed directly.
    loss, *_ = fit_calibration(probabilities, truth, weights, None)
    direct = -np.log(probabilities[np.arange(len(truth)), truth]).mean()
    assert loss == pytest.approx(direct)
    mapped = calibrated(probabilities, found_slope, found_biases)
    assert expected_calibration_error(mapped, truth) < 0.02
    assert expected_calibration_error(probabilities, truth) > 0.1
    _, temperature_slope, zero = fit_calibration(probabilities, truth, weights, "temperature")
    assert temperature_slope != 1.0 and not zero.any()


def _three_types(rng, count: int, shares=(0.6, 0.37, 0.03)):
    """Points [count, 2] of three types around three centres (the last one rare) and types."""
    types = rng.choice(3, count, p=shares)
    centres = np.array([[0.0, 0.0], [3.0, 0.0], [1.5, 2.5]])
    return centres[types] + rng.normal(0.0, 0.8, (count, 2)), types


def test_held_out_probabilities_are_calibrated_and_a_rare_type_is_found():
    rng = np.random.default_rng(1)
    x, types = _three_types(rng, 3000)
    batches = rng.integers(0, 3, len(x))
    transfer = LabelTransfer(num_neighbours=20, n_samples=4).fit(
        x, np.full_like(x, 0.05), types, batches
    )
    query, truth = _three_types(rng, 3000)
    probabilities = transfer.predict_proba(query, np.full_like(query, 0.05))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0)
    assert expected_calibration_error(probabilities, truth) < 0.04
    rare = truth == 2
    assert (probabilities[rare].argmax(axis=1) == 2).mean() > 0.6
    assert transfer.temperature_ > 0 and transfer.biases_.shape == (3,)


@pytest.mark.parametrize("groups", [None, np.zeros(300, int)], ids=["none", "one"])
def test_a_reference_of_one_batch_or_none_is_calibrated_on_folds_with_a_warning(groups):
    rng = np.random.default_rng(2)
    x, types = _three_types(rng, 300, shares=(0.5, 0.3, 0.2))
    with pytest.warns(UserWarning, match="random folds of its cells"):
        LabelTransfer(10, 2).fit(x, np.zeros_like(x), types, groups)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        LabelTransfer(10, 2).fit(x, np.zeros_like(x), types, np.arange(300) % 2)


def test_cells_below_the_threshold_or_flagged_are_unassigned():
    table = pd.DataFrame([[0.9, 0.1], [0.55, 0.45], [0.2, 0.8]], columns=["B", "T"])
    assert list(assigned_labels(table)) == ["B", "B", "T"]
    left = assigned_labels(table, 0.6, np.array([False, False, True]))
    assert list(left) == ["B", UNASSIGNED, UNASSIGNED]
    assert list(left.categories) == ["B", "T", UNASSIGNED]


def _embedded(rng, count: int, batches: int = 2) -> anndata.AnnData:
    x, types = _three_types(rng, count, shares=(0.5, 0.3, 0.2))
    names = np.array(["B", "T", "NK"])[types]
    obs = pd.DataFrame(
        {"cell_type": names, "batch": [f"b{i % batches}" for i in range(count)]},
        index=[f"c{i}" for i in range(count)],
    )
    cells = anndata.AnnData(np.zeros((count, 1), np.float32), obs=obs)
    cells.obsm["X_gplvm"], cells.obsm["X_gplvm_var"] = x, np.full_like(x, 0.01)
    return cells


def test_transfer_labels_writes_assigned_labels_and_names_bad_input():
    rng = np.random.default_rng(3)
    reference, query = _embedded(rng, 300), _embedded(rng, 60)
    query.obs["novel"] = np.arange(60) < 5
    options = dict(groups_key="batch", num_neighbours=10, n_samples=2)
    table = transfer_labels(
        reference, query, "cell_type", unassigned_below=0.7, flagged_key="novel", **options
    )
    written = query.obs["cell_type_transferred"].astype(str)
    sure = table.max(axis=1).to_numpy() >= 0.7
    assert (written[:5] == UNASSIGNED).all()
    np.testing.assert_array_equal(written[5:] == UNASSIGNED, ~sure[5:])
    right = written[5:][sure[5:]] == query.obs["cell_type"][5:][sure[5:]]
    assert right.mean() > 0.9
    np.testing.assert_allclose(query.obs["cell_type_transferred_probability"], table.max(axis=1))

    for kwargs, message in (
        (dict(unassigned_below=1.5), r"unassigned_below must be a probability in \[0, 1\]"),
        (dict(flagged_key="gone"), "no column 'gone' \\(flagged_key\\)"),
        (dict(flagged_key="cell_type"), "flagged_key\\) must be boolean"),
    ):
        with pytest.raises(ValueError, match=message):
            transfer_labels(reference, query, "cell_type", **options, **kwargs)
    reference.obs["with_unknown"] = reference.obs["cell_type"].astype(str)
    reference.obs.loc[reference.obs_names[:20], "with_unknown"] = "Unknown"
    with pytest.warns(UserWarning, match=r"unlabelled_category=\['Unknown'\]"):
        transfer_labels(reference, query, "with_unknown", **options)
    table = transfer_labels(
        reference, query, "with_unknown", unlabelled_category="Unknown", **options
    )
    assert "Unknown" not in table.columns
    reference.obs["numbered"] = pd.factorize(reference.obs["cell_type"])[0]  # integer labels
    table = transfer_labels(reference, query, "numbered", unlabelled_category=0, **options)
    assert list(table.columns) == [str(k) for k in sorted(set(reference.obs["numbered"]) - {0})]
    reference.obs.loc[reference.obs_names[:20], "with_unknown"] = UNASSIGNED
    with pytest.raises(ValueError, match="holds the label 'unassigned'"):
        transfer_labels(reference, query, "with_unknown", **options)
    with pytest.raises(ValueError, match="calibration must be one of"):
        LabelTransfer(calibration="isotonic")


def _cells(x: np.ndarray, labels=None) -> anndata.AnnData:
    """An AnnData of cells with q(x) means ``x`` [N, Q] (variances 0.01), labels in
    ``obs["cell_type"]`` if given."""
    obs = pd.DataFrame(index=[f"c{i}" for i in range(len(x))])
    if labels is not None:
        obs["cell_type"] = labels
    cells = anndata.AnnData(np.zeros((len(x), 1), np.float32), obs=obs)
    cells.obsm["X_gplvm"], cells.obsm["X_gplvm_var"] = x, np.full_like(x, 0.01)
    return cells


def test_label_mixing_is_the_share_of_neighbours_outside_the_most_common_label():
    rng = np.random.default_rng(4)
    reference_x, query_x = rng.normal(size=(60, 3)), rng.normal(size=(25, 3))
    names = rng.choice(np.array(["A", "B", "C", "unlabelled", None], dtype=object), 60)
    reference, query = _cells(reference_x, names), _cells(query_x)
    reference.obs["batch"] = np.arange(60) % 2
    transfer_labels(
        reference,
        query,
        "cell_type",
        groups_key="batch",
        unlabelled_category="unlabelled",
        mixing_neighbours=7,
        num_neighbours=5,
        n_samples=2,
    )
    # Brute force: the 7 nearest by every distance, unlabelled and missing labels voting for none.
    distances = ((query_x[:, None] - reference_x[None]) ** 2).sum(axis=-1)
    nearest = names[np.argsort(distances, axis=1)[:, :7]]
    votes = np.stack([(nearest == t).sum(axis=1) for t in "ABC"], axis=1)
    expected = 1.0 - votes.max(axis=1) / 7
    np.testing.assert_allclose(query.obs["cell_type_transferred_mixing"], expected)
    # More neighbours than reference cells: all of them.
    transfer_labels(
        reference,
        query,
        "cell_type",
        groups_key="batch",
        mixing_neighbours=100,
        unlabelled_category="unlabelled",
        num_neighbours=5,
        n_samples=2,
    )
    everyone = (names[:, None] == np.array(list("ABC"))).sum(axis=0).max() / 60
    np.testing.assert_allclose(query.obs["cell_type_transferred_mixing"], 1.0 - everyone)
    # Among reference cells without labels only, no label is carried: mixing 1.
    alone = label_mixing(reference_x, np.full(60, -1), query_x, 7)
    np.testing.assert_array_equal(alone, 1.0)


def test_a_cell_between_types_is_more_mixed_and_left_unassigned_above_mixed_above():
    rng = np.random.default_rng(5)
    types = np.arange(200) % 2  # two types around (0, 0) and (4, 0)
    reference_x = np.stack([4.0 * types, np.zeros(200)], axis=1) + rng.normal(0, 0.7, (200, 2))
    reference = _cells(reference_x, np.array(["A", "B"])[types])
    query = _cells(np.array([[0.0, 0.0], [4.0, 0.0], [2.0, 0.0]]))  # inside A, B; between
    options = dict(num_neighbours=10, n_samples=2, mixing_neighbours=15)
    with pytest.warns(UserWarning, match="random folds"):
        transfer_labels(reference, query, "cell_type", **options)
    mixing = query.obs["cell_type_transferred_mixing"].to_numpy()
    assert mixing[2] > 0.3 and mixing[2] > mixing[:2].max() + 0.2
    assert (query.obs["cell_type_transferred"] != UNASSIGNED).all()
    with pytest.warns(UserWarning, match="random folds"):
        transfer_labels(reference, query, "cell_type", mixed_above=0.25, **options)
    assert list(query.obs["cell_type_transferred"]) == ["A", "B", UNASSIGNED]

    for kwargs, message in (
        (dict(mixed_above=1.5), r"mixed_above must be a label mixing in \[0, 1\]"),
        (dict(mixed_above=-0.1), r"mixed_above must be a label mixing in \[0, 1\]"),
        (dict(mixing_neighbours=0), "mixing_neighbours must be a positive integer"),
        (dict(mixing_neighbours=2.5), "mixing_neighbours must be a positive integer"),
    ):
        with pytest.raises(ValueError, match=message):
            transfer_labels(reference, query, "cell_type", **{**options, **kwargs})
