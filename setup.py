from pathlib import Path

from setuptools import find_packages, setup

setup(
    name="gpflow_svi_gplvm",
    version="0.1.0",
    description="Generalised GPLVMs with stochastic variational inference, built on GPflow",
    long_description=Path(__file__).with_name("README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["gpflow_svi_gplvm", "gpflow_svi_gplvm.*"]),
    package_data={"gpflow_svi_gplvm": ["py.typed"]},
    install_requires=[
        "gpflow>=2.11",
        "tensorflow>=2.16",
        "tf_keras>=2.16",
        "tensorflow-probability>=0.24",
        "numpy",
        "tqdm",
        "scikit-learn>=1.6",
        "matplotlib",
    ],
    extras_require={
        "test": [
            "pytest",
            "pytest-xdist",
            "hypothesis",
            "ruff",
            "mypy",
            "jupytext",
            "nbclient",
            "ipykernel",
        ],
        "notebooks": ["jupytext", "nbclient", "ipykernel"],
        "bench": [],
    },
    entry_points={"console_scripts": ["gpflow-svi-gplvm=gpflow_svi_gplvm.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
    ],
)
