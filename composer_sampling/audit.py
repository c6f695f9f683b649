"""Read every rank's sample ledger of a run and account for each epoch's coverage.

A run may consist of several attempts: one that crashed, others resumed from a
checkpoint at batch ``B``, perhaps a side branch resumed from an early checkpoint
and abandoned. Each attempt's header names the attempt and batch it resumed from
(the checkpoint carries the id of the attempt that wrote it), so the attempts form
a tree. The audit counts one path of it, the *lineage*: from the attempt that
trained furthest back to the fresh start, each ancestor's records up to the batch
its child resumed from. Records past that batch were superseded (lost with a crash
or trained again by the resume); attempts off the path are abandoned branches and
are listed, not counted. No clock decides anything, except between branches that
reached the same last batch and descend from one another in neither direction: then
the one whose ledger files were written last (modification time) is counted.

Example:
    >>> import tempfile, pathlib
    >>> from composer_sampling.ledger_format import LedgerWriter
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> header = dict(lineage='l', attempt='a', resumed_from=None, started=0.0, rank=0, world_size=1, start_batch=0,
    ...               start_epoch=0, dataset_len=3, padded=0, dropped=0, sub_epochs_per_epoch=1, run_name='r')
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

from composer_sampling.coverage import count_coverage, exactly_once_problem
from composer_sampling.ledger_format import MAGIC, PLAN_BATCH, LedgerError, LedgerRecord, read_ledger

__all__ = ['Attempt', 'AuditReport', 'EpochAudit', 'audit_folder', 'choose_lineage']

_SAME_FOR_A_RUN = ('lineage', 'dataset_len', 'sub_epochs_per_epoch')
_INTS = {'rank': 0, 'world_size': 1, 'start_batch': 0, 'dataset_len': 0, 'sub_epochs_per_epoch': 1}


@dataclass(frozen=True)
class EpochAudit:
    """Coverage of one pass over the data in the lineage."""

    epoch: int
    trained: int
    exactly_once: int
    repeated: int
    missing: int
    status: str


@dataclass(eq=False)
class Attempt:
    """One fit of the run: its header fields, and per rank the batches it recorded."""

    attempt: str
    resumed_from: str | None
    resumed_at: int | None
    start_batch: int
    world_size: int
    replication: int
    ended: float
    started: float
    header: dict[str, Any]
    ranks: dict[int, list[LedgerRecord]]
    plans: dict[int, np.ndarray] = field(default_factory=dict)  # epoch -> the samples it is meant to train

    @property
    def last_batch(self) -> int:
        """The furthest batch any of its ranks recorded (its start batch if none)."""
        return max((r.batch for records in self.ranks.values() for r in records), default=self.start_batch)


@dataclass
class AuditReport:
    """The lineage's coverage per epoch, the attempts (counted or not), and per (attempt, rank, epoch) the samples.

    ``attempts`` rows come lineage first (from the fresh start), then the abandoned
    branches; ``per_rank`` keys use a row's position in ``attempts``.
    """

    dataset_len: int
    attempts: list[dict[str, Any]]
    superseded: int
    lineage: list[str] = field(default_factory=list)
    abandoned: list[dict[str, Any]] = field(default_factory=list)
    tie: str | None = None
    epochs: list[EpochAudit] = field(default_factory=list)
    per_rank: dict[tuple[int, int, int], int] = field(default_factory=dict)
    torn: list[str] = field(default_factory=list)

    @property
    def violations(self) -> list[EpochAudit]:
        return [epoch for epoch in self.epochs if epoch.status == 'VIOLATION']


def _ledger_files(folder: Path) -> list[Path]:
    """The ledger files of ``folder/ledger`` if it has any, else of ``folder``; other ``*.bin`` files are not ours."""
    if not folder.is_dir():
        raise LedgerError(f'{folder} is not a folder')
    for place in (folder / 'ledger', folder):
        files = [path for path in sorted(place.glob('*.bin')) if _is_ledger(path)] if place.is_dir() else []
        if files:
            return files
    raise LedgerError(f'nothing recorded: no ledger file in {folder} or {folder / "ledger"}; a run with the '
                      'sample_ledger callback writes its files there once its first batch has trained')


def _is_ledger(path: Path) -> bool:
    with path.open('rb') as file:
        return file.read(len(MAGIC)) == MAGIC


def _check_header(path: Path, header: dict[str, Any]) -> None:
    missing = [key for key in ('attempt', 'started', *_INTS, *_SAME_FOR_A_RUN) if key not in header]
    if missing:
        raise LedgerError(f'{path} has no {sorted(set(missing))} in its header')
    for key, least in _INTS.items():
        value = header[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise LedgerError(f'{path} has {key}={value!r} in its header; it must be an int >= {least}')
    if isinstance(header['started'], bool) or not isinstance(header['started'], (int, float)):
        raise LedgerError(f'{path} has started={header["started"]!r} in its header; it must be a time in seconds')
    if header['rank'] >= header['world_size']:
        raise LedgerError(f'{path} has rank={header["rank"]} in its header, outside [0, {header["world_size"]}) '
                          'for its world_size')
    origin = header.get('resumed_from')
    if origin is not None and not (isinstance(origin, dict) and isinstance(origin.get('attempt'), str)
                                   and isinstance(origin.get('batch'), int)):
        raise LedgerError(f'{path} has resumed_from={origin!r} in its header; it must be None or '
                          "{'attempt': str, 'batch': int}")


def _load(folder: Path, torn: list[str]) -> dict[str, Attempt]:
    attempts: dict[str, Attempt] = {}
    reference: tuple[dict[str, Any], Path] | None = None
    for path in _ledger_files(folder):
        ledger = read_ledger(path)
        header = ledger.header
        _check_header(path, header)
        if ledger.torn:
            torn.append(ledger.torn)
        if reference is None:
            reference = (header, path)
        for key in _SAME_FOR_A_RUN:
            if header[key] != reference[0][key]:
                raise LedgerError(
                    f'ledgers of different runs are mixed: {reference[1].name} has {key}={reference[0][key]!r}, '
                    f'{path.name} has {key}={header[key]!r}; audit one run folder at a time',
                )
        origin = header.get('resumed_from') or {}
        attempt = attempts.setdefault(header['attempt'], Attempt(
            header['attempt'], origin.get('attempt'), origin.get('batch'), header['start_batch'],
            header['world_size'], header.get('replication', 1), 0.0, header['started'], header, {}))
        if header['rank'] in attempt.ranks:
            raise LedgerError(f'attempt {attempt.attempt} has two ledgers for rank {header["rank"]}; {path.name} '
                              'is the second')
        attempt.ranks[header['rank']] = ledger.trained
        attempt.plans.update((record.epoch, record.indices) for record in ledger.records if record.batch == PLAN_BATCH)
        attempt.ended = max(attempt.ended, path.stat().st_mtime)
    for attempt in attempts.values():
        if sorted(attempt.ranks) != list(range(attempt.world_size)):
            raise LedgerError(f'attempt {attempt.attempt} ran on {attempt.world_size} ranks but only the ledgers of '
                              f'ranks {sorted(attempt.ranks)} are in {folder}')
    return attempts


def _ancestors(attempt: Attempt, attempts: dict[str, Attempt]) -> list[str]:
    """The ids of ``attempt``'s ancestors present in ``attempts``, nearest first."""
    seen, current = [], attempt
    while current.resumed_from in attempts and current.start_batch > 0:
        if current.resumed_from in seen or current.resumed_from == attempt.attempt:
            raise LedgerError(f'the attempts {seen} resume from each other in a cycle; the ledger headers are wrong')
        seen.append(current.resumed_from)
        current = attempts[current.resumed_from]
    return seen


