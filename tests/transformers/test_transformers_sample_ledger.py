"""The Hugging Face SampleLedger in one process, through a real ``transformers.Trainer``: the ledger of a run stopped
after a mid-epoch checkpoint and resumed audits every sample once, with and without SamplerSync and gradient
accumulation; a resume that repeats batches fails the audit; what the ledger refuses.

The two-rank audit, and its failure without SamplerSync, are in ``dist/``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import Trainer, TrainingArguments

from composer_sampling import DataOrderError
from composer_sampling.transformers import SampleLedger

from support.transformers_parts import Model, Named, audit, epochs, fit, recorded

pytestmark = pytest.mark.transformers

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(('kind', 'sync', 'size', 'accumulate', 'save', 'ledger'), [
    ('ours', True, 96, 1, 25, {}),  # 24 batches an epoch: step 25 is batch 1 of epoch 1
    ('ours', True, 100, 4, 8, {'first': True}),  # 25 batches, 7 steps an epoch (the last of 1): batch 4 of epoch 1
    ('default', False, 96, 2, 13, {'workers': 2}),  # 24 batches, 12 steps: batch 2 of epoch 1; accelerate's order
    ('default', False, 96, 1, 25, {'index_key': 'index'}),  # the indices read from each batch
], ids=['SamplerSync', 'SamplerSync, accumulation 4, attached first', 'Trainer alone, accumulation 2, 2 workers',
        'Trainer alone, index_key'])
def test_the_ledger_of_a_run_resumed_after_a_crash_audits_every_sample_once(
        kind: str, sync: bool, size: int, accumulate: int, save: int, ledger: dict[str, Any], tmp_path: Path) -> None:
    """Two epochs of 4 samples a batch, stopped right after the mid-epoch checkpoint of step ``save``. The ledger
    folder as a process killed there leaves it (copied before the ledger closes its file) is the folder the resume
    from that checkpoint writes into: its two attempts audit with exit 0, the first counted up to the checkpoint's
    batch. The ledger holds exactly the batches that the model trained, and tapping the loader changed nothing: the
    two fits trained the batches of a fit without the ledger."""
    steps = 2 * -(-(size // 4) // accumulate)
    first, key = ledger.get('first', False), {'index_key': ledger['index_key']} if 'index_key' in ledger else {}
    workers = ledger.get('workers', 0)
    common: dict[str, Any] = dict(size=size, accumulate=accumulate, sync=sync, ledger_first=first, workers=workers)
    whole = fit(kind, tmp_path / 'whole', steps, size=size, accumulate=accumulate, sync=sync, workers=workers)
    stopped = fit(kind, tmp_path / 'stopped', steps, save_steps=save, stop_at=save, crash_copy=tmp_path / 'crashed',
                  ledger=SampleLedger(tmp_path / 'ledger', **key), **common)
    checkpoint = tmp_path / 'stopped' / f'checkpoint-{save}'
    state = torch.load(checkpoint / 'sample_ledger_0.pt', weights_only=True)
    trained = len(stopped.model.trained)
    assert state['batch'] == trained and state['attempt'] is not None
    resumed = fit(kind, tmp_path / 'resumed', steps, resume=str(checkpoint),
                  ledger=SampleLedger(tmp_path / 'crashed', **key), **common)
    assert stopped.model.trained + resumed.model.trained == whole.model.trained
    assert [indices for _, _, indices in recorded(tmp_path / 'crashed')] == whole.model.trained
    status, report = audit(tmp_path / 'crashed')
    assert report is not None and [row['counted'] for row in report.attempts] == [
        f'batches 1-{trained}', f'batches {trained + 1}-{len(whole.model.trained)}']
    assert (status, epochs(report)) == (0, [(0, size, 0, 0, 'ok'), (1, size, 0, 0, 'ok')])


def test_a_resume_that_trains_batches_again_fails_the_audit(tmp_path: Path) -> None:
    """The Trainer alone, resumed with ignore_data_skip=True from the checkpoint of step 30 (batch 6 of epoch 1, 24
    batches an epoch): it trains epoch 1 again from its first batch and stops at step 48, so the first 6 batches of 4
    samples are trained twice and the last 6 never. ``composer-sampling audit`` exits with status 1."""
    fit('default', tmp_path / 'stopped', 48, save_steps=30, stop_at=30, sync=False,
        ledger=SampleLedger(tmp_path / 'ledger'))
    fit('default', tmp_path / 'resumed', 48, sync=False, resume=str(tmp_path / 'stopped' / 'checkpoint-30'),
        ledger=SampleLedger(tmp_path / 'ledger'), arguments={'ignore_data_skip': True})
    status, report = audit(tmp_path / 'ledger')
    assert (status, epochs(report)) == (1, [(0, 96, 0, 0, 'ok'), (1, 48, 24, 24, 'VIOLATION')])
    command = subprocess.run([sys.executable, '-m', 'composer_sampling', 'audit', str(tmp_path / 'ledger')],
                             capture_output=True, text=True, cwd=ROOT)
    assert command.returncode == 1, command.stdout + command.stderr


def test_given_only_in_callbacks_it_refuses_at_train_begin_naming_attach(tmp_path: Path) -> None:
    args = TrainingArguments(str(tmp_path), max_steps=2, report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=Model(), args=args, train_dataset=Named(), callbacks=[SampleLedger(tmp_path / 'ledger')])
    with pytest.raises(DataOrderError, match=r'given in callbacks=\[\.\.\.\] without attach.*'
                                             r'trainer = SampleLedger\(folder\)\.attach\(Trainer\(\.\.\.\)\)'):
        trainer.train()
    assert not (tmp_path / 'ledger').exists()


def test_attach_returns_the_trainer_once_and_refuses_what_it_cannot_attach_to(tmp_path: Path) -> None:
    ledger = SampleLedger(tmp_path / 'ledger')
    trainer = Trainer(model=Model(), args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True),
                      train_dataset=Named())
    assert ledger.attach(trainer) is trainer and ledger.attach(trainer) is trainer
    assert [callback for callback in trainer.callback_handler.callbacks if callback is ledger] == [ledger]
    assert type(trainer).training_step is Trainer.training_step, 'the class is left as it was'
    with pytest.raises(TypeError, match=r'SampleLedger.attach expects a transformers.Trainer .* got Model'):
        SampleLedger(tmp_path).attach(Model())
    with pytest.raises(DataOrderError, match='has another SampleLedger attached already'):
        SampleLedger(tmp_path).attach(trainer)
    with pytest.raises(DataOrderError, match='attached to another Trainer already'):
        ledger.attach(Trainer(model=Model(), args=TrainingArguments(str(tmp_path), report_to=[], use_cpu=True)))


@pytest.mark.parametrize(('arguments', 'error', 'message'), [
    ({'folder': 's3://bucket/run/ledger'}, ValueError, r"folder must be a local path, got the URI 's3://bucket/run/"),
    ({'folder': None}, TypeError, r'folder must be a local path \(the folder of the ledger files\), got None'),
    ({'folder': ''}, TypeError, r"folder must be a local path .* got ''"),
    ({'folder': 'ledger', 'index_key': True}, TypeError, r'index_key must be a str .* got True'),
], ids=['URI', 'None', 'empty', 'index_key'])
def test_bad_arguments_are_named(arguments: dict[str, Any], error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        SampleLedger(**arguments)


def test_the_ledger_example_of_the_docs_runs_as_written_and_audits(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    page = (ROOT / 'docs' / 'transformers.md').read_text()
    section = page.split('## The ledger, and what `audit` proves', 1)[1]
    code = re.search(r'```python\n(.*?)```', section, flags=re.DOTALL)
    assert code is not None
    monkeypatch.chdir(tmp_path)
    torch.manual_seed(0)
    namespace: dict[str, Any] = {'model': Model(), 'dataset': Named(), '__name__': 'docs'}
    exec(compile(code.group(1), 'docs/transformers.md', 'exec'), namespace)
    status, report = audit(tmp_path / 'runs' / 'ledger' / 'ledger')
    assert (status, epochs(report)) == (0, [(0, 96, 0, 0, 'ok'), (1, 96, 0, 0, 'ok')])
