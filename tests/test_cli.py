"""The main job (``python -m gpflow_svi_gplvm``) end to end, with few iterations."""

import json

import numpy as np
import pytest

from gpflow_svi_gplvm.cli import main

OUTPUTS = ["metrics.json", "latent_space.png", "ard.png", "elbo.png"]


def test_main_job_on_digits(tmp_path, capsys):
    args = ["--iterations", "60", "--num-inducing", "10", "--latent-dim", "3", "--no-progress"]
    assert main([*args, "--output", str(tmp_path)]) == 0
    for name in OUTPUTS:
        assert (tmp_path / name).stat().st_size > 0
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["model"] == "BayesianSVIGPLVM"
    assert (metrics["N"], metrics["D"]) == (1797, 64)
    assert np.isfinite(metrics["elbo_final"])
    # Pixels lie in [0, 1] with sd ~0.3: a trained decoder must do far better than guessing 0.5.
    assert metrics["reconstruction_rmse"] < 0.3
    assert len(metrics["ard_relevance"]) == 3
    assert "latent dims kept by ARD" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["point", "aeb"])
def test_main_job_on_a_csv_with_missing_entries(tmp_path, model):
    rng = np.random.default_rng(0)
    Y = np.tanh(rng.standard_normal((60, 2)) @ rng.standard_normal((2, 5)))
    Y[rng.random(Y.shape) < 0.2] = np.nan
    path = tmp_path / "mine.csv"
    rows = [",".join("" if np.isnan(v) else f"{v:.6f}" for v in row) for row in Y]
    path.write_text("a,b,c,d,e\n" + "\n".join(rows) + "\n")
    args = ["--data", str(path), "--model", model, "--latent-dim", "2", "--num-inducing", "8"]
    out = tmp_path / "out"
    with pytest.warns(UserWarning, match="MaskedLikelihood"):
        layout = ["--shared-covariance"] if model == "aeb" else []
        main([*args, *layout, "--iterations", "40", "--no-progress", "--output", str(out)])
    metrics = json.loads((out / "metrics.json").read_text())
    assert (metrics["N"], metrics["D"]) == (60, 5)
    assert metrics["shared_covariance"] is (model == "aeb")
    assert np.isfinite(metrics["reconstruction_rmse"])


def test_unknown_data_file_type_is_a_clear_error(tmp_path):
    path = tmp_path / "data.parquet"
    path.write_text("")
    with pytest.raises(ValueError, match="Unsupported data file type"):
        main(["--data", str(path), "--output", str(tmp_path)])
