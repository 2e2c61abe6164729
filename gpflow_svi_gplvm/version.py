"""The package's version, in a module of its own: the package's ``__version__``, what a run and
a saved model record, and what ``pyproject.toml`` reads."""

__all__ = ["__version__"]

__version__ = "0.1.0"
