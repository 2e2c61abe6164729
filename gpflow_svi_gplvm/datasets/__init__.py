"""Data sets: scikit-learn's digits, a user's own array files, the paper's data sets and the
experimental protocols (train/test splits, artificial missingness).

* :mod:`.dataset`: the :class:`DataSet` every loader returns, :func:`load_digits` and
  :func:`load_array_file` (.npy, .npz, .csv).
* :mod:`.files`: the data folder (``data_home``, ``$GPFLOW_SVI_GPLVM_DATA``, the per-user
  cache), the :data:`REGISTRY` of files with their checksums, and :func:`fetch`, which downloads.
* :mod:`.paper`: the loaders of the paper's data sets (oil flow, qPCR, taxi, MNIST, Brendan
  faces, motion capture, MovieLens 100K); the data are not shipped with the package.
* :mod:`.skeleton`: the CMU motion-capture skeleton and the bone of each pose column.
* :mod:`.splits`: the seeded train/test split, random missingness and blanked bones.
* :mod:`.atlas`: a simulated single-cell atlas (gamma-Poisson counts, cell types, batches).
* :mod:`.kang`: real single-cell counts of two conditions (Kang et al. 2018 PBMC) and their
  cell types by canonical markers.

Every public name of the submodules is importable from here.
"""

from .atlas import AtlasBlocks, AtlasEffects, SimulatedAtlas, atlas_blocks, simulate_atlas
from .dataset import (
    DataSet,
    load_array_file,
    load_digits,
    split_labels,
)
from .files import (
    DATA_ENV_VAR,
    REGISTRY,
    RemoteFile,
    cache_dir,
    default_data_home,
    fetch,
    fetch_first_available,
    locate,
    read_npz,
    sha256sum,
)
from .kang import CONDITIONS, PBMC_MARKERS, fetch_kang_pbmc, load_kang_pbmc, marker_cell_types
from .paper import (
    load_brendan_faces,
    load_mnist,
    load_mocap,
    load_movielens100k,
    load_oilflow,
    load_qpcr,
    load_taxi,
)
from .skeleton import (
    CMU_SKELETON_PARENTS,
    MOCAP_BODY_PARTS,
    ChannelTable,
    bone_columns,
    bone_descendants,
    bone_per_column,
    channel_table,
)
from .splits import (
    Split,
    blank_bones,
    random_missing,
    train_test_split,
)

__all__ = [
    "AtlasBlocks",
    "AtlasEffects",
    "CONDITIONS",
    "PBMC_MARKERS",
    "fetch_kang_pbmc",
    "load_kang_pbmc",
    "marker_cell_types",
    "SimulatedAtlas",
    "simulate_atlas",
    "atlas_blocks",
    "DataSet",
    "load_digits",
    "load_array_file",
    "split_labels",
    "load_oilflow",
    "load_qpcr",
    "load_taxi",
    "load_mnist",
    "load_brendan_faces",
    "load_mocap",
    "load_movielens100k",
    "RemoteFile",
    "REGISTRY",
    "DATA_ENV_VAR",
    "cache_dir",
    "default_data_home",
    "fetch",
    "fetch_first_available",
    "locate",
    "read_npz",
    "sha256sum",
    "Split",
    "train_test_split",
    "random_missing",
    "blank_bones",
    "bone_columns",
    "bone_descendants",
    "bone_per_column",
    "channel_table",
    "ChannelTable",
    "CMU_SKELETON_PARENTS",
    "MOCAP_BODY_PARTS",
]
