"""The seeded permutation behind every epoch's order: one object, two ways to compute it.

Position ``p`` of an epoch's order over ``N`` samples holds sample
``Permutation(N, seed, epoch)(p)``, a bijection of ``[0, N)`` that depends on
``(seed, epoch, N)`` only: an alternating Feistel network over the smallest power of
two ``>= N`` (so under ``2N``), cycle-walked back into ``[0, N)``. Its round function is
either computed (nine numpy operations a round) or looked up in round tables (two);
both give the same values, bit for bit, and the object picks one per call.

State, none of it part of any order: :meth:`Permutation.cached` keeps the last
``CACHE_SIZE`` objects it built, keyed by ``(domain, seed, epoch, strategy)``; an
object builds its round tables (at most ``6 * 2**16`` entries) once, on first need;
and each thread keeps one scratch array for calls of up to ``2**16`` values, reused
by its next call. Nothing returned to a caller shares memory with any of them.

Example:
    >>> import numpy as np
    >>> order = Permutation(6, seed=0, epoch=0)
    >>> sorted(order(np.arange(6)).tolist())
    [0, 1, 2, 3, 4, 5]
    >>> order.inverse(order(np.arange(6))).tolist()
    [0, 1, 2, 3, 4, 5]
"""

from __future__ import annotations

import functools
import operator
import threading
from itertools import accumulate, pairwise
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

__all__ = [
    'CACHE_SIZE',
    'MAX_DATASET_LEN',
    'MAX_DATA_SEED',
    'Permutation',
    'Strategy',
    'derive_seed',
    'splitmix64',
]

#: Largest supported dataset length: the Feistel halves must fit 31 bits each.
MAX_DATASET_LEN = 2**62
#: Data seeds are reduced to 64 bits by the key schedule, so larger ones are refused.
MAX_DATA_SEED = 2**64 - 1
#: How many permutations :meth:`Permutation.cached` keeps (each holds at most ``6 * 2**16`` table entries).
CACHE_SIZE = 4

#: ``'auto'`` picks per call; ``'tabulated'`` always looks the rounds up; ``'computed'`` never does.
Strategy = Literal['auto', 'tabulated', 'computed']

_Array = npt.NDArray[np.int64]

_ROUNDS = 6
_MASK64 = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15
_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_MIX_1_INT, _MIX_2_INT = int(_MIX_1), int(_MIX_2)
_SHIFT_1 = np.uint64(29)
_SHIFT_2 = np.uint64(32)
#: Feistel halves of at most this many bits can be tabulated (a domain of up to 2**32).
_TABLE_BITS = 16
#: Tables up to this size are built at the first call (cheaper than one small cycle walk); larger ones once a call
#: has as many values as the larger table has entries, so building them costs about one computed call.
_SMALL_TABLE = 1 << 12
#: Calls of up to this many values (a steady chunk of positions) work in an array the thread keeps.
_SCRATCH_MAX = 1 << 16
#: Stragglers left at most this many are walked one at a time in Python ints, cheaper than more numpy passes.
_PYTHON_TAIL = 32

_scratch = threading.local()


def splitmix64(value: int) -> int:
    """One step of the splitmix64 finalizer on a Python int (64-bit wraparound).

    Example:
        >>> splitmix64(0)
        16294208416658607535
    """
    value = (value + _GOLDEN) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def derive_seed(seed: int, stream: int) -> int:
    """An independent 64-bit seed for ``stream`` (a source, a purpose) from one data seed.

    Example:
        >>> derive_seed(7, 0) != derive_seed(7, 1)
        True
    """
    return splitmix64(splitmix64(seed & _MASK64) ^ splitmix64(stream & _MASK64))


def _round_keys(seed: int, epoch: int) -> list[np.uint64]:
    """Derive the Feistel round keys from ``(seed, epoch)``."""
    state = splitmix64(splitmix64(seed & _MASK64) ^ (epoch & _MASK64))
    keys = []
    for _ in range(_ROUNDS):
        state = splitmix64(state)
        keys.append(np.uint64(state))
    return keys


def _domain_bits(n: int) -> int:
    """Bits of the Feistel domain: the smallest power of two >= n (at least 4), so it is < 2n."""
    return max(2, (n - 1).bit_length())


