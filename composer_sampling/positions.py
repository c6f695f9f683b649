"""Where each rank reads an epoch's order: rank arithmetic, chunks, the pass cursor and the mixture schedule.

Position ``p`` of an epoch's global order holds sample ``Permutation(N, seed, epoch)(p mod N)``
(:mod:`composer_sampling.permutation`); rank ``r`` of ``W`` reads positions
``start + r, start + r + W, ...``, where ``start`` is the global position a (resumed) run
begins at. The functions here are pure; a :class:`PassCursor` is the one object that
changes, as its rank reads a pass. Nothing here allocates in proportion to the dataset.

Example:
    >>> rank_positions(start=0, rank=1, num_replicas=2, count=3).tolist()
    [1, 3, 5]
    >>> global_indices(np.arange(4), 3, shuffle=False, seed=0, epoch=0).tolist()
    [0, 1, 2, 0]
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator
from itertools import chain, pairwise, repeat

import numpy as np
import numpy.typing as npt

from composer_sampling.permutation import Permutation, derive_seed, splitmix64

__all__ = [
    'IndexArray',
    'PassCursor',
    'chunk_bounds',
    'global_indices',
    'iter_mapped_positions',
    'iter_rank_indices',
    'mixture_schedule',
    'rank_count',
    'rank_positions',
    'samples_per_rank',
    'split_window',
]

#: An array of sample indices or positions.
IndexArray = npt.NDArray[np.int64]
_MASK64 = (1 << 64) - 1
_CHUNK = 1 << 16
#: The first chunk of a pass: small, so the first index costs well under a millisecond; chunks then double.
_FIRST_CHUNK = 1 << 8


def samples_per_rank(n: int, num_replicas: int, drop_last: bool, start: int = 0) -> int:
    """How many positions each rank reads from global position ``start`` to the epoch's end.

    With ``start == 0`` this is torch's ``DistributedSampler.num_samples``: the
    ``n - start`` remaining positions are padded up to a multiple of ``num_replicas``
    (repeating the start of the order) or, with ``drop_last``, cut down to one.

    Example:
        >>> samples_per_rank(10, 4, drop_last=False), samples_per_rank(10, 4, drop_last=True)
        (3, 2)
    """
    remaining = max(n - start, 0)
    if drop_last:
        return remaining // num_replicas
    return -(-remaining // num_replicas)


def split_window(total: int, parts: int, part: int) -> tuple[int, int]:
    """Bounds of ``part`` when ``total`` items are cut into ``parts`` runs whose sizes differ by at most one.

    The remainder goes to the first parts: 10 items in 4 parts are 3, 3, 2, 2.

    Example:
        >>> [split_window(10, 4, part) for part in range(4)]
        [(0, 3), (3, 6), (6, 8), (8, 10)]
    """
    base, remainder = divmod(total, parts)
    start = part * base + min(part, remainder)
    return start, start + base + (part < remainder)


def rank_positions(start: int, rank: int, num_replicas: int, count: int) -> IndexArray:
    """Global positions ``start + rank + i * num_replicas`` for ``i`` in ``[0, count)``.

    Example:
        >>> rank_positions(start=8, rank=0, num_replicas=3, count=2).tolist()
        [8, 11]
    """
    return start + rank + num_replicas * np.arange(count, dtype=np.int64)


def rank_count(first: int, end: int, rank: int, num_replicas: int) -> int:
    """How many of the positions ``first + rank + i * num_replicas`` fall before ``end``.

    Example:
        >>> rank_count(first=8, end=12, rank=3, num_replicas=3), rank_count(8, 12, 0, 3)
        (1, 2)
    """
    return max(0, -(-(end - first - rank) // num_replicas))


def global_indices(positions: npt.ArrayLike, n: int, shuffle: bool, seed: int, epoch: int) -> IndexArray:
    """Sample indices at global ``positions``; positions past ``n`` wrap (torch's padding).

    Example:
        >>> global_indices(np.array([0, 1, 5, 6]), 5, shuffle=False, seed=0, epoch=0).tolist()
        [0, 1, 0, 1]
    """
    wrapped = np.asarray(positions, dtype=np.int64) % n
    return Permutation.cached(n, seed, epoch)(wrapped) if shuffle else wrapped


class PassCursor:
    """How far one rank has read a pass, known without a per-index cost.

    A pass starts at global position ``start`` and ends at ``end``; the rank reads
    ``count`` positions, ``num_replicas`` apart. The iterator of the chunk being
    read is a list iterator, whose remaining length is exact, so the count of
    yielded indices is the chunk's first index plus what has left that chunk.

    Example:
        >>> cursor = PassCursor(start=4, end=20, num_replicas=2, count=8)
        >>> items = iter_mapped_positions(lambda p: p, rank=0, num_replicas=2, count=8, start=4, cursor=cursor)
        >>> cursor.position, next(items), next(items), cursor.position
        (4, 4, 6, 8)
        >>> rest = list(items)
        >>> cursor.yielded, cursor.finished, cursor.position
        (8, True, 20)
    """

    def __init__(self, *, start: int, end: int, num_replicas: int, count: int) -> None:
        self.start, self.end, self.num_replicas, self.count = start, end, num_replicas, count
        self._before = 0
        self._chunk_len = 0
        self._chunk: Iterator[int] = iter(())

    def enter(self, first: int, values: list[int]) -> Iterator[int]:
        """Start reading ``values``, the chunk whose first item is the rank's ``first``-th index."""
        self._chunk = iter(values)
        self._before, self._chunk_len = first, len(values)
        return self._chunk

    @property
    def yielded(self) -> int:
        """Indices this rank has taken from the pass so far."""
        return self._before + self._chunk_len - operator.length_hint(self._chunk)

    @property
    def finished(self) -> bool:
        """Whether every index of the pass has been taken."""
        return self.yielded >= self.count

    @property
    def position(self) -> int:
        """The global position the pass has reached: ``end`` once finished."""
        if self.finished:
            return max(self.end, self.start)
        return min(self.start + self.yielded * self.num_replicas, self.end)


def iter_mapped_positions(
    to_indices: Callable[[IndexArray], IndexArray],
    *,
    rank: int,
    num_replicas: int,
    count: int,
    start: int,
    chunk: int = _CHUNK,
    cursor: PassCursor | None = None,
) -> Iterator[int]:
    """``to_indices`` of one rank's ``count`` positions from ``start``, as Python ints, chunk by chunk.

    The chunks are chained by C iterators (no Python generator frame per index),
    which is what makes iteration faster than torch's list of N ints. They grow
    from a few hundred positions to ``chunk`` (:func:`chunk_bounds`), so the first
    index comes at once and steady iteration pays the per-chunk cost rarely. A
    ``cursor`` is told of every chunk, so it knows how far the pass has been read.

    Example:
        >>> list(iter_mapped_positions(lambda p: p * 10, rank=1, num_replicas=2, count=3, start=0))
        [10, 30, 50]
    """

    def chunk_indices(first: int, size: int) -> list[int] | Iterator[int]:
        positions = rank_positions(start + first * num_replicas, rank, num_replicas, min(size, count - first))
        values = to_indices(positions).tolist()
        return values if cursor is None else cursor.enter(first, values)

    firsts, sizes = chunk_bounds(count, chunk)
    return chain.from_iterable(map(chunk_indices, firsts, sizes))


def chunk_bounds(count: int, chunk: int, first_chunk: int = _FIRST_CHUNK) -> tuple[Iterator[int], Iterator[int]]:
    """First item and size of every chunk of ``count`` items: ``first_chunk`` items, then doubling up to ``chunk``.

    Lazy (a pass of 2**62 positions is fine); the last size may run past ``count``.

    Example:
        >>> firsts, sizes = chunk_bounds(40, chunk=16, first_chunk=4)
        >>> list(zip(firsts, sizes))
        [(0, 4), (4, 4), (8, 8), (16, 16), (32, 16)]
    """
    first_chunk = max(1, min(first_chunk, chunk))
    small: list[int] = []
    edge, size = 0, first_chunk
    while edge < min(count, chunk):
        small.append(edge)
        edge += size
        size = edge
    small_sizes = [b - a for a, b in pairwise([*small, edge])]
    return (chain(small, range(edge, count, chunk)),
            chain(small_sizes, repeat(chunk)))


def iter_rank_indices(
    n: int,
    *,
    rank: int,
    num_replicas: int,
    count: int,
    start: int,
    shuffle: bool,
    seed: int,
    epoch: int,
    chunk: int = _CHUNK,
    cursor: PassCursor | None = None,
) -> Iterator[int]:
    """The ``count`` sample indices of one rank of the epoch's global order, computed lazily.

    Example:
        >>> list(iter_rank_indices(5, rank=1, num_replicas=2, count=3, start=0,
        ...                        shuffle=False, seed=0, epoch=0))
        [1, 3, 0]
    """
    return iter_mapped_positions(lambda positions: global_indices(positions, n, shuffle, seed, epoch), rank=rank,
                                 num_replicas=num_replicas, count=count, start=start, chunk=chunk, cursor=cursor)


def mixture_schedule(steps: list[int], *, shuffle: bool, seed: int, epoch: int) -> tuple[IndexArray, IndexArray]:
    """Which source each global step of an epoch draws from, and its step count within that source.

    Source ``k``'s ``steps[k]`` steps sit at times ``(j + u_k) / steps[k]``, ``j < steps[k]``,
    so each source is spread evenly over the epoch; ``u_k`` is ``0.5`` unshuffled, or a
    fraction drawn from ``(seed, epoch, k)``, so the interleave changes every epoch.
    O(total steps) memory, never O(samples).

    Example:
        >>> sources, within = mixture_schedule([2, 1], shuffle=False, seed=0, epoch=0)
        >>> sources.tolist(), within.tolist()
        ([0, 1, 0], [0, 0, 1])
    """
    sources = np.repeat(np.arange(len(steps), dtype=np.int64), steps)
    within = np.concatenate([np.arange(count, dtype=np.int64) for count in steps]) if steps else sources
    if shuffle:
        phase = np.array([splitmix64(derive_seed(seed, k) ^ (epoch & _MASK64)) / 2.0**64 for k in range(len(steps))])
    else:
        phase = np.full(len(steps), 0.5)
    counts = np.maximum(np.asarray(steps, dtype=np.float64), 1.0)
    times = (within + phase[sources]) / counts[sources]
    order = np.lexsort((sources, times))
    return sources[order], within[order]
