"""A user's own script after a run killed while saving: ``Trainer(..., autoresume=True, callbacks=[SamplerSync()])``.

The kill leaves what ``tests/support/fault_train.py`` leaves: rank 0's next checkpoint
opened and never written (0 bytes), beside a ``latest-rank0.pt`` that links to the one
before. Composer's ``CheckpointSaver`` used to refuse every later start
(``FileExistsError: ... may conflict with a future checkpoint``). Now the first of our
callbacks sets that file aside at fit start, as the recipe runner does, and the run ends
with the weights of the run that never stopped. A ``CheckpointSaver`` listed before our
callbacks checks the folder before any ``fit_start`` of ours: the Trainer is refused
when it is built, naming the file and the move, and nothing moves.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from composer import Trainer
from composer.callbacks import CheckpointSaver
from torch.utils.data import DataLoader

from composer_sampling import DataOrderError, ResumableDistributedSampler, SampleLedger, SamplerSync

from support.helpers import make_trainer, synthetic

pytestmark = pytest.mark.composer


def _trainer(duration: str, callbacks: list[Any], **kwargs: Any) -> Trainer:
    """The same run each time: the model is drawn from one seed, 12 batches an epoch."""
    torch.manual_seed(3)
    dataset = synthetic(96)
    loader = DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))
    return make_trainer(loader, max_duration=duration, callbacks=callbacks, save_interval='1ba', **kwargs)


def _entries(folder: Path) -> dict[str, int | str]:
    """Every entry below ``folder``: a link's target, or a file's size."""
    return {str(path.relative_to(folder)): str(path.readlink()) if path.is_symlink() else path.stat().st_size
            for path in folder.rglob('*') if path.is_symlink() or path.is_file()}


@pytest.fixture(scope='module')
def crashed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The save folder of a run killed while it saved batch 3: ``latest-rank0.pt`` links to batch 2."""
    folder = tmp_path_factory.mktemp('crashed') / 'run'
    _trainer('2ba', [SamplerSync()], save_folder=str(folder), run_name='mine').fit()
    (folder / 'ep0-ba3-rank0.pt').write_bytes(b'')  # Composer's open(filename, 'wb'), then the kill
    assert (folder / 'latest-rank0.pt').readlink() == Path('ep0-ba2-rank0.pt')
    return folder


def test_autoresume_sets_the_checkpoint_cut_short_aside_and_ends_as_the_run_that_never_stopped(
        crashed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    whole = tmp_path / 'whole'
    _trainer('4ba', [SamplerSync()], save_folder=str(whole), run_name='whole').fit()
    folder = tmp_path / 'run'
    shutil.copytree(crashed, folder, symlinks=True)
    capsys.readouterr()
    trainer = _trainer('4ba', [SamplerSync()], save_folder=str(folder), run_name='mine', autoresume=True)
    trainer.fit()
    assert (f'save_folder {folder}: moved ep0-ba3-rank0.pt (0 bytes) to {folder / "interrupted-1"}: cut short after '
            'ep0-ba2-rank0.pt, the latest checkpoint, which this run resumes') in capsys.readouterr().out
    assert (folder / 'interrupted-1' / 'ep0-ba3-rank0.pt').stat().st_size == 0, 'kept, not deleted'
    assert (folder / 'latest-rank0.pt').readlink() == Path('ep0-ba4-rank0.pt')
    resumed, never_stopped = (torch.load(path / 'ep0-ba4-rank0.pt', weights_only=False)['state']['model']
                              for path in (folder, whole))
    torch.testing.assert_close(resumed, never_stopped, rtol=0, atol=0)


def test_a_checkpoint_saver_listed_first_gets_the_trainer_refused_naming_the_file(crashed: Path,
                                                                                 tmp_path: Path) -> None:
    folder = tmp_path / 'run'
    shutil.copytree(crashed, folder, symlinks=True)
    before = _entries(folder)
    saver = CheckpointSaver(folder=str(folder), save_interval='1ba')
    with pytest.raises(DataOrderError) as refused:  # SampleLedger is the first of ours: it speaks for both
        _trainer('4ba', [saver, SampleLedger(folder=str(tmp_path / 'ledger')), SamplerSync()], run_name='mine',
                 autoresume=True)
    assert str(refused.value) == (
        f'SampleLedger: save_folder {folder} holds ep0-ba3-rank0.pt (0 bytes, cut short) after ep0-ba2-rank0.pt, the '
        'latest checkpoint, as a run killed while saving leaves it. The CheckpointSaver comes before SampleLedger in '
        "the Trainer's callbacks, so Composer checks the folder before SampleLedger can set that file aside, and "
        'would refuse to start (FileExistsError). Move the file out of the folder, then start again: mkdir '
        f'{folder}/interrupted-1 && mv {folder}/ep0-ba3-rank0.pt {folder}/interrupted-1/ (with SampleLedger listed '
        'before the CheckpointSaver, it moves such a file itself)')
    assert _entries(folder) == before, 'a refusal moves nothing'