def _mix_into(target: npt.NDArray[np.uint64], source: npt.NDArray[np.uint64], key: np.uint64, mask: np.uint64,
              mixed: npt.NDArray[np.uint64], scratch: npt.NDArray[np.uint64]) -> None:
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


def _mix_int(source: int, key: int, mask: int) -> int:
    """:func:`_mix_into`'s round function on one Python int."""
    mixed = ((source ^ key) * _MIX_1_INT) & _MASK64
    mixed ^= mixed >> 29
    mixed = (mixed * _MIX_2_INT) & _MASK64
    mixed ^= mixed >> 32
    return mixed & mask


def _round_tables(keys: list[np.uint64], bits: int) -> tuple[_Array, ...]:
    """Every round function of the network on all its inputs: forward round ``i`` is ``a ^= tables[i][b]``.

    Round ``i`` changes the half of ``bits // 2`` bits (even ``i``) or of the rest (odd
    ``i``) from the other half, so table ``i`` has ``2 ** len(other half)`` entries. The
    values are :func:`_mix_into`'s own, so a tabulated network is the computed one.
    The tables are read-only.
    """
    source, target = bits - bits // 2, bits // 2
    tables = []
    for key in keys:
        inputs = np.arange(1 << source, dtype=np.uint64)
        computed = np.zeros_like(inputs)
        _mix_into(computed, inputs, key, np.uint64((1 << target) - 1), np.empty_like(inputs), np.empty_like(inputs))
        table = computed.view(np.int64)
        table.flags.writeable = False
        tables.append(table)
        source, target = target, source
    return tuple(tables)


def _scratch_block(words: int, size: int) -> _Array:
    """An int64 work array of ``words`` values for a call on ``size`` values, to carve into buffers.

    Up to ``_SCRATCH_MAX`` values it is the thread's kept array (grown when too small),
    since a fresh array of a chunk's size goes back to the system when freed and every
    call would pay page faults to touch it again. Contents are garbage, and nothing
    returned to a caller is ever part of it.
    """
    if size > _SCRATCH_MAX:
        return np.empty(words, np.int64)
    kept: _Array | None = getattr(_scratch, 'block', None)
    if kept is None or len(kept) < words:
        kept = _scratch.block = np.empty(words, np.int64)
    return kept[:words]


def _carve(block: _Array, sizes: list[int]) -> list[_Array]:
    """Consecutive, disjoint pieces of ``block`` with the given lengths."""
    return [block[start:end] for start, end in pairwise(accumulate(sizes, initial=0))]


