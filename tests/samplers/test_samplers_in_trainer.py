"""SamplerSync drives the sub-epoch, mixture and nested-batch samplers in a real Trainer: seed, epoch, resume."""

from __future__ import annotations

import collections
from pathlib import Path

import numpy as np
import pytest
from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, RandomSampler, Subset

from composer_sampling import (
    MixtureDistributedSampler,
    NestedBatchSampler,
    SamplerSync,
    SubEpochDistributedSampler,
    distribute,
)

from support.helpers import ReadCounter, checkpoint, synthetic, train_with_ledger

SIZE = 100


def sub_epoch_loader(num_replicas: int | None = None, rank: int | None = None) -> DataLoader:
    dataset = ReadCounter(synthetic(SIZE))
    sampler = SubEpochDistributedSampler(dataset, 3, num_replicas=num_replicas, rank=rank)
    return DataLoader(dataset, batch_size=8, sampler=sampler)


def mixture_loader() -> DataLoader:
    base = synthetic(SIZE)
    dataset = ReadCounter(ConcatDataset([Subset(base, range(0, 50)), Subset(base, range(50, 80)),
                                         Subset(base, range(80, 100))]))
    return DataLoader(dataset, batch_size=8, sampler=MixtureDistributedSampler([50, 30, 20], batch_size=8))


def nested_loader() -> DataLoader:
    dataset = ReadCounter(synthetic(SIZE))
    nested = NestedBatchSampler(BatchSampler(RandomSampler(dataset), 4, drop_last=False), num_batches=2)
    return distribute(DataLoader(dataset, batch_sampler=nested))


def test_sub_epochs_cover_each_data_epoch_once_with_a_new_order() -> None:
    ledger = train_with_ledger(sub_epoch_loader(), '6ep')
    trained = ledger.trained
    assert [len(trained[e]) for e in range(6)] == [34, 33, 33] * 2
    passes = [trained[0] + trained[1] + trained[2], trained[3] + trained[4] + trained[5]]
    assert all(sorted(indices) == list(range(SIZE)) for indices in passes)
    assert passes[0] != passes[1]


def test_mixture_batches_come_from_one_source_even_with_microbatches() -> None:
    ledger = train_with_ledger(mixture_loader(), '2ep', microbatch=4)
    source = np.searchsorted([50, 80, 100], [max(b) for _, b in ledger.batches], side='right')
    assert all(len({int(np.searchsorted([50, 80, 100], i, side='right')) for i in b}) == 1 for _, b in ledger.batches)
    assert collections.Counter(source.tolist()) == {0: 12, 1: 6, 2: 4}  # 6 + 3 + 2 steps an epoch
    assert ledger.trained[0] != ledger.trained[1]


def test_nested_batches_partition_every_epoch() -> None:
    ledger = train_with_ledger(nested_loader(), '2ep')
    assert collections.Counter(len(b) for _, b in ledger.batches) == {8: 24, 4: 2}  # 12 joined + 1 short
    assert sorted(ledger.trained[0]) == sorted(ledger.trained[1]) == list(range(SIZE))
    assert ledger.trained[0] != ledger.trained[1]
    assert ledger.seeds and set(ledger.seeds) == {17}


def test_sub_epoch_resume_on_another_world_size_is_refused(tmp_path: Path) -> None:
    loose = SamplerSync(check_sharding=False)
    train_with_ledger(sub_epoch_loader(num_replicas=2, rank=0), '2ba', folder=tmp_path, sync=loose)
    with pytest.raises(ValueError, match='num_replicas=2, the train dataloader now has num_replicas=1'):
        train_with_ledger(sub_epoch_loader(), '4ep', load=checkpoint(tmp_path, 2))
