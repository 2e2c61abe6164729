"""Data rows: a large, mostly-zero matrix kept sparse, and the rows of an on-disk AnnData read a
block at a time."""
