"""Every Trainer path resumes exactly: repeated fits, reset_time, train subsets, a changed batch, workers, eval.

Each case is compared with the same run uninterrupted, sample by sample; resumes from a checkpoint
are in the resume grid (test_resume_grid.py, test_resume_layouts.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler

from support.helpers import IndexLedger, ReadCounter, checkpoint, make_trainer, synthetic
from support.helpers import train_with_ledger as train

pytestmark = pytest.mark.composer

SIZE, BATCH = 100, 8  # 13 batches per epoch, the last one partial


def loader(size: int = SIZE, batch: int = BATCH, **kwargs: Any) -> DataLoader:
    dataset = ReadCounter(synthetic(size))
    return DataLoader(dataset, batch_size=batch, sampler=ResumableDistributedSampler(dataset), **kwargs)


def shuffled_batches_loader(batch: int = BATCH) -> DataLoader:
    """A user's batch sampler that cannot start at a sample offset, over torch's own DistributedSampler."""
    dataset = ReadCounter(synthetic(SIZE))
    inner = DistributedSampler(dataset, num_replicas=1, rank=0)
    return DataLoader(dataset, batch_sampler=BatchShuffleSampler(BatchSampler(inner, batch, False)))


def samples(ledger: IndexLedger, first: int = 0) -> list[int]:
    return [index for _, batch in ledger.batches[first:] for index in batch]


def test_a_fit_with_reset_time_after_a_mid_epoch_continue_trains_the_whole_epoch(tmp_path: Path) -> None:
    train(loader(), '5ba', folder=tmp_path)
    ledger = IndexLedger()
    trainer = make_trainer(loader(), max_duration='1ep', callbacks=[SamplerSync(), ledger],
                           load_path=str(checkpoint(tmp_path, 5)))
    trainer.fit(duration='3ba')  # batches 6 to 8 of epoch 0: the samplers start at sample 40
    before = len(ledger.batches)
    trainer.fit(duration='1ep', reset_time=True)
    again = samples(ledger, before)
    assert len(again) == SIZE and sorted(again) == list(range(SIZE)), 'the offset of the earlier fit must not survive'
    assert again == samples(train(loader(), '1ep'))  # epoch 0's order from its first sample


def test_repeated_fits_continue_mid_epoch_exactly() -> None:
    whole = samples(train(loader(), '2ep'))
    ledger = IndexLedger()
    trainer = make_trainer(loader(), max_duration='3ba', callbacks=[SamplerSync(), ledger])
    trainer.fit()
    for _ in range(7):
        trainer.fit(duration='3ba')  # stops and continues in the middle of epochs 0 and 1
    trainer.fit(duration=f'{26 - 24}ba')
    assert samples(ledger) == whole


def test_autoresume_continues_at_the_next_sample(tmp_path: Path) -> None:
    whole = train(loader(), '2ep')

    def autoresumed(duration: str) -> IndexLedger:
        ledger = IndexLedger()
        model_loader = loader()
        trainer = make_trainer(model_loader, max_duration='2ep', callbacks=[SamplerSync(), ledger],
                               save_folder=str(tmp_path), save_interval='1ba', autoresume=True,
                               run_name='autoresume', save_overwrite=False)
        trainer.fit(duration=duration) if duration else trainer.fit()
        return ledger

    first = autoresumed('9ba')
    rest = autoresumed('')
    assert first.batches + rest.batches == whole.batches

