"""SamplerSync in a real composer.Trainer, one process."""

from __future__ import annotations

import collections
import warnings
from typing import Any

import pytest
from composer.core import Callback, State
from composer.loggers import InMemoryLogger, Logger
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.callbacks.sampler_sync import SecondCallbackError
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler

from support.helpers import IndexLedger, make_trainer, synthetic

pytestmark = pytest.mark.composer


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


def _seed_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(item.message) for item in caught if 'had seed' in str(item.message)]


def _fit_recording_warnings(loader: DataLoader, **kwargs: Any) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        make_trainer(loader, max_duration='2ep', **kwargs).fit()
    return _seed_warnings(caught)


def test_overwriting_a_chosen_seed_warns_once_and_says_how_to_keep_it() -> None:
    dataset = synthetic()
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, seed=42)
    found = _fit_recording_warnings(DataLoader(dataset, batch_size=8, sampler=sampler), callbacks=[SamplerSync()])
    assert len(found) == 1
    assert 'DistributedSampler(' in found[0] and 'had seed 42; it now uses the data seed 17' in found[0]
    assert 'To keep 42, pass SamplerSync(data_seed=42)' in found[0]
    assert sampler.seed == 17
    kept = DistributedSampler(dataset, num_replicas=1, rank=0, seed=42)
    loader = DataLoader(dataset, batch_size=8, sampler=kept)
    assert _fit_recording_warnings(loader, callbacks=[SamplerSync(data_seed=42)]) == []


@pytest.mark.parametrize('make', [
    lambda data: DistributedSampler(data, num_replicas=1, rank=0),  # seed 0: also Composer's dist.get_sampler
    lambda data: ResumableDistributedSampler(data),
    lambda data: ResumableDistributedSampler(data, seed=17),  # already the data seed
])
def test_class_defaults_are_reseeded_quietly(make: Any) -> None:
    dataset = synthetic()
    assert _fit_recording_warnings(DataLoader(dataset, batch_size=8, sampler=make(dataset)),
                                   callbacks=[SamplerSync()]) == []


def test_a_custom_batch_samplers_chosen_seed_warns() -> None:
    dataset = synthetic()
    custom = BatchShuffleSampler(BatchSampler(DistributedSampler(dataset, num_replicas=1, rank=0), 8, False), seed=5)
    found = _fit_recording_warnings(DataLoader(dataset, batch_sampler=custom), callbacks=[SamplerSync()],
                                    device_train_microbatch_size=8)
    assert len(found) == 1 and 'BatchShuffleSampler(seed=5' in found[0]


def test_two_sampler_syncs_are_refused_when_the_trainer_is_built() -> None:
    """As a second SampleLedger is: a SecondCallbackError at Event.INIT, before anything trains."""
    ledger = IndexLedger()
    with pytest.raises(ValueError, match=r'2 SamplerSync callbacks .*Keep exactly one') as refused:
        make_trainer(_resumable_loader(), callbacks=[SamplerSync(), SamplerSync(data_seed=3), ledger])
    assert type(refused.value) is SecondCallbackError
    assert not ledger.batches


class CountingSampler(ResumableDistributedSampler):
    """Records every set_epoch call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.calls.append(epoch)
        super().set_epoch(epoch)


def test_set_epoch_reaches_every_node_once_per_epoch() -> None:
    dataset = synthetic()
    inner = CountingSampler(dataset)
    loader = DataLoader(dataset, batch_sampler=BatchShuffleSampler(BatchSampler(inner, 8, False)))
    make_trainer(loader, max_duration='3ep', device_train_microbatch_size=8, callbacks=[SamplerSync()]).fit()
    assert inner.calls == [0, 1, 2]


@pytest.mark.parametrize(
    ('state', 'error', 'message'),
    [
        (None, TypeError, 'expects a dict, got None'),
        ({'version': 99}, ValueError, 'version 99; this version of composer-sampling reads versions 1 to 6'),
        ({'version': 5, 'data_fingerprint': ('x', 'y', True)}, TypeError,
         'data_fingerprint must be None, a .digest, source, covers content. triple'),
        ({'version': 1, 'data_seed': 'x'}, TypeError, 'data_seed must be an int'),
        ({'version': 1, 'data_seed': -3}, ValueError, 'data_seed must be in the interval'),
        ({'version': 1, 'order_signatures': 5}, TypeError, 'order_signatures must be a list of dicts or None'),
        ({'version': 2, 'replication': 0}, ValueError, 'replication must be in the interval'),
    ],
)
def test_malformed_states_are_refused(state: Any, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SamplerSync().load_state_dict(state)


@pytest.mark.parametrize(
    ('kwargs', 'error', 'message'),
    [
        ({'replication': 0}, ValueError, r'replication must be in the interval \[1, inf\), got 0'),
        ({'replication': True}, TypeError, 'replication must be an int'),
    ],
)
def test_bad_replication(kwargs: dict, error: type, message: str) -> None:
    with pytest.raises(error, match=message):
        SamplerSync(**kwargs)


def test_repr_shows_the_arguments() -> None:
    assert repr(SamplerSync(data_seed=4, replication=2)) == (
        'SamplerSync(data_seed=4, check_sharding=True, replication=2, print_summary=False, '
        'allow_data_change=False)'
    )
