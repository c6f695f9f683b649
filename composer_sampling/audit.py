"""Read every rank's sample ledger of a run and account for each epoch's coverage.

A run may consist of several attempts: one that crashed, others resumed from a
checkpoint at batch ``B``. Attempts are taken in the order they started; each one
supersedes the records of earlier attempts after its start batch (those batches
were trained, then lost with the crash). What remains is the lineage that the
final model was trained on.

Example:
    >>> import tempfile, pathlib
    >>> from composer_sampling.ledger import LedgerWriter
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> header = dict(lineage='l', attempt='a', started=0.0, rank=0, world_size=1, start_batch=0, start_epoch=0,
    ...               dataset_len=3, padded=0, dropped=0, sub_epochs_per_epoch=1, run_name='r')
    >>> writer = LedgerWriter(folder / 'a-rank0.bin', header)
    >>> writer.append(epoch=0, batch=1, indices=[2, 0, 1])
    >>> [(e.epoch, e.exactly_once, e.missing) for e in audit_folder(folder).epochs]
    [(0, 3, 0)]
"""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from composer_sampling.ledger import LedgerError, LedgerRecord, read_ledger
from composer_sampling.summary import count_coverage

__all__ = ['AuditReport', 'EpochAudit', 'audit_folder']

_SAME_FOR_A_RUN = ('lineage', 'dataset_len', 'sub_epochs_per_epoch')


@dataclass(frozen=True)
class EpochAudit:
    """Coverage of one pass over the data in the surviving lineage."""

    epoch: int
    trained: int
    exactly_once: int
    repeated: int
    missing: int
    status: str


@dataclass
class AuditReport:
    """The lineage's coverage per epoch, and per (attempt, rank, epoch) the samples trained."""

    dataset_len: int
    attempts: list[dict[str, Any]]
    superseded: int
    epochs: list[EpochAudit] = field(default_factory=list)
    per_rank: dict[tuple[int, int, int], int] = field(default_factory=dict)

    @property
    def violations(self) -> list[EpochAudit]:
        return [epoch for epoch in self.epochs if epoch.status == 'VIOLATION']


def _ledger_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        raise LedgerError(f'{folder} is not a folder')
    files = sorted(folder.glob('*.bin')) or sorted((folder / 'ledger').glob('*.bin'))
    if not files:
        raise LedgerError(f'no ledger files (*.bin) in {folder} or {folder / "ledger"}; run with the sample_ledger '
                          'callback')
    return files


def _load(folder: Path) -> dict[str, dict[int, tuple[dict[str, Any], list[LedgerRecord], Path]]]:
    attempts: dict[str, dict[int, tuple[dict[str, Any], list[LedgerRecord], Path]]] = collections.defaultdict(dict)
    reference: tuple[dict[str, Any], Path] | None = None
    for path in _ledger_files(folder):
        header, records = read_ledger(path)
        missing = [key for key in ('attempt', 'rank', 'world_size', 'start_batch', 'started', *_SAME_FOR_A_RUN)
                   if key not in header]
        if missing:
            raise LedgerError(f'{path} has no {missing} in its header')
        if reference is None:
            reference = (header, path)
        for key in _SAME_FOR_A_RUN:
            if header[key] != reference[0][key]:
                raise LedgerError(
                    f'ledgers of different runs are mixed: {reference[1].name} has {key}={reference[0][key]!r}, '
                    f'{path.name} has {key}={header[key]!r}; audit one run folder at a time',
                )
        attempts[header['attempt']][header['rank']] = (header, records, path)
    for attempt, ranks in attempts.items():
        world_size = next(iter(ranks.values()))[0]['world_size']
        if sorted(ranks) != list(range(world_size)):
            raise LedgerError(f'attempt {attempt} ran on {world_size} ranks but only the ledgers of ranks '
                              f'{sorted(ranks)} are in {folder}')
    return attempts


def audit_folder(folder: Path) -> AuditReport:
    """Account for every epoch of the run whose ledgers are in ``folder`` (or ``folder/ledger``)."""
    # Each attempt with the header its ranks share (checked in _load), in the order the attempts started.
    attempts = sorted(((next(iter(ranks.values()))[0], ranks) for ranks in _load(Path(folder)).values()),
                      key=lambda attempt: attempt[0]['started'])
    lineage: list[tuple[int, int, LedgerRecord]] = []
    superseded = 0
    summaries = []
    for number, (header, ranks) in enumerate(attempts):
        start = header['start_batch']
        kept = [entry for entry in lineage if entry[2].batch <= start]
        superseded += sum(entry[2].indices.size for entry in lineage) - sum(entry[2].indices.size for entry in kept)
        lineage = kept + [(number, rank, record) for rank, (_, records, _) in sorted(ranks.items())
                          for record in records]
        reached = max((r.batch for _, records, _ in ranks.values() for r in records), default=start)
        summaries.append({'attempt': header['attempt'], 'run_name': header.get('run_name'),
                          'world_size': header['world_size'], 'start_batch': start, 'last_batch': reached})
    first = attempts[0][0]
    report = AuditReport(first['dataset_len'], summaries, superseded)
    padded = max(header.get('padded', 0) for header, _ in attempts)
    dropped = max(header.get('dropped', 0) for header, _ in attempts)
    per_epoch: dict[int, list[np.ndarray]] = collections.defaultdict(list)
    last_batch = max((record.batch for _, _, record in lineage), default=0)
    replication = {number: header.get('replication', 1) for number, (header, _) in enumerate(attempts)}
    for number, rank, record in lineage:
        if rank % replication[number]:
            continue  # a replication group records its samples once per rank: count its first rank only
        epoch = record.epoch // first['sub_epochs_per_epoch']
        per_epoch[epoch].append(record.indices)
        key = (number, rank, epoch)
        report.per_rank[key] = report.per_rank.get(key, 0) + int(record.indices.size)
    final_epoch = max(per_epoch, default=-1)
    for epoch in sorted(per_epoch):
        coverage = count_coverage(np.concatenate(per_epoch[epoch]), report.dataset_len)
        if coverage.repeated > padded or (coverage.missing > dropped and epoch != final_epoch):
            status = 'VIOLATION'
        elif coverage.missing > dropped:
            status = f'partial (run ended at batch {last_batch})'
        else:
            status = 'ok'
        report.epochs.append(EpochAudit(epoch, coverage.trained, coverage.exactly_once, coverage.repeated,
                                        coverage.missing, status))
    return report
