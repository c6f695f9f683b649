"""Counting sample indices in bounded memory: 2 bits per sample, saturating at "twice or more".

The exactly-once verdict needs, per sample, only whether it was trained 0, 1 or
2+ times, so :class:`SaturatingCounts` keeps two bit planes (``N / 4`` bytes in one
``uint8`` array) instead of 8-byte counts, and takes the indices in chunks of any
size: no array of a whole epoch's indices is ever built. :class:`RankOverlap`
adds, for the plan, how many samples several ranks train, with one scratch bitmap
(``N / 8`` bytes) that holds the current rank's samples and is cleared where it was set.
Counts of disjoint sets of ranks merge (:meth:`RankOverlap.merge`), and their planes may
live in memory the caller provides (``store``), so that processes can count ranks apart.

Example:
    >>> counts = SaturatingCounts(5)
    >>> counts.add(np.array([0, 1, 1])); counts.add(np.array([1, 3]))
    >>> counts.at_least_once(), counts.at_least_twice()
    (3, 1)
"""

from __future__ import annotations

import numpy as np

__all__ = ['RankOverlap', 'SaturatingCounts', 'group_bits', 'plane_bytes', 'popcount']

_POPCOUNT = np.array([bin(value).count('1') for value in range(256)], dtype=np.uint8)
_POPCOUNT_CHUNK = 1 << 24
_ONE = np.uint8(1)


