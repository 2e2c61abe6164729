"""The paper's training configuration table (supplement, "Training experimental configuration"),
the one copy the benchmarks read it from.

Each row: N rows, D outputs, Z (here M) inducing inputs, Q latent dimensions, learning rate,
minibatch size, and whether the paper trains with missing entries. The number of draws of x per
row is not in the table: the main text uses "10 samples from q(x_n)" for the taxi data; the other
data sets use one.
"""

from __future__ import annotations

from typing import NamedTuple


class PaperConfiguration(NamedTuple):
    num_data: int
    data_dim: int
    num_inducing: int
    latent_dim: int
    learning_rate: float
    batch_size: int
    trains_with_missing: bool
    num_samples: int = 1


PAPER_CONFIGURATION = {
    "oilflow": PaperConfiguration(1000, 12, 25, 10, 1e-3, 100, False),
    "qpcr": PaperConfiguration(450, 48, 40, 11, 1e-3, 100, False),
    "taxi": PaperConfiguration(744, 3, 36, 2, 5e-3, 500, False, num_samples=10),
    "mnist": PaperConfiguration(15_000, 768, 100, 5, 0.01, 100, True),
    "brendan": PaperConfiguration(1965, 560, 120, 5, 0.01, 450, True),
    "mocap": PaperConfiguration(533, 62, 30, 6, 0.01, 200, True),
    "movielens": PaperConfiguration(943, 1682, 34, 15, 0.005, 100, True),
}
