"""Amortisation by distillation: the KL against TensorFlow Probability's, the GP handed over
whole, an encoder that learns given q(x), and the single-cell face's distilled fit against its
B-SVI fit."""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_probability as tfp
from builders import count_cells as _cells
from gpflow.utilities import parameter_dict
from test_anndata import N, Q

from gpflow_svi_gplvm import AmortisedBayesianGPLVM, BayesianSVIGPLVM
from gpflow_svi_gplvm.latents.distillation import (
    ROW_STATE,
    copy_global_parameters,
    distil_encoder,
    gaussian_kl,
)
from gpflow_svi_gplvm.rows.sparse import SparseRows
from gpflow_svi_gplvm.singlecell import SingleCellGPLVM
from gpflow_svi_gplvm.singlecell.face import TABLE_LEARNING_RATE


def test_gaussian_kl_is_tensorflow_probability_s():
    rng = np.random.default_rng(0)
    m, G, v = rng.normal(size=(4, 3)), rng.normal(size=(4, 3)), rng.uniform(0.1, 2.0, (4, 3))
    L = np.tril(rng.normal(size=(4, 3, 3)), -1) + np.eye(3) * rng.uniform(0.5, 2.0, (4, 1, 3))
    ours = gaussian_kl(*map(tf.constant, (m, v, G, L)))
    theirs = tfp.distributions.MultivariateNormalDiag(m, np.sqrt(v)).kl_divergence(
        tfp.distributions.MultivariateNormalTriL(G, L)
    )
    np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-10)


def _pair(Y: np.ndarray, **options):
    """A B-SVI and an amortised model of the same form on the same rows."""
    common = dict(num_inducing=5, seed=0, **options)
    return BayesianSVIGPLVM(Y, 2, **common), AmortisedBayesianGPLVM(Y, 2, **common)


def test_the_gp_is_handed_over_whole_and_nothing_of_the_rows():
    Y = np.random.default_rng(1).normal(size=(30, 4))
    table, encoder = _pair(Y)
    before = {n: p.numpy().copy() for n, p in parameter_dict(encoder).items()}
    for parameter in table.trainable_parameters:  # anything but the starting values
        parameter.assign(parameter.numpy() * 1.3 + 0.1)
    names = copy_global_parameters(table, encoder)
    after, given = parameter_dict(encoder), parameter_dict(table)
    assert ".q_mu" in names and ".inducing_variable.Z" in names and ".likelihood.variance" in names
    for name, value in after.items():
        if name.startswith(ROW_STATE):
            np.testing.assert_array_equal(value.numpy(), before[name], err_msg=name)
        else:
            np.testing.assert_array_equal(value.numpy(), given[name].numpy(), err_msg=name)
    other = BayesianSVIGPLVM(Y, 2, num_inducing=6, seed=0)
    with pytest.raises(ValueError, match=r"GPs differ: \['.inducing_variable.Z', '.q_mu'"):
        copy_global_parameters(other, encoder)


def test_an_encoder_learns_the_q_x_it_is_given():
    """Means a smooth function of the rows and variances of their own: after distillation the
    encoder's q(x_n | y_n) is close to them, far closer than where it started."""
    rng = np.random.default_rng(2)
    Y = rng.normal(size=(200, 5))
    means = np.tanh(Y[:, :2] - 0.5 * Y[:, 2:4])
    variances = np.exp(0.3 * Y[:, 4:5]) * np.array([[0.05, 0.2]])
    encoder = _pair(Y)[1].latent
    rows = SparseRows.from_matrix(Y)

    def gaps() -> tuple[float, float]:
        mean, variance = encoder.moments(tf.range(200), tf.constant(Y))
        log_ratio = np.abs(np.log(variance.numpy() / variances))
        return float(np.mean((mean.numpy() - means) ** 2)), float(np.median(log_ratio))

    (error, ratio) = gaps()
    errors = distil_encoder(encoder, rows, means, variances, 1500, batch_size=50, seed=0)
    assert errors.shape == (1500,) and errors[-100:].mean() < 0.1 * errors[:10].mean()
    (error_after, ratio_after) = gaps()
    assert error_after < 0.05 * np.var(means) < error
    assert ratio_after < 0.3 < ratio  # within a third of each variance, at the median
    with pytest.raises(ValueError, match=r"positive, finite variances \[S, Q\] = \[200, 2\]"):
        distil_encoder(encoder, rows, means, -variances, 10)
    for bad in (np.nan, np.inf):
        with pytest.raises(ValueError, match=r"\(some not finite\)"):
            distil_encoder(encoder, rows, np.where(means > 0, bad, means), variances, 10)
    with pytest.raises(ValueError, match=r"\[200, 2\].*got \(199, 2\)"):
        distil_encoder(encoder, rows, means[1:], variances, 10)


