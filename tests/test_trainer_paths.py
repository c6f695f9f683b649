"""Every Trainer path resumes exactly: repeated fits, reset_time, train subsets, a changed batch, workers, eval.

Each case is compared with the same run uninterrupted, sample by sample.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import ResumableDistributedSampler, SamplerSync
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler

from helpers import IndexLedger, ReadCounter, checkpoint, make_trainer, synthetic
from helpers import train_with_ledger as train

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


@pytest.mark.parametrize('stop', [3, 7])
def test_train_subset_resumes_with_the_batches_left(tmp_path: Path, stop: int) -> None:
    whole = train(loader(), '3ep', train_subset_num_batches=5)
    assert len(whole.batches) == 15
    train(loader(), f'{stop}ba', folder=tmp_path, train_subset_num_batches=5)
    resumed = train(loader(), '3ep', load=checkpoint(tmp_path, stop), train_subset_num_batches=5)
    assert resumed.batches == whole.batches[stop:], 'the resumed epoch stops after the batches that were left'


def test_a_batch_order_resumed_with_another_global_batch_is_refused_with_advice_that_works(tmp_path: Path) -> None:
    whole = train(shuffled_batches_loader(), '1ep')
    train(shuffled_batches_loader(), '4ba', folder=tmp_path)
    with pytest.raises(ValueError, match=r'BatchShuffleSampler.* decides the order of whole batches.*the checkpoint '
                                         r'trained 8 distinct samples a step, this run 4. Resume with global batch 8 '
                                         r'\(device batch 8 on each of the 1 data-parallel ranks\)'):
        train(shuffled_batches_loader(batch=4), '1ep', load=checkpoint(tmp_path, 4), microbatch=4)
    resumed = train(shuffled_batches_loader(batch=8), '1ep', load=checkpoint(tmp_path, 4))  # the advice
    assert resumed.batches == whole.batches[4:]


def test_the_same_global_batch_continues_the_batch_order(tmp_path: Path) -> None:
    whole = train(shuffled_batches_loader(), '1ep')
    train(shuffled_batches_loader(), '4ba', folder=tmp_path)
    resumed = train(shuffled_batches_loader(), '1ep', load=checkpoint(tmp_path, 4))
    assert resumed.batches == whole.batches[4:]


def test_an_offset_graph_resumes_with_another_batch_size(tmp_path: Path) -> None:
    first = train(loader(), '4ba', folder=tmp_path)
    resumed = train(loader(batch=4), '1ep', load=checkpoint(tmp_path, 4), microbatch=4)
    assert sorted(samples(first) + samples(resumed)) == list(range(SIZE))


def test_persistent_workers_and_eval_during_training_resume_exactly(tmp_path: Path) -> None:
    def with_workers() -> DataLoader:
        return loader(num_workers=2, persistent_workers=True)

    evaluation = DataLoader(synthetic(32), batch_size=16)
    extra = {'eval_dataloader': evaluation, 'eval_interval': '5ba'}
    whole = train(with_workers(), '2ep', **extra)
    train(with_workers(), '17ba', folder=tmp_path, **extra)
    resumed = train(with_workers(), '2ep', load=checkpoint(tmp_path, 17), **extra)
    assert resumed.batches == whole.batches[17:]


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

