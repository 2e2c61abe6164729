"""Every tutorial notebook runs top to bottom (with cut iteration counts in CI)."""

from pathlib import Path

import pytest

NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"
NOTEBOOKS = ["01_quickstart.py"]

jupytext = pytest.importorskip("jupytext")
nbclient = pytest.importorskip("nbclient")


def test_the_notebook_list_is_complete():
    assert sorted(p.name for p in NOTEBOOK_DIR.glob("*.py")) == sorted(NOTEBOOKS)


@pytest.mark.slow
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs(name, monkeypatch):
    monkeypatch.setenv("GPFLOW_SVI_GPLVM_FAST", "1")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    notebook = jupytext.read(NOTEBOOK_DIR / name)
    client = nbclient.NotebookClient(
        notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": NOTEBOOK_DIR}}
    )
    client.execute()
    errors = [
        output
        for cell in notebook.cells
        if cell.cell_type == "code"
        for output in cell.get("outputs", [])
        if output.get("output_type") == "error"
    ]
    assert not errors, errors
