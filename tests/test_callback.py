"""SamplerSync in a real composer.Trainer, one process."""

from __future__ import annotations

import collections
from typing import Any

import pytest
from composer.core import Callback, State
from composer.loggers import InMemoryLogger, Logger
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.demo.batch_shuffle import BatchShuffleSampler

from helpers import IndexLedger, make_trainer, synthetic


def _resumable_loader(size: int = 96, batch: int = 8, **kwargs: Any) -> DataLoader:
    dataset = synthetic(size)
    return DataLoader(dataset, batch_size=batch, sampler=ResumableDistributedSampler(dataset, **kwargs))


def _train_order(loader: DataLoader, *, epochs: int = 2, seed: int = 17, **sync: Any) -> dict[int, list[int]]:
    ledger = IndexLedger()
    make_trainer(loader, max_duration=f'{epochs}ep', seed=seed, callbacks=[SamplerSync(**sync), ledger]).fit()
    return dict(ledger.trained)


def test_every_epoch_is_a_new_order_of_every_sample() -> None:
    order = _train_order(_resumable_loader(), epochs=3)
    for epoch in range(3):
        assert sorted(order[epoch]) == list(range(96))
    assert order[0] != order[1] != order[2]


def test_same_seed_same_order_new_seed_new_order() -> None:
    assert _train_order(_resumable_loader(), seed=17) == _train_order(_resumable_loader(), seed=17)
    assert _train_order(_resumable_loader(), seed=17) != _train_order(_resumable_loader(), seed=18)


def test_trainer_seed_reaches_torchs_distributed_sampler() -> None:
    def torch_loader() -> DataLoader:
        dataset = synthetic()
        return DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=1, rank=0))

    seventeen, eighteen = _train_order(torch_loader(), seed=17), _train_order(torch_loader(), seed=18)
    assert seventeen != eighteen
    loader = torch_loader()
    make_trainer(loader, max_duration='1ba', seed=17, callbacks=[SamplerSync()]).fit()
    assert loader.sampler.seed == 17


def test_data_seed_overrides_the_trainer_seed() -> None:
    loader = _resumable_loader()
    order_a = _train_order(loader, seed=17, data_seed=5)
    assert loader.sampler.seed == 5
    assert order_a == _train_order(_resumable_loader(), seed=18, data_seed=5)
    assert order_a != _train_order(_resumable_loader(), seed=17, data_seed=6)


def test_data_seed_is_logged() -> None:
    logger = InMemoryLogger()
    make_trainer(_resumable_loader(), max_duration='1ba', seed=23, loggers=[logger], callbacks=[SamplerSync()]).fit()
    assert logger.hyperparameters['data_seed'] == 23


class EpochProbe(Callback):
    """At every batch, records the epoch each sampler of the graph believes it is in."""

    def __init__(self, nodes: list[Any]) -> None:
        self.nodes = nodes
        self.seen: dict[int, set[tuple[int, ...]]] = collections.defaultdict(set)

    def batch_start(self, state: State, logger: Logger) -> None:
        self.seen[int(state.timestamp.epoch)].add(tuple(node.epoch for node in self.nodes))


def _custom_batch_loader() -> tuple[DataLoader, BatchShuffleSampler, DistributedSampler]:
    dataset = synthetic()
    inner = DistributedSampler(dataset, num_replicas=1, rank=0)
    custom = BatchShuffleSampler(BatchSampler(inner, 8, drop_last=False))
    return DataLoader(dataset, batch_sampler=custom), custom, inner


def test_custom_batch_sampler_and_nested_distributed_sampler_get_set_epoch() -> None:
    loader, custom, inner = _custom_batch_loader()
    probe, ledger = EpochProbe([custom, inner]), IndexLedger()
    make_trainer(loader, max_duration='3ep', device_train_microbatch_size=8,
                 callbacks=[SamplerSync(), probe, ledger]).fit()
    assert dict(probe.seen) == {0: {(0, 0)}, 1: {(1, 1)}, 2: {(2, 2)}}
    assert custom.seed == inner.seed == 17
    assert ledger.trained[1] != ledger.trained[2]


def test_without_sampler_sync_composer_never_reaches_them() -> None:
    # The failure SamplerSync exists for: the same order every epoch.
    loader, custom, inner = _custom_batch_loader()
    probe, ledger = EpochProbe([custom, inner]), IndexLedger()
    make_trainer(loader, max_duration='2ep', device_train_microbatch_size=8, callbacks=[probe, ledger]).fit()
    assert dict(probe.seen) == {0: {(0, 0)}, 1: {(0, 0)}}
    assert ledger.trained[0] == ledger.trained[1]


def test_sharding_for_another_world_size_is_refused_before_training() -> None:
    dataset = synthetic()
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=2, rank=0))
    ledger = IndexLedger()
    trainer = make_trainer(loader, callbacks=[SamplerSync(), ledger])
    expected = 'shards for num_replicas=2, rank=0, but this process is rank 0 of world size 1'
    with pytest.raises(ValueError, match=expected):
        trainer.fit()
    assert not ledger.trained


def test_check_sharding_can_be_switched_off() -> None:
    dataset = synthetic()
    loader = DataLoader(dataset, batch_size=8, sampler=DistributedSampler(dataset, num_replicas=2, rank=0))
    ledger = IndexLedger()
    make_trainer(loader, max_duration='1ep', callbacks=[SamplerSync(check_sharding=False), ledger]).fit()
    assert len(ledger.trained[0]) == 48  # half the data: what the check protects from


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'data_seed': -1}, ValueError, r'data_seed must be in the interval \[0, 18446744073709551615\], got -1'),
        ({'data_seed': 1.5}, TypeError, 'data_seed must be an int, got 1.5'),
        ({'check_sharding': 'yes'}, TypeError, 'check_sharding must be a bool'),
    ],
)
def test_bad_arguments(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SamplerSync(**kwargs)


def test_state_dict_tolerates_old_checkpoints() -> None:
    sync = SamplerSync()
    sync.load_state_dict({})
    assert sync.state_dict()['data_seed'] is None
