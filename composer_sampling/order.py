"""Pure functions that define every epoch's global order.

An epoch's global order is a function of ``(seed, epoch, dataset length)`` only.
Position ``p`` of that order holds sample ``permute(p mod N)``; rank ``r`` of ``W``
reads positions ``start + r, start + r + W, ...`` where ``start`` is the global
position a (resumed) run begins at. Nothing here keeps state or allocates
anything proportional to the dataset length.

Example:
    >>> import numpy as np
    >>> order = permute(np.arange(6), 6, seed=0, epoch=0)
    >>> sorted(order.tolist())
    [0, 1, 2, 3, 4, 5]
    >>> rank_positions(start=0, rank=1, num_replicas=2, count=3).tolist()
    [1, 3, 5]
"""

from __future__ import annotations

import functools
import operator
import threading
from collections.abc import Callable, Iterator
from itertools import accumulate, chain, pairwise, repeat

import numpy as np

__all__ = [
    'MAX_DATASET_LEN',
    'MAX_SEED',
    'PassCursor',
    'chunk_bounds',
    'derive_seed',
    'global_indices',
    'inverse_permute',
    'iter_mapped_positions',
    'iter_rank_indices',
    'mixture_schedule',
    'permute',
    'rank_count',
    'rank_positions',
    'samples_per_rank',
    'split_window',
]

#: Largest supported dataset length: the Feistel halves must fit 31 bits each.
MAX_DATASET_LEN = 2**62
#: Seeds are reduced to 64 bits by the key schedule, so larger ones are refused.
MAX_SEED = 2**64 - 1

_ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_MIX_1_INT, _MIX_2_INT = int(_MIX_1), int(_MIX_2)
_CHUNK = 1 << 16
#: The first chunk of a pass: small, so the first index costs well under a millisecond; chunks then double.
_FIRST_CHUNK = 1 << 8


def _splitmix64(value: int) -> int:
    """One step of the splitmix64 finalizer on a Python int (64-bit wraparound)."""
    value = (value + _GOLDEN) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _round_keys(seed: int, epoch: int) -> list[np.uint64]:
    """Derive the Feistel round keys from ``(seed, epoch)``."""
    state = _splitmix64(_splitmix64(seed & _MASK64) ^ (epoch & _MASK64))
    keys = []
    for _ in range(_ROUNDS):
        state = _splitmix64(state)
        keys.append(np.uint64(state))
    return keys


def derive_seed(seed: int, stream: int) -> int:
    """An independent 64-bit seed for ``stream`` (a source, a purpose) from one data seed.

    Example:
        >>> derive_seed(7, 0) != derive_seed(7, 1)
        True
    """
    return _splitmix64(_splitmix64(seed & _MASK64) ^ _splitmix64(stream & _MASK64))


def _domain_bits(n: int) -> int:
    """Bits of the Feistel domain: the smallest power of two >= n (at least 4), so it is < 2n."""
    return max(2, (n - 1).bit_length())


_SHIFT_1 = np.uint64(29)
_SHIFT_2 = np.uint64(32)


def _mix_into(target: np.ndarray, source: np.ndarray, key: np.uint64, mask: np.uint64,
              mixed: np.ndarray, scratch: np.ndarray) -> None:
    """``target ^= F(source)``: the round function, in place in preallocated buffers."""
    np.bitwise_xor(source, key, out=mixed)
    np.multiply(mixed, _MIX_1, out=mixed)
    np.right_shift(mixed, _SHIFT_1, out=scratch)
    np.bitwise_xor(mixed, scratch, out=mixed)
    np.multiply(mixed, _MIX_2, out=mixed)
    np.right_shift(mixed, _SHIFT_2, out=scratch)
    np.bitwise_xor(mixed, scratch, out=mixed)
    np.bitwise_and(mixed, mask, out=mixed)
    np.bitwise_xor(target, mixed, out=target)


#: Feistel halves of at most this many bits are tabulated (a domain of up to 2**32).
_TABLE_BITS = 16
#: Round tables kept for reuse across calls: one set per (seed, epoch, domain), each at most ``6 * 2**16`` entries.
_TABLE_CACHE = 4
#: Calls of up to this many values (a steady chunk) work in an array the thread keeps.
_SCRATCH_MAX = _CHUNK
#: Stragglers left at most this many are walked one at a time in Python ints, cheaper than more numpy passes.
_PYTHON_TAIL = 32

