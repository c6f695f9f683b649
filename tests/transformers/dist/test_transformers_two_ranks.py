"""Two ranks of a real Hugging Face ``Trainer`` (``use_cpu=True``, gloo), started by torchrun; each test runs on both
ranks (``tests/lightning/test_launch.py`` launches them, with the Lightning and loop tests), and gathers what every rank trained."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as torch_dist

from composer_sampling import DataOrderError
from composer_sampling.transformers import SampleLedger, SamplerSync

from support.transformers_parts import audit, epochs, epochs_of, fit, recorded, same_weights
from support.two_ranks import gloo_group, gathered, shared_folder  # noqa: F401 (gloo_group: an autouse fixture)

pytestmark = [pytest.mark.world_size(2), pytest.mark.transformers]


def _samples_per_epoch(trained: list[list[int]], batches_in_epoch: int) -> list[list[int]]:
    """The samples every rank trained in each epoch, ranks gathered."""
    ranks = [epochs_of(rank, batches_in_epoch) for rank in gathered(trained)]
    return [[index for rank in ranks for index in rank[epoch]] for epoch in range(len(ranks[0]))]


@pytest.mark.parametrize(('kind', 'batch'), [('vila', 4), ('ours', 4), ('nested', 6)])
def test_each_kind_trains_every_sample_once_an_epoch_in_a_new_order_and_resumes_bit_for_bit(kind: str,
                                                                                            batch: int) -> None:
    """96 samples on two ranks. Stopped right after the checkpoint of step 15 (inside the second epoch) and resumed
    with resume_from_checkpoint: every rank trains the batches of the run that never stopped, across the next epoch
    boundary, and ends with its weights and AdamW state, dropout on. The same seed gives the same batches; the next
    data seed another order."""
    folder = shared_folder(kind)
    per_epoch = 96 // (2 * batch)
    whole = fit(kind, folder / 'whole', 30, batch=batch)
    epochs = _samples_per_epoch(whole.model.trained, per_epoch)
    assert [sorted(samples) for samples in epochs[:2]] == [list(range(96))] * 2, 'every sample once per epoch'
    assert epochs[0] != epochs[1], 'a new order every epoch'
    stopped = fit(kind, folder / 'stopped', 30, batch=batch, save_steps=5, stop_at=15)
    assert stopped.model.trained == whole.model.trained[:15], 'the same seed, the same batches'
    resumed = fit(kind, folder / 'resumed', 30, batch=batch, resume=str(folder / 'stopped' / 'checkpoint-15'))
    assert resumed.model.trained == whole.model.trained[15:]
    assert gathered(same_weights(whole, resumed)) == [True, True]
    other = fit(kind, folder / 'other', per_epoch, batch=batch, sync=SamplerSync(data_seed=18))
    assert _samples_per_epoch(other.model.trained, per_epoch)[0] != epochs[0], 'the next seed, another order'


@pytest.mark.parametrize(('kind', 'accumulate'), [('ours', 2), ('default', 4)])
def test_gradient_accumulation_with_a_length_that_does_not_divide_resumes_bit_for_bit(kind: str,
                                                                                     accumulate: int) -> None:
    """100 samples, 4 per batch on two ranks: 13 batches per rank per epoch, so the epoch's last optimizer step takes the
    remaining batch. The checkpoint of step 9 (2 accumulation) or 5 (4) lies inside the second epoch."""
    folder = shared_folder(f'accumulate-{accumulate}')
    steps, save = (16, 9) if accumulate == 2 else (9, 5)
    whole = fit(kind, folder / 'whole', steps, size=100, accumulate=accumulate)
    epochs = _samples_per_epoch(whole.model.trained, 13)
    assert [sorted(set(samples)) for samples in epochs[:2]] == [list(range(100))] * 2, 'every sample in every epoch'
    assert [len(samples) for samples in epochs[:2]] == [100 if kind == 'ours' else 104] * 2, \
        "ours: once; accelerate's even batches repeat the first 4 on the rank that runs short"
    stopped = fit(kind, folder / 'stopped', steps, size=100, accumulate=accumulate, save_steps=save, stop_at=save)
    trained = len(stopped.model.trained)
    assert stopped.model.trained == whole.model.trained[:trained]
    resumed = fit(kind, folder / 'resumed', steps, size=100, accumulate=accumulate,
                  resume=str(folder / 'stopped' / f'checkpoint-{save}'))
    assert resumed.model.trained == whole.model.trained[trained:]
    assert gathered(same_weights(whole, resumed)) == [True, True]


def test_adjacent_data_seeds_share_no_epoch_order() -> None:
    """The Trainer's own random sampler, left to accelerate: its SeedableRandomSampler would draw epoch 1 of seed 17
    as epoch 0 of seed 18 (it seeds seed + epoch); seeded from the data seed and the epoch, no two epochs agree."""
    folder = shared_folder('seeds')
    orders = [_samples_per_epoch(fit('default', folder / str(seed), 24, sync=SamplerSync(data_seed=seed)).model.trained,
                                 12) for seed in (17, 18)]
    assert orders[1][0] != orders[0][1] and orders[1][0] != orders[0][0] and orders[0][0] != orders[0][1]


@pytest.mark.parametrize(('config', 'message'), [
    ({'split_batches': True}, r"split_batches=True splits every batch .* already shards by rank"),
    ({'dispatch_batches': True}, r'dispatch_batches=True \(DataLoaderDispatcher\) draws every batch on rank 0'),
], ids=['split_batches', 'dispatch_batches'])
def test_accelerate_settings_that_split_the_data_again_are_refused_by_name(config: dict[str, bool],
                                                                         message: str) -> None:
    with pytest.raises(DataOrderError, match=message):
        fit('ours', shared_folder('refused'), 6, arguments={'accelerator_config': config})


def test_without_the_adapter_accelerate_splits_a_sampler_that_shards_by_rank_again() -> None:
    """The problem the adapter exists for, kept as a test of accelerate's behaviour: our sampler returned from
    _get_train_sampler trains 48 of 96 samples per epoch."""
    trained = fit('ours', shared_folder('plain'), 6, sync=False).model.trained
    samples = [index for rank in gathered(trained) for batch in rank for index in batch]
    assert len(samples) == len(set(samples)) == 48


@pytest.mark.parametrize(('kind', 'sync'), [('ours', True), ('default', True), ('ours', False)],
                         ids=['with SamplerSync', "the Trainer's sampler, with SamplerSync", 'without SamplerSync'])
def test_the_ledger_of_a_resumed_run_audits_every_sample_once_and_fails_without_sampler_sync(kind: str,
                                                                                           sync: bool) -> None:
    """Our sampler returned from _get_train_sampler, or the Trainer's own sampler that accelerate shards, 96 samples,
    4 a rank a batch, 2 batches an optimizer step. Stopped right after the checkpoint of step 4 and resumed from it,
    each rank's ledger holds exactly the batches its model trained.

    With SamplerSync: 12 batches a rank an epoch, the checkpoint at batch 8 of epoch 0; the two attempts audit with
    exit 0. Without it, for our sampler, accelerate splits the sampler's share of each rank a second time: 6 batches a rank an epoch,
    48 samples of 96, and the checkpoint lies at batch 2 of epoch 1. The Trainer skips those 2 batches of the epoch
    it resumes, but its set_epoch does not reach the sampler below accelerate's skip, so the rest of epoch 1 is drawn
    in epoch 0's order. The audit exits with 1: 48 samples of every epoch are missing, and epoch 1 trains 7 samples
    twice and misses 55 (the last epoch, 3, counts as the one the run ended in). The tap itself changes nothing: the
    batches are those of the fits without the ledger."""
    folder = shared_folder(f'ledger-{kind}-{sync}')
    common: dict[str, Any] = dict(accumulate=2, sync=sync)
    stopped = fit(kind, folder / 'stopped', 12, save_steps=4, stop_at=4, ledger=SampleLedger(folder / 'ledger'),
                  **common)
    checkpoint = str(folder / 'stopped' / 'checkpoint-4')
    resumed = fit(kind, folder / 'resumed', 12, resume=checkpoint, ledger=SampleLedger(folder / 'ledger'), **common)
    trained = stopped.model.trained + resumed.model.trained
    torch_dist.barrier()  # every rank's files are closed
    mine = [indices for _, _, indices in recorded(folder / 'ledger', torch_dist.get_rank())]
    assert gathered(mine == trained) == [True, True]
    status, report = audit(folder / 'ledger')
    if sync:
        assert (status, epochs(report)) == (0, [(0, 96, 0, 0, 'ok'), (1, 96, 0, 0, 'ok')])
        return
    plain = fit('ours', folder / 'plain', 12, **common).model.trained[:len(stopped.model.trained)]
    assert plain == stopped.model.trained, 'the batches of the run without the ledger'
    assert fit('ours', folder / 'again', 12, resume=checkpoint, **common).model.trained == resumed.model.trained
    assert (status, epochs(report)) == (1, [(0, 48, 0, 48, 'VIOLATION'), (1, 34, 7, 55, 'VIOLATION'),
                                            (2, 48, 0, 48, 'VIOLATION'), (3, 48, 0, 48, 'partial (run ended at batch 24)')])
