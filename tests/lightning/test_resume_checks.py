"""The Lightning SamplerSync agrees with Lightning's own loop at every resume, through a real Lightning ``Trainer``.

Where the fit continues is read from Lightning's restored loop counters and checked
against the callback's own state; checkpoints saved at every kind of place resume bit
for bit, and a resume that would repeat or skip samples is refused before the first
batch, naming why.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import pytorch_lightning as pl
import torch

from composer_sampling import DataOrderError

from support.lightning_parts import Model, batch_of_batches_loader, fit, loader, same_weights

pytestmark = pytest.mark.lightning


def _edited(checkpoint: Path, folder: Path, edit: Any) -> str:
    """A copy of ``checkpoint`` whose SamplerSync state ``edit(state)`` returned; its path."""
    whole = torch.load(checkpoint, weights_only=True)
    (key,) = [key for key in whole['callbacks'] if 'SamplerSync' in key]
    whole['callbacks'][key] = edit(dict(whole['callbacks'][key]))
    folder.mkdir(parents=True, exist_ok=True)
    torch.save(whole, folder / checkpoint.name)
    return str(folder / checkpoint.name)


def test_a_checkpoint_saved_without_the_callback_is_refused_inside_an_epoch(tmp_path: Path) -> None:
    """12 batches an epoch. Lightning would resume at batch 5 while no state says in which order its batches came;
    at the epoch's last batch nothing of the epoch is left, and the fit goes on."""
    fit(loader('ours'), tmp_path / 'plain', max_steps=13, save_every=5, sync=False)
    with pytest.raises(DataOrderError, match=r'holds no SamplerSync state .* resumes it inside an epoch, at epoch 0, '
                                             r"batch 5.*Resume from a checkpoint saved at an epoch's end"):
        fit(loader('ours'), tmp_path / 'refused', max_steps=20, ckpt_path=str(tmp_path / 'plain' / 'step=5.ckpt'))
    fit(loader('ours'), tmp_path / 'plain', max_steps=13, save_every=12, sync=False)
    resumed = fit(loader('ours'), tmp_path / 'resumed', max_steps=15,
                  ckpt_path=str(tmp_path / 'plain' / 'step=12.ckpt'))
    assert [(epoch, batch) for epoch, batch, _ in resumed.trained] == [(1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize(('edit', 'message'), [
    (lambda state: {'version': 2},
     r'state \(version 2\) has no data_seed, order_signatures, .*, rng, data_fingerprint'),
    (lambda state: {**state, 'batches': 12}, r"saved at epoch 0 after 12 batches, but Lightning's loop resumes at "
                                             r'epoch 0, batch 5'),
    (lambda state: {**state, 'epoch': 7}, r"saved at epoch 7 after 5 batches, but Lightning's loop resumes at "
                                          r'epoch 0, batch 5'),
    (lambda state: {**state, 'rng': ({'python': [3]},)}, r'rng\[0\], the RNG state of rank 0, is not an RNG state'),
    (lambda state: {**state, 'rng': ({**state['rng'][0], 'numpy': 'x'},)}, r'rng\[0\].*is not an RNG state'),
    (lambda state: {**state, 'data_fingerprint': None}, r'holds no data_fingerprint \(None\)'),
    (lambda state: {key: value for key, value in state.items() if key != 'data_fingerprint'},
     r'has no data_fingerprint'),
    (lambda state: {'version': 5, 'data_seed': 17, 'replication': 1, 'rng_batch': None},
     r'^this is a Composer SamplerSync state, not a Lightning SamplerSync state$'),
], ids=['emptied', 'batches', 'epoch', 'rng', 'rng numpy', 'fingerprint None', 'fingerprint missing', 'Composer'])
def test_an_edited_or_foreign_state_is_refused_by_name(edit: Any, message: str, tmp_path: Path) -> None:
    fit(loader('ours'), tmp_path / 'saved', max_steps=6, save_every=5)
    edited = _edited(tmp_path / 'saved' / 'step=5.ckpt', tmp_path / 'edited', edit)
    model = None
    with pytest.raises(DataOrderError, match=message):
        model = fit(loader('ours'), tmp_path / 'resumed', max_steps=12, ckpt_path=edited)
    assert model is None


@pytest.mark.parametrize('by_steps', [True, False], ids=['max_steps', 'max_epochs'])
@pytest.mark.parametrize('kind', ['ours', 'user batch sampler'])
def test_checkpoints_saved_at_an_epochs_end_resume_bit_for_bit(kind: str, by_steps: bool, tmp_path: Path) -> None:
    """ModelCheckpoint(every_n_epochs=1) saves at the epoch's end, where Lightning may draw one more batch at a resume
    (with max_steps, where it also counts that restart as an epoch of max_epochs); the placed loader has none, so the
    next batch is the next epoch's first."""
    limits = {'max_steps': 30, 'max_epochs': 10} if by_steps else {'max_epochs': 3}
    whole = fit(loader(kind), tmp_path / 'whole', **limits)
    fit(loader(kind), tmp_path / 'stopped', save_epochs=True,
        **({'max_steps': 25, 'max_epochs': 10} if by_steps else {'max_epochs': 2}))
    for step in (12, 24):
        resumed = fit(loader(kind), tmp_path / f'resumed{step}', **limits,
                      ckpt_path=str(tmp_path / 'stopped' / f'end-step={step}.ckpt'))
        assert resumed.trained == whole.trained[step:]
        assert same_weights(whole, resumed)


def test_the_end_of_a_fit_stopped_by_max_steps_inside_an_epoch_is_refused(tmp_path: Path) -> None:
    """Lightning resumes the rest of epoch 2 there but gives the samplers epoch 3: a mismatch of its own."""
    fit(loader('ours'), tmp_path / 'stopped', max_steps=26, save_epochs=True)
    with pytest.raises(DataOrderError, match=r'max_steps stopped the fit inside epoch 2, after 2 batches; Lightning '
                                             r'resumes the rest of epoch 2 but gives the samplers epoch 3'):
        fit(loader('ours'), tmp_path / 'resumed', max_steps=30,
            ckpt_path=str(tmp_path / 'stopped' / 'end-step=26.ckpt'))


class _SaveAt(pl.Callback):
    """Saves a checkpoint at the end of batch ``batch_idx`` of the first epoch, wherever the optimizer stands."""

    def __init__(self, path: Path, batch_idx: int) -> None:
        self.path, self.batch_idx = path, batch_idx

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.current_epoch == 0 and batch_idx == self.batch_idx:
            trainer.save_checkpoint(self.path)


def test_gradient_accumulation_resumes_at_an_optimizer_step_and_refuses_between_two(tmp_path: Path) -> None:
    """accumulate_grad_batches=2: a checkpoint at an optimizer step resumes bit for bit; one after the first batch of
    a pair (Lightning keeps no accumulated gradients) is warned about when saved and refused at the resume."""
    whole = fit(loader('ours'), tmp_path / 'whole', max_steps=15, accumulate=2)
    fit(loader('ours'), tmp_path / 'stopped', max_steps=5, save_every=2, accumulate=2)
    resumed = fit(loader('ours'), tmp_path / 'resumed', max_steps=15, accumulate=2,
                  ckpt_path=str(tmp_path / 'stopped' / 'step=4.ckpt'))
    assert resumed.trained == whole.trained[8:]
    assert same_weights(whole, resumed)
    between = tmp_path / 'between.ckpt'
    with pytest.warns(UserWarning, match=r'saved at epoch 0, batch 5, between two optimizer steps'):
        fit(loader('ours'), tmp_path / 'odd', max_steps=4, accumulate=2, callbacks=(_SaveAt(between, 4),))
    with pytest.raises(DataOrderError, match=r'saved at epoch 0, batch 5, between two optimizer steps '
                                             r'\(accumulate_grad_batches=2\)'):
        fit(loader('ours'), tmp_path / 'refused', max_steps=15, accumulate=2, ckpt_path=str(between))


def test_the_write_ups_batch_of_batches_resumes_mid_epoch_and_a_drifting_one_is_refused(tmp_path: Path) -> None:
    """A user's batch sampler with neither set_epoch nor a generator, grouping a seeded BatchSampler: its trained
    index lists are drawn again at the resume, checked against the checkpoint's digest, and dropped. One whose order
    drifts from pass to pass comes out different in a later epoch, and is refused before the first batch."""
    whole = fit(batch_of_batches_loader(), tmp_path / 'whole', max_steps=15)
    assert sorted(index for _, _, indices in whole.trained[:12] for index in indices) == list(range(96))
    fit(batch_of_batches_loader(), tmp_path / 'stopped', max_steps=9, save_every=4)
    resumed = fit(batch_of_batches_loader(), tmp_path / 'resumed', max_steps=15,
                  ckpt_path=str(tmp_path / 'stopped' / 'step=8.ckpt'))
    assert resumed.trained == whole.trained[8:]
    assert same_weights(whole, resumed)
    fit(batch_of_batches_loader(drifting=True), tmp_path / 'drifting', max_steps=17, save_every=8)
    with pytest.raises(DataOrderError, match=r'drawn again for rank 0, the 4 index lists trained before the '
                                             r'checkpoint come out different'):  # epoch 1 is the resumed fit's 1st pass
        fit(batch_of_batches_loader(drifting=True), tmp_path / 'refused', max_steps=20,
            ckpt_path=str(tmp_path / 'drifting' / 'step=16.ckpt'))


class _Failing(Model):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise RuntimeError('a bug in training_step')


def test_a_fit_that_raised_gives_the_strategy_its_process_dataloader_back(tmp_path: Path) -> None:
    from composer_sampling.lightning import SamplerSync

    pl.seed_everything(3, verbose=False)
    trainer = pl.Trainer(max_steps=2, callbacks=[SamplerSync()], logger=False, enable_progress_bar=False,
                         enable_checkpointing=False, accelerator='cpu', enable_model_summary=False)
    own = trainer.strategy.process_dataloader
    with pytest.raises(RuntimeError, match='a bug in training_step'):
        trainer.fit(_Failing(), loader('ours'))
    assert trainer.strategy.process_dataloader == own
    model = Model()
    trainer.fit(model, loader('ours'))
    assert [batch for _, batch, _ in model.trained] == [0, 1]


def test_a_refusal_of_another_graph_speaks_of_what_the_user_wrote(tmp_path: Path) -> None:
    """A sampler that distribute() put in place is named as such, and a graph with no distributed sampler is said to
    have none, instead of an empty list."""
    from torch.utils.data import DataLoader, RandomSampler

    from composer_sampling import distribute

    from support.lightning_parts import Named

    fit(loader('torch'), tmp_path, max_steps=6, save_every=5)
    checkpoint = str(tmp_path / 'step=5.ckpt')
    data = Named()
    made = distribute(DataLoader(data, batch_size=8, sampler=RandomSampler(data)), 1, 0)
    with pytest.raises(DataOrderError, match=r'written with the sampler DistributedSampler, the train dataloader now '
                                             r'has ResumableDistributedSampler\(.*\) \(which distribute\(\) put in '
                                             r'place of your RandomSampler\)'):
        fit(made, tmp_path / 'made', max_steps=12, ckpt_path=checkpoint)
    with pytest.raises(DataOrderError, match=r'now has no sampler whose order a checkpoint records'):
        fit(DataLoader(data, batch_size=8, shuffle=True), tmp_path / 'plain', max_steps=12, ckpt_path=checkpoint)
