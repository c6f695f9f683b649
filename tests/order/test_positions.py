"""Where ranks read the order: torch's shapes, exactly-once coverage, padding, chunks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from composer_sampling.permutation import Permutation
from composer_sampling.positions import (
    chunk_bounds,
    global_indices,
    iter_rank_indices,
    rank_positions,
    samples_per_rank,
)


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




def test_global_indices_read_the_shared_permutation() -> None:
    positions = np.arange(0, 40, 3)
    expected = Permutation(17, seed=6, epoch=2)(positions % 17)
    assert global_indices(positions, 17, shuffle=True, seed=6, epoch=2).tolist() == expected.tolist()
    assert global_indices(positions, 17, shuffle=False, seed=6, epoch=2).tolist() == (positions % 17).tolist()
