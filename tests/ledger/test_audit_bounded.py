"""``audit`` in two passes: the same numbers as counting every record in memory, and every record still checked."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling import ledger_format
from composer_sampling.audit import audit_folder
from composer_sampling.ledger_format import LedgerError, LedgerWriter, read_ledger, scan_ledger

SIZE = 12


def _write(folder: Path, attempt: str, records: list[tuple[int, int, list[int]]], rank: int = 0,
           world_size: int = 1, **header: object) -> Path:
    path = folder / f'{attempt}-rank{rank}.bin'
    writer = LedgerWriter(path, {'lineage': 'one', 'attempt': attempt, 'resumed_from': None, 'started': 1.0,
                                 'rank': rank, 'world_size': world_size, 'start_batch': 0, 'start_epoch': 0,
                                 'dataset_len': SIZE, 'padded': 0, 'dropped': 0, 'sub_epochs_per_epoch': 1,
                                 **header})
    for epoch, batch, indices in records:
        writer.append(epoch, batch, indices)
    writer.close()
    return path


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, SIZE - 1), max_size=9), min_size=1, max_size=12), st.integers(40, 200),
       st.integers(1, 3))
def test_counting_in_blocks_agrees_with_counting_every_record(tmp_path_factory: pytest.TempPathFactory,
                                                              batches: list[list[int]], block: int,
                                                              per_epoch: int) -> None:
    folder = tmp_path_factory.mktemp('run')
    _write(folder, 'a1', [(k // per_epoch, k + 1, indices) for k, indices in enumerate(batches)])
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger_format, '_RUN_BYTES', block)  # records read a few at a time, or one alone
        report = audit_folder(folder)
    for epoch in report.epochs:
        trained = np.concatenate([np.array(indices, np.int64) for k, indices in enumerate(batches)
                                  if k // per_epoch == epoch.epoch])
        counts = np.bincount(trained, minlength=SIZE)
        assert (epoch.trained, epoch.exactly_once, epoch.repeated, epoch.missing) == (
            trained.size, np.count_nonzero(counts == 1), trained.size - np.count_nonzero(counts),
            np.count_nonzero(counts == 0))


def test_the_scan_finds_the_records_read_ledger_reads(tmp_path: Path) -> None:
    path = _write(tmp_path, 'a1', [(0, 1, [0, 1]), (0, -1, [3, 3, 4]), (1, 2, []), (1, 3, [11])])
    with path.open('ab') as file:
        file.write(b'\x01\x00')  # a torn last record
    scan, ledger = scan_ledger(path), read_ledger(path)
    assert scan.batches.tolist() == [record.batch for record in ledger.records]
    assert scan.counts.tolist() == [record.indices.size for record in ledger.records]
    assert scan.torn == ledger.torn is not None


def test_a_damaged_record_off_the_lineage_is_still_refused(tmp_path: Path) -> None:
    _write(tmp_path, 'a1', [(0, 1, list(range(6))), (0, 2, list(range(6, 12))), (1, 3, list(range(6)))])
    abandoned = _write(tmp_path, 'b1', [(0, 2, [6, 7, 8])], start_batch=1, resumed_from={'attempt': 'a1', 'batch': 1})
    report = audit_folder(tmp_path)
    assert [row['attempt'] for row in report.abandoned] == ['b1'] and not report.violations
    data = bytearray(abandoned.read_bytes())
    data[-6] ^= 0x01
    abandoned.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=r'b1-rank0\.bin is corrupted: the record at byte'):
        audit_folder(tmp_path)


def test_damage_is_named_before_the_gap_it_causes(tmp_path: Path) -> None:
    # a1's record is damaged and b1 resumes after a batch a1 never reached: the damage is what the audit names
    first = _write(tmp_path, 'a1', [(0, 1, [0, 1])])
    _write(tmp_path, 'b1', [(0, 3, [2, 3])], start_batch=2, resumed_from={'attempt': 'a1', 'batch': 2})
    with pytest.raises(LedgerError, match='whose rank 0 ledger ends at batch 1'):
        audit_folder(tmp_path)
    data = bytearray(first.read_bytes())
    data[-6] ^= 0x01
    first.write_bytes(bytes(data))
    with pytest.raises(LedgerError, match=r'a1-rank0\.bin is corrupted'):
        audit_folder(tmp_path)


@st.composite
def damaged_ledgers(draw: st.DrawFn) -> tuple[int, list[list[int]], int, tuple[int, int] | None]:
    """A dataset size, batches of indices (repeats, gaps, several samples of a byte), the samples per epoch, and
    perhaps damage: a record and a byte past its header (an index or its checksum) to flip."""
    size = draw(st.integers(1, 200))
    pool = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=5))  # repeats of 3 and more are common
    batches = draw(st.lists(st.lists(st.one_of(st.sampled_from(pool), st.integers(0, size - 1)), max_size=60),
                            min_size=1, max_size=10))
    damage = None
    if draw(st.booleans()):
        record = draw(st.integers(0, len(batches) - 1))
        damage = (record, draw(st.integers(0, 4 * len(batches[record]) + 3)))
    return size, batches, draw(st.integers(1, 3)), damage


@settings(max_examples=150, deadline=None)
@given(damaged_ledgers(), st.integers(30, 1000))
def test_the_counts_of_generated_ledgers_agree_with_bincount_and_damage_is_named(
        tmp_path_factory: pytest.TempPathFactory, ledger: tuple[int, list[list[int]], int, tuple[int, int] | None],
        block: int) -> None:
    size, batches, per_epoch, damage = ledger
    folder = tmp_path_factory.mktemp('run')
    path = _write(folder, 'a1', [(k // per_epoch, k + 1, indices) for k, indices in enumerate(batches)],
                  dataset_len=size)
    if damage is not None:
        record, at = damage
        offset = scan_ledger(path).offsets[record]
        data = bytearray(path.read_bytes())
        data[offset + 16 + at] ^= 0x10  # past the record's epoch, batch and count
        path.write_bytes(bytes(data))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ledger_format, '_RUN_BYTES', block)  # runs of a few records, or one alone
        if damage is not None:
            with pytest.raises(LedgerError) as raised:
                audit_folder(folder)
            assert str(raised.value) == f'{path} is corrupted: the record at byte {offset} fails its checksum'
            return
        report = audit_folder(folder)
    for epoch in report.epochs:
        trained = np.array([i for k, indices in enumerate(batches) if k // per_epoch == epoch.epoch
                            for i in indices], dtype=np.int64)
        counts = np.bincount(trained, minlength=size)
        assert (epoch.trained, epoch.exactly_once, epoch.repeated, epoch.missing) == (
            trained.size, np.count_nonzero(counts == 1), trained.size - np.count_nonzero(counts),
            np.count_nonzero(counts == 0))
