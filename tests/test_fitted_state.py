"""The state a fit produces (``SingleCellGPLVM.fitted``): made anew by each fit, left as it was by
a fit that fails, read back by ``load`` whatever options shaped it, and checked where the readers
of genes take cells' q(x) from ``obsm``."""

from __future__ import annotations

import numpy as np
import pytest

anndata = pytest.importorskip("anndata")

from builders import count_cells, spoiled_embedding  # noqa: E402
from gpflow.utilities import parameter_dict  # noqa: E402

from gpflow_svi_gplvm.singlecell import SingleCellGPLVM  # noqa: E402
from gpflow_svi_gplvm.singlecell.fitting.fitted import CellModelOptions  # noqa: E402
from gpflow_svi_gplvm.singlecell.mapping.offsets import BatchOffsets  # noqa: E402

Q = 2


@pytest.fixture(scope="module")
def fitted():
    """A B-SVI face fitted to counts with a batch key, and its cells."""
    cells = count_cells()
    face = SingleCellGPLVM(Q, layer="counts", batch_key="batch", num_inducing=8, seed=5)
    face.fit(cells, iterations=20, batch_size=16, progress=False)
    return face, cells


def test_the_state_holds_what_the_fit_produced(fitted):
    face, cells = fitted
    state = face.fitted
    assert state.model is face.model and state.registration is face.registration
    assert state.options is face.options and state.key == "gplvm"
    assert state.registration.cells == cells.n_obs and state.registration.cell_names
    assert state.training_record["iterations"] == 20 and len(state.history.elbo) == 20
    assert state.reference is None and state.offsets.categories == []
    assert CellModelOptions.from_dict(face.options.to_dict()) == face.options


def test_a_new_fit_makes_a_new_state_and_a_failed_one_keeps_the_last(fitted, tmp_path):
    face, cells = fitted
    face.save(tmp_path / "model", adata=cells)
    loaded = SingleCellGPLVM.load(tmp_path / "model")
    loaded.batch_offsets = BatchOffsets(["new"], np.zeros((1, len(loaded.gene_names))))
    before = loaded.fitted
    assert before.reference.n_obs == cells.n_obs and before.offsets.categories == ["new"]
    with pytest.raises(ValueError, match="batch_size must be a positive integer"):
        loaded.fit(count_cells(seed=9), iterations=3, batch_size=0, progress=False)
    assert loaded.fitted is before  # a refused fit leaves the state it found
    loaded.fit(count_cells(seed=9), iterations=3, batch_size=16, progress=False)
    assert loaded.fitted is not before and loaded.fitted.history is not None
    assert loaded.reference is None and loaded.batch_offsets.categories == []


def test_a_gaussian_model_without_size_factors_saves_and_loads(tmp_path):
    cells = count_cells()
    face = SingleCellGPLVM(
        Q, layer="counts", likelihood="gaussian", size_factors=None, num_inducing=6, seed=2
    )
    face.fit(cells, iterations=3, batch_size=16, progress=False)
    loaded = SingleCellGPLVM.load(face.save(tmp_path / "model"))
    assert loaded.options == face.options and loaded.registration == face.registration
    assert loaded.registration.size_factors is None
    fitted, again = parameter_dict(face.model), parameter_dict(loaded.model)
    for name in (".q_mu", ".q_sqrt", ".likelihood.variance", ".kernel.lengthscales"):
        np.testing.assert_array_equal(again[name].numpy(), fitted[name].numpy())


@pytest.mark.parametrize(
    "stored, match",
    [
        ("wide", r"have shapes \(48, 5\) and \(48, 5\), but the model's q\(x\) has Q = 2"),
        ("nan", "give cell 'cell4' a mean that is not finite"),
        ("negative", "give cell 'cell4' a variance that is negative or not finite"),
    ],
)
def test_readers_of_genes_refuse_a_q_x_in_obsm_that_is_not_this_model_s(fitted, stored, match):
    face, cells = fitted
    adata = spoiled_embedding(cells, stored, cell=4)
    with pytest.raises(ValueError, match=match):
        face.normalized_expression(adata, genes=["gene0"], n_samples=2)


def test_normalized_expression_takes_overwrite_as_a_boolean_only(fitted, tmp_path):
    face, cells = fitted
    face.normalized_expression(cells, genes=["gene0"], n_samples=2, output=tmp_path)
    with pytest.raises(ValueError, match="overwrite must be True or False"):
        face.normalized_expression(
            cells, genes=["gene0"], n_samples=2, output=tmp_path, overwrite="no"
        )
