"""Sphinx configuration of the documentation site.

Build it from the repository root (the one command the README gives):

    python -m sphinx -W --keep-going -c docs . docs/_build/html

The source folder is the repository root so that the tutorials (``tutorials/*.md``) and the
notebooks (``notebooks/*.py``, jupytext percent scripts) are pages of the site as they stand,
and their links to each other resolve. Notebooks are rendered without running them unless
``GPFLOW_SVI_GPLVM_DOCS_EXECUTE=1`` (then each runs once, with ``GPFLOW_SVI_GPLVM_FAST=1``
cutting its iterations unless that variable is set otherwise, and its outputs are shown).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import gpflow_svi_gplvm

project = "gpflow_svi_gplvm"
author = "The gpflow_svi_gplvm maintainers"
copyright = "the gpflow_svi_gplvm maintainers, Apache-2.0"
release = gpflow_svi_gplvm.__version__
version = release

extensions = [
    "myst_nb",
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
]

root_doc = "docs/index"
# Only these files of the repository are pages; everything else (the package's source, the
# benchmarks' scripts, build folders) is not.
include_patterns = [
    "docs/**",
    "tutorials/*.md",
    "notebooks/*.py",
    "benchmarks/README.md",
    "benchmarks/results/*.md",
    "CHANGELOG.md",
]
exclude_patterns = ["docs/_build/**", "docs/conf.py", "**/.ipynb_checkpoints"]

source_suffix = {".md": "myst-nb", ".py": "myst-nb", ".rst": "restructuredtext"}
nb_custom_formats = {".py": ["jupytext.reads", {"fmt": "py:percent"}]}
EXECUTE = os.environ.get("GPFLOW_SVI_GPLVM_DOCS_EXECUTE") == "1"
nb_execution_mode = "force" if EXECUTE else "off"
nb_execution_timeout = 900
nb_execution_raise_on_error = True
if EXECUTE:
    os.environ.setdefault("GPFLOW_SVI_GPLVM_FAST", "1")
    # The kernels draw their figures inline, as in Jupyter: a headless backend (CI sets Agg)
    # would leave the pages without them.
    os.environ.pop("MPLBACKEND", None)
myst_enable_extensions = ["dollarmath", "amsmath"]
myst_heading_anchors = 3
suppress_warnings: list[str] = []

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_inherit_docstrings = False
# The models use GPflow's ``:param name:`` lists; the scikit-learn face uses NumPy's sections.
napoleon_google_docstring = False
napoleon_numpy_docstring = True

html_theme = "furo"
html_title = f"gpflow_svi_gplvm {release}"


def _redirect_to_the_root_doc(app, exception) -> None:
    """An ``index.html`` at the top of the built site that opens ``docs/index.html``."""
    if exception is None and app.builder.format == "html":
        target = "docs/index.html"
        page = f'<meta http-equiv="refresh" content="0; url={target}"><a href="{target}">docs</a>'
        (Path(app.outdir) / "index.html").write_text(page, encoding="utf-8")


def _plural_literals(app, what, name, obj, options, lines: list[str]) -> None:
    """Docstrings write the plural of code as ``ValueError``s; reStructuredText needs an
    escaped space between the closing backquotes and the "s"."""
    lines[:] = [re.sub(r"(\w)``s\b", r"\1``\\ s", line) for line in lines]


def setup(app) -> None:
    app.connect("autodoc-process-docstring", _plural_literals)
    app.connect("build-finished", _redirect_to_the_root_doc)
