"""One answer to "what does this wrapper group": a subclass that keeps its parent's ``__iter__`` groups like it, one
with an ``__iter__`` of its own is the user's own; the callers agree (the rank shape, the top tap, distribute)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

from composer_sampling import DistributedBatchAdapter, NestedBatchSampler, ResumableDistributedSampler, distribute
from composer_sampling._graph.grouping import Grouping, grouping, keeps_child_order
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._graph.walk import active_root
from composer_sampling._proofs._rank_shape import read_shape
from composer_sampling.samplers.nested import StatefulNestedBatchSampler

DATA = range(24)


class NamedBatches(BatchSampler):
    """Only a name: torch's ``__iter__``."""


class OwnBatches(BatchSampler):
    def __iter__(self) -> Iterator[list[int]]:
        return reversed(list(super().__iter__()))


class NamedNested(NestedBatchSampler):
    """Only a name: our ``__iter__``."""


class OwnNested(NestedBatchSampler):
    def __iter__(self) -> Iterator[list[int]]:
        return reversed(list(super().__iter__()))


class NamedAdapter(DistributedBatchAdapter):
    """Only a name: our ``__iter__``."""


class OwnAdapter(DistributedBatchAdapter):
    def __iter__(self) -> Iterator[Any]:
        return reversed(list(super().__iter__()))


def _batches(kind: type, sampler: Any = None) -> Any:
    return kind(RandomSampler(DATA) if sampler is None else sampler, 4, True)


def _nested(kind: type) -> Any:
    return kind(_batches(BatchSampler), 3, drop_last=True)


def _adapter(kind: type) -> Any:
    return kind(_batches(BatchSampler, DistributedSampler(DATA, num_replicas=1, rank=0)))


@pytest.mark.parametrize(('node', 'expected'), [
    (_batches(BatchSampler), Grouping('sampler', 4, False)),
    (_batches(NamedBatches), Grouping('sampler', 4, False)),
    (_batches(OwnBatches), None),
    (_nested(NestedBatchSampler), Grouping('batch_sampler', 3, False)),
    (_nested(NamedNested), Grouping('batch_sampler', 3, False)),
    (_nested(OwnNested), None),
    (_adapter(DistributedBatchAdapter), Grouping('batch_sampler', 1, True)),
    (_adapter(NamedAdapter), Grouping('batch_sampler', 1, True)),
    (_adapter(OwnAdapter), None),
    (DistributedSampler(DATA, num_replicas=1, rank=0), None),
], ids=lambda value: type(value).__name__ if not isinstance(value, Grouping | None) else '')
def test_a_subclass_groups_like_its_parent_unless_it_iterates_its_own_way(node: Any, expected: Grouping | None) -> None:
    assert grouping(node) == expected


def test_our_stateful_variants_group_like_the_wrapper_they_vary() -> None:
    nested = NestedBatchSampler(BatchSampler(ResumableDistributedSampler(24, 1, 0), 4, False), 2)
    assert hasattr(nested, 'state_dict')
    assert grouping(StatefulNestedBatchSampler(nested.batch_sampler, 2)) == Grouping('batch_sampler', 2, True)
    assert grouping(nested) == Grouping('batch_sampler', 2, True) and keeps_child_order(nested)


def test_the_construction_proves_a_batch_sampler_subclass_that_keeps_torchs_iter_only() -> None:
    def shape(kind: type) -> Any:
        loader = DataLoader(DATA, batch_sampler=kind(ResumableDistributedSampler(24, 1, 0), 4, True))
        return read_shape(take_snapshot(loader))

    assert shape(NamedBatches).layers == ((4, True),)
    assert shape(OwnBatches) == 'OwnBatches, which may reorder'


def test_the_top_tap_goes_below_a_nested_subclass_that_keeps_our_iter_only() -> None:
    named = _nested(NamedNested)
    assert active_root(DataLoader(DATA, batch_sampler=named)) is named
    assert grouping(named) == Grouping('batch_sampler', 3, False)
    assert grouping(active_root(DataLoader(DATA, batch_sampler=_nested(OwnNested)))) is None


def test_distribute_replaces_an_adapter_subclass_that_keeps_our_iter_and_keeps_one_of_its_own() -> None:
    named = distribute(DataLoader(DATA, batch_sampler=_adapter(NamedAdapter)), num_replicas=1, rank=0)
    assert type(named.batch_sampler.batch_sampler) is BatchSampler
    assert type(named.batch_sampler.batch_sampler.sampler) is ResumableDistributedSampler
    own = _adapter(OwnAdapter)
    assert distribute(DataLoader(DATA, batch_sampler=own), num_replicas=1, rank=0).batch_sampler.batch_sampler is own
