"""The sampler-graph walker and its tree rendering."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from unittest.mock import MagicMock, Mock

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, Sampler, SequentialSampler

from composer_sampling import iter_samplers
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._graph.walk import MAX_DEPTH, active_root, render_tree, sharding_problem


class Wrapper(Sampler[list[int]]):
    """A custom batch sampler over another one; unhashable, like many real ones (it defines __eq__)."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.epochs: list[int] = []

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Wrapper) and other.batch_sampler is self.batch_sampler

    __hash__ = None  # type: ignore[assignment]

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        raise AssertionError('the walker must never iterate a sampler')

    def __len__(self) -> int:
        return len(self.batch_sampler)


class Group(Sampler[int]):
    def __init__(self, samplers: Any) -> None:
        self.samplers = samplers

    def __iter__(self) -> Iterator[int]:
        raise AssertionError('the walker must never iterate a sampler')


class Untouchable:
    """A dataset that fails if the walker touches it."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> int:
        raise AssertionError('the walker must never read the dataset')


def test_three_nested_custom_batch_samplers_are_all_found_in_order() -> None:
    leaf = DistributedSampler(range(8), num_replicas=2, rank=0)
    batches = BatchSampler(leaf, 2, drop_last=False)
    top = Wrapper(Wrapper(Wrapper(batches)))
    loader = DataLoader(Untouchable(), batch_sampler=top)
    nodes = list(iter_samplers(loader))
    assert nodes[:5] == [top, top.batch_sampler, top.batch_sampler.batch_sampler, batches, leaf]
    assert isinstance(nodes[5], SequentialSampler)  # the DataLoader's own (unused) sampler
    assert len(nodes) == 6


def test_a_sampler_root_is_yielded_itself() -> None:
    inner = SequentialSampler(range(3))
    assert list(iter_samplers(BatchSampler(inner, 2, False)))[1] is inner


def test_samplers_lists_tuples_and_dicts() -> None:
    a, b, c = SequentialSampler(range(2)), RandomSampler(range(3)), SequentialSampler(range(4))
    assert list(iter_samplers(Group([a, b])))[1:] == [a, b]
    assert list(iter_samplers(Group((b, a))))[1:] == [b, a]
    nested = Group({'images': Group([a]), 'text': c})
    assert [type(n).__name__ for n in iter_samplers(nested)] == ['Group', 'Group', 'SequentialSampler',
                                                                 'SequentialSampler']


def test_each_node_once_even_when_shared_or_cyclic() -> None:
    shared = SequentialSampler(range(4))
    group = Group([shared, BatchSampler(shared, 2, False)])
    group.samplers.append(group)  # a cycle back to the root
    nodes = list(iter_samplers(group))
    assert len(nodes) == 3 and len({id(n) for n in nodes}) == 3


def test_unhashable_samplers_are_walked() -> None:
    top = Wrapper(BatchSampler(SequentialSampler(range(4)), 2, False))
    with pytest.raises(TypeError):
        hash(top)
    assert len(list(iter_samplers(top))) == 3


def test_chains_to_the_depth_bound_are_walked_and_deeper_ones_are_a_clear_error() -> None:
    node: Any = SequentialSampler(range(2))
    for _ in range(MAX_DEPTH - 1):
        node = Wrapper(node)
    assert len(list(iter_samplers(node))) == MAX_DEPTH
    message = r'deeper than 64 levels at Wrapper\.batch_sampler\.batch_sampler.*\(SequentialSampler\)'
    with pytest.raises(ValueError, match=message):
        list(iter_samplers(Wrapper(node)))


def test_the_walk_ends_on_mocks_and_keeps_lightnings_reach() -> None:
    loader = Mock()
    take_snapshot(loader).set_epoch(3)
    for node in (loader.sampler, loader.batch_sampler, loader.batch_sampler.sampler):
        node.set_epoch.assert_called_once_with(3)
    assert len(list(iter_samplers(loader))) == 3  # not the loader itself, nothing below a non-sampler
    with pytest.raises(ValueError, match='deeper than 64 levels'):
        list(iter_samplers(MagicMock()))
    with pytest.raises(ValueError, match='deeper than 64 levels'):
        list(iter_samplers(DataLoader(range(4), batch_sampler=MagicMock())))


def test_active_root_and_tree() -> None:
    leaf = DistributedSampler(range(8), num_replicas=2, rank=1, seed=4)
    loader = DataLoader(range(8), batch_sampler=Wrapper(BatchSampler(leaf, 2, False)))
    assert active_root(loader) is loader.batch_sampler
    tree = render_tree(loader)
    assert 'DistributedSampler(num_replicas=2, rank=1, seed=4, shuffle=True, drop_last=False, len=4)' in tree
    assert '(unused: the batch_sampler draws the indices)' in tree
    assert tree.count('\n') == 4


def test_sharding_problems() -> None:
    assert sharding_problem(RandomSampler(range(4)), world_size=1, rank=0) is None
    assert 'no sampler of the train dataloader shards by rank (RandomSampler)' in sharding_problem(
        RandomSampler(range(4)), world_size=2, rank=0)
    wrong = DistributedSampler(range(4), num_replicas=1, rank=0)
    assert 'shards for num_replicas=1, rank=0, but this process is rank 1 of world size 2' in sharding_problem(
        BatchSampler(wrong, 2, False), world_size=2, rank=1)
    right = DistributedSampler(range(4), num_replicas=2, rank=1)
    assert sharding_problem(Wrapper(BatchSampler(right, 2, False)), world_size=2, rank=1) is None


def test_replication_asked_of_sampler_sync_but_not_of_the_dataset_names_the_datasets_replication() -> None:
    every_rank_its_share = DistributedSampler(range(8), num_replicas=4, rank=3)
    text = sharding_problem(every_rank_its_share, world_size=4, rank=3, replication=2)
    assert 'expects num_replicas=2, rank=1 (world size 4 / replication 2)' in text
    assert 'build it with the replication too (llm-foundry: replication: 2 under train_loader.dataset' in text
    assert 'build the sampler with num_replicas=composer.utils.dist.get_world_size()' not in text
