"""Block shuffling's arithmetic (:meth:`~gpflow_svi_gplvm.rows.h5ad.DiskRows.batches`), reading
nothing: each epoch permutes blocks of consecutive rows, groups them into buffers and permutes
each buffer's rows; batch k is a function of the seed and k alone."""

from __future__ import annotations

import numpy as np

__all__ = ["ShufflePlan", "block_rows_of"]


def block_rows_of(bounds: list[tuple[int, int]]) -> np.ndarray:
    """The row numbers of blocks given by their bounds [a, b), in turn."""
    return np.concatenate([np.arange(a, b) for a, b in bounds])


class ShufflePlan:
    """Block shuffling's arithmetic, reading nothing: the buffers of an epoch, the order of a
    buffer's rows, the rows at positions of an epoch, and which buffers serve which batches."""

    def __init__(
        self, num_rows: int, batch_size: int, block_rows: int, buffer_blocks: int, seed: int
    ):
        self.num_rows, self.batch_size, self.seed = num_rows, batch_size, seed
        self.block_rows, self.buffer_blocks = block_rows, buffer_blocks
        self.batches_per_epoch = num_rows // batch_size
        self._layouts: dict[int, tuple[list[np.ndarray], np.ndarray]] = {}

    def block_bounds(self, block: int) -> tuple[int, int]:
        """Rows [a, b) of block ``block``."""
        first = int(block) * self.block_rows
        return first, min(first + self.block_rows, self.num_rows)

    def layout(self, epoch: int) -> tuple[list[np.ndarray], np.ndarray]:
        """The blocks of each buffer of ``epoch`` (ascending: the reading order) and the
        positions where each buffer's rows begin in the epoch's serving order [buffers + 1]."""
        if epoch in self._layouts:
            return self._layouts[epoch]
        num_blocks = -(-self.num_rows // self.block_rows)
        # The third word keeps the blocks' stream apart from the buffers' (``buffer``).
        shuffled = np.random.default_rng([self.seed, epoch, 0]).permutation(num_blocks)
        K, R = self.buffer_blocks, self.block_rows
        blocks = [np.sort(shuffled[i : i + K]) for i in range(0, num_blocks, K)]
        sizes = [np.minimum(R, self.num_rows - group * R).sum() for group in blocks]
        layout = blocks, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        if len(self._layouts) > 2:  # the epochs being read and the next one suffice
            self._layouts.pop(min(self._layouts), None)
        self._layouts[epoch] = layout
        return layout

    def buffer(self, epoch: int, number: int) -> tuple[list[tuple[int, int]], np.ndarray]:
        """Buffer ``number`` of ``epoch``: its blocks' rows [a, b) (the reading order) and the
        order [n] in which it serves its n rows (positions in the reading order)."""
        bounds = [self.block_bounds(block) for block in self.layout(epoch)[0][number]]
        size = sum(b - a for a, b in bounds)
        return bounds, np.random.default_rng([self.seed, epoch, 1, number]).permutation(size)

    def rows_at(self, epoch: int, first: int, last: int) -> np.ndarray:
        """The row numbers at positions [first, last) of ``epoch``'s serving order."""
        begins = self.layout(epoch)[1]
        number, pieces = int(np.searchsorted(begins, first, side="right")) - 1, []
        while first < last:
            bounds, order = self.buffer(epoch, number)
            stop = min(last, int(begins[number + 1]))
            pieces.append(
                block_rows_of(bounds)[order[first - begins[number] : stop - begins[number]]]
            )
            first, number = stop, number + 1
        return np.concatenate(pieces)

    def units(self, epoch: int, start: int) -> np.ndarray:
        """The reads of ``epoch`` [U, 4]: (epoch, buffer j, first batch, count) for the batches
        (numbered in the epoch) that begin among buffer j's rows, from global batch ``start``."""
        per_epoch, begins = self.batches_per_epoch, self.layout(epoch)[1]
        lowest = max(start - epoch * per_epoch, 0)
        # Batch k begins at position k B: in buffer j when begins[j] <= k B < begins[j + 1].
        firsts = np.clip(-(-begins // self.batch_size), lowest, per_epoch)
        counts = np.diff(firsts)
        numbers = np.flatnonzero(counts)
        epochs = np.full(numbers.size, epoch)
        return np.stack([epochs, numbers, firsts[numbers], counts[numbers]], axis=1).astype(
            np.int64
        )
