"""Two ranks of a real Lightning ``Trainer`` (``strategy='ddp'``, gloo on the CPU), started by torchrun; each test
runs on both ranks (``tests/lightning/test_launch.py`` launches them), and gathers what every rank trained."""

from __future__ import annotations

import json
import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as torch_dist

from composer_sampling import DataOrderError
from composer_sampling.lightning import SampleLedger

from support.lightning_parts import KINDS, audit, epochs, fit, loader, nested_loader, same_weights
from support.two_ranks import gloo_group, gathered, shared_folder  # noqa: F401 (gloo_group: an autouse fixture)

pytestmark = [pytest.mark.world_size(2), pytest.mark.lightning]


def _per_epoch(trained: list[list[tuple[int, int, list[int]]]]) -> dict[int, list[int]]:
    samples: dict[int, list[int]] = {}
    for rank_batches in trained:
        for epoch, _, indices in rank_batches:
            samples.setdefault(epoch, []).extend(indices)
    return samples


def test_a_batch_of_batches_covers_every_sample_once_an_epoch_in_a_new_order_each_epoch() -> None:
    """3 samples grouped 5 at a time, 15 a batch, made distributed by distribute(); no user hook."""
    folder = shared_folder('nested')
    trained = gathered(fit(nested_loader(), folder, max_epochs=3).trained)
    epochs = _per_epoch(trained)
    assert sorted(epochs) == [0, 1, 2]
    assert all(sorted(samples) == list(range(90)) for samples in epochs.values()), 'every sample once an epoch'
    assert len({tuple(samples) for samples in epochs.values()}) == 3, 'a new order every epoch'
    assert all(len(indices) == 15 for rank in trained for _, _, indices in rank)
    assert gathered(fit(nested_loader(), folder, max_epochs=3).trained) == trained, 'same seed, same batches'


@pytest.mark.parametrize('workers', [0, 2])
@pytest.mark.parametrize('kind', KINDS)
def test_a_run_stopped_after_a_mid_epoch_checkpoint_resumes_bit_for_bit(kind: str, workers: int) -> None:
    """96 samples, 8 a rank a batch: 6 batches per epoch. Stopped right after the checkpoint of step 8 (epoch 1,
    batch 2), resumed with ckpt_path: every rank trains the batches of the run that never stopped, every sample once
    an epoch, and ends with its weights and momentum, dropout on."""
    folder = shared_folder('resume')
    whole = fit(loader(kind, workers), folder / 'whole', max_steps=15)
    fit(loader(kind, workers), folder / 'stopped', max_steps=9, save_every=4)
    resumed = fit(loader(kind, workers), folder / 'resumed', max_steps=15,
                  ckpt_path=str(folder / 'stopped' / 'step=8.ckpt'))
    assert resumed.trained == whole.trained[8:]
    assert same_weights(whole, resumed)
    epochs = _per_epoch(gathered(whole.trained))
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(96)), 'every sample once an epoch, across ranks'
    assert gathered(same_weights(whole, resumed)) == [True, True]


def test_a_two_rank_checkpoint_for_one_rank_to_resume() -> None:
    """The batch of batches on two ranks, a checkpoint after the first batch of each rank (30 samples of 90);
    tests/lightning/test_launch.py resumes it on one rank, and checks every sample of the epoch is trained once."""
    folder = Path(os.environ['LIGHTNING_SHARED']) / 'two'
    trained = gathered(fit(nested_loader(), folder, max_steps=2, save_every=1).trained)
    if torch_dist.get_rank() == 0:
        (folder / 'trained.json').write_text(json.dumps(trained))


def test_a_resume_onto_more_ranks_inside_an_epoch_is_refused() -> None:
    """The one-rank checkpoint test_launch.py wrote after 2 of 12 batches: on two ranks, Lightning would count the rest
    of the epoch from batch 2 of 6 and end it before every sample was trained."""
    checkpoint = Path(os.environ['LIGHTNING_SHARED']) / 'one' / 'step=2.ckpt'
    with pytest.raises(DataOrderError, match=r"saved at epoch 0, batch 2 on 1 ranks to 2: Lightning's loop counts the rest"):
        fit(loader('ours'), shared_folder('more'), max_steps=20, ckpt_path=str(checkpoint))


@pytest.mark.parametrize('sync', [True, False], ids=['with SamplerSync', 'without SamplerSync'])
def test_the_ledger_of_a_resumed_run_audits_every_sample_once_and_catches_a_resume_without_sampler_sync(
        sync: bool) -> None:
    """96 samples, 8 a rank a batch: 6 batches an epoch. Stopped right after the checkpoint of step 8 (epoch 1, batch
    2), resumed with ckpt_path: the ledger's two attempts audit with exit 0, the first counted up to batch 8. Without
    SamplerSync, Lightning trains the rest of epoch 1 from a new iterator, so its first 2 batches train again and its
    last 2 never: 2 batches x 8 samples x 2 ranks repeated and as many missing, exit 1."""
    folder = shared_folder('ledger')
    fit(loader('torch'), folder / 'stopped', max_steps=9, save_every=4, sync=sync,
        callbacks=(SampleLedger(folder / 'ledger'),))
    resumed = fit(loader('torch'), folder / 'resumed', max_steps=15, sync=sync, callbacks=(SampleLedger(
        folder / 'ledger'),), ckpt_path=str(folder / 'stopped' / 'step=8.ckpt'))
    assert [batch for _, batch, _ in resumed.trained] == [2, 3, 4, 5, 0, 1, 2]
    torch_dist.barrier()  # every rank's files are closed
    status, report = audit(folder / 'ledger')
    assert report is not None and [row['counted'] for row in report.attempts] == ['batches 1-8', 'batches 9-15']
    partial = 'partial (run ended at batch 15)'
    if sync:
        assert (status, epochs(report)) == (0, [(0, 96, 0, 0, 'ok'), (1, 96, 0, 0, 'ok'), (2, 48, 0, 48, partial)])
    else:
        assert (status, epochs(report)[1]) == (1, (1, 32, 32, 32, 'VIOLATION'))
