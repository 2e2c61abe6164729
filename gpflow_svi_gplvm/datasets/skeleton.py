"""The CMU motion-capture skeleton: its bone hierarchy, named body parts and the table that ties
each column of the pose data to its bone.

The MOCAP loader (:func:`~gpflow_svi_gplvm.datasets.paper.load_mocap`) puts a channel table in its
``metadata``; the structured missingness of :func:`~gpflow_svi_gplvm.datasets.splits.blank_bones`
reads it to find the columns of the bones it blanks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# A channel table: the mapping made by channel_table (a "bone" entry with one bone name per
# column), or the "bone.dof" channel names themselves.
ChannelTable = Mapping[str, Any] | Iterable[str]

# The CMU Acclaim (ASF) skeleton hierarchy, identical for every CMU subject: bone -> parent.
# lhipjoint and rhipjoint have no degrees of freedom (no channels) but parent the legs.
CMU_SKELETON_PARENTS: dict[str, str | None] = {
    "root": None,
    "lhipjoint": "root",
    "lfemur": "lhipjoint",
    "ltibia": "lfemur",
    "lfoot": "ltibia",
    "ltoes": "lfoot",
    "rhipjoint": "root",
    "rfemur": "rhipjoint",
    "rtibia": "rfemur",
    "rfoot": "rtibia",
    "rtoes": "rfoot",
    "lowerback": "root",
    "upperback": "lowerback",
    "thorax": "upperback",
    "lowerneck": "thorax",
    "upperneck": "lowerneck",
    "head": "upperneck",
    "lclavicle": "thorax",
    "lhumerus": "lclavicle",
    "lradius": "lhumerus",
    "lwrist": "lradius",
    "lhand": "lwrist",
    "lfingers": "lhand",
    "lthumb": "lwrist",
    "rclavicle": "thorax",
    "rhumerus": "rclavicle",
    "rradius": "rhumerus",
    "rwrist": "rradius",
    "rhand": "rwrist",
    "rfingers": "rhand",
    "rthumb": "rwrist",
}


def bone_descendants(
    bone: str, parents: Mapping[str, str | None] = CMU_SKELETON_PARENTS
) -> list[str]:
    """``bone`` followed by every bone below it in the skeleton (depth first).

    ``parents`` maps each bone to its parent (``None`` for the root).
    """
    children: dict[str, list[str]] = {}
    for child, parent in parents.items():
        if parent is not None:
            children.setdefault(parent, []).append(child)
    result, stack = [], [bone]
    while stack:
        current = stack.pop()
        result.append(current)
        stack.extend(reversed(children.get(current, [])))
    return result


# Named body parts as bone subtrees. They match the vertex sets the authors' MOCAP script blanks:
# {lhipjoint} = left leg, {lowerneck} = neck and head, {lhumerus} = left arm,
# {upperback} = upper body, {lhipjoint, rhipjoint} = both legs.
MOCAP_BODY_PARTS: dict[str, list[str]] = {
    "left_leg": bone_descendants("lhipjoint"),
    "right_leg": bone_descendants("rhipjoint"),
    "legs": bone_descendants("lhipjoint") + bone_descendants("rhipjoint"),
    "left_arm": bone_descendants("lhumerus"),
    "right_arm": bone_descendants("rhumerus"),
    "arms": bone_descendants("lhumerus") + bone_descendants("rhumerus"),
    "neck_and_head": bone_descendants("lowerneck"),
    "upper_body": bone_descendants("upperback"),
}


def channel_table(channel_names: Iterable[str]) -> dict[str, np.ndarray]:
    """The table of the D channels named ``"bone.dof"`` (e.g. ``"lfemur.rx"``): a dict of arrays
    [D], ``column`` (0..D-1), ``channel`` (the names), ``bone`` and ``dof``."""
    names = np.asarray(list(channel_names)).astype(str)
    parts = [name.split(".", 1) for name in names]
    return {
        "column": np.arange(names.size),
        "channel": names,
        "bone": np.array([part[0] for part in parts]),
        "dof": np.array([part[1] for part in parts]),
    }


def bone_per_column(table: ChannelTable) -> np.ndarray:
    """The bone name of each of the D columns, [D], from a :data:`ChannelTable`."""
    if isinstance(table, Mapping):
        if "bone" not in table:
            raise ValueError(
                "channel_table mapping needs a 'bone' entry (one bone name per column)."
            )
        return np.asarray(table["bone"]).astype(str)
    names = np.asarray(list(table)).astype(str)
    return np.array([name.split(".", 1)[0] for name in names])


def bone_columns(channel_table: ChannelTable) -> dict[str, np.ndarray]:
    """Map each bone to the indices of its columns.

    ``channel_table`` is the mapping ``load_mocap().metadata["channel_table"]`` (needs a
    ``"bone"`` entry with one bone name per column) or a sequence of ``"bone.dof"`` channel names.
    """
    bones = bone_per_column(channel_table)
    return {bone: np.flatnonzero(bones == bone) for bone in dict.fromkeys(bones.tolist())}
