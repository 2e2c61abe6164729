"""The defaults that the models, the command line and the single-cell face share, and the name
registries the command line prints before TensorFlow loads. Defaults that one module alone
reads (a tolerance, a step count of new rows' inference) stay beside it, named in capitals.

This module imports nothing: the command line reads it to print its help before TensorFlow
loads. What the numbers buy is measured on the results pages they link to.
"""

from __future__ import annotations

__all__ = [
    "MODEL_NAMES",
    "LIKELIHOOD_NAMES",
    "CELL_LIKELIHOOD_NAMES",
    "COUNT_LIKELIHOOD_NAMES",
    "NUM_INDUCING",
    "CELL_NUM_INDUCING",
    "LATENT_DIM",
    "CELL_LATENT_DIM",
    "BATCH_SIZE",
    "CELL_BATCH_SIZE",
    "ITERATIONS",
    "CELL_ITERATIONS",
    "CELL_TABLE_LEARNING_RATE",
    "CELL_ENCODER_LEARNING_RATE",
    "CHECKPOINT_EVERY",
    "FIT_CELLS",
]

MODEL_NAMES = ("aeb", "bsvi", "flow", "map", "point")
"""The latent treatments by name (``models.MODELS``' keys, ``--model``)."""

LIKELIHOOD_NAMES = ("bernoulli", "gaussian", "negative_binomial", "poisson")
"""The likelihoods by name (``likelihoods.NAMED_LIKELIHOODS``' keys, ``--likelihood``)."""

CELL_LIKELIHOOD_NAMES = ("negative_binomial", "poisson", "gaussian")
"""The likelihoods ``SingleCellGPLVM`` takes: counts (with or without overdispersion) or
continuous values."""

COUNT_LIKELIHOOD_NAMES = ("negative_binomial", "poisson")
"""The names of :data:`CELL_LIKELIHOOD_NAMES` that model counts (with size factors)."""

NUM_INDUCING = 25
"""M, the inducing points of every model, ``GPLVMEmbedding`` and the command line unless given."""

CELL_NUM_INDUCING = 100
"""M of ``SingleCellGPLVM`` (and the command line for an ``.h5ad``) unless given: on hard
simulated atlases 100 kept rare cell types that 25 and 50 merged, for about a fifth more CPU
time (``benchmarks/results/single_cell.md``)."""

LATENT_DIM = 5
"""Q of the command line for a table of rows unless given."""

CELL_LATENT_DIM = 10
"""Q of ``SingleCellGPLVM`` (and the command line for an ``.h5ad``) unless given."""

BATCH_SIZE = 100
"""Rows per step of ``fit`` (and ``GPLVMEmbedding``, the command line for a table) unless given."""

CELL_BATCH_SIZE = 256
"""Cells per step of ``SingleCellGPLVM.fit`` (and the command line for an ``.h5ad``) unless
given."""

ITERATIONS = 3000
"""Training steps of the command line for a table unless given: the README's oil-flow fit and the
guide's measurements of the bound's estimators use 3000."""

CELL_ITERATIONS = 2000
"""Training steps of ``SingleCellGPLVM.fit`` (and the command line for an ``.h5ad``) unless
given: fewer than a table's, as each step reads a larger batch (256 cells); the single-cell
results pages were measured at 3000 (``benchmarks/results/single_cell.md``: pass
``iterations=3000`` to reproduce them)."""

CELL_TABLE_LEARNING_RATE = 0.03
"""Adam's step size for latent tables (B-SVI, MAP, point) in ``SingleCellGPLVM.fit`` unless
given: three times ``fit``'s 0.01, which kept hard simulated atlases' cell types apart and
mixed their batches better (``benchmarks/results/single_cell.md``)."""

CELL_ENCODER_LEARNING_RATE = 0.01
"""Adam's step size for an encoder in ``SingleCellGPLVM.fit`` unless given: with 0.03 the
amortised model lost the default atlas's cell types (``benchmarks/results/single_cell.md``)."""

CHECKPOINT_EVERY = 1000
"""Training steps between checkpoints of ``fit``, ``Trainer``, ``SingleCellGPLVM.fit`` and the
command line's ``--save`` unless given (each run also keeps one at its end)."""

FIT_CELLS = 2000
"""The cells of a new batch whose q(x*) its offsets are fitted with, at most (drawn at random),
in ``SingleCellGPLVM.map_query`` and the command line's ``map-query`` unless given."""
