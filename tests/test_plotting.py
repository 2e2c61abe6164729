"""The figures of gpflow_svi_gplvm.plotting render headless (Agg) and save as PNG."""

import os
import re
import subprocess
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg", force=True)

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import EllipseCollection  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from gpflow_svi_gplvm import (  # noqa: E402
    AmortisedBayesianGPLVM,
    BayesianSVIGPLVM,
    History,
    PointGPLVM,
    fit,
)
from gpflow_svi_gplvm.metrics import expected_calibration_error, reliability_table  # noqa: E402
from gpflow_svi_gplvm.plotting import (  # noqa: E402
    plot_ard,
    plot_elbo,
    plot_image_grid,
    plot_label_reliability,
    plot_latent_space,
    plot_reliability,
    plot_variance_against,
)

N, D, Q = 30, 4, 3
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture(scope="module")
def Y():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((N, 2))
    return np.tanh(X @ rng.standard_normal((2, D))) + 0.1 * rng.standard_normal((N, D))


def _trained(model_class, Y, iterations=5):
    model = model_class(Y, Q, num_inducing=5)
    history = fit(model, Y, iterations=iterations, batch_size=10, progress=False)
    return model, history


@pytest.fixture(scope="module")
def point(Y):
    return _trained(PointGPLVM, Y)


@pytest.fixture(scope="module")
def bayesian(Y):
    return _trained(BayesianSVIGPLVM, Y, iterations=60)


@pytest.fixture(scope="module")
def amortised(Y):
    return _trained(AmortisedBayesianGPLVM, Y)


def saved_png(figure, path) -> bytes:
    """Save ``figure`` as PNG at ``path`` and return the file's bytes (checked non-empty)."""
    assert isinstance(figure, Figure)
    figure.savefig(path)
    content = path.read_bytes()
    assert content.startswith(PNG_SIGNATURE) and len(content) > 1000
    return content


def ellipses(figure) -> list:
    return [c for ax in figure.axes for c in ax.collections if isinstance(c, EllipseCollection)]


LABELS = {
    "none": None,
    "numeric": np.arange(N) % 3,
    "string": np.array(["oil", "gas", "water"])[np.arange(N) % 3],
    "continuous": np.linspace(0.0, 1.0, N),
}


@pytest.mark.parametrize("labels", LABELS, ids=list(LABELS))
def test_latent_space_of_a_point_model_has_no_ellipses(point, labels, tmp_path):
    figure = plot_latent_space(point[0], labels=LABELS[labels])
    saved_png(figure, tmp_path / "latent.png")
    assert not ellipses(figure)
    ax = figure.axes[0]
    assert "with 1 sd" not in ax.get_title()
    scattered = sum(len(c.get_offsets()) for c in ax.collections)
    assert scattered == N
    if labels == "continuous":
        assert len(figure.axes) == 2  # the colour bar
    if labels in ("numeric", "string"):
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert sorted(legend) == sorted(set(map(str, LABELS[labels])))
        colours = {tuple(c.get_facecolor()[0]) for c in ax.collections}
        assert len(colours) == 3


def test_latent_space_gives_classes_beyond_ten_their_own_colours(point, tmp_path):
    labels = np.arange(N) % 15
    figure = plot_latent_space(point[0], labels=labels)
    saved_png(figure, tmp_path / "latent.png")
    ax = figure.axes[0]
    assert len(ax.get_legend().get_texts()) == 15
    assert len({tuple(c.get_facecolor()[0]) for c in ax.collections}) == 15


def test_latent_space_refuses_too_many_named_classes(point):
    with pytest.raises(ValueError, match="numeric labels"):
        plot_latent_space(point[0], labels=np.array([f"c{i}" for i in range(N)]))


@pytest.mark.parametrize("labels", LABELS, ids=list(LABELS))
def test_latent_space_of_a_bayesian_model_has_one_ellipse_per_row(bayesian, labels, tmp_path):
    figure = plot_latent_space(bayesian[0], labels=LABELS[labels])
    saved_png(figure, tmp_path / "latent.png")
    (collection,) = ellipses(figure)
    assert len(collection.get_offsets()) == N
    assert "with 1 sd" in figure.axes[0].get_title()
    edges = collection.get_edgecolor()
    if labels in ("numeric", "string"):  # each ellipse in its point's class colour
        points = [c for c in figure.axes[0].collections if c is not collection]
        by_class = {tuple(c.get_facecolor()[0][:3]) for c in points}
        assert {tuple(edge[:3]) for edge in edges} == by_class and len(by_class) == 3
    else:  # no classes: grey
        assert len({tuple(edge) for edge in edges}) == 1


