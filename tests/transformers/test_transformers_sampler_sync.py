"""The Hugging Face SamplerSync in one process, through a real ``transformers.Trainer``: how it is attached, what it
writes into a checkpoint, and every resume it refuses, before the first batch and naming why.

The two-rank tests (the second split, the order, exact resumes) are in ``dist/``, launched with the Lightning and loop
tests by ``tests/lightning/test_launch.py``.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.utils.data import IterableDataset
from transformers import Trainer, TrainingArguments

from composer_sampling import DataOrderError
from composer_sampling.transformers import SamplerSync

from support.transformers_parts import Model, Named, fit, same_weights

pytestmark = pytest.mark.transformers

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope='module')
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkpoint of step 5 (inside the first epoch of 24 batches) of a fit of our sampler, shared by the tests
    that resume from it; a test that edits it edits a copy."""
    folder = tmp_path_factory.mktemp('saved')
    fit('ours', folder, 6, save_steps=5)
    return folder / 'checkpoint-5'


def _edited(checkpoint: Path, folder: Path, edit: Any) -> str:
    """A copy of the ``checkpoint`` folder whose order state ``edit(state)`` returned; its path."""
    shutil.copytree(checkpoint, folder)
    path = folder / 'data_order_0.pt'
    torch.save(edit(dict(torch.load(path, weights_only=True))), path)
    return str(folder)


def test_given_only_in_callbacks_it_refuses_at_train_begin_naming_attach(tmp_path: Path) -> None:
    with pytest.raises(DataOrderError, match=r'given in callbacks=\[\.\.\.\] without attach.*'
                                             r'trainer = SamplerSync\(\.\.\.\)\.attach\(Trainer\(\.\.\.\)\)'):
        fit('ours', tmp_path, 3, attach=False)


def test_attach_returns_the_trainer_once_and_refuses_what_it_cannot_attach_to(tmp_path: Path) -> None:
    sync = SamplerSync()
    trainer = Trainer(model=Model(), args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True),
                      train_dataset=Named())
    own = trainer.get_train_dataloader
    assert sync.attach(trainer) is trainer and sync.attach(trainer) is trainer
    assert [callback for callback in trainer.callback_handler.callbacks if callback is sync] == [sync]
    assert trainer.get_train_dataloader is not own
    assert type(trainer).get_train_dataloader is Trainer.get_train_dataloader, 'the class is left as it was'
    with pytest.raises(TypeError, match=r'SamplerSync.attach expects a transformers.Trainer .* got Model'):
        SamplerSync().attach(Model())
    with pytest.raises(DataOrderError, match='has another SamplerSync attached already'):
        SamplerSync().attach(trainer)
    with pytest.raises(DataOrderError, match='attached to another Trainer already'):
        sync.attach(Trainer(model=Model(), args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True)))


def test_every_checkpoint_holds_the_order_state_and_resumes_bit_for_bit(tmp_path: Path) -> None:
    """24 batches per epoch; the checkpoint of step 10 lies inside the first epoch, and its state loads with
    weights_only."""
    whole = fit('vila', tmp_path / 'whole', 30)
    fit('vila', tmp_path / 'stopped', 30, save_steps=10, stop_at=10)
    state = torch.load(tmp_path / 'stopped' / 'checkpoint-10' / 'data_order_0.pt', weights_only=True)
    assert (state['trainer'], state['data_seed'], state['epoch'], state['batches'], state['epoch_done']) == \
        ('transformers', 17, 0, 10, False)
    assert state['rng'] is None, "transformers restores the RNG itself (rng_state.pth)"
    resumed = fit('vila', tmp_path / 'resumed', 30, resume=str(tmp_path / 'stopped' / 'checkpoint-10'))
    assert resumed.model.trained == whole.model.trained[10:] and same_weights(whole, resumed)


def test_a_resume_onto_changed_data_is_refused_unless_allowed(saved: Path, tmp_path: Path) -> None:
    checkpoint = str(saved)
    with pytest.raises(DataOrderError, match=r'fingerprint'):
        fit('ours', tmp_path / 'refused', 12, resume=checkpoint, data_seed=1)
    with pytest.warns(UserWarning, match='fingerprint'):
        fit('ours', tmp_path / 'allowed', 12, resume=checkpoint, data_seed=1,
            sync=SamplerSync(allow_data_change=True))