def choose_lineage(attempts: dict[str, Attempt]) -> tuple[list[Attempt], str | None]:
    """The counted path, from the fresh start to the attempt that trained furthest, and a note on a broken tie.

    The furthest attempt is the one whose last recorded batch is greatest; among
    several, an ancestor gives way to its descendant, and of unrelated branches the
    one whose files were written last wins. Raises :class:`LedgerError` when the
    path has a gap: an attempt started at batch ``B > 0`` from a checkpoint that
    names no attempt, or from one whose ledgers are missing or end before ``B``.
    """
    furthest = max(attempt.last_batch for attempt in attempts.values())
    tied = [attempt for attempt in attempts.values() if attempt.last_batch == furthest]
    below = {ancestor for attempt in tied for ancestor in _ancestors(attempt, attempts)}
    tied = [attempt for attempt in tied if attempt.attempt not in below]
    tip = max(tied, key=lambda attempt: (attempt.ended, attempt.started, attempt.attempt))
    tie = None
    if len(tied) > 1:
        others = ', '.join(attempt.attempt for attempt in tied if attempt is not tip)
        tie = (f'branches {tip.attempt} and {others} both reached batch {furthest}; counted {tip.attempt}, whose '
               'ledger files were written last')
    path = [tip]
    while path[-1].start_batch > 0:
        child = path[-1]
        if child.resumed_from is None:
            raise LedgerError(
                f'attempt {child.attempt} started at batch {child.start_batch} from a checkpoint that names no '
                'attempt (saved without SampleLedger or by an older composer-sampling): the batches before it '
                'cannot be accounted for')
        parent = attempts.get(child.resumed_from)
        if parent is None:
            raise LedgerError(f'attempt {child.attempt} resumed at batch {child.start_batch} from attempt '
                              f'{child.resumed_from}, whose ledgers are not in this folder; audit the folder that '
                              'holds every attempt of the run')
        for rank, records in sorted(parent.ranks.items()):
            reached = max((r.batch for r in records), default=parent.start_batch)
            if reached < child.start_batch:
                raise LedgerError(f'attempt {child.attempt} resumed at batch {child.start_batch} from attempt '
                                  f'{parent.attempt}, whose rank {rank} ledger ends at batch {reached}: the records '
                                  'in between are missing')
        if any(parent is attempt for attempt in path):
            raise LedgerError(f'attempt {parent.attempt} resumes from its own descendant; the ledger headers are wrong')
        path.append(parent)
    return path[::-1], tie


