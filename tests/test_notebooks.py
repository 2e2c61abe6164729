"""Every tutorial notebook runs top to bottom (with cut iteration counts in CI) and shows a
figure, as a notebook and, the quickstart, as a script that keeps its figures.

CI runs the notebooks once, in the documentation build (``.ci/run``, which then names the built
site in ``GPFLOW_SVI_GPLVM_DOCS_SITE`` and runs the tests marked ``site``): there an error in a
notebook fails the build, and these tests read each notebook's page for its figures. Without the
site they run the notebooks here."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = [
    "01_quickstart.py",
    "02_oilflow.py",
    "03_missing_data.py",
    "04_taxi_counts.py",
    "05_movielens.py",
    "06_new_data_and_serving.py",
    "07_bring_your_own.py",
    "08_flows_and_hmc.py",
    "09_single_cell.py",
    "10_reference_mapping.py",
    "11_kang_genes.py",
]
# The folders of the data folder ($GPFLOW_SVI_GPLVM_DATA) that a notebook reads; the others
# use scikit-learn's bundled digits only.
NEEDED_DATA = {
    "02_oilflow.py": ["oilflow"],
    "03_missing_data.py": ["mnist", "brendan_faces"],
    "04_taxi_counts.py": ["taxi"],
    "05_movielens.py": ["movielens100k"],
}

# The optional packages a notebook imports ("singlecell" extra); it is skipped without them.
NEEDED_MODULES = {
    "09_single_cell.py": ["anndata", "scanpy", "igraph"],
    "10_reference_mapping.py": ["anndata", "scanpy"],
    "11_kang_genes.py": ["anndata", "scanpy"],
}

DOCS_SITE = os.environ.get("GPFLOW_SVI_GPLVM_DOCS_SITE")


# The figures a notebook draws, each its own: counted where the documentation build ran it (or
# in a kernel of its own, test_notebook_runs_and_shows_a_figure) and, for the quickstart, where it
# runs as a script (the test below: keep_figures' path, the same for every notebook).
FIGURES = {"01_quickstart.py": 5, "09_single_cell.py": 7}
SCRIPTS = ["01_quickstart.py"]


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("name", SCRIPTS)
def test_a_notebook_run_as_a_script_keeps_each_of_its_figures(tmp_path, name):
    """``python notebooks/<name>`` headless: the folder it prints holds each figure it draws,
    each on its own (a plot drawn into the current axes of an earlier figure would merge two),
    and nothing meant for Jupyter's display is printed."""
    for module in NEEDED_MODULES.get(name, []):
        pytest.importorskip(module)
    environment = {**os.environ, "GPFLOW_SVI_GPLVM_FAST": "1", "MPLBACKEND": "Agg"}
    script = [sys.executable, str(NOTEBOOK_DIR / name)]
    run = {"cwd": tmp_path, "env": environment, "timeout": 900}
    result = subprocess.run(script, capture_output=True, text=True, **run)
    assert result.returncode == 0, result.stderr[-3000:]
    (folder,) = re.findall(r"^figures: saved to (\S+)/ when", result.stdout, flags=re.M)
    assert len(list((tmp_path / folder).glob("figure_*.png"))) == FIGURES[name]
    assert "IPython" not in result.stdout


MEASURES = re.compile(r"\b(RMSE|NLPD|ELBO|ARI|NMI|ASW|accuracy|seconds)\b")
RESULTS_PAGE = re.compile(r"benchmarks/results/(\w+)\.md")


def _prose(name: str) -> list[str]:
    """The paragraphs of a notebook's markdown cells (jupytext percent format: "# %% [markdown]"
    cells whose lines start with "# ")."""
    cells = (NOTEBOOK_DIR / name).read_text().split("# %%")
    markdown = [cell.split("\n", 1)[1] for cell in cells if cell.startswith(" [markdown]")]
    text = "\n".join(re.sub(r"^# ?", "", line, flags=re.M) for line in markdown)
    return [" ".join(paragraph.split()) for paragraph in re.split(r"\n\s*\n", text)]


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_a_measured_number_in_a_notebook_s_prose_is_on_the_results_page_it_names(name):
    """A run of the notebook (in CI a short one) cannot check the full-budget numbers its prose
    quotes, so a paragraph quoting a measurement (RMSE, NLPD, ...) names the results page that
    holds it, made by a written command, and each of its decimals is on that page."""
    for paragraph in _prose(name):
        numbers = re.findall(r"(?<![\w.])\d+\.\d+", paragraph)
        if not numbers or not MEASURES.search(paragraph):
            continue
        pages = RESULTS_PAGE.findall(paragraph)
        assert pages, f"{name}: a measurement without its results page: {paragraph}"
        held = " ".join(
            (NOTEBOOK_DIR.parent / "benchmarks" / "results" / f"{page}.md").read_text()
            for page in pages
        )
        missing = [number for number in numbers if number not in held]
        assert not missing, f"{name}: {missing} are not on {pages}: {paragraph}"


jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")


def test_the_notebook_list_is_complete():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.py")) == sorted(NOTEBOOKS)


def _skip_without_data(name: str) -> None:
    needed = NEEDED_DATA.get(name, [])
    if not needed:
        return
    data_home = os.environ.get("GPFLOW_SVI_GPLVM_DATA")
    if not data_home:
        pytest.skip(f"{name} needs the data sets {needed}: set GPFLOW_SVI_GPLVM_DATA")
    missing = [folder for folder in needed if not (Path(data_home) / folder).is_dir()]
    if missing:
        pytest.skip(f"{name} needs {missing} in GPFLOW_SVI_GPLVM_DATA={data_home}")


def _figures_on_page(name: str) -> list[Path]:
    """The figures (PNG or SVG files that exist in the site) on a notebook's built page."""
    page = Path(DOCS_SITE) / "notebooks" / f"{Path(name).stem}.html"
    assert page.is_file(), f"{page} was not built"
    sources = re.findall(r'<img [^>]*src="([^"]+\.(?:png|svg))"', page.read_text())
    return [page.parent / src for src in sources if (page.parent / src).is_file()]


def _figures_of_a_run(name: str, monkeypatch) -> list[dict]:
    """Run the notebook in a fresh kernel; its figure outputs (after checking for errors)."""
    _skip_without_data(name)
    for module in NEEDED_MODULES.get(name, []):
        pytest.importorskip(module)
    monkeypatch.setenv("GPFLOW_SVI_GPLVM_FAST", "1")
    # The kernel's own inline backend draws the figures into the outputs, as in Jupyter.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    notebook = jupytext.read(NOTEBOOK_DIR / name)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK_DIR}}
    )
    client.execute()
    outputs = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
    ]
    errors = [output for output in outputs if output.get("output_type") == "error"]
    assert not errors, errors
    return [output for output in outputs if "image/png" in output.get("data", {})]


# Without the built site, each notebook runs in a kernel of its own (a process).
@pytest.mark.site
@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_and_shows_a_figure(name, monkeypatch):
    figures = _figures_on_page(name) if DOCS_SITE else _figures_of_a_run(name, monkeypatch)
    assert figures, f"{name} shows no figure"
    if name in FIGURES:  # each figure on its own: one drawn into another's axes would merge two
        assert len(figures) == FIGURES[name], f"{name} shows {len(figures)} figures"
