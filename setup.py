"""The project's metadata lives in pyproject.toml; this file lets ``python setup.py ...``
workflows and tools that look for it find the same package."""

from setuptools import setup

setup()
