"""The ledger holds its records in memory and writes them before every checkpoint: none is lost that one holds.

With a real Trainer and Composer's real CheckpointSaver: when a checkpoint file appears,
the ledger on disk already holds every batch up to it, whatever the order of the
callbacks; a run killed with SIGKILL after a checkpoint has every batch of it in its
ledger, and resumed from it, audits exactly once. The records written in one go are
the bytes one write per record gave.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from composer.callbacks import CheckpointSaver
from composer.core import Callback, State
from composer.loggers import Logger
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger, SamplerSync
from composer_sampling._ledger import recorder as _ledger_recorder
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import LedgerWriter, read_ledger
from composer_sampling.train import main as train_main

from support.helpers import make_trainer, synthetic

ROOT = Path(__file__).resolve().parents[2]
SIZE = 60  # 8 batches of 8 an epoch, the last one of 4


def _loader() -> DataLoader:
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))


def _on_disk(folder: Path) -> list[int]:
    """The batches the ledger files in ``folder`` hold now."""
    return [record.batch for path in sorted(folder.glob('*.bin')) for record in read_ledger(path).trained]


class AfterTheSave(Callback):
    """Placed after the saver: at each checkpoint event where the saver has just saved, the file and the ledger."""

    def __init__(self, saves: Path, ledger: Path) -> None:
        self.saves, self.ledger = saves, ledger
        self.seen: list[tuple[int, list[int]]] = []  # (checkpoint batch, the batches on disk when it appeared)

    def _look(self, state: State) -> None:
        saver = next(callback for callback in state.callbacks if isinstance(callback, CheckpointSaver))
        batch = int(state.timestamp.batch)
        if saver.last_checkpoint_batch == state.timestamp.batch and (not self.seen or self.seen[-1][0] != batch):
            assert list(self.saves.glob(f'ep*-ba{batch}-rank0.pt')), 'the saver has written its file'
            self.seen.append((batch, _on_disk(self.ledger)))

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        self._look(state)

    def epoch_checkpoint(self, state: State, logger: Logger) -> None:
        self._look(state)


class AtEpochEnd(Callback):
    """After the ledger: the batches on disk at each epoch's end."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.seen: list[tuple[int, list[int]]] = []

    def epoch_end(self, state: State, logger: Logger) -> None:
        self.seen.append((int(state.timestamp.batch), _on_disk(self.ledger)))


@pytest.mark.parametrize('order', ['ledger_then_saver', 'saver_then_ledger'])
def test_every_batch_of_a_checkpoint_is_on_disk_when_its_file_appears(tmp_path: Path, order: str) -> None:
    """The Trainer's own saver (appended after the ledger), or a saver given before the ledger, saving every 3
    batches and at the end; a callback after both reads the ledger file when the checkpoint file is there, and
    one after the ledger at each epoch's end."""
    saves, ledger = tmp_path / 'run', tmp_path / 'ledger'
    probe, epochs = AfterTheSave(saves, ledger), AtEpochEnd(ledger)
    if order == 'ledger_then_saver':
        callbacks: list[Callback] = [SamplerSync(), SampleLedger(str(ledger)), epochs]
        saving: dict[str, Any] = {'save_folder': str(saves), 'save_interval': '3ba'}
    else:
        saver = CheckpointSaver(folder=str(saves), save_interval='3ba')
        callbacks, saving = [SamplerSync(), saver, SampleLedger(str(ledger)), epochs], {}
    trainer = make_trainer(_loader(), max_duration='2ep', callbacks=callbacks, **saving)
    trainer.state.callbacks.append(probe)  # after the saver the Trainer appends to the callbacks it is given
    assert trainer.state.callbacks.index(probe) > max(trainer.state.callbacks.index(callback)
                                                      for callback in trainer.state.callbacks
                                                      if isinstance(callback, (CheckpointSaver, SampleLedger)))
    trainer.fit()
    assert [batch for batch, _ in probe.seen] == [3, 6, 9, 12, 15, 16]
    for batch, on_disk in probe.seen:
        assert on_disk == list(range(1, batch + 1)), f'checkpoint of batch {batch}: the ledger held {on_disk}'
    assert [(batch, on_disk[-1]) for batch, on_disk in epochs.seen] == [(8, 8), (16, 16)]
    assert _on_disk(ledger) == list(range(1, 17))


class HeldBack(Callback):
    """After the ledger, without a saver: the batches on disk after each batch."""

    def __init__(self, ledger: Path) -> None:
        self.ledger = ledger
        self.lag: list[int] = []

    def batch_end(self, state: State, logger: Logger) -> None:
        on_disk = _on_disk(self.ledger) if self.ledger.exists() else []
        self.lag.append(int(state.timestamp.batch) - (on_disk[-1] if on_disk else 0))