_scratch = threading.local()


def _scratch_block(words: int, size: int) -> np.ndarray:
    """An int64 work array of ``words`` values for a call on ``size`` values, to carve into buffers.

    Up to ``_SCRATCH_MAX`` values it is the thread's kept array (grown when too small),
    since a fresh array of a chunk's size goes back to the system when freed and every
    call would pay page faults to touch it again. Contents are garbage, and nothing
    returned to a caller is ever part of it.
    """
    if size > _SCRATCH_MAX:
        return np.empty(words, np.int64)
    kept = getattr(_scratch, 'block', None)
    if kept is None or len(kept) < words:
        kept = _scratch.block = np.empty(words, np.int64)
    return kept[:words]


def _carve(block: np.ndarray, sizes: list[int]) -> list[np.ndarray]:
    """Consecutive, disjoint pieces of ``block`` with the given lengths."""
    return [block[start:end] for start, end in pairwise(accumulate(sizes, initial=0))]


@functools.lru_cache(maxsize=_TABLE_CACHE)
def _round_tables(seed: int, epoch: int, bits: int) -> tuple[np.ndarray, ...]:
    """Every round function of the epoch's network on all its inputs: forward round ``i`` is ``a ^= tables[i][b]``.

    Round ``i`` changes the half of ``bits // 2`` bits (even ``i``) or of the rest (odd
    ``i``) from the other half, so table ``i`` has ``2 ** len(other half)`` entries. The
    values are :func:`_mix_into`'s own, so a tabulated network is the computed one.
    """
    source, target = bits - bits // 2, bits // 2
    tables = []
    for key in _round_keys(seed, epoch):
        inputs = np.arange(1 << source, dtype=np.uint64)
        table = np.zeros_like(inputs)
        _mix_into(table, inputs, key, np.uint64((1 << target) - 1), np.empty_like(inputs), np.empty_like(inputs))
        table = table.view(np.int64)
        table.flags.writeable = False
        tables.append(table)
        source, target = target, source
    return tuple(tables)


def _mix_int(source: int, key: int, mask: int) -> int:
    """:func:`_mix_into`'s round function on one Python int."""
    mixed = ((source ^ key) * _MIX_1_INT) & _MASK64
    mixed ^= mixed >> 29
    mixed = (mixed * _MIX_2_INT) & _MASK64
    mixed ^= mixed >> 32
    return mixed & mask