@pytest.mark.filterwarnings("ignore:The embedding collapsed")  # 20 steps on 48 cells
def test_the_face_distils_from_the_b_svi_fit_it_would_make(capsys):
    """With every cell drawn, the amortised face's GP is the B-SVI face's, step for step: the
    same fit, then handed over; its cells' q(x) refined from the distilled encoder's."""
    options = dict(layer="counts", batch_key="batch", num_inducing=8, seed=1)
    table = SingleCellGPLVM(Q, **options).fit(_cells(), iterations=20, batch_size=16)
    cells = _cells()
    face = SingleCellGPLVM(Q, model="aeb", **options).fit(cells, iterations=20, batch_size=16)
    assert "distil encoder: 100%" in capsys.readouterr().err
    ours, theirs = parameter_dict(face.model), parameter_dict(table.model)
    for name in [".kernel.latent_kernel.lengthscales", ".q_mu", ".likelihood.dispersion"]:
        np.testing.assert_allclose(ours[name].numpy(), theirs[name].numpy(), rtol=1e-6)
    settings = cells.uns["gplvm"]["settings"]
    assert settings["encoder_training"] == "distilled" and settings["distil_cells"] == 10_000
    assert settings["learning_rate"] == TABLE_LEARNING_RATE  # B-SVI's step
    assert cells.obsm["X_gplvm"].shape == (N, Q) and np.isfinite(cells.obsm["X_gplvm"]).all()
    np.testing.assert_array_equal(cells.uns["gplvm"]["elbo"], table.history.elbo)


@pytest.mark.filterwarnings("ignore:The embedding collapsed")
def test_a_few_cells_drawn_from_a_file_serve_every_cell(tmp_path):
    """Out of core: the drawn cells are read from the .h5ad, every cell's q(x) written."""
    _cells().write_h5ad(tmp_path / "cells.h5ad")
    options = dict(layer="counts", batch_key="batch", num_inducing=8, seed=1, model="aeb")
    face = SingleCellGPLVM(Q, distil_cells=20, **options)
    face.fit(tmp_path / "cells.h5ad", 10, batch_size=16, progress=False, output=tmp_path / "out")
    embedding = np.load(tmp_path / "out" / "X_gplvm.npy")
    assert embedding.shape == (N, Q) and np.isfinite(embedding).all()
    assert len(face.history.elbo) == 10


def test_distillation_s_options_are_checked():
    with pytest.raises(ValueError, match=r"encoder_training must be one of \('distilled', 'jo"):
        SingleCellGPLVM(Q, model="aeb", encoder_training="ELBO")
    with pytest.raises(ValueError, match="distil_cells must be a positive integer"):
        SingleCellGPLVM(Q, model="aeb", distil_cells=0)
    few = SingleCellGPLVM(Q, layer="counts", model="aeb", num_inducing=8, distil_cells=5)
    with pytest.raises(ValueError, match="distil_cells=5 is fewer than num_inducing=8"):
        few.fit(_cells(), iterations=1)
    face = SingleCellGPLVM(Q, layer="counts", model="aeb", num_inducing=4)
    with pytest.raises(ValueError, match="encoder_training='joint', or fit model='bsvi'"):
        face.fit(_cells(), iterations=1, strategy=tf.distribute.OneDeviceStrategy("/cpu:0"))