def _span(first: int, last: int) -> str:
    return f'batches {first + 1}-{last}' if last > first else 'no batch'


def audit_folder(folder: Path) -> AuditReport:
    """Account for every epoch of the run whose ledgers are in ``folder`` (or ``folder/ledger``)."""
    torn: list[str] = []
    attempts = _load(Path(folder), torn)
    path, tie = choose_lineage(attempts)
    if not any(records for attempt in path for records in attempt.ranks.values()):
        raise LedgerError(f'nothing recorded: the ledgers in {folder} hold no trained batch (attempts '
                          f'{", ".join(attempt.attempt for attempt in path)} stopped before their first)')
    # Each lineage attempt counts its records up to the batch the next one resumed from.
    cuts = [child.start_batch for child in path[1:]] + [path[-1].last_batch]
    off_path = sorted((a for a in attempts.values() if all(a is not b for b in path)),
                      key=lambda a: (a.start_batch, a.attempt))
    first = path[0].header
    rows, counted = [], []
    for number, (attempt, cut) in enumerate(zip(path + off_path, cuts + [None] * len(off_path), strict=True)):
        origin = '-' if attempt.resumed_from is None else f'{attempt.resumed_from} at batch {attempt.resumed_at}'
        rows.append({'attempt': attempt.attempt, 'run_name': attempt.header.get('run_name'),
                     'world_size': attempt.world_size, 'resumed_from': origin, 'start_batch': attempt.start_batch,
                     'last_batch': attempt.last_batch,
                     'counted': 'abandoned' if cut is None else _span(attempt.start_batch, cut)})
        if cut is not None:
            counted += [(number, attempt, rank, record) for rank, records in sorted(attempt.ranks.items())
                        for record in records if record.batch <= cut]
    report = AuditReport(first['dataset_len'], rows, 0, [attempt.attempt for attempt in path], tie=tie, torn=torn)
    report.superseded = sum(record.indices.size for attempt, cut in zip(path, cuts, strict=True)
                            for records in attempt.ranks.values() for record in records if record.batch > cut)
    for attempt in off_path:
        report.abandoned.append({
            'attempt': attempt.attempt,
            'origin': (f'resumed from {attempt.resumed_from} at batch {attempt.start_batch}' if attempt.resumed_from
                       else f'started at batch {attempt.start_batch}'),
            'trained': _span(attempt.start_batch, attempt.last_batch),
            'samples': sum(r.indices.size for records in attempt.ranks.values() for r in records),
        })
    padded = max(attempt.header.get('padded', 0) for attempt in path)
    dropped = max(attempt.header.get('dropped', 0) for attempt in path)
    per_epoch: dict[int, list[np.ndarray]] = collections.defaultdict(list)
    for number, attempt, rank, record in counted:
        if rank % attempt.replication:
            continue  # a replication group records its samples once per rank: count its first rank only
        epoch = record.epoch // first['sub_epochs_per_epoch']
        per_epoch[epoch].append(record.indices)
        key = (number, rank, epoch)
        report.per_rank[key] = report.per_rank.get(key, 0) + int(record.indices.size)
    final_epoch = max(per_epoch, default=-1)
    plans = {epoch: plan for attempt in path for epoch, plan in attempt.plans.items()}
    for epoch in sorted(per_epoch):
        trained = np.concatenate(per_epoch[epoch])
        if epoch in plans:
            report.epochs.append(_against_plan(epoch, trained, plans[epoch], epoch == final_epoch, path[-1]))
            continue
        coverage = count_coverage(trained, report.dataset_len)
        if exactly_once_problem(coverage, epoch, padded, dropped, complete=epoch != final_epoch):
            status = 'VIOLATION'
        elif coverage.missing > dropped:
            status = f'partial (run ended at batch {path[-1].last_batch})'
        else:
            status = 'ok'
        report.epochs.append(EpochAudit(epoch, coverage.trained, coverage.exactly_once, coverage.repeated,
                                        coverage.missing, status))
    return report


def _against_plan(epoch: int, trained: np.ndarray, plan: np.ndarray, final: bool, last: Attempt) -> EpochAudit:
    """An epoch whose samples repeat or are left out by design: what was trained against what was meant to be.

    ``repeated`` counts trainings beyond the plan's, ``missing`` samples the plan has and the run did not train.
    """
    size = int(max(trained.max(initial=-1), plan.max(initial=-1))) + 1
    got, meant = np.bincount(trained, minlength=size), np.bincount(plan, minlength=size)
    repeated = int(np.maximum(got - meant, 0).sum())
    missing = int(np.maximum(meant - got, 0).sum())
    exactly_once = int(np.count_nonzero((got == meant) & (meant > 0)))
    if repeated:
        status = 'VIOLATION'
    elif missing:
        status = f'partial (run ended at batch {last.last_batch})' if final else 'VIOLATION'
    else:
        status = 'ok'
    return EpochAudit(epoch, int(trained.size), exactly_once, repeated, missing, status)
