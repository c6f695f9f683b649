"""PyTorch's own ``DistributedSampler`` test cases, run against ``ResumableDistributedSampler``.

The cases are adapted from the PyTorch repository (https://github.com/pytorch/pytorch), which is
distributed under the BSD-3-Clause license (its copyright lines are reproduced below):

* ``test/test_dataloader.py`` at commit 74436f9025609987bbc69c617564f98635b67807:
  ``TestDataLoader.test_distributed_sampler_invalid_rank`` and
  ``TestDataLoader.test_duplicating_data_with_drop_last``;
* ``torch/testing/_internal/distributed/distributed_test.py`` at commit a069159c00b60fc660b36e63b9863cb6b30cda16
  (torch 2.7.0 ships the same case in its copy of that file):
  ``DistributedTest._DistTestBase.test_DistributedSampler_padding``.

They were rewritten as pytest functions, not copied. Torch runs the padding case as one process per rank in
a process group, one GPU each; here every rank is built in one process with ``num_replicas`` and ``rank``
passed explicitly, and the all-gather that checks that the ranks agree on their sample count becomes a loop
over the ranks. Fixed world sizes and dataset sizes became hypothesis properties over them. Where a case is
about ``len``, ``num_samples``, ``total_size``, padding or ``drop_last``, it is also checked against a real
``torch.utils.data.DistributedSampler`` built with the same arguments, including torch's exact order when
``shuffle=False``.

Not ported: none of these cases pins the indices of torch's ``randperm`` (our shuffled order is another seeded
bijection), so nothing had to be left out for that reason. At these commits torch has no other
``DistributedSampler`` case: ``test/test_utils.py`` has none, and ``distributed_test.py`` has no other. Torch has
no case of its own about ``set_epoch`` changing the order or about the ``shuffle=False`` order; those
properties are tested in ``tests/samplers/test_resumable.py`` (``test_drop_in_for_torch``,
``test_new_epoch_or_seed_gives_a_new_order_same_gives_the_same``) and are not repeated here.
"""

# Copyright lines of PyTorch, as they appear in its LICENSE file (the one distributed with torch 2.7.0):
#
# From PyTorch:
#
# Copyright (c) 2016-     Facebook, Inc            (Adam Paszke)
# Copyright (c) 2014-     Facebook, Inc            (Soumith Chintala)
# Copyright (c) 2011-2014 Idiap Research Institute (Ronan Collobert)
# Copyright (c) 2012-2014 Deepmind Technologies    (Koray Kavukcuoglu)
# Copyright (c) 2011-2012 NEC Laboratories America (Koray Kavukcuoglu)
# Copyright (c) 2011-2013 NYU                      (Clement Farabet)
# Copyright (c) 2006-2010 NEC Laboratories America (Ronan Collobert, Leon Bottou, Iain Melvin, Jason Weston)
# Copyright (c) 2006      Idiap Research Institute (Samy Bengio)
# Copyright (c) 2001-2004 Idiap Research Institute (Ronan Collobert, Samy Bengio, Johnny Mariethoz)
#
# From Caffe2:
#
# Copyright (c) 2016-present, Facebook Inc. All rights reserved.
#
# All contributions by Facebook:
# Copyright (c) 2016 Facebook Inc.
#
# All contributions by Google:
# Copyright (c) 2015 Google Inc.
# All rights reserved.
#
# All contributions by Yangqing Jia:
# Copyright (c) 2015 Yangqing Jia
# All rights reserved.
#
# All contributions by Kakao Brain:
# Copyright 2019-2020 Kakao Brain
#
# All contributions by Cruise LLC:
# Copyright (c) 2022 Cruise LLC.
# All rights reserved.
#
# All contributions by Tri Dao:
# Copyright (c) 2024 Tri Dao.
# All rights reserved.
#
# All contributions by Arm:
# Copyright (c) 2021, 2023-2024 Arm Limited and/or its affiliates
#
# All contributions from Caffe:
# Copyright(c) 2013, 2014, 2015, the respective contributors
# All rights reserved.
#
# All other contributions:
# Copyright(c) 2015, 2016 the respective contributors
# All rights reserved.

from __future__ import annotations

import collections
import math
from typing import Any

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler


def _shape(sampler: DistributedSampler) -> tuple[int, int, int]:
    """What a training loop reads off a distributed sampler before iterating it."""
    return len(sampler), sampler.num_samples, sampler.total_size


def _samples(size: int) -> list[torch.Tensor]:
    """A list of one-element tensors, the kind of dataset torch's padding case uses; only its length matters."""
    return [torch.full((1,), float(i)) for i in range(size)]


def _read_through_loaders(sampler_type: type[DistributedSampler], dataset: torch.Tensor, world: int,
                          batch_size: int, epoch: int = 0, **kwargs: Any) -> list[int]:
    """Every sample that ``world`` DataLoaders, one a rank, yield from ``dataset`` in ``epoch``, rank after rank."""
    read = []
    for rank in range(world):
        sampler = sampler_type(dataset, world, rank, **kwargs)
        sampler.set_epoch(epoch)
        loader = DataLoader(dataset, batch_size=batch_size, drop_last=True, sampler=sampler)
        read.extend(int(value) for batch in loader for value in batch)
    return read


# torch: TestDataLoader.test_distributed_sampler_invalid_rank