class _Network:
    """The epoch's alternating Feistel network (or its inverse) on ``bits``-bit values.

    The state is ``(a, b)``, ``a`` the high ``u = bits // 2`` bits and ``b`` the low
    ``v = bits - u``. A round maps ``(a, b)`` to ``(b, a ^ F(b))``, the halves swapping
    lengths; after an even number of rounds the layout is back to ``(u, v)``. The
    inverse round maps ``(a, b)`` back to ``(b ^ F(a), a)``.

    ``F`` is computed by :func:`_mix_into` (nine numpy operations a round) or, when
    the halves have at most ``_TABLE_BITS`` bits and the larger table is no longer
    than the call (so building it costs about one computed pass; it is then cached),
    looked up (two). Arrays are int64 (values are below ``2**62``); the caller lends
    the ``buffers`` scratch arrays.
    """

    def __init__(self, seed: int, epoch: int, bits: int, inverse: bool, size: int) -> None:
        self.inverse = inverse
        self.high, self.low = bits // 2, bits - bits // 2
        self.tables: tuple[np.ndarray, ...] | None = None
        if self.low <= _TABLE_BITS and 1 << self.low <= size:
            self.tables = _round_tables(seed, epoch, bits)
        self.keys = _round_keys(seed, epoch) if self.tables is None else []
        self.int_keys = [int(key) for key in self.keys]
        #: Scratch arrays one application needs.
        self.buffers = 3 if self.tables is not None else 4

    def __call__(self, values: np.ndarray, out: np.ndarray, buffers: list[np.ndarray]) -> None:
        """``out[:] = network(values)`` for 1-D int64 arrays of one length (``out`` may be ``values``)."""
        count = len(values)
        if self.tables is not None:
            self._tabulated(values, out, *(buffer[:count] for buffer in buffers[:3]))
        else:
            self._computed(values.view(np.uint64), out.view(np.uint64),
                           *(buffer[:count].view(np.uint64) for buffer in buffers[:4]))

    def _tabulated(self, values: np.ndarray, out: np.ndarray, a: np.ndarray, b: np.ndarray,
                   looked_up: np.ndarray) -> None:
        assert self.tables is not None
        np.right_shift(values, self.low, out=a)
        np.bitwise_and(values, (1 << self.low) - 1, out=b)
        # The halves index their tables in range by construction: 'clip' skips the bounds check and buffering.
        if not self.inverse:
            for table in self.tables:
                np.take(table, b, out=looked_up, mode='clip')
                np.bitwise_xor(a, looked_up, out=a)
                a, b = b, a
        else:
            for table in reversed(self.tables):
                np.take(table, a, out=looked_up, mode='clip')
                np.bitwise_xor(b, looked_up, out=b)
                a, b = b, a
        np.left_shift(a, self.low, out=a)
        np.bitwise_or(a, b, out=out)

    def _computed(self, values: np.ndarray, out: np.ndarray, a: np.ndarray, b: np.ndarray, mixed: np.ndarray,
                  scratch: np.ndarray) -> None:
        np.right_shift(values, np.uint64(self.low), out=a)
        np.bitwise_and(values, np.uint64((1 << self.low) - 1), out=b)
        len_a, len_b = self.high, self.low
        for key in (self.keys if not self.inverse else reversed(self.keys)):
            if not self.inverse:
                _mix_into(a, b, key, np.uint64((1 << len_a) - 1), mixed, scratch)
            else:
                _mix_into(b, a, key, np.uint64((1 << len_b) - 1), mixed, scratch)
            a, b = b, a
            len_a, len_b = len_b, len_a
        np.left_shift(a, np.uint64(len_b), out=a)
        np.bitwise_or(a, b, out=out)

    def walk_one(self, value: int, n: int) -> int:
        """Apply the network to one Python int until it falls below ``n`` (at least once)."""
        low, low_mask = self.low, (1 << self.low) - 1
        tables = self.tables
        keys = self.int_keys
        while True:
            a, b = value >> low, value & low_mask
            if tables is not None:
                if not self.inverse:
                    for table in tables:
                        a, b = b, a ^ table.item(b)
                else:
                    for table in reversed(tables):
                        a, b = b ^ table.item(a), a
            else:
                len_a, len_b = self.high, self.low
                if not self.inverse:
                    for key in keys:
                        a, b = b, a ^ _mix_int(b, key, (1 << len_a) - 1)
                        len_a, len_b = len_b, len_a
                else:
                    for key in reversed(keys):
                        a, b = b ^ _mix_int(a, key, (1 << len_b) - 1), a
                        len_a, len_b = len_b, len_a
            value = (a << low) | b
            if value < n:
                return value


