"""The pure order functions: bijection, known answers, statistics, torch's shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

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
