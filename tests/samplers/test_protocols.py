"""The sampler contract: capabilities are found by attribute access, the same on every Python version."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, SequentialSampler

from composer_sampling import ResumableDistributedSampler, SubEpochDistributedSampler
from composer_sampling._graph.grouping import keeps_child_order
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._graph.walk import sharding_nodes
from composer_sampling.protocols import (
    CAPABILITIES,
    EpochAware,
    EpochUsage,
    HasOrderSignature,
    Offsettable,
    OrderPreserving,
    PassIndices,
    ReportsSources,
    Seeded,
    SeedForwarding,
    Sharded,
    Stateful,
    SubEpochs,
    supports,
)


class Forwarding:
    """A wrapper that forwards every attribute it lacks, as many user wrappers do."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __iter__(self) -> Any:
        return iter(self.inner)

    def __len__(self) -> int:
        return len(self.inner)


ALL = (EpochAware, Seeded, SeedForwarding, Offsettable, Stateful, OrderPreserving, Sharded, EpochUsage,
       HasOrderSignature, SubEpochs, ReportsSources, PassIndices)


@pytest.mark.parametrize('protocol', ALL, ids=lambda p: p.__name__)
def test_a_forwarding_wrapper_has_what_it_wraps(protocol: type) -> None:
    inner = SubEpochDistributedSampler(24, 3, num_replicas=2, rank=1)
    assert supports(Forwarding(inner), protocol) == supports(inner, protocol)


def test_static_lookup_would_miss_the_forwarded_members() -> None:
    # Python 3.12's isinstance(x, Protocol) looks members up as inspect.getattr_static does; supports() does not.
    wrapper = Forwarding(ResumableDistributedSampler(8, 1, 0))
    assert inspect.getattr_static(wrapper, 'set_epoch', None) is None
    assert supports(wrapper, EpochAware) and supports(wrapper, Offsettable) and supports(wrapper, Stateful)


def test_the_graph_reaches_a_forwarding_wrapper() -> None:
    inner = ResumableDistributedSampler(8, num_replicas=2, rank=0)
    loader = DataLoader(range(8), batch_sampler=BatchSampler(Forwarding(inner), 2, False))  # type: ignore[arg-type]
    take_snapshot(loader).set_epoch(4)
    assert inner.epoch == 4
    assert supports(loader.batch_sampler.sampler, Offsettable)
    assert sharding_nodes(loader.batch_sampler) == [loader.batch_sampler.sampler]  # it shards as what it wraps


def test_flags_must_be_true_and_data_must_have_the_right_type() -> None:
    class Says:
        keeps_child_order = False
        forwards_seed = 1
        num_replicas, rank = True, 0
        sub_epochs_per_epoch = '4'

    assert not supports(Says(), OrderPreserving) and not keeps_child_order(Says())
    assert not supports(Says(), SeedForwarding)
    assert not supports(Says(), Sharded)
    assert not supports(Says(), SubEpochs)
    assert keeps_child_order(BatchSampler(SequentialSampler(range(4)), 2, False))  # torch's own, without the flag


def test_methods_must_be_callable() -> None:
    class NotCallable:
        set_epoch = 3
        state_dict = load_state_dict = None

    assert not supports(NotCallable(), EpochAware) and not supports(NotCallable(), Stateful)


def test_a_seed_waiting_to_be_set_still_counts() -> None:
    class Waiting:
        seed = None

    assert supports(Waiting(), Seeded)
    assert take_snapshot(DistributedSampler(range(4), 1, 0)).seeded() != []


def test_supports_refuses_what_is_not_a_protocol_of_ours() -> None:
    with pytest.raises(TypeError, match=r'knows the Protocols of composer_sampling\.protocols'):
        supports(object(), int)


def test_the_protocols_work_with_isinstance_on_plain_objects() -> None:
    sampler = ResumableDistributedSampler(8, 1, 0)
    assert isinstance(sampler, EpochAware) and isinstance(sampler, Stateful) and isinstance(sampler, PassIndices)
    assert not isinstance(object(), EpochAware)


@pytest.mark.parametrize('protocol', CAPABILITIES, ids=lambda p: p.__name__)
def test_supports_asks_for_exactly_the_members_the_protocol_declares(protocol: type) -> None:
    """The checks of supports() and the Protocol class agree: an object with every declared member (of the right
    kind) supports the Protocol, and one without any single member does not."""
    declared = {name for name in protocol.__annotations__} | {
        name for name, value in vars(protocol).items() if callable(value) and not name.startswith('_')}
    values = {'keeps_child_order': True, 'forwards_seed': True, 'num_replicas': 2, 'rank': 1,
              'sub_epochs_per_epoch': 3, 'seed': 0, 'epoch': 0}

    def having(names: set[str]) -> Any:
        return type('Having', (), {name: values.get(name, lambda self, *args: None) for name in names})()

    assert supports(having(declared), protocol)
    for name in declared:
        assert not supports(having(declared - {name}), protocol), name