def plane_bytes(n: int, planes: int) -> int:
    """The bytes of ``planes`` bit planes over ``n`` samples (a :class:`SaturatingCounts` has 2, a
    :class:`RankOverlap` 3).

    Example:
        >>> plane_bytes(10, 3)
        6
    """
    return planes * -(-n // 8)


def popcount(bits: np.ndarray) -> int:
    """The number of set bits in a ``uint8`` array, counted in chunks (no temporary the size of ``bits``).

    Example:
        >>> popcount(np.array([0b1011, 0xFF], dtype=np.uint8))
        11
    """
    return sum(int(_POPCOUNT[bits[lo:lo + _POPCOUNT_CHUNK]].sum(dtype=np.int64))
               for lo in range(0, bits.size, _POPCOUNT_CHUNK))


def _narrow(indices: np.ndarray, n: int) -> np.ndarray:
    """The indices as ``uint32`` when every index of ``[0, n)`` fits (half the bytes to sort), else as ``int64``."""
    return indices.astype(np.uint32 if n <= 2**32 else np.int64, copy=False)


def group_bits(indices: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A chunk of indices as bitmap updates: the distinct bytes touched, their bits, and the bits seen twice.

    ``bytes_[k]`` is a byte position (``index // 8``), each at most once and in
    increasing order; ``bits[k]`` has the bits of the indices that fall in it,
    ``again[k]`` those that occur twice or more in the chunk. One sort of the chunk
    makes it; fancy assignment with distinct positions then updates a bitmap exactly.

    Example:
        >>> [part.tolist() for part in group_bits(np.array([9, 1, 8, 9]))]
        [[0, 1], [2, 3], [0, 2]]
    """
    values = np.sort(indices)
    first = np.ones(values.size, dtype=bool)
    np.not_equal(values[1:], values[:-1], out=first[1:])
    distinct = values[first]
    bytes_ = distinct >> 3
    bit = np.left_shift(1, (distinct & 7).astype(np.uint8), dtype=np.uint8)
    starts = np.flatnonzero(np.concatenate(([bytes_.size > 0], bytes_[1:] != bytes_[:-1])))
    bits = np.bitwise_or.reduceat(bit, starts) if bytes_.size else bit
    bytes_ = bytes_[starts]
    again = np.zeros(bytes_.size, dtype=np.uint8)
    repeated = values[~first]
    if repeated.size:
        np.bitwise_or.at(again, np.searchsorted(bytes_, repeated >> 3),
                         np.left_shift(1, (repeated & 7).astype(np.uint8), dtype=np.uint8))
    return bytes_.astype(np.int64), bits, again


def _firsts(values: np.ndarray) -> np.ndarray:
    """Which entries of a sorted array differ from the one before (the first always does)."""
    first = np.empty(values.size, dtype=bool)
    first[:1] = True
    np.not_equal(values[1:], values[:-1], out=first[1:])
    return first


def _places(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where samples lie in a bit plane: their bytes (``index // 8``) and their bits in them."""
    return (np.right_shift(values, 3, dtype=np.intp),
            np.left_shift(_ONE, np.bitwise_and(values, 7, dtype=np.uint8, casting='unsafe')))


def _set_bits(plane: np.ndarray, values: np.ndarray) -> None:
    """Set the bits of the sorted, distinct ``values`` in ``plane``: in rounds, each the first sample of every byte
    still to do, so that a round's bytes are distinct and its gather and scatter exact.

    Example:
        >>> plane = np.zeros(2, dtype=np.uint8)
        >>> _set_bits(plane, np.array([0, 3, 9], dtype=np.uint32)); plane.tolist()
        [9, 2]
    """
    while values.size:
        bytes_, bits = _places(values)
        first = _firsts(bytes_)
        plane[bytes_[first]] |= bits[first]
        values = values[~first]


class SaturatingCounts:
    """How often each sample of ``[0, n)`` was counted, as 0, 1 or 2+: two bit planes in ``n / 4`` bytes.

    Indices must already be checked to lie in ``[0, n)``.

    Args:
        n (int): the number of samples, at least 0.
        planes (np.ndarray | None): zeroed ``uint8`` memory of :func:`plane_bytes` ``(n, 2)`` bytes to count in
            (shared memory, for counts another process reads), or ``None`` for new memory. Default: ``None``.

    Example:
        >>> counts = SaturatingCounts(4)
        >>> counts.add(np.array([2, 2, 2, 0]))
        >>> counts.at_least_once(), counts.at_least_twice(), counts.exactly_once()
        (2, 1, 1)
    """

    def __init__(self, n: int, planes: np.ndarray | None = None) -> None:
        self.n = n
        size = -(-n // 8)
        self.planes = np.zeros(2 * size, dtype=np.uint8) if planes is None else planes[:2 * size]
        self.once, self.twice = self.planes[:size], self.planes[size:]

    def add(self, indices: np.ndarray) -> None:
        """Count every index of the chunk once (an index repeated in the chunk counts each time).

        One sort of the chunk: an index it repeats is set in ``twice``; then every
        distinct index is tested against ``once`` and set in it with one gather and one
        scatter, in byte order. The samples that share a byte first each get the bits
        of all of them, so that whichever of their writes lands holds them all.
        """
        if not indices.size:
            return
        values = np.sort(_narrow(indices, self.n))
        new = _firsts(values)
        if not new.all():
            again = values[~new]
            _set_bits(self.twice, again[_firsts(again)])
            values = values[new]
        bytes_, bits = _places(values)
        seen = self.once[bytes_]
        twice = seen & bits
        shared = np.flatnonzero(bytes_[1:] == bytes_[:-1])  # sample k and k + 1 share a byte
        while shared.size and not np.array_equal(bits[shared], bits[shared + 1]):
            bits[shared + 1] |= bits[shared]  # each sample's bits spread one neighbour on, and back
            bits[shared] |= bits[shared + 1]
        self.once[bytes_] = seen | bits
        if twice.any():
            _set_bits(self.twice, values[twice != 0])

    def add_bits(self, bytes_: np.ndarray, bits: np.ndarray, again: np.ndarray | None = None) -> None:
        """Count the samples of ``bits`` at the distinct ``bytes_`` once, and those of ``again`` once more."""
        seen = self.once[bytes_]
        twice = seen & bits
        if again is not None:
            twice |= again
        if twice.any():  # most chunks repeat nothing: the second plane is then neither read nor written
            self.twice[bytes_] |= twice
        self.once[bytes_] = seen | bits

    def merge(self, other: SaturatingCounts) -> None:
        """Add the counts of ``other`` (of the same ``n``): a sample counted once in each is now counted twice.

        Example:
            >>> first, second = SaturatingCounts(4), SaturatingCounts(4)
            >>> first.add(np.array([0, 1])); second.add(np.array([1, 2, 2]))
            >>> first.merge(second)
            >>> first.at_least_once(), first.at_least_twice()
            (3, 2)
        """
        for lo in range(0, self.once.size, _POPCOUNT_CHUNK):
            window = slice(lo, lo + _POPCOUNT_CHUNK)
            self.twice[window] |= other.twice[window] | (self.once[window] & other.once[window])
            self.once[window] |= other.once[window]

    def at_least_once(self) -> int:
        return popcount(self.once)

    def at_least_twice(self) -> int:
        return popcount(self.twice)

    def exactly_once(self) -> int:
        return self.at_least_once() - self.at_least_twice()


class RankOverlap:
    """Samples counted rank by rank: how many ranks hold each sample (0, 1, 2+) and which a rank repeats itself.

    Feed each rank's indices with :meth:`add` between :meth:`start_rank` calls.
    Together, ``ranks`` and ``within`` (allocated at the first sample a rank
    repeats) give the total count of every sample, saturated: a sample is trained
    twice or more when two ranks hold it or one rank holds it twice.

    Args:
        n (int): the number of samples, at least 0.
        store (np.ndarray | None): zeroed ``uint8`` memory of :func:`plane_bytes` ``(n, 3)`` bytes for the counts
            and ``within`` (shared memory, for counts another process reads), or ``None`` for new memory.
            Default: ``None``.

    Example:
        >>> overlap = RankOverlap(6)
        >>> overlap.start_rank(); overlap.add(np.array([0, 1, 1]))
        >>> overlap.start_rank(); overlap.add(np.array([1, 2]))
        >>> overlap.at_least_once(), overlap.at_least_twice(), overlap.on_several_ranks()
        (3, 1, 1)
    """

    def __init__(self, n: int, store: np.ndarray | None = None) -> None:
        self.ranks = SaturatingCounts(n, None if store is None else store[:plane_bytes(n, 2)])
        #: Where ``within`` goes once a rank repeats a sample (allocated then, unless a store holds it).
        self._within_store = None if store is None else store[plane_bytes(n, 2):plane_bytes(n, 3)]
        self.within: np.ndarray | None = None
        self._scratch = np.zeros(self.ranks.once.size, dtype=np.uint8)
        self._touched: list[np.ndarray] | None = []
        self._touched_size = 0
        self._first: tuple[np.ndarray, np.ndarray] | None = None
        self._chunks = 0

    def start_rank(self) -> None:
        """Forget the last rank's samples: clear the scratch bitmap where it was set (all of it if that was most)."""
        if self._touched is None:
            self._scratch.fill(0)
        else:
            for bytes_ in self._touched:
                self._scratch[bytes_] = 0
        self._touched, self._touched_size, self._first, self._chunks = [], 0, None, 0

    def add(self, indices: np.ndarray) -> None:
        """Count a chunk of the current rank's indices."""
        if not indices.size:
            return
        bytes_, bits, again = group_bits(_narrow(indices, self.ranks.n))
        self._chunks += 1
        if self._chunks == 1:
            held = np.zeros_like(bits)  # a rank's first chunk: the scratch is written only if a second one comes
            self._first = (bytes_, bits)
        else:
            if self._first is not None:
                self._hold(*self._first)
                self._first = None
            held = self._scratch[bytes_]
            self._hold(bytes_, held | bits)
        repeated = (held & bits) | again
        if repeated.any():
            self._within()[bytes_] |= repeated
        self.ranks.add_bits(bytes_, bits & ~held)

    def _within(self) -> np.ndarray:
        """The plane of samples a rank repeats, allocated (or taken from the store) at its first use."""
        if self.within is None:
            self.within = (np.zeros(self._scratch.size, dtype=np.uint8) if self._within_store is None
                           else self._within_store)
        return self.within

    def note_within(self) -> None:
        """Read ``within`` from the store: another process counting into it found a rank that repeats a sample."""
        self._within()

    def merge(self, other: RankOverlap) -> None:
        """Add the counts of ``other``, counted over other ranks than these (of the same ``n``).

        Example:
            >>> first, second = RankOverlap(4), RankOverlap(4)
            >>> first.start_rank(); first.add(np.array([0, 1, 1]))
            >>> second.start_rank(); second.add(np.array([1, 2]))
            >>> first.merge(second)
            >>> first.at_least_once(), first.at_least_twice(), first.on_several_ranks()
            (3, 1, 1)
        """
        self.ranks.merge(other.ranks)
        if other.within is not None:
            self._within()[:] |= other.within

    def _hold(self, bytes_: np.ndarray, bits: np.ndarray) -> None:
        """Set the current rank's ``bits`` in the scratch bitmap, remembering where (while that is the smaller)."""
        self._scratch[bytes_] = bits
        if self._touched is not None:
            self._touched.append(bytes_)
            self._touched_size += bytes_.size
            if self._touched_size * 8 > self._scratch.size:  # their positions would outweigh the bitmap
                self._touched = None

    def at_least_once(self) -> int:
        return self.ranks.at_least_once()

    def at_least_twice(self) -> int:
        if self.within is None:
            return self.ranks.at_least_twice()
        step = _POPCOUNT_CHUNK
        return sum(popcount(self.ranks.twice[lo:lo + step] | self.within[lo:lo + step])
                   for lo in range(0, self.within.size, step))

    def on_several_ranks(self) -> int:
        return self.ranks.at_least_twice()