def test_records_are_written_once_the_memory_holds_enough_of_them(tmp_path: Path, monkeypatch) -> None:
    """No checkpoint: records are written when more than the hold (here 20 indices) are held, and at epoch end."""
    monkeypatch.setattr(_ledger_recorder, 'HOLD', 20)
    ledger = tmp_path / 'ledger'
    held = HeldBack(ledger)
    make_trainer(_loader(), max_duration='1ep', callbacks=[SamplerSync(), SampleLedger(str(ledger)), held]).fit()
    assert held.lag == [1, 2, 0, 1, 2, 0, 1, 2]  # 24 indices > 20 written at batches 3 and 6
    assert _on_disk(ledger) == list(range(1, 9))


class SavesByHand(Callback):
    """After the ledger: ``Trainer.save_checkpoint`` at the end of batch 2, and the batches on disk just after."""

    def __init__(self, path: Path, ledger: Path) -> None:
        self.path, self.ledger = path, ledger
        self.trainer: Any = None
        self.seen: list[int] | None = None

    def batch_end(self, state: State, logger: Logger) -> None:
        if int(state.timestamp.batch) == 2:
            assert _on_disk(self.ledger) == [], 'held in memory until a checkpoint'
            self.trainer.save_checkpoint(str(self.path))
            self.seen = _on_disk(self.ledger)


def test_a_checkpoint_the_trainer_is_asked_for_holds_its_batches_in_the_ledger(tmp_path: Path) -> None:
    """``Trainer.save_checkpoint`` by hand, between the saver's checkpoints: the ledger is written first."""
    ledger = tmp_path / 'ledger'
    by_hand = SavesByHand(tmp_path / 'by-hand.pt', ledger)
    trainer = make_trainer(_loader(), max_duration='4ba', save_folder=str(tmp_path / 'run'), save_interval='1ep',
                           callbacks=[SamplerSync(), SampleLedger(str(ledger)), by_hand])
    by_hand.trainer = trainer
    trainer.fit()
    assert by_hand.seen == [1, 2] and (tmp_path / 'by-hand.pt').exists()


@given(batches=st.lists(st.one_of(st.lists(st.integers(0, 2**32 - 1), max_size=9),
                                  st.lists(st.integers(0, 2**32 - 1), max_size=9).map(np.array)), max_size=6),
       dataset_len=st.sampled_from([2**32, 2**40]))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=40)
def test_records_written_in_one_go_are_the_bytes_of_one_write_each(tmp_path_factory, batches: list[Any],
                                                                    dataset_len: int) -> None:
    folder = tmp_path_factory.mktemp('ledger')
    header = {'rank': 0, 'dataset_len': dataset_len}
    one, many = LedgerWriter(folder / 'one.bin', header), LedgerWriter(folder / 'many.bin', header)
    records = [(batch % 3, batch, indices) for batch, indices in enumerate(batches, 1)]
    for record in records:
        one.append(*record)
    many.extend(records)
    one.close()
    many.close()
    assert (folder / 'one.bin').read_bytes() == (folder / 'many.bin').read_bytes()


def test_a_fits_ledger_is_the_bytes_of_one_write_per_record(tmp_path: Path) -> None:
    """The file a fit leaves, rewritten one record per write with its header: the same bytes."""
    ledger = tmp_path / 'ledger'
    make_trainer(_loader(), max_duration='2ep', callbacks=[SamplerSync(), SampleLedger(str(ledger))],
                 save_folder=str(tmp_path / 'run'), save_interval='5ba').fit()
    (path,) = ledger.glob('*.bin')
    read = read_ledger(path)
    writer = LedgerWriter(tmp_path / 'again.bin', read.header)
    for record in read.records:
        writer.append(record.epoch, record.batch, record.indices.tolist())
    writer.close()
    assert (tmp_path / 'again.bin').read_bytes() == path.read_bytes()


#: 320 training samples (of 400) at batch 64: 5 batches per epoch; checkpoints at batches 3 and 5 (the end).
COMMON = ['yamls/digits.yaml', 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=1ep',
          'save_interval=3ba', 'run_name=synthetic', 'callbacks.sample_ledger={}']


