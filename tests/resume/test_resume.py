"""Mid-epoch resume through SamplerSync with real checkpoints: exact, and without reading data twice."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, Sampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler

from support.helpers import ReadCounter, checkpoint, synthetic
from support.helpers import train_with_ledger as train

pytestmark = pytest.mark.composer

BATCH = 8
SIZE = 100  # 13 batches per epoch, the last one partial


def resumable_loader(size: int = SIZE, **kwargs: Any) -> DataLoader:
    dataset = ReadCounter(synthetic(size))
    return DataLoader(dataset, batch_size=BATCH, sampler=ResumableDistributedSampler(dataset, **kwargs))


def custom_loader(size: int = SIZE) -> DataLoader:
    dataset = ReadCounter(synthetic(size))
    inner = DistributedSampler(dataset, num_replicas=1, rank=0)
    return DataLoader(dataset, batch_sampler=BatchShuffleSampler(BatchSampler(inner, BATCH, False)))


def flat(ledger) -> list[int]:
    return [index for _, indices in ledger.batches for index in indices]


def test_resume_refuses_another_dataset_length(tmp_path: Path) -> None:
    train(resumable_loader(), '3ba', folder=tmp_path)
    with pytest.raises(ValueError, match='dataset_len=100, the train dataloader now has dataset_len=90'):
        train(resumable_loader(size=90), '2ep', load=checkpoint(tmp_path, 3))


def test_resume_refuses_another_shuffle_setting(tmp_path: Path) -> None:
    train(resumable_loader(), '3ba', folder=tmp_path)
    with pytest.raises(ValueError, match='shuffle=True, the train dataloader now has shuffle=False'):
        train(resumable_loader(shuffle=False), '2ep', load=checkpoint(tmp_path, 3))


def test_checkpointed_seed_wins_over_a_new_data_seed(tmp_path: Path) -> None:
    whole = train(resumable_loader(), '1ep', sync=SamplerSync(data_seed=5))
    train(resumable_loader(), '4ba', folder=tmp_path, sync=SamplerSync(data_seed=5))
    with pytest.warns(UserWarning, match='trained with data seed 5, this run asks for 6; keeping 5'):
        resumed = train(resumable_loader(), '1ep', load=checkpoint(tmp_path, 4), sync=SamplerSync(data_seed=6))
    assert resumed.batches == whole.batches[4:]


def test_a_batch_sampler_of_yours_resumes_without_loading_a_trained_batch(tmp_path: Path) -> None:
    whole = train(custom_loader(), '1ep')
    train(custom_loader(), '4ba', folder=tmp_path)
    loader = custom_loader()
    resumed = train(loader, '1ep', load=checkpoint(tmp_path, 4))
    assert resumed.batches == whole.batches[4:]
    assert sorted(loader.dataset.reads.elements()) == sorted(flat(resumed))  # no trained batch is loaded again


class _PassCounting(Sampler[int]):
    """A sampler whose order depends on how many passes it made: only Composer's spin replays that."""

    def __init__(self, size: int) -> None:
        self.size, self.passes = size, 0

    def __iter__(self):
        self.passes += 1
        return iter(np.random.default_rng(self.passes).permutation(self.size).tolist())

    def __len__(self) -> int:
        return self.size


def test_a_sampler_that_counts_its_passes_keeps_composers_spin(tmp_path: Path, caplog) -> None:
    def loader() -> DataLoader:
        dataset = ReadCounter(synthetic(SIZE))
        return DataLoader(dataset, batch_size=BATCH, sampler=_PassCounting(SIZE))

    whole = train(loader(), '1ep')
    train(loader(), '4ba', folder=tmp_path)
    resumed_loader = loader()
    with caplog.at_level(logging.WARNING, logger='composer_sampling'):
        resumed = train(resumed_loader, '1ep', load=checkpoint(tmp_path, 4))
    assert '_PassCounting(len=100) has neither set_epoch nor a generator' in caplog.text
    assert resumed.batches == whole.batches[4:]  # still correct, by Composer's spin...
    assert sum(resumed_loader.dataset.reads.values()) == SIZE  # ...which loaded the 4 trained batches again


def test_llm_foundrys_loader_shape_reads_no_trained_sample_on_resume(tmp_path: Path) -> None:
    """BatchSampler(DistributedSampler), as dist.get_sampler and llm-foundry's finetuning loader build it."""
    from composer.utils import dist

    def finetuning_loader() -> DataLoader:
        dataset = ReadCounter(synthetic(96))
        return DataLoader(dataset, batch_size=BATCH, sampler=dist.get_sampler(dataset, shuffle=True))

    whole = train(finetuning_loader(), '2ep')
    train(finetuning_loader(), '18ba', folder=tmp_path)
    loader = finetuning_loader()
    resumed = train(loader, '2ep', load=checkpoint(tmp_path, 18))
    assert resumed.batches == whole.batches[18:]
    assert sorted(loader.dataset.reads.elements()) == sorted(flat(resumed)), 'no trained sample is read again'
    assert sum(loader.dataset.reads.values()) == 96 * 2 - 18 * BATCH