class _Network:
    """The epoch's alternating Feistel network (or its inverse) on ``bits``-bit values.

    The state is ``(a, b)``, ``a`` the high ``u = bits // 2`` bits and ``b`` the low
    ``v = bits - u``. A round maps ``(a, b)`` to ``(b, a ^ F(b))``, the halves swapping
    lengths; after an even number of rounds the layout is back to ``(u, v)``. The
    inverse round maps ``(a, b)`` back to ``(b ^ F(a), a)``.

    ``F`` is looked up in ``tables`` when given (two numpy operations a round), else
    computed by :func:`_mix_into` from ``keys`` (nine). Arrays are int64 (values are
    below ``2**62``); the caller lends the ``buffers`` scratch arrays.
    """

    def __init__(self, bits: int, keys: list[np.uint64], tables: tuple[_Array, ...] | None, inverse: bool) -> None:
        self.inverse = inverse
        self.high, self.low = bits // 2, bits - bits // 2
        self.tables = tables
        self.keys = keys
        self.int_keys = [int(key) for key in keys]
        #: Scratch arrays one application needs.
        self.buffers = 3 if tables is not None else 4

    def __call__(self, values: _Array, out: _Array, buffers: list[_Array]) -> None:
        """``out[:] = network(values)`` for 1-D int64 arrays of one length (``out`` may be ``values``)."""
        count = len(values)
        if self.tables is not None:
            a, b, looked_up = (buffer[:count] for buffer in buffers[:3])
            self._tabulated(self.tables, values, out, a, b, looked_up)
        else:
            a64, b64, mixed, scratch = (buffer[:count].view(np.uint64) for buffer in buffers[:4])
            self._computed(values.view(np.uint64), out.view(np.uint64), a64, b64, mixed, scratch)

    def _tabulated(self, tables: tuple[_Array, ...], values: _Array, out: _Array, a: _Array, b: _Array,
                   looked_up: _Array) -> None:
        np.right_shift(values, self.low, out=a)
        np.bitwise_and(values, (1 << self.low) - 1, out=b)
        # The halves index their tables in range by construction: 'clip' skips the bounds check and buffering.
        if not self.inverse:
            for table in tables:
                np.take(table, b, out=looked_up, mode='clip')
                np.bitwise_xor(a, looked_up, out=a)
                a, b = b, a
        else:
            for table in reversed(tables):
                np.take(table, a, out=looked_up, mode='clip')
                np.bitwise_xor(b, looked_up, out=b)
                a, b = b, a
        np.left_shift(a, self.low, out=a)
        np.bitwise_or(a, b, out=out)

    def _computed(self, values: npt.NDArray[np.uint64], out: npt.NDArray[np.uint64], a: npt.NDArray[np.uint64],
                  b: npt.NDArray[np.uint64], mixed: npt.NDArray[np.uint64], scratch: npt.NDArray[np.uint64]) -> None:
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

    def _rounds_int(self, a: int, b: int) -> tuple[int, int]:
        """One application of the network to the halves ``(a, b)`` of one Python int."""
        if self.tables is not None:
            if not self.inverse:
                for table in self.tables:
                    a, b = b, a ^ table.item(b)
            else:
                for table in reversed(self.tables):
                    a, b = b ^ table.item(a), a
            return a, b
        len_a, len_b = self.high, self.low
        if not self.inverse:
            for key in self.int_keys:
                a, b = b, a ^ _mix_int(b, key, (1 << len_a) - 1)
                len_a, len_b = len_b, len_a
        else:
            for key in reversed(self.int_keys):
                a, b = b ^ _mix_int(a, key, (1 << len_b) - 1), a
                len_a, len_b = len_b, len_a
        return a, b

    def walk_one(self, value: int, n: int) -> int:
        """Apply the network to one Python int until it falls below ``n`` (at least once)."""
        low, low_mask = self.low, (1 << self.low) - 1
        while True:
            a, b = self._rounds_int(value >> low, value & low_mask)
            value = (a << low) | b
            if value < n:
                return value


def _cycle_walk(values: _Array, n: int, network: _Network) -> _Array:
    """The network applied to each value until the result falls in ``[0, n)``.

    One pass over all values; then passes over the stragglers only, gathered into a
    small array: each pass maps them once more, writes them back and keeps those still
    out of range, so the set shrinks by a factor ``n / 2**bits`` or faster and no pass
    touches the full array again. The last ``_PYTHON_TAIL`` or fewer are walked one at a
    time: a numpy pass over a handful of values is all fixed overhead, and the longest
    walks of a chunk would need a dozen such passes.
    """
    flat = values.reshape(-1)
    size = len(flat)
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