@pytest.mark.parametrize(('edit', 'message'), [
    (lambda state: {**state, 'batches': 12}, r"saved at epoch 0 after 12 batches, but the Trainer's loop resumes at "
                                             r'epoch 0, batch 5'),
    (lambda state: {'version': 6}, r'state \(version 6\) has no data_seed, order_signatures, .*, batch_digests'),
    (lambda state: {**state, 'order_signatures': ({'sampler': 'RandomSampler'},)},
     r'written with the sampler RandomSampler, the train dataloader now has ResumableDistributedSampler'),
    (lambda state: {'version': 2, 'data_seed': 17, 'epoch': 0, 'batches': 5, 'epoch_done': False},
     r'^this is a Lightning SamplerSync state, not a Hugging Face SamplerSync state$'),
], ids=['batches', 'emptied', 'another sampler', 'Lightning'])
def test_an_edited_or_foreign_state_is_refused_by_name(edit: Any, message: str, saved: Path, tmp_path: Path) -> None:
    edited = _edited(saved, tmp_path / 'edited', edit)
    with pytest.raises(DataOrderError, match=message):
        fit('ours', tmp_path / 'resumed', 12, resume=edited)


def test_a_checkpoint_saved_without_the_callback_is_refused_inside_an_epoch(tmp_path: Path) -> None:
    fit('ours', tmp_path / 'plain', 6, save_steps=5, sync=False)
    with pytest.raises(DataOrderError, match=r'holds no SamplerSync state .* resumes it inside an epoch, at epoch 0, '
                                             r'batch 5'):
        fit('ours', tmp_path / 'refused', 12, resume=str(tmp_path / 'plain' / 'checkpoint-5'))


def test_ignore_data_skip_is_refused_inside_an_epoch(saved: Path, tmp_path: Path) -> None:
    with pytest.raises(DataOrderError, match=r'ignore_data_skip=True makes the Trainer train epoch 0 again'):
        fit('ours', tmp_path, 12, resume=str(saved), arguments={'ignore_data_skip': True})


def test_a_dataset_that_cannot_fill_one_optimizer_step_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataOrderError, match=r'one optimizer step trains 4 per device x 1 ranks x 4 gradient '
                                             r'accumulation steps = 16 samples.*holds 12 samples'):
        fit('ours', tmp_path, 3, size=12, accumulate=4)


class Stream(IterableDataset):
    """The samples of :class:`Named` as an iterable dataset that orders itself by its epoch."""

    def __init__(self) -> None:
        self.data, self.epoch = Named(), 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return (self.data[index] for index in torch.randperm(96, generator=torch.Generator().manual_seed(self.epoch)))


def test_an_iterable_dataset_is_given_its_epoch_and_resumed_by_the_trainer(tmp_path: Path) -> None:
    """It orders itself: no sampler to place, so transformers skips the trained batches itself (loading them)."""
    def run(folder: Path, resume: str | None = None) -> list[list[int]]:
        torch.manual_seed(0)
        model = Model()
        args = TrainingArguments(str(folder), per_device_train_batch_size=4, max_steps=30, save_steps=10, seed=17,
                                 report_to=[], use_cpu=True, disable_tqdm=True, logging_strategy='no')
        SamplerSync().attach(Trainer(model=model, args=args, train_dataset=Stream())).train(resume)
        return model.trained

    whole = run(tmp_path / 'whole')
    assert run(tmp_path / 'resumed', str(tmp_path / 'whole' / 'checkpoint-20')) == whole[20:]


@pytest.mark.parametrize(('arguments', 'message'), [
    ({'data_seed': -1}, 'data_seed'), ({'check_sharding': 'yes'}, 'check_sharding'),
    ({'allow_data_change': 1}, 'allow_data_change'),
])
def test_bad_arguments_are_named(arguments: dict[str, Any], message: str) -> None:
    with pytest.raises((TypeError, ValueError), match=message):
        SamplerSync(**arguments)


def test_the_dozen_lines_of_the_docs_run_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    page = (ROOT / 'docs' / 'transformers.md').read_text()
    section = page.split('## The fix in a dozen lines', 1)[1]
    code = re.search(r'```python\n(.*?)```', section, flags=re.DOTALL)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict[str, Any] = {'model': Model(), 'dataset': Named(), '__name__': 'docs'}
    exec(compile(code.group(1), 'docs/transformers.md', 'exec'), namespace)
    assert 'SamplerSync: global batch 4 per device x 1 ranks x 2 gradient accumulation steps' in capsys.readouterr().out
    assert namespace['trainer'].state.global_step == 36
    assert sorted(index for batch in namespace['model'].trained[:24] for index in batch) == list(range(96))
