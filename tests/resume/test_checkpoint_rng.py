"""The checkpoint's RNG state: restored where Composer's spin would, never where the user declined it.

The grid (test_resume_grid.py) proves the restore on every sampler graph. These
cases are its edges: ``load_ignore_keys`` with ``rng``, a later ``fit()`` of a
trainer that resumed this way (Composer would restore its stale copy), a
``CheckpointSaver`` placed before ``SamplerSync``, a copy older than its checkpoint,
and the copy itself: the state Composer saves, taken only when it saves.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from composer import Trainer
from composer.callbacks import CheckpointSaver

from composer_sampling import SamplerSync

from support.resume_harness import LOADERS, CountedData, DropoutMLP, Row, fit, fit_whole

pytestmark = pytest.mark.composer

SEED = 17  # the weights' and the Trainer's


def _trainer(folder: Path, *, callbacks: list[Any] | None = None, **kwargs: Any) -> tuple[Trainer, DropoutMLP]:
    """A dropout model over torch's DistributedSampler on one rank, 2 epochs of 10 batches."""
    data = CountedData(40, augment=True)
    # The weights start from this seed, not from whatever the process drew before: the Trainer seeds only after the
    # model is built, and a reference run must start where the run whose checkpoint is resumed started.
    torch.manual_seed(SEED)
    model = DropoutMLP(dropout=0.5)
    kwargs.setdefault('max_duration', '2ep')
    trainer = Trainer(model=model, train_dataloader=LOADERS['torch_distributed'](data, 1, 0, 0),
                      optimizers=torch.optim.Adam(model.parameters(), lr=0.01),
                      device_train_microbatch_size=4, callbacks=callbacks or [SamplerSync()], seed=SEED, device='cpu',
                      progress_bar=False, log_to_console=False, load_progress_bar=False, **kwargs)
    return trainer, model


def _same(first: DropoutMLP, second: DropoutMLP) -> bool:
    return all(torch.equal(a, b) for a, b in zip(first.state_dict().values(), second.state_dict().values(),
                                                 strict=True))


def test_load_ignore_keys_with_rng_is_honoured(tmp_path: Path) -> None:
    row = Row('torch_distributed', randomness='global', stops=('mid',))
    whole, stops = fit_whole(row, tmp_path)
    (stop,) = stops.values()
    checkpoint = next(tmp_path.glob(f'ep*-ba{stop}-rank0.pt'))
    declined, model = _trainer(tmp_path / 'declined', load_path=str(checkpoint), load_ignore_keys=['rng'])
    declined.fit()
    restored, again = _trainer(tmp_path / 'restored', load_path=str(checkpoint))
    restored.fit()
    assert all(torch.equal(whole.weights[name], tensor) for name, tensor in again.state_dict().items())
    assert not _same(model, again), 'the RNG state was restored although load_ignore_keys named rng'


def test_a_later_fit_at_an_epoch_boundary_does_not_go_back_to_the_checkpoints_rng(tmp_path: Path) -> None:
    reference, expected = _trainer(tmp_path / 'reference', max_duration='1ep')
    reference.fit()  # epoch 0, then a later fit for epoch 1 in the same trainer
    reference.fit(duration='1ep')
    writer, _ = _trainer(tmp_path, max_duration='1ep', save_folder=str(tmp_path), save_interval='1ba')
    writer.fit()
    resumed, model = _trainer(tmp_path / 'resumed', max_duration='1ep', load_path=str(tmp_path / 'ep0-ba6-rank0.pt'))
    resumed.fit()  # restores the checkpoint's RNG before batch 7; Composer still holds it...
    resumed.fit(duration='1ep')  # ...and restores it here, at batch 0 of epoch 1, unless undone
    assert _same(model, expected)


def test_a_checkpoint_saver_before_sampler_sync_resumes_exactly(tmp_path: Path) -> None:
    """The copy is taken when the checkpoint is saved: the callbacks' order does not matter."""
    saver = CheckpointSaver(folder=str(tmp_path), save_interval='1ba')
    with warnings.catch_warnings():
        warnings.filterwarnings('error', message='.*SamplerSync')
        whole, expected = _trainer(tmp_path, callbacks=[saver, SamplerSync()], max_duration='4ba')
        whole.fit()
        resumed, model = _trainer(tmp_path / 'resumed', callbacks=[SamplerSync()], max_duration='4ba',
                                  load_path=str(tmp_path / 'ep0-ba2-rank0.pt'))
        resumed.fit()
    assert _same(model, expected)


def test_a_copy_older_than_its_checkpoint_is_not_restored(tmp_path: Path) -> None:
    """A checkpoint whose copy is a batch behind (an earlier release, with the saver first) says so."""
    _trainer(tmp_path, max_duration='2ba', save_folder=str(tmp_path), save_interval='1ba')[0].fit()
    checkpoint = torch.load(tmp_path / 'ep0-ba2-rank0.pt', weights_only=False)
    sync = checkpoint['state']['callbacks']['SamplerSync']
    assert sync['rng_batch'] == 2
    sync['rng_batch'] = 1
    torch.save(checkpoint, tmp_path / 'older.pt')
    resumed, _ = _trainer(tmp_path / 'resumed', callbacks=[SamplerSync()], load_path=str(tmp_path / 'older.pt'))
    with pytest.warns(UserWarning, match=r'its copy of the RNG state is from batch 1, the checkpoint from batch 2.*'
                                         r'edited, or written by an older composer-sampling'):
        resumed.fit()


def test_the_copy_is_the_state_composer_saves(tmp_path: Path) -> None:
    """Taken with the checkpoint, the copy is the very RNG state Composer writes beside it."""
    _trainer(tmp_path, max_duration='3ba', save_folder=str(tmp_path), save_interval='1ba')[0].fit()
    for batch in (1, 2, 3):
        checkpoint = torch.load(tmp_path / f'ep0-ba{batch}-rank0.pt', weights_only=False)
        sync = checkpoint['state']['callbacks']['SamplerSync']
        assert sync['rng_batch'] == batch
        (ours,), (composers,) = sync['rng'], checkpoint['rng']
        assert ours.keys() == composers.keys()
        assert ours['python'] == composers['python']
        assert all(np.array_equal(a, b) for a, b in zip(ours['numpy'], composers['numpy'], strict=True))
        assert torch.equal(ours['torch'], composers['torch'])


def test_no_fit_no_copy(tmp_path: Path) -> None:
    """Before its trainer's first fit (a checkpoint load asks then), the state holds no RNG copy."""
    sync = SamplerSync()
    _trainer(tmp_path, callbacks=[sync], max_duration='1ba')[0].fit()
    assert sync.state_dict()['rng_batch'] == 1
    _trainer(tmp_path / 'another', callbacks=[sync])
    assert (sync.state_dict()['rng'], sync.state_dict()['rng_batch']) == (None, None)


def test_a_resume_without_random_state_to_restore_is_exact_too(tmp_path: Path) -> None:
    """No dropout, no augmentation: nothing draws, and the restore changes nothing."""
    row = Row('torch_distributed', stops=('mid',))
    whole, stops = fit_whole(row, tmp_path)
    resumed = fit(row, tmp_path, load=next(tmp_path.glob(f'ep*-ba{stops["mid"]}-rank0.pt')))
    assert all(torch.equal(whole.weights[name], tensor) for name, tensor in resumed.weights.items())
