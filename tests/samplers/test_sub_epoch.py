"""SubEpochDistributedSampler: every sample once per data epoch, split into sub-epochs."""

from __future__ import annotations

import collections

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from composer_sampling import ResumableDistributedSampler, SubEpochDistributedSampler

from support.helpers import all_ranks


def _maker(n: int, parts: int, **kwargs):
    return lambda world, rank: SubEpochDistributedSampler(n, parts, num_replicas=world, rank=rank, **kwargs)


def test_the_remainder_goes_to_the_first_sub_epochs() -> None:
    # 103 samples on 2 ranks: a share of 52 per rank, not divisible by 5 sub-epochs.
    # The well-known bug computed the remainder from a misspelt name and lost 2 samples a rank.
    make = _maker(103, 5, seed=1)
    lengths = []
    for epoch in range(5):
        per_rank = all_ranks(make, 2, epoch=epoch)
        lengths.append([len(indices) for indices in per_rank])
    assert lengths == [[11, 11], [11, 11], [10, 10], [10, 10], [10, 10]]
    assert len(SubEpochDistributedSampler(103, 5, num_replicas=2, rank=0)) == 11  # before set_epoch: sub-epoch 0
    trained = collections.Counter(i for epoch in range(5) for ranks in all_ranks(make, 2, epoch=epoch) for i in ranks)
    assert set(trained) == set(range(103)) and sum(trained.values()) == 104  # one padded sample, as torch


@given(
    n=st.integers(1, 400),
    world=st.integers(1, 6),
    parts=st.integers(1, 9),
    drop_last=st.booleans(),
    seed=st.integers(0, 10**6),
    data_epoch=st.integers(0, 3),
)
@settings(max_examples=150, deadline=None)
def test_exactly_once_per_data_epoch(n, world, parts, drop_last, seed, data_epoch) -> None:
    share = ResumableDistributedSampler(n, world, 0, drop_last=drop_last).num_samples
    assume(1 <= parts <= share)
    make = _maker(n, parts, seed=seed, drop_last=drop_last)
    lengths, everything = [], []
    for sub in range(parts):
        per_rank = all_ranks(make, world, epoch=data_epoch * parts + sub)
        assert len({len(indices) for indices in per_rank}) == 1, 'every rank the same count'
        lengths.append(len(per_rank[0]))
        everything += [i for indices in per_rank for i in indices]
    assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)
    assert sum(lengths) == share
    counts = collections.Counter(everything)
    if drop_last:
        assert set(counts.values()) <= {1} and n - len(counts) <= world - 1
    else:
        assert set(counts) == set(range(n)) and sum(counts.values()) - n <= world - 1


def test_len_follows_the_sub_epoch() -> None:
    sampler = SubEpochDistributedSampler(103, 5, num_replicas=2, rank=1)
    for epoch, expected in enumerate([11, 11, 10, 10, 10, 11]):
        sampler.set_epoch(epoch)
        assert len(sampler) == expected == len(list(sampler))


def test_a_new_order_each_data_epoch() -> None:
    make = _maker(200, 4, seed=3)
    first = [all_ranks(make, 2, epoch=e) for e in range(4)]
    second = [all_ranks(make, 2, epoch=e) for e in range(4, 8)]
    assert first != second
    assert first == [all_ranks(make, 2, epoch=e) for e in range(4)]


@given(world=st.integers(1, 4), steps=st.integers(0, 30), sub=st.integers(0, 3))
@settings(max_examples=60, deadline=None)
def test_resume_in_the_middle_of_a_sub_epoch(world: int, steps: int, sub: int) -> None:
    make = _maker(157, 4, seed=11)
    whole = all_ranks(make, world, epoch=4 + sub)
    steps = min(steps, len(whole[0]))
    assert all_ranks(make, world, epoch=4 + sub, start=steps * world) == [ranks[steps:] for ranks in whole]


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'sub_epochs_per_epoch': 0}, ValueError, r'sub_epochs_per_epoch must be in the interval \[1, inf\), got 0'),
        ({'sub_epochs_per_epoch': True}, TypeError, 'sub_epochs_per_epoch must be an int'),
        ({'sub_epochs_per_epoch': 6}, ValueError, 'sub_epochs_per_epoch=6 exceeds the 5 samples each of the 2 ranks'),
    ],
)
def test_bad_arguments(kwargs, error, message) -> None:
    with pytest.raises(error, match=message):
        SubEpochDistributedSampler(10, num_replicas=2, rank=0, **kwargs)


def test_repr_and_signature() -> None:
    sampler = SubEpochDistributedSampler(10, 2, num_replicas=2, rank=1, seed=4)
    assert repr(sampler) == ('SubEpochDistributedSampler(dataset=10, sub_epochs_per_epoch=2, num_replicas=2, rank=1, '
                             'shuffle=True, seed=4, drop_last=False)')
    assert sampler.order_signature()['num_replicas'] == 2
