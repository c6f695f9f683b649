"""Drop-in behaviours of torch's ``DistributedSampler`` that our sampler and ``distribute`` keep.

Tensors and numpy arrays are datasets, as torch takes them (their length is their first dimension); an
integer scalar, 0-d tensors and numpy integers included, is a length; a string is refused rather than taken
for a dataset of characters. ``distribute`` keeps a subclass of a distributed sampler that is already built
for the requested world, since rebuilding it would lose its own order, and rebuilds the exact types.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, distribute


def _shape(sampler: DistributedSampler) -> tuple[int, int, int]:
    return len(sampler), sampler.num_samples, sampler.total_size


# Datasets of n samples that are not Python sequences: torch's sampler takes their len().
DATASETS: dict[str, Callable[[int], Any]] = {
    'tensor': torch.arange,
    'int32 tensor': lambda n: torch.arange(n, dtype=torch.int32),
    'matrix tensor': lambda n: torch.zeros(n, 3),
    'array': np.arange,
    'matrix array': lambda n: np.zeros((n, 2)),
}


@pytest.mark.parametrize('make', [torch.arange, np.arange], ids=['tensor', 'array'])
@pytest.mark.parametrize('shuffle', [False, True])
def test_a_tensor_or_array_is_a_dataset_as_in_torch(make: Callable[[int], Any], shuffle: bool) -> None:
    dataset = make(10)
    ours = ResumableDistributedSampler(dataset, 3, 2, shuffle=shuffle)
    theirs = DistributedSampler(dataset, 3, 2, shuffle=shuffle)
    assert ours.dataset_len == 10
    assert _shape(ours) == _shape(theirs) == (4, 4, 12)
    indices = list(ours)
    assert all(type(index) is int for index in indices)
    if shuffle:
        assert len(indices) == 4 and set(indices) <= set(range(10))
    else:
        assert indices == list(theirs) == [2, 5, 8, 1]  # positions 2, 5, 8 and 11, the last one padding


@given(
    kind=st.sampled_from(sorted(DATASETS)),
    size=st.integers(1, 200),
    world=st.integers(1, 8),
    rank_draw=st.integers(0, 7),
    drop_last=st.booleans(),
)
@settings(max_examples=150, deadline=None)
def test_tensors_and_arrays_of_any_size_shard_as_in_torch(
    kind: str, size: int, world: int, rank_draw: int, drop_last: bool,
) -> None:
    dataset = DATASETS[kind](size)
    rank = rank_draw % world
    for shuffle in (False, True):
        ours = ResumableDistributedSampler(dataset, world, rank, shuffle=shuffle, drop_last=drop_last)
        theirs = DistributedSampler(dataset, world, rank, shuffle=shuffle, drop_last=drop_last)
        assert _shape(ours) == _shape(theirs)
        indices = list(ours)
        assert len(indices) == len(ours)
        if not shuffle:
            assert indices == list(theirs)


@pytest.mark.parametrize(
    'length',
    [torch.tensor(10), torch.tensor(10, dtype=torch.int32), torch.tensor(10, dtype=torch.uint8),
     np.int64(10), np.int32(10), np.uint16(10), np.array(10)],
    ids=['tensor', 'int32-tensor', 'uint8-tensor', 'int64', 'int32', 'uint16', '0-d-array'],
)
def test_an_integer_scalar_is_a_length(length: Any) -> None:
    ours = ResumableDistributedSampler(length, 3, 2, shuffle=False)
    theirs = DistributedSampler(range(10), 3, 2, shuffle=False)
    assert type(ours.dataset_len) is int and ours.dataset_len == 10
    assert _shape(ours) == _shape(theirs)
    assert list(ours) == list(theirs)


@pytest.mark.parametrize('dataset', [torch.tensor([10]), np.array([10])], ids=['tensor', 'array'])
def test_a_one_element_tensor_is_a_dataset_of_one_sample_not_a_length(dataset: Any) -> None:
    ours = ResumableDistributedSampler(dataset, 3, 2, shuffle=False)
    theirs = DistributedSampler(dataset, 3, 2, shuffle=False)
    assert ours.dataset_len == 1
    assert _shape(ours) == _shape(theirs) == (1, 1, 3)
    assert list(ours) == list(theirs) == [0]


@pytest.mark.parametrize('text', ['10', '', b'10'], ids=['digits', 'empty', 'bytes'])
def test_a_string_is_refused_not_taken_for_a_dataset_of_characters(text: str | bytes) -> None:
    with pytest.raises(TypeError, match='string'):
        ResumableDistributedSampler(text, 3, 2)


@pytest.mark.parametrize(
    'scalar', [torch.tensor(10.0), np.array(10.0), np.float64(10.0), 10.0],
    ids=['float-tensor', 'float-array', 'float64', 'float'],
)
def test_a_non_integer_scalar_is_neither_a_length_nor_a_dataset(scalar: Any) -> None:
    with pytest.raises(TypeError, match='dataset must be'):
        ResumableDistributedSampler(scalar, 3, 2)


class BackwardsSampler(ResumableDistributedSampler):
    """A subclass of ours with an order of its own: each rank reads its indices backwards."""

    def __iter__(self) -> Iterator[int]:
        return reversed(list(super().__iter__()))


class OddPositionsFirstSampler(DistributedSampler):
    """A subclass of torch's sampler with an order of its own: the rank's odd positions, then its even ones."""

    def __iter__(self) -> Iterator[int]:
        indices = list(super().__iter__())
        return iter(indices[1::2] + indices[::2])


SUBCLASSES = [BackwardsSampler, OddPositionsFirstSampler]


def _loader(sampler: DistributedSampler, batched: bool) -> DataLoader:
    dataset = list(range(20))
    if batched:  # a batch sampler of its own on top: distribute wraps it and descends to the sampler
        return DataLoader(dataset, batch_sampler=BatchSampler(sampler, 4, drop_last=False))
    return DataLoader(dataset, batch_size=4, sampler=sampler)


def _index_sampler(loader: DataLoader) -> Any:
    if loader.batch_size is None:
        return loader.batch_sampler.batch_sampler.sampler  # DistributedBatchAdapter > BatchSampler > sampler
    return loader.sampler


@pytest.mark.parametrize('subclass', SUBCLASSES)
@pytest.mark.parametrize('batched', [False, True], ids=['sampler', 'batch-sampler'])
def test_distribute_keeps_a_subclass_built_for_the_requested_world(
    subclass: type[DistributedSampler], batched: bool,
) -> None:
    sampler = subclass(list(range(20)), num_replicas=3, rank=1, shuffle=False)
    ranked = distribute(_loader(sampler, batched), num_replicas=3, rank=1)
    kept = _index_sampler(ranked)
    assert kept is sampler and type(kept) is subclass
    assert [index for batch in ranked for index in batch.tolist()] == list(sampler)


@pytest.mark.parametrize('subclass', SUBCLASSES)
@pytest.mark.parametrize(('num_replicas', 'rank'), [(3, 0), (2, 1), (1, 0)])
def test_distribute_refuses_a_subclass_built_for_another_world(
    subclass: type[DistributedSampler], num_replicas: int, rank: int,
) -> None:
    sampler = subclass(list(range(20)), num_replicas=3, rank=1)
    for batched in (False, True):
        with pytest.raises(ValueError, match=f'{subclass.__name__} is already distributed for num_replicas=3, rank=1'):
            distribute(_loader(sampler, batched), num_replicas=num_replicas, rank=rank)


@pytest.mark.parametrize('exact', [DistributedSampler, ResumableDistributedSampler])
@pytest.mark.parametrize('batched', [False, True], ids=['sampler', 'batch-sampler'])
def test_distribute_rebuilds_an_exact_distributed_sampler_for_the_requested_world(
    exact: type[DistributedSampler], batched: bool,
) -> None:
    sampler = exact(list(range(20)), num_replicas=1, rank=0, shuffle=False, drop_last=True)
    ranked = distribute(_loader(sampler, batched), num_replicas=3, rank=2)
    rebuilt = _index_sampler(ranked)
    assert type(rebuilt) is ResumableDistributedSampler and rebuilt is not sampler
    assert (rebuilt.num_replicas, rebuilt.rank, rebuilt.shuffle, rebuilt.drop_last) == (3, 2, False, True)
    assert list(rebuilt) == list(DistributedSampler(range(20), 3, 2, shuffle=False, drop_last=True))


def test_a_boolean_scalar_is_not_a_length() -> None:
    with pytest.raises(TypeError, match='dataset must be an int'):
        ResumableDistributedSampler(torch.tensor(True), 1, 0)
