"""The figures of gpflow_svi_gplvm.plotting render headless (Agg) and save as PNG."""

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
from gpflow_svi_gplvm.plotting import plot_ard, plot_elbo, plot_latent_space  # noqa: E402

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
    if labels == "numeric":
        assert len(figure.axes) == 2  # the colour bar
    if labels == "string":
        legend = [text.get_text() for text in ax.get_legend().get_texts()]
        assert sorted(legend) == ["gas", "oil", "water"]


@pytest.mark.parametrize("labels", LABELS, ids=list(LABELS))
def test_latent_space_of_a_bayesian_model_has_one_ellipse_per_row(bayesian, labels, tmp_path):
    figure = plot_latent_space(bayesian[0], labels=LABELS[labels])
    saved_png(figure, tmp_path / "latent.png")
    (collection,) = ellipses(figure)
    assert len(collection.get_offsets()) == N
    assert "with 1 sd" in figure.axes[0].get_title()


def test_latent_space_default_dims_are_the_two_most_relevant(bayesian, tmp_path):
    model = bayesian[0]
    order = np.argsort(-model.ard_relevance())
    ax = plot_latent_space(model).axes[0]
    assert ax.get_xlabel() == f"latent dim {order[0]}"
    assert ax.get_ylabel() == f"latent dim {order[1]}"
    ax = plot_latent_space(model, dims=(2, 0)).axes[0]
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("latent dim 2", "latent dim 0")


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
def test_ard_bars(fixture, request, tmp_path):
    model = request.getfixturevalue(fixture)[0]
    figure = plot_ard(model)
    saved_png(figure, tmp_path / "ard.png")
    heights = [patch.get_height() for patch in figure.axes[0].patches]
    np.testing.assert_allclose(heights, model.ard_relevance())


def test_elbo_trace_of_a_short_run_has_no_running_mean(point, tmp_path):
    history = point[1]
    figure = plot_elbo(history)
    saved_png(figure, tmp_path / "elbo.png")
    (line,) = figure.axes[0].get_lines()
    np.testing.assert_array_equal(line.get_ydata(), history.elbo)


def test_elbo_trace_with_running_mean(bayesian, tmp_path):
    history = bayesian[1]
    figure = plot_elbo(history, window=10)
    saved_png(figure, tmp_path / "elbo.png")
    raw, smooth = figure.axes[0].get_lines()
    assert len(raw.get_ydata()) == len(history.elbo) == 60
    assert len(smooth.get_ydata()) == 60 - 10 + 1
    np.testing.assert_allclose(smooth.get_ydata()[0], history.elbo[:10].mean())


def test_elbo_trace_of_a_hand_made_history(tmp_path):
    history = History(elbo=-np.logspace(3, 1, 200), seconds=0.0, tracing_count=1)
    saved_png(plot_elbo(history), tmp_path / "elbo.png")