def _cycle_walk(values: np.ndarray, n: int, seed: int, epoch: int, inverse: bool) -> np.ndarray:
    """The network (or its inverse) applied to each value until the result falls in ``[0, n)``.

    One pass over all values; then passes over the stragglers only, gathered into a
    small array: each pass maps them once more, writes them back and keeps those still
    out of range, so the set shrinks by a factor ``n / 2**bits`` or faster and no pass
    touches the full array again. The last ``_PYTHON_TAIL`` or fewer are walked one at a
    time: a numpy pass over a handful of values is all fixed overhead, and the longest
    walks of a chunk would need a dozen such passes.
    """
    values = np.asarray(values, dtype=np.int64)
    flat = values.reshape(-1)
    size = len(flat)
    network = _Network(seed, epoch, _domain_bits(n), inverse, size)
    sizes = [size] * network.buffers + [size // 8 + 1]  # the network's buffers, then flags (bytes) for comparisons
    *buffers, flag_words = _carve(_scratch_block(sum(sizes), size), sizes)
    out = np.empty(size, np.int64)
    network(flat, out, buffers)
    todo = np.flatnonzero(np.greater_equal(out, n, out=flag_words.view(np.bool_)[:size]))
    if len(todo) <= _PYTHON_TAIL:
        walk = out[todo]
    else:
        # Room for the stragglers (indices and values, each twice: a pass gathers from one into the other).
        sizes += [len(todo)] * 4
        *buffers, flag_words, todo_here, todo_there, walk_here, walk_there = _carve(
            _scratch_block(sum(sizes), size), sizes)
        flags = flag_words.view(np.bool_)
        walk = np.take(out, todo, out=walk_there[:len(todo)], mode='clip')
        while len(todo) > _PYTHON_TAIL:
            network(walk, walk, buffers)
            out[todo] = walk
            left = np.flatnonzero(np.greater_equal(walk, n, out=flags[:len(walk)]))
            todo = np.take(todo, left, out=todo_here[:len(left)], mode='clip')
            walk = np.take(walk, left, out=walk_here[:len(left)], mode='clip')
            todo_here, todo_there = todo_there, todo_here
            walk_here, walk_there = walk_there, walk_here
    for index, value in zip(todo.tolist(), walk.tolist(), strict=True):
        out[index] = network.walk_one(value, n)
    return out.reshape(values.shape)


def _check_domain(n: int, seed: int) -> None:
    if not 1 <= n <= MAX_DATASET_LEN:
        raise ValueError(f'dataset length must be in [1, {MAX_DATASET_LEN}], got {n}')
    if not 0 <= seed <= MAX_SEED:
        raise ValueError(f'seed must be in [0, 2**64 - 1], got {seed}')


def permute(positions: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """Map positions in ``[0, n)`` to samples through the epoch's seeded bijection.

    An alternating Feistel network over the smallest power of two ``>= n`` (so under
    ``2n``), with cycle walking back into ``[0, n)``; round keys come from ``(seed, epoch)``.
    Memory is proportional to ``len(positions)``, never to ``n``: the round tables, when
    used, hold at most six entries a position, and a chunk's scratch arrays are kept by
    the calling thread for its next call.

    Example:
        >>> permute(np.arange(5), 5, seed=3, epoch=1).tolist()
        [3, 1, 2, 4, 0]
    """
    _check_domain(n, seed)
    return _cycle_walk(np.asarray(positions), n, seed, epoch, inverse=False)


def inverse_permute(samples: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """The position at which each sample appears: ``inverse_permute(permute(p)) == p``.

    Example:
        >>> inverse_permute(np.array([3, 1, 2, 4, 0]), 5, seed=3, epoch=1).tolist()
        [0, 1, 2, 3, 4]
    """
    _check_domain(n, seed)
    return _cycle_walk(np.asarray(samples), n, seed, epoch, inverse=True)


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


def rank_positions(start: int, rank: int, num_replicas: int, count: int) -> np.ndarray:
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


def global_indices(positions: np.ndarray, n: int, shuffle: bool, seed: int, epoch: int) -> np.ndarray:
    """Sample indices at global ``positions``; positions past ``n`` wrap (torch's padding).

    Example:
        >>> global_indices(np.array([0, 1, 5, 6]), 5, shuffle=False, seed=0, epoch=0).tolist()
        [0, 1, 0, 1]
    """
    wrapped = np.asarray(positions, dtype=np.int64) % n
    return permute(wrapped, n, seed, epoch) if shuffle else wrapped


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
    to_indices: Callable[[np.ndarray], np.ndarray],
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


def mixture_schedule(steps: list[int], *, shuffle: bool, seed: int, epoch: int) -> tuple[np.ndarray, np.ndarray]:
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
        phase = np.array([_splitmix64(derive_seed(seed, k) ^ (epoch & _MASK64)) / 2.0**64 for k in range(len(steps))])
    else:
        phase = np.full(len(steps), 0.5)
    counts = np.maximum(np.asarray(steps, dtype=np.float64), 1.0)
    times = (within + phase[sources]) / counts[sources]
    order = np.lexsort((sources, times))
    return sources[order], within[order]
