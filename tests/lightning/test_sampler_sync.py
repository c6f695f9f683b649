"""The Lightning SamplerSync through a real Lightning ``Trainer`` on one process: seeds, epochs, resume, refusals.

Two ranks (``strategy='ddp'``, gloo) are ``tests/lightning/dist``'s, through torchrun.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler
from composer_sampling.lightning import SamplerSync

from support.lightning_parts import KINDS, Model, Named, Rebuilt, fit, loader, same_weights

pytestmark = pytest.mark.lightning


def _epochs(model: object) -> dict[int, list[int]]:
    order: dict[int, list[int]] = {}
    for epoch, _, indices in model.trained:  # type: ignore[attr-defined]
        order.setdefault(epoch, []).extend(indices)
    return order


@pytest.mark.parametrize('kind', ['user batch sampler', 'ours'])
def test_the_order_changes_every_epoch_and_follows_the_seed(kind: str, tmp_path: Path) -> None:
    """No user hook: every node gets set_epoch and the data seed; the same seed gives the same batches."""
    first = _epochs(fit(loader(kind), tmp_path, max_epochs=3))
    assert all(sorted(order) == list(range(96)) for order in first.values())
    assert len({tuple(order) for order in first.values()}) == 3, 'a new order every epoch'
    assert _epochs(fit(loader(kind), tmp_path, max_epochs=3)) == first
    assert _epochs(fit(loader(kind), tmp_path, max_epochs=3, seed=18)) != first
    assert _epochs(fit(loader(kind), tmp_path, max_epochs=3, seed=18, data_seed=17)) == first


@pytest.mark.parametrize('kind', KINDS)
def test_a_mid_epoch_checkpoint_resumes_bit_for_bit(kind: str, tmp_path: Path) -> None:
    """Stopped right after the checkpoint of step 15 (epoch 1, batch 3 of 12), resumed with ckpt_path: the batches
    the run that never stopped trained, and its weights and momentum, with dropout."""
    whole = fit(loader(kind), tmp_path / 'whole', max_steps=30)
    fit(loader(kind), tmp_path / 'stopped', max_steps=17, save_every=5)
    checkpoint = tmp_path / 'stopped' / 'step=15.ckpt'
    resumed = fit(loader(kind), tmp_path / 'resumed', max_steps=30, ckpt_path=str(checkpoint))
    assert resumed.trained == whole.trained[15:]
    assert same_weights(whole, resumed)


def test_checkpoints_at_an_epochs_end_and_its_last_batch_resume_at_the_next_epoch(tmp_path: Path) -> None:
    """12 batches per epoch: step 12 is the last batch of epoch 0, step 24 the last of epoch 1."""
    whole = fit(loader('ours'), tmp_path / 'whole', max_steps=30)
    fit(loader('ours'), tmp_path / 'stopped', max_steps=25, save_every=12)
    for step in (12, 24):
        resumed = fit(loader('ours'), tmp_path / f'resumed{step}', max_steps=30,
                      ckpt_path=str(tmp_path / 'stopped' / f'step={step}.ckpt'))
        assert resumed.trained == whole.trained[step:] and same_weights(whole, resumed)


def test_a_loader_rebuilt_every_epoch_keeps_the_order_and_resumes(tmp_path: Path) -> None:
    """reload_dataloaders_every_n_epochs=1: each new loader is seeded and given its epoch as the first one was, and
    a mid-epoch checkpoint resumes bit for bit."""
    data = Rebuilt('user batch sampler')
    whole = fit(data, tmp_path / 'whole', max_steps=30, reload=1)
    assert data.built == 3
    assert _epochs(whole) == _epochs(fit(loader('user batch sampler'), tmp_path / 'once', max_steps=30))
    fit(Rebuilt('user batch sampler'), tmp_path / 'stopped', max_steps=17, save_every=5, reload=1)
    resumed = fit(Rebuilt('user batch sampler'), tmp_path / 'resumed', max_steps=30, reload=1,
                  ckpt_path=str(tmp_path / 'stopped' / 'step=15.ckpt'))
    assert resumed.trained == whole.trained[15:]
    assert same_weights(whole, resumed)


def test_the_state_loads_weights_only_and_a_changed_dataset_is_refused(tmp_path: Path) -> None:
    fit(loader('ours'), tmp_path, max_steps=6, save_every=5)
    checkpoint = tmp_path / 'step=5.ckpt'
    state = torch.load(checkpoint, weights_only=True)['callbacks']
    (saved,) = [value for key, value in state.items() if 'SamplerSync' in key]
    assert saved['data_seed'] == 17 and (saved['epoch'], saved['batches'], saved['epoch_done']) == (0, 5, False)
    assert len(saved['rng']) == 1
    with pytest.raises(Exception, match=r'SamplerSync: the checkpoint was written with ResumableDistributedSampler '
                                         r'dataset_len=96, the train dataloader now has dataset_len=80'):
        fit(loader('ours', size=80), tmp_path / 'other', max_steps=12, ckpt_path=str(checkpoint))


def test_a_resume_onto_changed_data_is_refused_unless_allowed(tmp_path: Path) -> None:
    """The same length, other content: the fingerprints differ; allow_data_change continues with a warning."""
    fit(loader('ours'), tmp_path, max_steps=6, save_every=5)
    checkpoint = str(tmp_path / 'step=5.ckpt')
    with pytest.raises(Exception, match=r'the train dataset is not the one the checkpoint trained on: its '
                                        r"fingerprint was [0-9a-f]{16}, from the Named's own fingerprint 'named "
                                        r"samples, seed 0, 96 samples'.*SamplerSync\(allow_data_change=True\)"):
        fit(loader('ours', seed=1), tmp_path / 'changed', max_steps=12, ckpt_path=checkpoint)
    with pytest.warns(UserWarning, match='Continuing, because allow_data_change is true'):
        resumed = fit(loader('ours', seed=1), tmp_path / 'allowed', max_steps=12, ckpt_path=checkpoint,
                      allow_data_change=True)
    assert [batch for _, batch, _ in resumed.trained] == list(range(5, 12))


def test_a_fit_without_a_seed_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import pytorch_lightning as pl

    monkeypatch.delenv('PL_GLOBAL_SEED', raising=False)
    data = Named()
    trainer = pl.Trainer(max_steps=1, callbacks=[SamplerSync()], logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, accelerator='cpu')
    sampled = DataLoader(data, batch_size=8, sampler=ResumableDistributedSampler(data, 1, 0))
    with pytest.raises(ValueError, match=r'SamplerSync has no data seed: call seed_everything\(seed\) before fitting'):
        trainer.fit(Model(), sampled)
    assert 'PL_GLOBAL_SEED' not in os.environ


@pytest.mark.parametrize(('arguments', 'message'), [
    ({'data_seed': -1}, r'data_seed must be in the interval \[0, 18446744073709551615\], got -1'),
    ({'check_sharding': 'yes'}, r"check_sharding must be a bool, got 'yes' \(str\)"),
])
def test_bad_arguments_are_named(arguments: dict[str, object], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        SamplerSync(**arguments)  # type: ignore[arg-type]


def test_print_summary_and_replication_are_taken_as_under_composer(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    fit(loader('ours'), tmp_path, max_steps=2, print_summary=True)
    summary = capsys.readouterr().out
    assert 'composer-sampling run summary' in summary and re.search(r'data seed +17 \(seed_everything\)', summary)
    assert 'ResumableDistributedSampler' in summary
    with pytest.raises(ValueError, match=r'replication must be in the interval \[1, '):
        SamplerSync(replication=0)
