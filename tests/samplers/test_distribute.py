"""distribute(): the innermost index sampler replaced at any depth, the input left untouched."""

from __future__ import annotations

import collections
from collections.abc import Iterator

import pytest
import torch
from composer.core import DataSpec
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    WeightedRandomSampler,
)

from composer_sampling import NestedBatchSampler, ResumableDistributedSampler, distribute, iter_samplers
from composer_sampling.samplers import DistributedBatchAdapter


class Reverse(Sampler[list[int]]):
    """A custom batch sampler: yields the inner batches in reverse order."""

    def __init__(self, batch_sampler) -> None:
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[list[int]]:
        return reversed(list(self.batch_sampler))

    def __len__(self) -> int:
        return len(self.batch_sampler)


def _collate(items):
    return torch.tensor(items)


def _deep_loader(base: Sampler, size: int = 60) -> DataLoader:
    nested = NestedBatchSampler(BatchSampler(base, 3, drop_last=False), num_batches=2)
    return DataLoader(list(range(size)), batch_sampler=Reverse(nested), collate_fn=_collate, pin_memory=False)


def test_a_random_sampler_three_levels_down_becomes_a_shuffled_distributed_one() -> None:
    loader = _deep_loader(RandomSampler(range(60)))
    before = [type(node).__name__ for node in iter_samplers(loader)]
    ranked = distribute(loader, num_replicas=3, rank=2, seed=4)
    assert [type(node).__name__ for node in iter_samplers(loader)] == before  # untouched
    leaf = ranked.batch_sampler.batch_sampler.batch_sampler.batch_sampler.sampler
    assert isinstance(ranked.batch_sampler, DistributedBatchAdapter)
    assert isinstance(leaf, ResumableDistributedSampler)
    assert (leaf.num_replicas, leaf.rank, leaf.shuffle, leaf.seed) == (3, 2, True, 4)
    assert ranked.collate_fn is _collate and ranked.dataset is loader.dataset
    batches = list(ranked)
    assert all(isinstance(batch, torch.Tensor) for batch in batches)
    assert sorted(len(batch) for batch in batches) == [2, 6, 6, 6]  # 20 samples a rank, reversed by Reverse


def test_sequential_stays_unshuffled_and_ranks_partition_the_data() -> None:
    per_rank = []
    for rank in range(4):
        ranked = distribute(_deep_loader(SequentialSampler(range(60))), num_replicas=4, rank=rank)
        leaf = ranked.batch_sampler.batch_sampler.batch_sampler.batch_sampler.sampler
        assert leaf.shuffle is False
        per_rank.append([int(i) for batch in ranked for i in batch])
    counts = collections.Counter(i for indices in per_rank for i in indices)
    assert set(counts) == set(range(60)) and set(counts.values()) == {1}


def test_plain_loaders_keep_batch_size_drop_last_and_workers() -> None:
    loader = DataLoader(list(range(50)), batch_size=8, shuffle=True, drop_last=True, num_workers=2,
                        prefetch_factor=3, persistent_workers=True)
    ranked = distribute(loader, num_replicas=2, rank=0)
    assert isinstance(ranked.sampler, ResumableDistributedSampler) and ranked.sampler.shuffle
    assert (ranked.batch_size, ranked.drop_last, ranked.num_workers, ranked.prefetch_factor,
            ranked.persistent_workers) == (8, True, 2, 3, True)
    assert len(ranked) == 25 // 8


def test_a_distributed_sampler_keeps_its_settings() -> None:
    base = DistributedSampler(range(20), num_replicas=1, rank=0, shuffle=False, drop_last=True)
    ranked = distribute(DataLoader(list(range(20)), batch_size=4, sampler=base), num_replicas=3, rank=1)
    assert (ranked.sampler.shuffle, ranked.sampler.drop_last, ranked.sampler.num_replicas) == (False, True, 3)


def test_result_passes_composers_multi_rank_check(monkeypatch) -> None:
    monkeypatch.setenv('WORLD_SIZE', '2')  # Composer's DataSpec reads the world size from the environment
    loader = _deep_loader(RandomSampler(range(60)))
    with pytest.raises(ValueError, match='does not use DistributedSampler'):
        DataSpec(loader)
    DataSpec(distribute(loader, num_replicas=2, rank=0))


def test_levels_that_cannot_be_rebuilt_are_named() -> None:
    class Opaque(Sampler[list[int]]):
        def __init__(self) -> None:
            self.source = BatchSampler(RandomSampler(range(6)), 2, False)

        def __iter__(self):
            return iter(self.source)

        def __len__(self) -> int:
            return 3

    with pytest.raises(ValueError, match='distribute cannot replace Opaque: only RandomSampler, SequentialSampler'):
        distribute(DataLoader(list(range(6)), batch_sampler=Opaque()), num_replicas=2, rank=0)
    weighted = WeightedRandomSampler([1.0] * 6, 6)
    with pytest.raises(ValueError, match='distribute cannot replace WeightedRandomSampler'):
        distribute(DataLoader(list(range(6)), batch_size=2, sampler=weighted), num_replicas=2, rank=0)
    with pytest.raises(ValueError, match=r'RandomSampler\(replacement=True'):
        distribute(DataLoader(list(range(6)), batch_size=2, sampler=RandomSampler(range(6), replacement=True)), 2, 0)


def test_bad_arguments() -> None:
    loader = DataLoader(list(range(6)), batch_size=2)
    with pytest.raises(ValueError, match=r'Invalid rank 2, rank should be in the interval \[0, 1\]'):
        distribute(loader, num_replicas=2, rank=2)
    with pytest.raises(TypeError, match='distribute expects a torch DataLoader, got list'):
        distribute([1, 2], num_replicas=1, rank=0)


def test_the_messages_that_suggest_distribute_name_the_public_function() -> None:
    import composer_sampling
    from composer_sampling._graph.walk import sharding_problem

    assert composer_sampling.distribute is distribute  # the name both messages give, and what it is
    text = sharding_problem(BatchSampler(SequentialSampler(range(8)), 2, False), world_size=2, rank=0)
    assert text is not None and text.endswith('or composer_sampling.distribute(dataloader) for a custom batch sampler')
    with pytest.raises(ValueError, match=r'or call composer_sampling\.distribute\(dataloader\)$'):
        DistributedBatchAdapter(BatchSampler(SequentialSampler(range(8)), 2, False))