def test_latent_space_default_dims_are_the_two_most_relevant(bayesian, tmp_path):
    model = bayesian[0]
    order = np.argsort(-model.latent_relevance())
    ax = plot_latent_space(model).axes[0]
    assert ax.get_xlabel() == f"latent dim {order[0]}"
    assert ax.get_ylabel() == f"latent dim {order[1]}"
    ax = plot_latent_space(model, dims=(2, 0)).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("latent dim 2", "latent dim 0")


def test_latent_space_has_equal_scales_whole_ellipses_and_says_what_it_shows(bayesian):
    model = bayesian[0]
    figure = plot_latent_space(model, labels=LABELS["numeric"], legend_title="flow regime")
    ax = figure.axes[0]
    assert ax.get_aspect() == 1.0
    mean, sd = model.latent_mean().numpy(), np.sqrt(model.latent_variance().numpy())
    order = np.argsort(-model.latent_relevance())
    for axis, limits in ((order[0], ax.get_xlim()), (order[1], ax.get_ylim())):
        assert limits[0] <= np.min(mean[:, axis] - sd[:, axis])
        assert limits[1] >= np.max(mean[:, axis] + sd[:, axis])
    assert ax.get_legend().get_title().get_text() == "flow regime"
    assert "the two most relevant" in ax.get_title()


def test_latent_space_on_a_given_axis(bayesian, tmp_path):
    figure, axes = plt.subplots(1, 2)
    assert plot_latent_space(bayesian[0], ax=axes[1]) is figure
    assert plot_ard(bayesian[0], ax=axes[0]) is figure
    saved_png(figure, tmp_path / "both.png")


def test_latent_space_of_an_amortised_model_needs_Y(amortised, Y, tmp_path):
    model = amortised[0]
    figure = plot_latent_space(model, Y, labels=LABELS["string"])
    saved_png(figure, tmp_path / "latent.png")
    (collection,) = ellipses(figure)
    assert len(collection.get_offsets()) == N
    with pytest.raises(ValueError, match="amortised"):
        plot_latent_space(model)


@pytest.mark.parametrize("fixture", ["point", "bayesian", "amortised"])
def test_ard_bars(fixture, request, Y, tmp_path):
    model = request.getfixturevalue(fixture)[0]
    figure = plot_ard(model, Y if fixture == "amortised" else None)
    saved_png(figure, tmp_path / "ard.png")
    relevance, lengthscales = figure.axes
    heights = [patch.get_height() for patch in relevance.patches]
    np.testing.assert_allclose(
        heights, model.latent_relevance(Y if fixture == "amortised" else None)
    )
    (kept,) = relevance.get_lines()  # the line above which a dimension counts as kept
    np.testing.assert_allclose(kept.get_ydata(), 0.1 * max(heights))
    heights = [patch.get_height() for patch in lengthscales.patches]
    np.testing.assert_allclose(heights, model.ard_relevance())


def test_elbo_trace_of_a_short_run_has_no_running_mean(point, tmp_path):
    history = point[1]
    figure = plot_elbo(history)
    saved_png(figure, tmp_path / "elbo.png")
    (line,) = figure.axes[0].get_lines()
    np.testing.assert_array_equal(line.get_ydata(), history.elbo)
    assert figure.axes[0].get_yscale() == "symlog"  # the whole run, first steps included


def test_elbo_trace_with_running_mean(bayesian, tmp_path):
    history = bayesian[1]
    figure = plot_elbo(history, window=10)
    saved_png(figure, tmp_path / "elbo.png")
    raw, smooth = figure.axes[0].get_lines()
    assert len(raw.get_ydata()) == len(history.elbo) == 60
    assert len(smooth.get_ydata()) == 60 - 10 + 1
    np.testing.assert_allclose(smooth.get_ydata()[0], history.elbo[:10].mean())
    # The second panel: the last 90% of the steps, on a linear scale where convergence shows.
    raw, smooth = figure.axes[1].get_lines()
    assert raw.get_xdata()[0] == 6 and figure.axes[1].get_yscale() == "linear"
    np.testing.assert_array_equal(raw.get_ydata(), history.elbo[6:])
    assert smooth.get_xdata()[0] == 9  # the running mean from where it exists


def test_elbo_trace_of_a_hand_made_history(tmp_path):
    history = History(elbo=-np.logspace(3, 1, 200), seconds=0.0, tracing_count=1)
    saved_png(plot_elbo(history), tmp_path / "elbo.png")


