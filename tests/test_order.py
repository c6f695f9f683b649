"""The pure order functions: bijection, known answers, statistics, torch's shapes."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from composer_sampling import order
from composer_sampling.order import (
    MAX_DATASET_LEN,
    chunk_bounds,
    global_indices,
    inverse_permute,
    iter_rank_indices,
    permute,
    rank_positions,
    samples_per_rank,
)


def test_known_answers() -> None:
    # Pinned outputs: a checkpoint written by one release must resume the same order
    # in the next one, so any change to the permutation must be deliberate.
    assert permute(np.arange(10), 10, 0, 0).tolist() == [3, 9, 5, 8, 2, 1, 0, 7, 6, 4]
    assert permute(np.arange(10), 10, 17, 3).tolist() == [7, 0, 3, 4, 2, 5, 1, 8, 9, 6]
    assert permute(np.array([0, 1, 2, 10**12 - 1]), 10**12, 5, 7).tolist() == [
        770058132651, 480081188509, 797951951795, 117246391228,
    ]


@pytest.mark.parametrize('seed', [0, 1, 2**63 + 5])
def test_bijection_for_every_small_length(seed: int) -> None:
    for n in range(1, 3001):
        values = permute(np.arange(n), n, seed, epoch=n % 5)
        assert np.array_equal(np.sort(values), np.arange(n)), f'not a permutation at n={n}'


@pytest.mark.parametrize('n', [10**12, 2**40, 2**40 + 1, MAX_DATASET_LEN])
def test_spot_checks_at_huge_lengths(n: int) -> None:
    positions = np.random.default_rng(n % 1000).integers(0, n, size=50_000)
    values = permute(positions, n, seed=3, epoch=1)
    assert values.min() >= 0 and values.max() < n
    assert np.array_equal(inverse_permute(values, n, seed=3, epoch=1), positions)
    distinct = np.unique(positions)
    assert len(np.unique(permute(distinct, n, seed=3, epoch=1))) == len(distinct)


def test_seed_and_epoch_change_the_order_and_only_they_do() -> None:
    base = permute(np.arange(1000), 1000, seed=1, epoch=0)
    assert np.array_equal(base, permute(np.arange(1000), 1000, seed=1, epoch=0))
    assert not np.array_equal(base, permute(np.arange(1000), 1000, seed=2, epoch=0))
    assert not np.array_equal(base, permute(np.arange(1000), 1000, seed=1, epoch=1))


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
    ours = np.stack([permute(np.arange(n), n, seed=seed, epoch=seed % 3) for seed in range(count)])
    rng = np.random.default_rng(0)
    reference = np.stack([rng.permutation(n) for _ in range(count)])
    our_corr, our_half, our_chi = _statistics(ours)
    ref_corr, ref_half, ref_chi = _statistics(reference)
    assert abs(our_corr - ref_corr) < 0.01
    assert abs(our_half - 0.5) < 0.01 and abs(ref_half - 0.5) < 0.01
    assert our_chi < 86 and ref_chi < 86


@pytest.mark.parametrize('n', range(1, 40))
@pytest.mark.parametrize('world', [1, 2, 3, 8])
@pytest.mark.parametrize('drop_last', [False, True])
def test_samples_per_rank_is_torchs(n: int, world: int, drop_last: bool) -> None:
    torch_sampler = DistributedSampler(range(n), num_replicas=world, rank=0, drop_last=drop_last)
    assert samples_per_rank(n, world, drop_last) == torch_sampler.num_samples


@given(
    n=st.integers(1, 500),
    world=st.integers(1, 9),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 1000),
)
@settings(max_examples=200, deadline=None)
def test_exactly_once_across_ranks(n: int, world: int, drop_last: bool, seed: int, epoch: int) -> None:
    count = samples_per_rank(n, world, drop_last)
    per_rank = [
        list(iter_rank_indices(n, rank=r, num_replicas=world, count=count, start=0, shuffle=True, seed=seed,
                               epoch=epoch, chunk=7))
        for r in range(world)
    ]
    everything = np.concatenate([np.asarray(indices, dtype=np.int64) for indices in per_rank])
    unique, counts = np.unique(everything, return_counts=True)
    if drop_last:
        assert counts.max(initial=1) == 1 and n - len(unique) <= world - 1
    else:
        assert len(unique) == n
        assert counts.sum() - n <= world - 1  # padding repeats at most W - 1 samples


def test_rank_positions_interleave() -> None:
    assert rank_positions(0, 2, 4, 3).tolist() == [2, 6, 10]
    assert rank_positions(10, 0, 3, 2).tolist() == [10, 13]


def test_padding_wraps_to_the_start_of_the_order() -> None:
    order = global_indices(np.arange(7), 7, shuffle=True, seed=4, epoch=2)
    padded = global_indices(np.arange(7, 10), 7, shuffle=True, seed=4, epoch=2)
    assert padded.tolist() == order[:3].tolist()


def test_unshuffled_order_is_torchs_order() -> None:
    for n in (1, 5, 17):
        for world in (1, 3, 4):
            for drop_last in (False, True):
                for rank in range(world):
                    torch_sampler = DistributedSampler(range(n), world, rank, shuffle=False, drop_last=drop_last)
                    ours = iter_rank_indices(n, rank=rank, num_replicas=world, count=torch_sampler.num_samples,
                                             start=0, shuffle=False, seed=0, epoch=0)
                    assert list(ours) == list(torch_sampler)


def test_indices_are_python_ints() -> None:
    first = next(iter_rank_indices(10, rank=0, num_replicas=1, count=10, start=0, shuffle=True, seed=0, epoch=0))
    assert type(first) is int


def test_rejects_out_of_range_domain() -> None:
    with pytest.raises(ValueError, match=r'dataset length must be in \[1,'):
        permute(np.arange(1), 0, 0, 0)
    with pytest.raises(ValueError, match='seed must be in'):
        permute(np.arange(1), 1, -1, 0)


@settings(max_examples=60)
@given(count=st.integers(0, 3000), chunk=st.integers(1, 700), first_chunk=st.integers(1, 300))
def test_chunk_bounds_tile_the_pass_whatever_the_sizes(count: int, chunk: int, first_chunk: int) -> None:
    firsts, sizes = chunk_bounds(count, chunk, first_chunk)
    covered = [i for first, size in zip(firsts, sizes, strict=False) for i in range(first, min(first + size, count))]
    assert covered == list(range(count))


def test_the_first_chunk_is_small_and_chunks_grow_to_the_steady_size() -> None:
    _, sizes = chunk_bounds(10**9, chunk=1 << 16)
    first_sizes = [next(sizes) for _ in range(12)]
    assert first_sizes[0] == 256 and first_sizes[-1] == 1 << 16
    assert first_sizes == sorted(first_sizes)


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
    st.builds(lambda k, d: max(1, 2**k + d), st.integers(2, 62), st.integers(-3, 3)),  # either side of a power of two
    st.integers(1, MAX_DATASET_LEN),
)


@given(
    n=_LENGTHS,
    seed=st.integers(0, 2**64 - 1),
    epoch=st.integers(0, 2**40),
    count=st.integers(0, 700),
    draw=st.integers(0, 2**32 - 1),
)
@settings(max_examples=200, deadline=None)
def test_cycle_walk_equals_the_reference(n: int, seed: int, epoch: int, count: int, draw: int) -> None:
    # Up to 700 values: halves of up to 9 bits take the tabulated rounds, wider ones the
    # computed rounds; near a power of two hundreds of stragglers take the numpy passes.
    rng = np.random.default_rng(draw)
    positions = rng.integers(0, n, size=count, dtype=np.int64)
    forward = permute(positions, n, seed, epoch)
    assert forward.tolist() == [_reference_walk(p, n, seed, epoch, inverse=False) for p in positions.tolist()]
    samples = rng.integers(0, n, size=count, dtype=np.int64)
    backward = inverse_permute(samples, n, seed, epoch)
    assert backward.tolist() == [_reference_walk(s, n, seed, epoch, inverse=True) for s in samples.tolist()]
    assert np.array_equal(inverse_permute(forward, n, seed, epoch), positions)


@pytest.mark.parametrize('n', [2**20 + 1, 3 * 2**23, 2**32 - 3, 2**32, 2**32 + 1])
def test_tabulated_rounds_equal_computed_rounds_at_chunk_size(n: int) -> None:
    # A chunk of 2**16 values tabulates halves of up to 16 bits (N up to 2**32); calls of a
    # few values compute the rounds. Both, and the reference, agree.
    positions = np.random.default_rng(n % 977).integers(0, n, size=1 << 16)
    whole = permute(positions, n, seed=9, epoch=4)
    pieces = np.concatenate([permute(part, n, seed=9, epoch=4) for part in np.array_split(positions, 2048)])
    assert np.array_equal(whole, pieces)
    assert np.array_equal(inverse_permute(whole, n, seed=9, epoch=4), positions)
    for p, v in zip(positions[:300].tolist(), whole[:300].tolist(), strict=True):
        assert _reference_walk(p, n, 9, 4, inverse=False) == v


def test_results_never_share_the_reused_scratch_arrays() -> None:
    n = 2**20 + 1
    first_positions, second_positions = np.arange(0, 1 << 16), np.arange(1 << 16, 1 << 17)
    first = permute(first_positions, n, seed=2, epoch=0)
    kept = first.copy()
    second = permute(second_positions, n, seed=2, epoch=0)
    assert np.array_equal(first, kept) and not np.shares_memory(first, second)
    assert np.array_equal(np.sort(np.concatenate([first, second])), np.sort(permute(np.arange(1 << 17), n, 2, 0)))


def test_threads_walk_independently() -> None:
    n = 3 * 2**19 + 7
    chunks = [np.arange(start, start + (1 << 16)) for start in range(0, 8 << 16, 1 << 16)]
    expected = [permute(chunk, n, seed=5, epoch=1) for chunk in chunks]
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda chunk: permute(chunk, n, seed=5, epoch=1), chunks * 3))
    assert all(np.array_equal(result, expected[i % len(chunks)]) for i, result in enumerate(results))


def test_permute_keeps_the_shape_and_leaves_its_input_alone() -> None:
    positions = np.arange(12).reshape(3, 4)
    before = positions.copy()
    values = permute(positions, 12, seed=1, epoch=1)
    assert values.shape == (3, 4) and np.array_equal(positions, before)
    assert values.ravel().tolist() == permute(np.arange(12), 12, seed=1, epoch=1).tolist()
    assert permute([], 5, 0, 0).tolist() == []


def test_round_tables_are_read_only_and_cached() -> None:
    tables = order._round_tables(3, 1, 21)
    assert tables is order._round_tables(3, 1, 21)
    assert [len(table) for table in tables] == [2**11, 2**10] * 3
    with pytest.raises(ValueError, match='read-only'):
        tables[0][0] = 1
