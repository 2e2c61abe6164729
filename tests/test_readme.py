"""Every Python block of the README runs, in order, as a reader would paste them.

The blocks assume data (``Y``, ``Y_new``, ...) that the prose describes; a small data set stands in
for it, and ``fit`` is capped at a few steps (the README's own iteration counts are for real data).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

import gpflow_svi_gplvm

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)
CAPPED_ITERATIONS = 3


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 5


def _reader_data() -> dict:
    """What the README's prose gives the reader before its code: data with gaps, new rows."""
    rng = np.random.default_rng(0)
    N, D = 60, 6
    latent = rng.normal(size=(N, 2))
    Y = np.tanh(latent @ rng.normal(size=(2, D))) + 0.05 * rng.normal(size=(N, D))
    Y_true = Y[:10].copy()
    Y_with_gaps = Y_true.copy()
    Y_with_gaps[rng.random(Y_with_gaps.shape) < 0.3] = np.nan
    return dict(
        np=np,
        tf=tf,
        N=N,
        Y=Y,
        Y_train=Y,
        Y_new=Y_with_gaps,
        Y_with_gaps=Y_with_gaps,
        Y_true=Y_true,
        log_predictive_density=gpflow_svi_gplvm.log_predictive_density,
        AmortisedBayesianGPLVM=gpflow_svi_gplvm.AmortisedBayesianGPLVM,
    )


def test_readme_blocks_run(tmp_path, monkeypatch):
    """The blocks share one namespace (a later block uses an earlier block's model)."""
    real_fit = gpflow_svi_gplvm.fit

    def capped_fit(model, data, *args, iterations=CAPPED_ITERATIONS, **options):
        return real_fit(
            model, data, *args, iterations=min(iterations, CAPPED_ITERATIONS), **options
        )

    monkeypatch.setattr(gpflow_svi_gplvm, "fit", capped_fit)
    monkeypatch.chdir(tmp_path)  # blocks write "exported/" and "ckpt/" where they run
    namespace = _reader_data()
    for number, block in enumerate(BLOCKS, start=1):
        try:
            exec(compile(block, f"README block {number}", "exec"), namespace)
        except Exception as error:  # say which block broke, with the block's own text
            pytest.fail(f"README block {number} failed: {error!r}\n{block}")
    assert set(namespace["out"]) == {"mean", "variance"}
    assert namespace["log_p"].shape == namespace["Y_true"].shape
