"""Each sampler of ours states its own math: ``pass_window`` says which global positions each rank reads, and
``indices_at`` and ``positions_of`` map those positions to samples and back."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling import MixtureDistributedSampler, ResumableDistributedSampler, SubEpochDistributedSampler
from composer_sampling.positions import rank_positions


@st.composite
def samplers(draw: Any) -> tuple[Any, int]:
    """A builder of one rank's sampler, and the world size."""
    world = draw(st.integers(1, 5))
    seed, shuffle = draw(st.integers(0, 2**64 - 1)), draw(st.booleans())
    kind = draw(st.sampled_from(['resumable', 'sub_epoch', 'mixture']))
    if kind == 'resumable':
        n, drop_last = draw(st.integers(1, 60)), draw(st.booleans())
        return (lambda r: ResumableDistributedSampler(n, world, r, shuffle=shuffle, seed=seed,
                                                      drop_last=drop_last)), world
    if kind == 'sub_epoch':
        n = draw(st.integers(world * 3, 60))
        parts = draw(st.integers(1, 3))
        return (lambda r: SubEpochDistributedSampler(n, parts, world, r, shuffle=shuffle, seed=seed)), world
    batch = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(0, 30), min_size=1, max_size=3).filter(lambda s: max(s) >= world * batch))
    return (lambda r: MixtureDistributedSampler(sizes, batch, world, r, shuffle=shuffle, seed=seed)), world


@settings(max_examples=80, deadline=None)
@given(samplers(), st.integers(0, 5))
def test_the_window_and_indices_at_give_what_every_rank_iterates(built: tuple[Any, int], epoch: int) -> None:
    build, world = built
    for rank in range(world):
        sampler = build(rank)
        sampler.set_epoch(epoch)
        first, count = sampler.pass_window(epoch)
        positions = rank_positions(first, rank, world, count)
        assert sampler.indices_at(positions).tolist() == list(sampler)
        n = sampler.dataset_len
        assert sampler.positions_of(sampler.indices_at(positions)).tolist() == (positions % n).tolist()


def test_a_mixture_gives_no_position_for_a_trimmed_sample() -> None:
    sampler = MixtureDistributedSampler([5, 4], batch_size=2, num_replicas=2, rank=0, shuffle=False)
    assert sampler.positions_of(np.arange(9)).tolist() == [0, 1, 2, 3, -1, 4, 5, 6, 7]
