"""The seeded permutation: bijection, known answers, statistics, both strategies, the cache."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling.permutation import CACHE_SIZE, MAX_DATASET_LEN, Permutation, Strategy


def test_known_answers() -> None:
    # Pinned outputs: a checkpoint written by one release must resume the same order
    # in the next one, so any change to the permutation must be deliberate.
    assert Permutation(10, 0, 0)(np.arange(10)).tolist() == [3, 9, 5, 8, 2, 1, 0, 7, 6, 4]
    assert Permutation(10, 17, 3)(np.arange(10)).tolist() == [7, 0, 3, 4, 2, 5, 1, 8, 9, 6]
    assert Permutation(10**12, 5, 7)(np.array([0, 1, 2, 10**12 - 1])).tolist() == [
        770058132651, 480081188509, 797951951795, 117246391228,
    ]


@pytest.mark.parametrize('strategy', ['auto', 'tabulated', 'computed'])
def test_known_answers_whatever_the_strategy_and_one_at_a_time(strategy: Strategy) -> None:
    order = Permutation(10, 0, 0, strategy=strategy)
    assert order(np.arange(10)).tolist() == [3, 9, 5, 8, 2, 1, 0, 7, 6, 4]
    assert [order.at(p) for p in range(10)] == [3, 9, 5, 8, 2, 1, 0, 7, 6, 4]
    assert order.inverse(np.array([3, 9, 5, 8, 2, 1, 0, 7, 6, 4])).tolist() == list(range(10))
    huge = Permutation(10**12, 5, 7, strategy='computed' if strategy == 'tabulated' else strategy)
    assert [huge.at(p) for p in (0, 1, 2, 10**12 - 1)] == [770058132651, 480081188509, 797951951795, 117246391228]


@pytest.mark.parametrize('seed', [0, 1, 2**63 + 5])
def test_bijection_for_every_small_length(seed: int) -> None:
    for n in range(1, 3001):
        values = Permutation(n, seed, epoch=n % 5)(np.arange(n))
        assert np.array_equal(np.sort(values), np.arange(n)), f'not a permutation at n={n}'


@pytest.mark.parametrize('n', [10**12, 2**40, 2**40 + 1, MAX_DATASET_LEN])
def test_spot_checks_at_huge_lengths(n: int) -> None:
    positions = np.random.default_rng(n % 1000).integers(0, n, size=50_000)
    order = Permutation(n, seed=3, epoch=1)
    values = order(positions)
    assert values.min() >= 0 and values.max() < n
    assert np.array_equal(order.inverse(values), positions)
    distinct = np.unique(positions)
    assert len(np.unique(order(distinct))) == len(distinct)


def test_seed_and_epoch_change_the_order_and_only_they_do() -> None:
    base = Permutation(1000, seed=1, epoch=0)(np.arange(1000))
    assert np.array_equal(base, Permutation(1000, seed=1, epoch=0)(np.arange(1000)))
    assert not np.array_equal(base, Permutation(1000, seed=2, epoch=0)(np.arange(1000)))
    assert not np.array_equal(base, Permutation(1000, seed=1, epoch=1)(np.arange(1000)))


def _statistics(permutations: np.ndarray) -> tuple[float, float, float]:
    """Mean |position/value correlation|, mean share of the first half of positions landing in
    the first half of values, and a chi-square over an 8x8 grid of (position, value) buckets."""
    count, n = permutations.shape
    positions = np.arange(n)
    correlations = [abs(np.corrcoef(positions, row)[0, 1]) for row in permutations]
    first_half = (permutations[:, : n // 2] < n // 2).mean()
    buckets = np.zeros((8, 8))
    np.add.at(buckets, (np.broadcast_to(positions * 8 // n, permutations.shape), permutations * 8 // n), 1)
    expected = count * n / 64
    chi_square = ((buckets - expected) ** 2 / expected).sum()
    return float(np.mean(correlations)), float(first_half), float(chi_square)


def test_statistics_match_numpy_permutations() -> None:
    # A weak Feistel network leaves structure: positions correlated with values, or halves
    # that stay in place. We compare against numpy's own permutations of the same size:
    # mean |correlation| ~ sqrt(2 / (pi n)) ~ 0.025 for n = 1000; the first half of positions
    # lands in the first half of values half of the time; the 8x8 chi-square has 49 degrees
    # of freedom (mean 49, 99.9th percentile ~ 86).
    n, count = 1000, 400
    ours = np.stack([Permutation(n, seed=seed, epoch=seed % 3)(np.arange(n)) for seed in range(count)])
    rng = np.random.default_rng(0)
    reference = np.stack([rng.permutation(n) for _ in range(count)])
    our_corr, our_half, our_chi = _statistics(ours)
    ref_corr, ref_half, ref_chi = _statistics(reference)
    assert abs(our_corr - ref_corr) < 0.01
    assert abs(our_half - 0.5) < 0.01 and abs(ref_half - 0.5) < 0.01
    assert our_chi < 86 and ref_chi < 86


def test_rejects_out_of_range_domain() -> None:
    with pytest.raises(ValueError, match=r'dataset length must be in \[1,'):
        Permutation(0, 0, 0)
    with pytest.raises(ValueError, match='seed must be in'):
        Permutation(1, -1, 0)
    with pytest.raises(ValueError, match=r"strategy must be one of .*got 'fast'"):
        Permutation(1, 0, 0, strategy='fast')  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"strategy='tabulated' needs a domain of at most 2\*\*32.*domain=4294967297"):
        Permutation(2**32 + 1, 0, 0, strategy='tabulated')
    with pytest.raises(ValueError, match=r'position must be in \[0, 9\], got 10'):
        Permutation(10, 0, 0).at(10)
    with pytest.raises(TypeError):
        Permutation(10.0, 0, 0)  # type: ignore[arg-type]


# A reference cycle walk, one Python int at a time and written from the definition (the
# key schedule included), against which the vectorized walk (tables or computed rounds,
# straggler passes, the one-at-a-time tail, reused scratch arrays) must agree exactly.
_MASK64 = (1 << 64) - 1


def _reference_splitmix64(value: int) -> int:
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def _reference_keys(seed: int, epoch: int) -> list[int]:
    state = _reference_splitmix64(_reference_splitmix64(seed) ^ (epoch & _MASK64))
    keys = []
    for _ in range(6):
        state = _reference_splitmix64(state)
        keys.append(state)
    return keys


def _reference_round(source: int, key: int, bits: int) -> int:
    mixed = ((source ^ key) * 0xBF58476D1CE4E5B9) & _MASK64
    mixed ^= mixed >> 29
    mixed = (mixed * 0x94D049BB133111EB) & _MASK64
    mixed ^= mixed >> 32
    return mixed & ((1 << bits) - 1)


def _reference_network(value: int, keys: list[int], bits: int, inverse: bool) -> int:
    len_a, len_b = bits // 2, bits - bits // 2
    a, b = value >> len_b, value & ((1 << len_b) - 1)
    for key in (keys[::-1] if inverse else keys):
        if inverse:
            a, b = b ^ _reference_round(a, key, len_b), a
        else:
            a, b = b, a ^ _reference_round(b, key, len_a)
        len_a, len_b = len_b, len_a
    return (a << len_b) | b


def _reference_walk(value: int, n: int, seed: int, epoch: int, inverse: bool) -> int:
    keys, bits = _reference_keys(seed, epoch), max(2, (n - 1).bit_length())
    value = _reference_network(value, keys, bits, inverse)
    while value >= n:
        value = _reference_network(value, keys, bits, inverse)
    return value


def test_reference_walk_reproduces_the_known_answers() -> None:
    assert [_reference_walk(p, 10, 0, 0, inverse=False) for p in range(10)] == [3, 9, 5, 8, 2, 1, 0, 7, 6, 4]
    assert _reference_walk(10**12 - 1, 10**12, 5, 7, inverse=False) == 117246391228
    assert _reference_walk(117246391228, 10**12, 5, 7, inverse=True) == 10**12 - 1


_LENGTHS = st.one_of(
    st.integers(1, 5000),
    # either side of a power of two
    st.builds(lambda k, d: min(MAX_DATASET_LEN, max(1, 2**k + d)), st.integers(2, 62), st.integers(-3, 3)),
    st.integers(1, MAX_DATASET_LEN),
)


def _strategies(n: int) -> list[Strategy]:
    return ['auto', 'computed', 'tabulated'] if Permutation(n, 0, 0).tabulable else ['auto', 'computed']


@given(
    n=_LENGTHS,
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**40),
    count=st.integers(0, 700),
    draw=st.integers(0, 2**32 - 1),
)
@settings(max_examples=200, deadline=None)
def test_cycle_walk_equals_the_reference(n: int, seed: int, epoch: int, count: int, draw: int) -> None:
    # Up to 700 values, every strategy the domain allows: tabulated or computed rounds;
    # near a power of two hundreds of stragglers take the numpy passes.
    rng = np.random.default_rng(draw)
    positions = rng.integers(0, n, size=count, dtype=np.int64)
    samples = rng.integers(0, n, size=count, dtype=np.int64)
    expected_forward = [_reference_walk(p, n, seed, epoch, inverse=False) for p in positions.tolist()]
    expected_backward = [_reference_walk(s, n, seed, epoch, inverse=True) for s in samples.tolist()]
    for strategy in _strategies(n):
        order = Permutation(n, seed, epoch, strategy=strategy)
        forward = order(positions)
        assert forward.tolist() == expected_forward, strategy
        assert order.inverse(samples).tolist() == expected_backward, strategy
        assert np.array_equal(order.inverse(forward), positions)


@pytest.mark.parametrize('n', [2**20 + 1, 3 * 2**23, 2**32 - 3, 2**32, 2**32 + 1])
def test_tabulated_rounds_equal_computed_rounds_at_chunk_size(n: int) -> None:
    # A chunk of 2**16 values tabulates halves of up to 16 bits (N up to 2**32) under 'auto';
    # a fresh object's calls of a few values compute the rounds. Both, and the reference, agree.
    positions = np.random.default_rng(n % 977).integers(0, n, size=1 << 16)
    pieces = np.concatenate([Permutation(n, seed=9, epoch=4)(part) for part in np.array_split(positions, 2048)])
    order = Permutation(n, seed=9, epoch=4)
    whole = order(positions)
    assert (order.tables is not None) == (n <= 2**32)
    assert np.array_equal(whole, pieces)
    assert np.array_equal(order.inverse(whole), positions)
    for p, v in zip(positions[:300].tolist(), whole[:300].tolist(), strict=True):
        assert _reference_walk(p, n, 9, 4, inverse=False) == v


def test_results_never_share_the_reused_scratch_arrays() -> None:
    n = 2**20 + 1
    first_positions, second_positions = np.arange(0, 1 << 16), np.arange(1 << 16, 1 << 17)
    order = Permutation(n, seed=2, epoch=0)
    first = order(first_positions)
    kept = first.copy()
    second = order(second_positions)
    assert np.array_equal(first, kept) and not np.shares_memory(first, second)
    assert np.array_equal(np.sort(np.concatenate([first, second])), np.sort(order(np.arange(1 << 17))))


def test_threads_walk_independently() -> None:
    n = 3 * 2**19 + 7
    chunks = [np.arange(start, start + (1 << 16)) for start in range(0, 8 << 16, 1 << 16)]
    expected = [Permutation(n, seed=5, epoch=1)(chunk) for chunk in chunks]
    shared = Permutation(n, seed=5, epoch=1)  # one object, its tables built by whichever thread comes first
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(shared, chunks * 3))
    assert all(np.array_equal(result, expected[i % len(chunks)]) for i, result in enumerate(results))


def test_a_call_keeps_the_shape_and_leaves_its_input_alone() -> None:
    positions = np.arange(12).reshape(3, 4)
    before = positions.copy()
    order = Permutation(12, seed=1, epoch=1)
    values = order(positions)
    assert values.shape == (3, 4) and np.array_equal(positions, before)
    assert values.ravel().tolist() == order(np.arange(12)).tolist()
    assert order.inverse(values).tolist() == positions.tolist()
    assert Permutation(5, 0, 0)([]).tolist() == []


def test_round_tables_are_read_only_and_built_once() -> None:
    order = Permutation(2**27 - 5, seed=3, epoch=1)  # a 27-bit domain: halves of 13 and 14 bits
    order(np.arange(10))
    assert order.tables is None  # a call smaller than the tables computes the rounds
    order(np.arange(2**14))
    tables = order.tables
    assert tables is not None and [len(table) for table in tables] == [2**14, 2**13] * 3
    order(np.arange(10))
    assert order.tables is tables
    with pytest.raises(ValueError, match='read-only'):
        tables[0][0] = 1
    computed = Permutation(2**27 - 5, seed=3, epoch=1, strategy='computed')
    computed(np.arange(2**14))
    assert computed.tables is None
    small = Permutation(2**21 - 5, seed=3, epoch=1)  # tables of 2**11 entries: built at the first call
    small.at(0)
    assert small.tables is not None and [len(table) for table in small.tables] == [2**11, 2**10] * 3
    assert Permutation(2**32, 0, 0).tabulable and not Permutation(2**32 + 1, 0, 0).tabulable


def test_the_cache_shares_one_object_per_key_and_is_bounded() -> None:
    first = Permutation.cached(1000, seed=4, epoch=2)
    assert Permutation.cached(1000, seed=4, epoch=2) is first
    assert Permutation.cached(np.int64(1000), seed=np.uint64(4), epoch=2) is first
    assert Permutation.cached(1000, seed=4, epoch=2, strategy='computed') is not first
    assert Permutation.cached(1000, seed=4, epoch=3) is not first
    assert Permutation.cached(1001, seed=4, epoch=2) is not first
    for epoch in range(100, 100 + CACHE_SIZE):  # as many other keys as the cache holds push the first one out
        Permutation.cached(1000, seed=4, epoch=epoch)
    again = Permutation.cached(1000, seed=4, epoch=2)
    assert again is not first and np.array_equal(again(np.arange(1000)), first(np.arange(1000)))


@given(n=_LENGTHS, seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**64 - 1),
       size=st.integers(0, 300), draw=st.integers(0, 2**32 - 1))
@settings(max_examples=150, deadline=None)
def test_inverse_undoes_the_permutation_and_the_strategies_agree(n: int, seed: int, epoch: int, size: int,
                                                                  draw: int) -> None:
    positions = np.random.default_rng(draw).integers(0, n, size=size, dtype=np.int64)
    results = {}
    for strategy in _strategies(n):
        order = Permutation(n, seed, epoch, strategy=strategy)
        results[strategy] = samples = order(positions)
        assert samples.dtype == np.int64 and ((samples >= 0) & (samples < n)).all()
        assert np.array_equal(order.inverse(samples), positions), strategy
        assert [order.at(p) for p in positions[:20].tolist()] == samples[:20].tolist(), strategy
    assert all(np.array_equal(samples, results['computed']) for samples in results.values())


@given(k=st.integers(2, 32), offset=st.integers(-3, 3), seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 2**20))
@settings(max_examples=60, deadline=None)
def test_tabulated_and_computed_agree_bit_for_bit_on_every_tabulable_width(k: int, offset: int, seed: int,
                                                                           epoch: int) -> None:
    n = min(max(1, 2**k + offset), 2**32)  # either side of every power of two the tables cover
    positions = np.unique(np.random.default_rng(seed % 1000).integers(0, n, min(n, 3000)))
    tabulated = Permutation(n, seed, epoch, strategy='tabulated')
    computed = Permutation(n, seed, epoch, strategy='computed')
    assert tabulated(positions).tolist() == computed(positions).tolist()
    assert tabulated.inverse(positions).tolist() == computed.inverse(positions).tolist()
