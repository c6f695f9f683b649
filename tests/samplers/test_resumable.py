"""ResumableDistributedSampler: a drop-in DistributedSampler with exact, elastic resume."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DistributedSampler

from composer_sampling import ResumableDistributedSampler
from composer_sampling.positions import global_indices


def _all_ranks(n: int, world: int, *, epoch: int = 0, start: int = 0, **kwargs) -> list[list[int]]:
    lists = []
    for rank in range(world):
        sampler = ResumableDistributedSampler(n, num_replicas=world, rank=rank, **kwargs)
        sampler.set_epoch(epoch)
        sampler.set_sample_in_epoch(start)
        lists.append(list(sampler))
    return lists


@pytest.mark.parametrize('n', [1, 2, 7, 16, 33])
@pytest.mark.parametrize('world', [1, 2, 3, 8])
@pytest.mark.parametrize('drop_last', [False, True])
def test_drop_in_for_torch(n: int, world: int, drop_last: bool) -> None:
    for rank in range(world):
        ours = ResumableDistributedSampler(range(n), world, rank, shuffle=False, drop_last=drop_last)
        theirs = DistributedSampler(range(n), world, rank, shuffle=False, drop_last=drop_last)
        assert isinstance(ours, DistributedSampler)
        assert (len(ours), ours.num_samples, ours.total_size) == (len(theirs), theirs.num_samples, theirs.total_size)
        assert list(ours) == list(theirs)


def test_dataset_may_be_an_int_and_indices_are_ints() -> None:
    sampler = ResumableDistributedSampler(10**10, num_replicas=8, rank=3, seed=1)
    first = next(iter(sampler))
    assert type(first) is int and 0 <= first < 10**10
    assert len(sampler) == 10**10 // 8


@given(n=st.integers(1, 300), world=st.integers(1, 8), drop_last=st.booleans(), seed=st.integers(0, 2**32))
@settings(max_examples=150, deadline=None)
def test_exactly_once_per_epoch(n: int, world: int, drop_last: bool, seed: int) -> None:
    for epoch in (0, 1):
        counts = collections.Counter(i for ranks in _all_ranks(n, world, epoch=epoch, seed=seed,
                                                              drop_last=drop_last) for i in ranks)
        if drop_last:
            assert max(counts.values(), default=1) == 1 and n - len(counts) <= world - 1
        else:
            assert set(counts) == set(range(n)) and sum(counts.values()) - n <= world - 1


def test_new_epoch_or_seed_gives_a_new_order_same_gives_the_same() -> None:
    first = _all_ranks(1000, 2, epoch=0, seed=5)
    assert first == _all_ranks(1000, 2, epoch=0, seed=5)
    assert first != _all_ranks(1000, 2, epoch=1, seed=5)
    assert first != _all_ranks(1000, 2, epoch=0, seed=6)


@given(
    n=st.integers(1, 300),
    world=st.integers(1, 8),
    drop_last=st.booleans(),
    steps=st.integers(0, 60),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 5),
)
@settings(max_examples=150, deadline=None)
def test_resume_on_the_same_world_continues_each_rank_exactly(n, world, drop_last, steps, seed, epoch) -> None:
    whole = _all_ranks(n, world, epoch=epoch, seed=seed, drop_last=drop_last)
    steps = min(steps, len(whole[0]))
    resumed = _all_ranks(n, world, epoch=epoch, start=steps * world, seed=seed, drop_last=drop_last)
    assert resumed == [indices[steps:] for indices in whole]


@given(
    n=st.integers(1, 300),
    world=st.integers(1, 8),
    new_world=st.integers(1, 8),
    drop_last=st.booleans(),
    offset=st.integers(0, 320),
    seed=st.integers(0, 1000),
)
@settings(max_examples=200, deadline=None)
def test_elastic_resume_trains_every_remaining_sample_once(n, world, new_world, drop_last, offset, seed) -> None:
    total = ResumableDistributedSampler(n, world, 0, drop_last=drop_last).total_size
    offset = min(offset, total)
    trained = global_indices(np.arange(offset), n, shuffle=True, seed=seed, epoch=3).tolist()
    after = [i for ranks in _all_ranks(n, new_world, epoch=3, start=offset, seed=seed, drop_last=drop_last)
             for i in ranks]
    counts = collections.Counter(trained + after)
    assert len({len(ranks) for ranks in _all_ranks(n, new_world, epoch=3, start=offset, seed=seed,
                                                   drop_last=drop_last)}) == 1, 'ranks must get equal counts'
    if offset < n:
        repeats = sum(counts.values()) - len(counts)
        limit = max(world, new_world) - 1
        if drop_last:
            assert repeats == 0 and n - len(counts) <= new_world - 1
        else:
            assert set(counts) == set(range(n)) and repeats <= limit
    else:
        assert after == []  # only padding was left in the epoch


def test_same_epoch_keeps_the_offset_and_a_new_epoch_clears_it() -> None:
    sampler = ResumableDistributedSampler(20, num_replicas=2, rank=0, seed=1)
    sampler.set_epoch(4)
    whole = list(sampler)
    sampler.set_sample_in_epoch(6)
    sampler.set_epoch(4)  # the trainer calls set_epoch again after a resume
    assert list(sampler) == whole[3:]
    sampler.set_epoch(5)
    assert sampler.sample_in_epoch == 0 and len(list(sampler)) == 10


def test_state_dict_round_trip_resumes_exactly() -> None:
    sampler = ResumableDistributedSampler(50, num_replicas=2, rank=1, seed=9)
    sampler.set_epoch(2)
    sampler.set_sample_in_epoch(10)
    fresh = ResumableDistributedSampler(50, num_replicas=2, rank=1)
    fresh.load_state_dict(sampler.state_dict())
    assert (fresh.epoch, fresh.sample_in_epoch, fresh.seed) == (2, 10, 9)
    assert list(fresh) == list(sampler)


@pytest.mark.parametrize(
    ('other', 'message'),
    [
        (ResumableDistributedSampler(51, 2, 1), 'dataset_len=50 but this sampler has dataset_len=51'),
        (ResumableDistributedSampler(50, 2, 1, shuffle=False), 'shuffle=True but this sampler has shuffle=False'),
    ],
)
def test_state_of_another_order_is_refused(other: ResumableDistributedSampler, message: str) -> None:
    state = ResumableDistributedSampler(50, 2, 1).state_dict()
    with pytest.raises(ValueError, match=message):
        other.load_state_dict(state)


def test_corrupt_states_are_refused() -> None:
    sampler = ResumableDistributedSampler(50, 2, 1)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match=r"missing \['epoch'\]"):
        sampler.load_state_dict({k: v for k, v in state.items() if k != 'epoch'})
    with pytest.raises(ValueError, match='version 99'):
        sampler.load_state_dict({**state, 'version': 99})
    with pytest.raises(TypeError, match='expects a dict'):
        sampler.load_state_dict([1, 2])


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'rank': 2, 'num_replicas': 2}, ValueError, r'Invalid rank 2, rank should be in the interval \[0, 1\]'),
        ({'rank': -1, 'num_replicas': 2}, ValueError, 'Invalid rank -1'),
        ({'num_replicas': 0, 'rank': 0}, ValueError,
         r'num_replicas must be in the interval \[1, 4611686018427387904\], got 0'),
        ({'num_replicas': True, 'rank': 0}, TypeError, r'num_replicas must be an int, got True \(bool\)'),
        ({'rank': 1.0, 'num_replicas': 2}, TypeError, 'rank must be an int, got 1.0'),
        ({'seed': -3}, ValueError, r'seed must be in the interval \[0, 18446744073709551615\], got -3'),
        ({'seed': False}, TypeError, 'seed must be an int'),
        ({'shuffle': 1}, TypeError, 'shuffle must be a bool, got 1'),
        ({'drop_last': 'no'}, TypeError, 'drop_last must be a bool'),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, message: str) -> None:
    kwargs = {'num_replicas': 1, 'rank': 0, **kwargs}
    with pytest.raises(error, match=message):
        ResumableDistributedSampler(10, **kwargs)


def test_bad_datasets() -> None:
    with pytest.raises(ValueError, match='at least one sample, got length 0'):
        ResumableDistributedSampler([], 1, 0)
    with pytest.raises(ValueError, match='at least one sample, got length 0'):
        ResumableDistributedSampler(0, 1, 0)
    with pytest.raises(TypeError, match='sized'):
        ResumableDistributedSampler(iter(range(3)), 1, 0)
    with pytest.raises(ValueError, match='sample_in_epoch must be in'):
        ResumableDistributedSampler(3, 1, 0).set_sample_in_epoch(-1)
    with pytest.raises(TypeError, match='epoch must be an int'):
        ResumableDistributedSampler(3, 1, 0).set_epoch(True)


def test_rank_and_world_default_from_composer_dist() -> None:
    sampler = ResumableDistributedSampler(10)
    assert (sampler.num_replicas, sampler.rank) == (1, 0)


def test_repr_shows_every_argument() -> None:
    assert repr(ResumableDistributedSampler(range(5), 2, 1, shuffle=False, seed=3, drop_last=True)) == (
        'ResumableDistributedSampler(dataset=<range len=5>, num_replicas=2, rank=1, shuffle=False, seed=3, '
        'drop_last=True)'
    )
