"""composer-sampling audit: coverage per epoch from every rank's ledger, resumed runs included."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

from composer_sampling import ResumableDistributedSampler, SampleLedger
from composer_sampling.audit import audit_folder
from composer_sampling.cli import main
from composer_sampling.ledger import LedgerWriter

from helpers import checkpoint, synthetic, train_with_ledger

SIZE = 50  # 7 batches of 8 an epoch


def loader() -> DataLoader:
    dataset = synthetic(SIZE)
    return DataLoader(dataset, batch_size=8, sampler=ResumableDistributedSampler(dataset))


def _crashed_and_resumed(tmp_path: Path) -> Path:
    """A run that reached batch 9 (epoch 1), 'crashed', and was resumed from its checkpoint at batch 5."""
    ledger, checkpoints = tmp_path / 'ledger', tmp_path / 'checkpoints'
    train_with_ledger(loader(), '9ba', folder=checkpoints, callbacks_extra=[SampleLedger(str(ledger))])
    train_with_ledger(loader(), '3ep', load=checkpoint(checkpoints, 5), callbacks_extra=[SampleLedger(str(ledger))])
    return ledger


def test_a_resumed_run_supersedes_what_the_crash_lost(tmp_path: Path, capsys) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    report = audit_folder(ledger)
    assert [(e.epoch, e.exactly_once, e.repeated, e.missing, e.status) for e in report.epochs] == [
        (epoch, SIZE, 0, 0, 'ok') for epoch in range(3)]
    assert report.superseded == 8 + 2 + 8 + 8  # batches 6 and 7 (the short one) of epoch 0, 8 and 9 of epoch 1
    assert [a['start_batch'] for a in report.attempts] == [0, 5]
    assert main(['audit', str(tmp_path)]) == 0  # finds ledger/ under the save folder
    out = capsys.readouterr().out
    assert '26 samples trained after the checkpoint a resume started from were superseded' in out


def test_without_superseding_the_same_ledgers_would_show_repeats(tmp_path: Path) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    # Rewrite the resumed attempt as if it had started from scratch: nothing is superseded any more.
    (resumed,) = [path for path in ledger.glob('*.bin') if b'"start_batch": 5' in path.read_bytes()[:400]]
    resumed.write_bytes(resumed.read_bytes().replace(b'"start_batch": 5', b'"start_batch": 9'))
    report = audit_folder(ledger)
    assert report.epochs[0].repeated == 26 - 16 and report.epochs[0].status == 'VIOLATION'


def test_plot(tmp_path: Path) -> None:
    ledger = _crashed_and_resumed(tmp_path)
    assert main(['audit', str(ledger), '--plot', str(tmp_path / 'coverage.png')]) == 0
    assert (tmp_path / 'coverage.png').read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'


def _header(**overrides) -> dict:
    return {'lineage': 'one', 'attempt': 'a1', 'started': 1.0, 'rank': 0, 'world_size': 1, 'start_batch': 0,
            'start_epoch': 0, 'dataset_len': 4, 'padded': 0, 'dropped': 0, 'sub_epochs_per_epoch': 1, **overrides}


def test_a_violation_exits_1(tmp_path: Path, capsys) -> None:
    writer = LedgerWriter(tmp_path / 'a1-rank0.bin', _header())
    writer.append(0, 1, [0, 1, 1, 2])  # 1 twice, 3 never
    writer.append(1, 2, [0, 1, 2, 3])
    writer.close()
    assert main(['audit', str(tmp_path)]) == 1
    assert 'FAILED guarantee: exactly once per epoch: epoch 0 repeats 1 and misses 1 samples' in capsys.readouterr().err


@pytest.mark.parametrize(
    ('setup', 'message'),
    [
        ('missing', 'is not a folder'),
        ('empty', 'no ledger files'),
        ('mixed', "ledgers of different runs are mixed: a1-rank0.bin has lineage='one', b1-rank0.bin has "
                  "lineage='two'"),
        ('rank', r'attempt a1 ran on 2 ranks but only the ledgers of ranks \[0\]'),
        ('truncated', 'is truncated'),
        ('corrupted', 'is corrupted'),
    ],
)
def test_bad_input_exits_2(tmp_path: Path, capsys, setup: str, message: str) -> None:
    folder = tmp_path / 'run'
    if setup != 'missing':
        folder.mkdir()
    if setup in ('mixed', 'truncated', 'corrupted'):
        writer = LedgerWriter(folder / 'a1-rank0.bin', _header())
        writer.append(0, 1, [0, 1, 2, 3])
        writer.close()
    if setup == 'mixed':
        LedgerWriter(folder / 'b1-rank0.bin', _header(lineage='two', attempt='b1')).close()
    if setup == 'rank':
        LedgerWriter(folder / 'a1-rank0.bin', _header(world_size=2)).close()
    if setup == 'truncated':
        path = folder / 'a1-rank0.bin'
        path.write_bytes(path.read_bytes()[:-3])
    if setup == 'corrupted':
        path = folder / 'a1-rank0.bin'
        data = bytearray(path.read_bytes())
        data[-10] ^= 0x01
        path.write_bytes(bytes(data))
    assert main(['audit', str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.startswith('error: ') and len(err.splitlines()) == 1
    assert re.search(message, err), err


def test_unknown_arguments_are_refused(capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(['audit', 'folder', 'extra=1'])
    assert exit_info.value.code == 2
