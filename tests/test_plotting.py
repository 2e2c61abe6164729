"""The figures of gpflow_svi_gplvm.plotting render headless (Agg) and save as PNG."""

import os
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
from gpflow_svi_gplvm.plotting import (  # noqa: E402
    plot_ard,
    plot_elbo,
    plot_image_grid,
    plot_latent_space,
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