@pytest.mark.parametrize('rank', [3, -1], ids=['rank-equal-to-world', 'negative-rank'])
def test_a_rank_outside_the_world_is_refused_like_torch(rank: int) -> None:
    dataset = torch.arange(10, dtype=torch.int32)
    with pytest.raises(ValueError, match='Invalid rank') as theirs:
        DistributedSampler(dataset, 3, rank)
    with pytest.raises(ValueError, match='Invalid rank') as ours:
        ResumableDistributedSampler(dataset, 3, rank)
    assert str(ours.value) == str(theirs.value)


@given(world=st.integers(1, 64), rank=st.integers(-200, 200))
@settings(max_examples=100, deadline=None)
def test_every_rank_outside_the_world_is_refused_with_torchs_message(world: int, rank: int) -> None:
    assume(not 0 <= rank < world)
    with pytest.raises(ValueError, match='Invalid rank') as theirs:
        DistributedSampler(range(10), world, rank)
    with pytest.raises(ValueError, match='Invalid rank') as ours:
        ResumableDistributedSampler(range(10), world, rank)
    assert str(ours.value) == str(theirs.value)


# torch: TestDataLoader.test_duplicating_data_with_drop_last


def test_loaders_that_drop_the_last_batch_read_no_sample_twice() -> None:
    # 9 samples on 4 ranks: 3 indices a rank, 3 of the 12 are padding. With batches of 9 // 4 = 2 and the
    # loader's drop_last, each rank reads its first 2 indices only, so the padding is never read.
    world, size = 4, 9
    dataset = torch.arange(size, dtype=torch.int32)
    read = _read_through_loaders(ResumableDistributedSampler, dataset, world, batch_size=size // world)
    assert len(read) == world * (size // world)
    assert len(read) == len(set(read))


@given(
    size=st.integers(1, 60),
    world=st.integers(1, 8),
    batch_size=st.integers(1, 10),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
)
@settings(max_examples=150, deadline=None)
def test_loaders_over_every_rank_repeat_as_many_samples_as_torchs(
    size: int, world: int, batch_size: int, shuffle: bool, drop_last: bool, seed: int, epoch: int,
) -> None:
    # The generalisation of the case above: whatever the sizes, the loaders read as many samples and repeat as
    # many of them (padding read) as torch's; unshuffled, they read the very same samples in the same order.
    dataset = torch.arange(size, dtype=torch.int32)
    arguments = {'batch_size': batch_size, 'epoch': epoch, 'shuffle': shuffle, 'drop_last': drop_last, 'seed': seed}
    ours = _read_through_loaders(ResumableDistributedSampler, dataset, world, **arguments)
    theirs = _read_through_loaders(DistributedSampler, dataset, world, **arguments)
    assert len(ours) == len(theirs)
    assert len(ours) - len(set(ours)) == len(theirs) - len(set(theirs))
    assert set(ours) <= set(range(size))
    if not shuffle:
        assert ours == theirs


# torch: DistributedTest._DistTestBase.test_DistributedSampler_padding


def _check_ranks_agree_with_torch(size: int, world: int, expected_per_rank: int, **kwargs: Any) -> None:
    """Every rank of ``world`` has ``expected_per_rank`` samples, as torch's sampler on the same arguments."""
    dataset = _samples(size)
    counts = set()
    for shuffle in (True, False):
        for rank in range(world):
            ours = ResumableDistributedSampler(dataset, world, rank, shuffle=shuffle, **kwargs)
            theirs = DistributedSampler(dataset, world, rank, shuffle=shuffle, **kwargs)
            indices = list(ours)
            assert _shape(ours) == _shape(theirs) == (expected_per_rank, expected_per_rank,
                                                       expected_per_rank * world)
            assert len(indices) == expected_per_rank
            if not shuffle:
                assert indices == list(theirs)
            counts.add(len(indices))
    assert counts == {expected_per_rank}  # torch all-gathers the counts: every rank reads as many samples


@given(world=st.integers(1, 64))
@settings(max_examples=64, deadline=None)
def test_drop_last_trims_a_casual_dataset_to_a_multiple_of_the_world(world: int) -> None:
    size = 100 + world + 1
    # The greatest multiple of the world not above the size, shared by the ranks.
    expected = math.ceil((size - world) / world) if size % world else size // world
    assert expected == size // world
    _check_ranks_agree_with_torch(size, world, expected, drop_last=True)


@given(world=st.integers(1, 64))
@settings(max_examples=64, deadline=None)
def test_padding_extends_a_casual_dataset_to_a_multiple_of_the_world(world: int) -> None:
    size = 100 + world + 1
    # The least multiple of the world not below the size, shared by the ranks.
    _check_ranks_agree_with_torch(size, world, math.ceil(size / world))


@given(world=st.integers(1, 64), seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
@settings(max_examples=64, deadline=None)
def test_padding_extends_even_a_dataset_smaller_than_the_world(world: int, seed: int, epoch: int) -> None:
    size = max(world // 2 - 1, 1)
    _check_ranks_agree_with_torch(size, world, math.ceil(size / world))
    # Beyond torch's counts: the padding repeats the epoch's order from its head, so every sample is read and
    # read counts differ by at most one.
    read = []
    for rank in range(world):
        sampler = ResumableDistributedSampler(_samples(size), world, rank, seed=seed)
        sampler.set_epoch(epoch)
        read.extend(sampler)
    counts = collections.Counter(read)
    assert set(counts) == set(range(size))
    assert max(counts.values()) - min(counts.values()) <= 1