def test_the_whole_run_s_panel_is_labelled_over_its_range_and_the_plateau_clears_the_top():
    """A run from -1e6 to a plateau near -2e4 (as the main job's): labelled ticks between
    the plateau and the first steps, and the plateau below the panel's top edge."""
    steps = np.arange(1000)
    noise = 300 * np.random.default_rng(0).standard_normal(1000)
    elbo = -2e4 - 1e6 * np.exp(-steps / 60) + noise
    figure = plot_elbo(History(elbo=elbo, seconds=0.0, tracing_count=1))
    ax = figure.axes[0]
    figure.canvas.draw()
    low, high = ax.get_ylim()
    labelled = [t.get_position()[1] for t in ax.get_yticklabels() if t.get_text()]
    shown = [value for value in labelled if low <= value <= high]
    assert len(shown) >= 4 and any(-1e5 < value < -1e4 for value in shown), shown
    transform = ax.yaxis.get_transform().transform
    top, plateau, bottom = transform(np.array([high, elbo.max(), low]))
    assert (top - plateau) > 0.05 * (top - bottom)


IMAGE_SHAPE = (4, 3)


@pytest.fixture
def images():
    """Five flattened 4 x 3 images: originals, with a third of the pixels hidden, a "fit"."""
    rng = np.random.default_rng(1)
    original = rng.random((5, 12))
    hidden = rng.random((5, 12)) < 1 / 3
    return original, np.where(hidden, np.nan, original), original + 0.05


def test_image_grid_has_one_row_of_panels_per_kind(images, tmp_path):
    figure = plot_image_grid(images, IMAGE_SHAPE, titles=["original", "missing", "fit"])
    saved_png(figure, tmp_path / "grid.png")
    panels = [ax for ax in figure.axes if ax.get_images()]
    assert len(panels) == 3 * 5
    assert [ax.get_ylabel() for ax in panels[::5]] == ["original", "missing", "fit"]
    (colour_bar,) = [ax for ax in figure.axes if not ax.get_images()]  # one shared scale
    assert colour_bar.get_ylabel() == "value"
    shown = panels[5].get_images()[0].get_array()
    assert shown.shape == IMAGE_SHAPE
    np.testing.assert_array_equal(np.ma.getmaskarray(shown), np.isnan(images[1][0]).reshape(4, 3))


def test_image_grid_draws_missing_pixels_in_their_own_colour(images, tmp_path):
    figure = plot_image_grid(images, IMAGE_SHAPE, missing_colour="red")
    saved_png(figure, tmp_path / "grid.png")
    image = [ax for ax in figure.axes if ax.get_images()][5].get_images()[0]
    np.testing.assert_allclose(image.get_cmap().get_bad(), matplotlib.colors.to_rgba("red"))
    (legend,) = figure.legends
    assert [text.get_text() for text in legend.get_texts()] == ["missing"]
    assert not plot_image_grid(images[:1], IMAGE_SHAPE).legends


def test_image_grid_shares_the_grey_scale_unless_asked(images):
    original, _, fitted = images
    low, high = np.min(original), np.max(fitted)
    shared = plot_image_grid([original, fitted], IMAGE_SHAPE)
    for ax in shared.axes[:-1]:
        np.testing.assert_allclose(ax.get_images()[0].get_clim(), (low, high))
    assert len(shared.axes) == 2 * 5 + 1  # the panels and one colour bar
    separate = plot_image_grid([original, fitted], IMAGE_SHAPE, same_scale=False)
    np.testing.assert_allclose(separate.axes[0].get_images()[0].get_clim(), (low, original.max()))
    assert len(separate.axes) == 2 * 5 + 2  # a colour bar per grid row


def test_image_grid_of_an_all_missing_row_and_of_3d_images(tmp_path):
    blank = np.full((2, 4, 3), np.nan)
    figure = plot_image_grid([blank, np.ones((2, 4, 3))], IMAGE_SHAPE)
    saved_png(figure, tmp_path / "grid.png")
    assert len([ax for ax in figure.axes if ax.get_images()]) == 4


def test_image_grid_with_a_wrong_image_shape_says_what_to_pass(images):
    with pytest.raises(ValueError, match=r"image_shape \(4, 4\) holds 16 pixels.*height, width"):
        plot_image_grid(images, (4, 4))
    with pytest.raises(ValueError, match="same number of images"):
        plot_image_grid([images[0], images[1][:2]], IMAGE_SHAPE)
    with pytest.raises(ValueError, match="list of arrays"):
        plot_image_grid(images[0], IMAGE_SHAPE)
    with pytest.raises(ValueError, match="titles"):
        plot_image_grid(images, IMAGE_SHAPE, titles=["only one"])