class Permutation:
    """The bijection of ``[0, domain)`` that ``(seed, epoch)`` pick: an epoch's order.

    Calls are vectorised and take memory proportional to the call, never to the
    domain. With ``strategy='auto'`` each call picks the round function's form: looked
    up in round tables when the Feistel halves have at most 16 bits (a domain of up to
    ``2**32``) and the tables are built, small (at most ``2**12`` entries) or no larger
    than the call, else computed. ``'tabulated'`` and ``'computed'`` force one form
    (for benchmarks and tests); every strategy gives the same values, bit for bit.
    Safe to share between threads. :meth:`cached` returns a shared object.

    Args:
        domain (int): the number of samples ``N``, in ``[1, 2**62]``.
        seed (int): the data seed, in ``[0, 2**64 - 1]``.
        epoch (int): the epoch; only its low 64 bits count.
        strategy (str): ``'auto'`` (default), ``'tabulated'`` (needs ``domain <= 2**32``)
            or ``'computed'``.

    Example:
        >>> order = Permutation(5, seed=3, epoch=1)
        >>> order(np.arange(5)).tolist(), order.at(0), order.inverse(np.array([3])).tolist()
        ([3, 1, 2, 4, 0], 3, [0])
    """

    def __init__(self, domain: int, seed: int, epoch: int, *, strategy: Strategy = 'auto') -> None:
        self.domain, self.seed, self.epoch = operator.index(domain), operator.index(seed), operator.index(epoch)
        if not 1 <= self.domain <= MAX_DATASET_LEN:
            raise ValueError(f'dataset length must be in [1, {MAX_DATASET_LEN}], got {self.domain}')
        if not 0 <= self.seed <= MAX_DATA_SEED:
            raise ValueError(f'seed must be in [0, 2**64 - 1], got {self.seed}')
        if strategy not in get_args(Strategy):
            raise ValueError(f'strategy must be one of {get_args(Strategy)}, got {strategy!r}')
        self.strategy: Strategy = strategy
        self._bits = _domain_bits(self.domain)
        self._table_entries = 1 << (self._bits - self._bits // 2)
        if strategy == 'tabulated' and not self.tabulable:
            raise ValueError(f"strategy='tabulated' needs a domain of at most 2**32 (Feistel halves of at most "
                             f'{_TABLE_BITS} bits), got domain={self.domain}')
        self._keys = _round_keys(self.seed, self.epoch)
        self._tables: tuple[_Array, ...] | None = None

    @classmethod
    def cached(cls, domain: int, seed: int, epoch: int, *, strategy: Strategy = 'auto') -> Permutation:
        """The shared permutation of ``(domain, seed, epoch, strategy)``, one of the last ``CACHE_SIZE`` used.

        Example:
            >>> Permutation.cached(10, seed=0, epoch=0) is Permutation.cached(10, seed=0, epoch=0)
            True
        """
        return _cached_permutation(operator.index(domain), operator.index(seed), operator.index(epoch), strategy)

    @property
    def tabulable(self) -> bool:
        """Whether the Feistel halves are narrow enough (16 bits) for round tables."""
        return self._bits - self._bits // 2 <= _TABLE_BITS

    @property
    def tables(self) -> tuple[_Array, ...] | None:
        """The round tables (read-only arrays) once a call has built them, else ``None``."""
        return self._tables

    def __repr__(self) -> str:
        return (f'Permutation(domain={self.domain}, seed={self.seed}, epoch={self.epoch}, '
                f'strategy={self.strategy!r})')

    def __call__(self, positions: npt.ArrayLike) -> _Array:
        """The samples at ``positions`` (in ``[0, domain)``), as a new int64 array of the same shape.

        Example:
            >>> Permutation(10, seed=0, epoch=0)([0, 1, 2]).tolist()
            [3, 9, 5]
        """
        values = np.asarray(positions, dtype=np.int64)
        return _cycle_walk(values, self.domain, self._network(inverse=False, size=values.size))

    def inverse(self, samples: npt.ArrayLike) -> _Array:
        """The position of each of ``samples``: ``inverse(self(p)) == p``.

        Example:
            >>> Permutation(5, seed=3, epoch=1).inverse([3, 1, 2, 4, 0]).tolist()
            [0, 1, 2, 3, 4]
        """
        values = np.asarray(samples, dtype=np.int64)
        return _cycle_walk(values, self.domain, self._network(inverse=True, size=values.size))

    def at(self, position: int) -> int:
        """The sample at one ``position``, in Python ints (no numpy call).

        Example:
            >>> Permutation(10, seed=17, epoch=3).at(0)
            7
        """
        position = operator.index(position)
        if not 0 <= position < self.domain:
            raise ValueError(f'position must be in [0, {self.domain - 1}], got {position}')
        return self._network(inverse=False, size=1).walk_one(position, self.domain)

    def _network(self, *, inverse: bool, size: int) -> _Network:
        """The network for a call on ``size`` values: tabulated or computed as the strategy says."""
        tables = self._tables
        if tables is None and self._wants_tables(size):
            tables = self._tables = _round_tables(self._keys, self._bits)  # a race builds equal tables: harmless
        return _Network(self._bits, self._keys, tables if self.strategy != 'computed' else None, inverse)

    def _wants_tables(self, size: int) -> bool:
        if self.strategy != 'auto':
            return self.strategy == 'tabulated'
        return self.tabulable and self._table_entries <= max(size, _SMALL_TABLE)


@functools.lru_cache(maxsize=CACHE_SIZE)
def _cached_permutation(domain: int, seed: int, epoch: int, strategy: Strategy) -> Permutation:
    return Permutation(domain, seed, epoch, strategy=strategy)