def test_a_run_killed_after_a_checkpoint_has_its_batches_in_the_ledger_and_audits_once_resumed(
        tmp_path: Path, capsys) -> None:
    """SIGKILL at the end of batch 4 (tests/support/fault_train.py), after the checkpoint of batch 3: the ledger
    holds batches 1-3, every batch that checkpoint holds (batch 4, in none, was in memory). Resumed from it,
    every sample of the epoch is trained exactly once, nothing superseded."""
    folder = tmp_path / 'run'
    killed = subprocess.run([sys.executable, 'tests/support/fault_train.py', str(tmp_path), '0', '4', *COMMON,
                             f'save_folder={folder}'], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-3000:]
    assert sorted(path.name for path in folder.glob('*.pt')) == ['ep0-ba3-rank0.pt', 'latest-rank0.pt']
    assert _on_disk(folder / 'ledger') == [1, 2, 3]
    (killed_file,) = (folder / 'ledger').glob('*.bin')
    assert read_ledger(killed_file).torn is None

    assert train_main([*COMMON, f'save_folder={folder}', f'load_path={folder}/ep0-ba3-rank0.pt']) == 0
    report = audit_folder(folder / 'ledger')
    assert [(epoch.exactly_once, epoch.repeated, epoch.missing, epoch.status) for epoch in report.epochs] == [
        (320, 0, 0, 'ok')]
    assert report.superseded == 0 and [attempt['start_batch'] for attempt in report.attempts] == [0, 3]
    assert sorted(_on_disk(folder / 'ledger')) == [1, 2, 3, 4, 5]


@given(batches=st.lists(st.tuples(st.lists(st.integers(-3, 12), max_size=5), st.booleans()), max_size=6),
       within=st.sampled_from([10, 2**32, 2**40]))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None, max_examples=60)
def test_a_checked_write_names_the_first_batch_outside_the_dataset_and_writes_nothing(
        tmp_path_factory, batches: list[tuple[list[int], bool]], within: int) -> None:
    """``extend(records, within=...)``: lists (checked on their packed bytes) and numpy arrays alike."""
    from composer_sampling.ledger_format import OutsideDatasetError

    path = tmp_path_factory.mktemp('ledger') / 'rank0.bin'
    writer = LedgerWriter(path, {'rank': 0, 'dataset_len': within})
    size = path.stat().st_size
    records = [(0, batch, np.array(indices, dtype=np.int64) if as_array else indices)
               for batch, (indices, as_array) in enumerate(batches, 1)]
    bad = [(batch, next(i for i in indices if not 0 <= i < within))
           for batch, (indices, _) in enumerate(batches, 1) if any(not 0 <= i < within for i in indices)]
    if bad:
        with pytest.raises(OutsideDatasetError) as raised:
            writer.extend(records, within=within)
        assert (raised.value.batch, raised.value.index) == bad[0]
        assert path.stat().st_size == size, 'nothing written'
    else:
        writer.extend(records, within=within)
        assert [(r.batch, r.indices.tolist()) for r in read_ledger(path).records] == [
            (batch, list(indices)) for _, batch, indices in records]
    writer.close()


class Anywhere(torch.utils.data.Dataset):
    """The synthetic dataset read at any index (modulo its length): a sampler's bad index reaches the ledger."""

    def __init__(self, size: int) -> None:
        self.data = synthetic(size)

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        return self.data[index % len(self.data)]


class Yields(torch.utils.data.Sampler):
    def __init__(self, indices: list[int]) -> None:
        self.indices = indices

    def __len__(self) -> int:
        return len(self.indices)

    def __iter__(self) -> Any:
        return iter(self.indices)


@pytest.mark.parametrize('bad_batch', [1, 3])
def test_an_index_outside_the_dataset_stops_the_run_before_a_checkpoint_holds_its_batch(tmp_path: Path,
                                                                                       bad_batch: int) -> None:
    """The first batch of a fit is checked at once; a later one when the records are written, here in the save of
    batch 4, which stops before its file is written. The message is the one a check at the batch gave, and the
    batches before it are in the ledger, as when each was written at its end."""
    indices = list(range(40))
    indices[8 * (bad_batch - 1) + 5] = 40  # one past the end
    loader = DataLoader(Anywhere(40), batch_size=8, sampler=Yields(indices))
    trainer = make_trainer(loader, max_duration='1ep', save_folder=str(tmp_path / 'run'), save_interval='4ba',
                           callbacks=[SampleLedger(str(tmp_path / 'ledger'))])
    with pytest.raises(ValueError, match=re.escape(
            f'SampleLedger(index_key=None) read sample index 40 in batch {bad_batch}, outside [0, 40) for a dataset '
            'of 40 samples: index_key must select the dataset indices')):
        trainer.fit()
    assert int(trainer.state.timestamp.batch) == (1 if bad_batch == 1 else 4)
    assert not list((tmp_path / 'run').glob('ep*-ba4-rank0.pt')), 'the checkpoint of batch 4 was not written'
    assert _on_disk(tmp_path / 'ledger') == list(range(1, bad_batch))