def test_variance_against_bins_the_covariate(tmp_path):
    rng = np.random.default_rng(2)
    counts = rng.integers(1, 500, size=300).astype(float)
    variance = 1.0 / np.sqrt(counts) + 0.01 * rng.random(300)
    variance[0] = np.nan  # left out
    figure = plot_variance_against(counts, variance, bins=6, xlabel="ratings", log_x=True)
    saved_png(figure, tmp_path / "variance.png")
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and ax.get_xlabel() == "ratings"
    (points,) = ax.collections[:1]
    assert len(points.get_offsets()) == 299
    (bars,) = ax.containers
    means = bars.lines[0].get_ydata()
    assert 1 <= len(means) <= 6
    assert np.all(np.diff(means) < 0)  # fewer ratings, more variance


def test_variance_against_given_edges_on_a_given_axis(tmp_path):
    figure, axes = plt.subplots(1, 2)
    covariate = np.array([0.5, 1.5, 1.6, 2.5, 9.0])
    variance = np.array([1.0, 2.0, 4.0, 3.0, 7.0])
    assert plot_variance_against(covariate, variance, bins=[0, 1, 2, 3], ax=axes[1]) is figure
    saved_png(figure, tmp_path / "variance.png")
    (bars,) = axes[1].containers
    np.testing.assert_allclose(bars.lines[0].get_xdata(), [0.5, 1.55, 2.5])
    np.testing.assert_allclose(bars.lines[0].get_ydata(), [1.0, 3.0, 3.0])


def test_variance_against_refuses_bad_input():
    with pytest.raises(ValueError, match="same shape"):
        plot_variance_against(np.ones(3), np.ones(4))
    with pytest.raises(ValueError, match="log_x=True needs positive values.*covariate > 0"):
        plot_variance_against(np.arange(5.0), np.ones(5), log_x=True)
    with pytest.raises(ValueError, match="non-negative"):
        plot_variance_against(np.arange(5.0), -np.ones(5))
    with pytest.raises(ValueError, match="increasing"):
        plot_variance_against(np.arange(5.0), np.ones(5), bins=[3, 1])


def _predictions(rng, count: int, classes: int = 3):
    """Overconfident class probabilities [count, classes] and true classes [count]: the true
    probabilities sharpened, so the share right falls below the probability."""
    truth_probabilities = rng.dirichlet(np.ones(classes), count)
    labels = np.array([rng.choice(classes, p=row) for row in truth_probabilities])
    sharpened = truth_probabilities**2
    return sharpened / sharpened.sum(axis=1, keepdims=True), labels


def _brute_force_bins(probability, correct, num_bins):
    """Per bin b of [b / K, (b + 1) / K) (the last one closed), by comparisons: its cells, mean
    probability and share right (empty bins left out); and the ECE."""
    rows, error = [], 0.0
    for b in range(num_bins):
        low, high = b / num_bins, (b + 1) / num_bins
        inside = (probability >= low) & ((probability < high) | (b == num_bins - 1))
        if inside.any():
            rows.append((inside.sum(), probability[inside].mean(), correct[inside].mean()))
            error += inside.mean() * abs(rows[-1][2] - rows[-1][1])
    return np.array(rows), error


def _diagram(ax):
    """The (mean probability, share right) points of a reliability diagram's ``ax``, and the
    low and high ends of their intervals."""
    (bins,) = ax.containers
    points = bins.lines[0]
    (bars,) = bins.lines[2]
    ends = np.array([segment[:, 1] for segment in bars.get_segments()])
    return points.get_xdata(), points.get_ydata(), ends[:, 0], ends[:, 1]


