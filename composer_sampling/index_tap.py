"""The one place composer-sampling steps in between a DataLoader and the sampler graph it reads.

An :class:`IndexTap` sits on one edge of a sampler graph (for example as the
``sampler`` of torch's ``BatchSampler``) and passes on, unchanged and in order,
what the node below it yields. Its next pass can be given a *window*: drop the
first ``skip`` items and stop after ``limit`` more. That is how
:class:`~composer_sampling.SamplerSync` resumes a graph that cannot start at a
sample offset without reading a trained sample again: the index lists of the
trained batches are drawn and dropped, their samples are never loaded. It is the
one sanctioned replay in the package: indices are replayed, data is not.

A window applies to the next pass only; every later pass is the node's own.

Example:
    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> batches = BatchSampler(SequentialSampler(range(10)), 2, drop_last=False)
    >>> batches.sampler = IndexTap(batches.sampler)
    >>> batches.sampler.set_window(skip=4, limit=4)  # two batches trained, two more in this pass
    >>> list(batches), len(batches)
    ([[4, 5], [6, 7]], 5)
    >>> list(batches)
    [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9]]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from composer_sampling.validate import check_int

__all__ = ['IndexTap']


class IndexTap(Sampler):
    """Passes on what ``sampler`` yields; the next pass can skip a head and stop early.

    It keeps the order of the node below (``keeps_child_order``), so the graph walk,
    seeding and checkpoints see through it to ``sampler``. ``len()`` is the full
    pass's length, as Composer expects of a resumed epoch.

    Args:
        sampler: the node below: an index sampler or a batch sampler.
    """

    keeps_child_order = True

    def __init__(self, sampler: Any) -> None:
        self.sampler = sampler
        self._skip = 0
        self._limit: int | None = None

    @property
    def window(self) -> tuple[int, int | None]:
        """The pending ``(skip, limit)`` of the next pass; ``(0, None)`` is the whole pass."""
        return self._skip, self._limit

    def set_window(self, skip: int, limit: int | None = None) -> None:
        """Drop the first ``skip`` items of the next pass and yield at most ``limit`` after them."""
        self._skip = check_int('skip', skip)
        self._limit = None if limit is None else check_int('limit', limit)

    def __iter__(self) -> Iterator[Any]:
        if self._skip == 0 and self._limit is None:
            return iter(self.sampler)
        return self._windowed_pass()

    def _windowed_pass(self) -> Iterator[Any]:
        # A generator: the window is taken at the first next(), not at iter(). A DataLoader with workers calls
        # iter() on its batch sampler twice and reads only the second iterator.
        skip, limit = self._skip, self._limit
        self._skip, self._limit = 0, None
        yield from itertools.islice(self.sampler, skip, None if limit is None else skip + limit)

    def __len__(self) -> int:
        return len(self.sampler)

    def __repr__(self) -> str:
        return f'IndexTap(sampler={self.sampler!r})'