def test_reliability_diagram_draws_the_bins_and_the_ece_of_the_metric(tmp_path):
    from scipy.stats import binomtest

    rng = np.random.default_rng(0)
    probabilities, labels = _predictions(rng, 600)
    probability = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    figure = plot_reliability(probability, correct, num_bins=10)
    saved_png(figure, tmp_path / "reliability.png")
    diagram, counts = figure.axes
    rows, error = _brute_force_bins(probability, correct, 10)
    x, y, low, high = _diagram(diagram)
    np.testing.assert_allclose(x, rows[:, 1])
    np.testing.assert_allclose(y, rows[:, 2])
    intervals = [
        binomtest(round(share * cells), int(cells)).proportion_ci(method="wilson")
        for cells, _, share in rows
    ]
    np.testing.assert_allclose(low, [i.low for i in intervals], atol=1e-4)
    np.testing.assert_allclose(high, [i.high for i in intervals], atol=1e-4)
    assert error > 0.05  # overconfident: the test can tell a wrong ECE
    assert expected_calibration_error(probabilities, labels, 10) == pytest.approx(error, 1e-12)
    assert f"ECE {error:.3f}" in diagram.get_title() and "600 predictions" in diagram.get_title()
    heights = [bar.get_height() for bar in counts.patches]
    assert [h for h in heights if h] == list(rows[:, 0]) and len(heights) == 10
    assert counts.get_yscale() == "log"


def test_reliability_table_sums_to_the_ece_and_keeps_empty_bins():
    probability = np.array([0.95, 0.9, 1.0, 0.55, 0.6, 1 + 1e-15])  # the last one by round-off
    correct = np.array([True, True, False, True, False, True])
    table = reliability_table(probability, correct, num_bins=4)
    assert list(table["cells"]) == [0, 0, 2, 4]
    assert table.loc[0, ["mean probability", "share right"]].isna().all()
    np.testing.assert_allclose(table.loc[3, "share right"], 0.75)
    rows, error = _brute_force_bins(probability, correct.astype(float), 4)
    assert table["weighted gap"].sum() == pytest.approx(error, 1e-12)
    with pytest.raises(ValueError, match="NaN or infinite"):  # the metric checks through it
        expected_calibration_error(np.array([[0.5, 0.5], [np.nan, 0.2]]), np.array([0, 1]))


def test_reliability_diagram_on_a_given_axis_puts_the_counts_on_a_second_y_axis(tmp_path):
    figure, (left, right) = plt.subplots(1, 2, layout="constrained")
    probability = np.array([0.2, 0.3, 0.8, 0.9, 0.85])
    correct = np.array([0, 1, 1, 1, 0])  # 1 and 0 stand for True and False
    assert plot_reliability(probability, correct, num_bins=5, ax=right) is figure
    saved_png(figure, tmp_path / "reliability.png")
    (twin,) = [ax for ax in figure.axes if ax not in (left, right)]
    assert [bar.get_height() for bar in twin.patches] == [0, 2, 0, 0, 3]
    x, y, _, _ = _diagram(right)
    np.testing.assert_allclose(x, [0.25, 0.85])
    np.testing.assert_allclose(y, [0.5, 2 / 3])


def _transferred(rng, count: int = 300):
    """Probabilities as transfer_labels returns them (a DataFrame of named classes, indexed by
    the cells) and the cells' own labels, some "unlabelled" and some missing."""
    import pandas as pd

    probabilities, labels = _predictions(rng, count)
    names = np.array(["B", "NK", "T"])
    cells = [f"cell{n}" for n in range(count)]
    truth = names[labels].astype(object)
    truth[:20], truth[20:30] = "unlabelled", None
    return pd.DataFrame(probabilities, index=cells, columns=names), truth, labels


def test_label_reliability_scores_the_most_probable_class_of_the_labelled_cells():
    import pandas as pd

    probabilities, truth, labels = _transferred(np.random.default_rng(1))
    figure = plot_label_reliability(
        probabilities, pd.Series(truth, index=probabilities.index), unlabelled_category="unlabelled"
    )
    error = expected_calibration_error(probabilities.to_numpy()[30:], labels[30:])
    assert f"ECE {error:.3f}\n270 predictions" in figure.axes[0].get_title()
    truth[-5:] = "DC"  # a type the reference lacks: wrong, and named
    with pytest.warns(UserWarning, match=r"5 cells have labels no class.*\['DC'\]"):
        figure = plot_label_reliability(probabilities, truth, unlabelled_category=["unlabelled"])
    _, y, _, _ = _diagram(figure.axes[0])
    rows, _ = _brute_force_bins(
        probabilities.to_numpy()[30:].max(axis=1),
        np.r_[(probabilities.to_numpy().argmax(axis=1) == labels)[30:-5], np.zeros(5, bool)],
        15,
    )
    np.testing.assert_allclose(y, rows[:, 2])


def test_label_reliability_takes_one_unlabelled_category_of_any_type_as_transfer_labels_does():
    """Integer cluster labels: ``unlabelled_category=-1`` is one label (as transfer_labels reads
    it, metrics.unlabelled_texts), not a sequence to iterate."""
    probabilities, truth, labels = _transferred(np.random.default_rng(2))
    probabilities.columns = ["0", "1", "2"]
    codes = labels.astype(object)
    codes[:20], codes[20:30] = -1, None
    figure = plot_label_reliability(probabilities, codes, unlabelled_category=-1)
    error = expected_calibration_error(probabilities.to_numpy()[30:], labels[30:])
    assert f"ECE {error:.3f}\n270 predictions" in figure.axes[0].get_title()


def test_the_howto_s_label_reliability_block_runs_as_written():
    anndata = pytest.importorskip("anndata")
    import pandas as pd

    howto = (Path(__file__).resolve().parents[1] / "docs" / "howto.md").read_text()
    (block,) = [b for b in re.findall(r"```python\n(.*?)```", howto, re.S) if "reliab" in b]
    probabilities, truth, _ = _transferred(np.random.default_rng(2))
    query = anndata.AnnData(obs=pd.DataFrame({"cell_type": truth}, index=probabilities.index))
    namespace = {"probabilities": probabilities, "query": query}
    exec(block, namespace)
    assert isinstance(namespace["figure"], Figure)
    assert "270 predictions" in namespace["figure"].axes[0].get_title()


@pytest.mark.parametrize(
    "probability, correct, match",
    [
        (np.full(3, 0.5), np.ones(4, bool), r"one value per prediction.*\(3,\) and \(4,\)"),
        (np.zeros(0), np.zeros(0, bool), "N >= 1"),
        (np.ones((3, 2)) / 2, np.ones(3, bool), r"probabilities.max\(axis=1\)"),
        (np.array([0.5, np.nan]), np.ones(2, bool), "1 NaN or infinite values, e.g. prediction 1"),
        (np.array([0.5, 1.2]), np.ones(2, bool), r"in \[0, 1\].*not a score or a log-prob"),
        (np.array([-0.1, 0.5]), np.ones(2, bool), r"from -0.1 to 0.5"),
        (["high", "low"], np.ones(2, bool), "numbers in"),
        (np.full(2, 0.5), np.array([1, 2]), "True or False.*got dtype int64"),
        (np.full(2, 0.5), np.array([1.0, np.nan]), "got missing values"),
        (np.full(2, 0.5), np.array(["yes", "no"]), "predicted == truth"),
    ],
)
def test_reliability_diagram_refuses_bad_input(probability, correct, match):
    with pytest.raises(ValueError, match=match):
        plot_reliability(probability, correct)


def test_reliability_refuses_a_bad_number_of_bins_and_bad_labels():
    import pandas as pd

    with pytest.raises(ValueError, match="num_bins must be a positive integer"):
        plot_reliability(np.full(2, 0.5), np.ones(2, bool), num_bins=0)
    probabilities, truth, _ = _transferred(np.random.default_rng(3), 40)
    with pytest.raises(ValueError, match="DataFrame whose columns name the classes"):
        plot_label_reliability(probabilities.to_numpy(), truth)
    with pytest.raises(ValueError, match=r"one label per row of probabilities, \[N\*=40\]"):
        plot_label_reliability(probabilities, truth[:-1])
    with pytest.raises(ValueError, match="index is not probabilities'"):
        plot_label_reliability(probabilities, pd.Series(truth))
    with pytest.raises(ValueError, match="None of the 40 cells has a label"):
        plot_label_reliability(
            probabilities, np.full(40, "unlabelled"), unlabelled_category="unlabelled"
        )


KEEPING_SCRIPT = """
import matplotlib.pyplot as plt
from gpflow_svi_gplvm.plotting import keep_figures

keep_figures("demo")
figure, ax = plt.subplots()
ax.plot([0, 1], [1, 0])
ax.set_title("A line, falling")
plt.show()  # headless: shows nothing
plt.subplots()
"""


@pytest.mark.processes
def test_a_script_keeps_its_figures_in_the_folder_it_prints(tmp_path):
    """As a notebook runs as a script: headless, every figure ends up on disk, named in order."""
    environment = {**os.environ, "MPLBACKEND": "Agg"}
    result = subprocess.run(
        [sys.executable, "-c", KEEPING_SCRIPT],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environment,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "runs" / "notebooks" / "demo"
    assert f"figures: saved to {Path('runs', 'notebooks', 'demo')}/" in result.stdout
    assert sorted(p.name for p in folder.iterdir()) == [
        "figure_01_a_line_falling.png",
        "figure_02.png",
    ]
    assert "non-interactive" not in result.stderr
