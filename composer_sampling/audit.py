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

import os
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from composer_sampling._fingerprint import Fingerprint
from composer_sampling._proofs.counting import SaturatingCounts
from composer_sampling._proofs.coverage import exactly_once_problem, saturated_coverage
from composer_sampling._proofs.progress import Progress, current_progress
from composer_sampling.ledger_format import (
    MAGIC,
    LedgerError,
    LedgerHeader,
    LedgerScan,
    not_a_file,
    object_store_scheme,
    open_ledger,
    read_records,
    scan_ledger,
    verify_ledger,
)

__all__ = ['Attempt', 'AuditReport', 'EpochAudit', 'audit_folder', 'choose_lineage']

#: What a folder without a ledger lacks, and how to get one.
_NO_LEDGER_HELP = ('a run with the sample_ledger callback writes its files there once its first batch has trained; '
                   'a run without that callback records nothing: add it and train again (in a recipe, '
                   'callbacks: {sample_ledger: {}} beside a save_folder; in Python, SampleLedger() in the '
                   "Trainer's callbacks)")
_SAME_FOR_A_RUN = ('lineage', 'dataset_len', 'sub_epochs_per_epoch')


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
    ranks: dict[int, LedgerScan]
    schedules: dict[int, tuple[LedgerScan, int]] = field(default_factory=dict)  # epoch -> its schedule record

    @property
    def root(self) -> int:
        """The batch its lineage started at: 0, or where a fit on another dataloader began a new one."""
        return int(self.header.get('lineage_start', 0))

    @property
    def last_batch(self) -> int:
        """The furthest batch any of its ranks recorded (its start batch if none)."""
        reached = [scan.last_batch(0) for scan in self.ranks.values() if scan.trained.any()]
        return max(reached, default=self.start_batch)


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
    skipped: list[str] = field(default_factory=list)
    lineage_id: str = ''
    chosen: str = ''
    other_lineages: list[dict[str, Any]] = field(default_factory=list)
    #: The train dataset's fingerprint that the counted attempts share, as text; empty for ledgers without one.
    data_fingerprint: str = ''

    @property
    def violations(self) -> list[EpochAudit]:
        return [epoch for epoch in self.epochs if epoch.status == 'VIOLATION']


def _ledger_files(folder: Path, skipped: list[str]) -> list[Path]:
    """The ledger files of ``folder/ledger`` if it has any, else of ``folder``; other ``*.bin`` files are not ours.

    A ``*.bin`` that is not a regular file (a directory, a dangling symbolic link, a
    FIFO) is never opened: ``skipped`` gets a line naming it.
    """
    if not folder.is_dir():
        raise LedgerError(f'{folder} is not a folder')
    for place in (folder / 'ledger', folder):
        files = []
        for path in sorted(place.glob('*.bin')) if place.is_dir() else []:
            kind = not_a_file(path)
            if kind is not None:
                skipped.append(f'{path} is {kind}, not a ledger file')
            elif _is_ledger(path):
                files.append(path)
        if files:
            return files
    also = f' (skipped: {"; ".join(skipped)})' if skipped else ''
    raise LedgerError(f'nothing recorded: no ledger file in {folder} or {folder / "ledger"}{also}; {_NO_LEDGER_HELP}')


def _is_ledger(path: Path) -> bool:
    with open_ledger(path) as file:
        return file.read(len(MAGIC)) == MAGIC


def _load(folder: Path, torn: list[str], scans: list[LedgerScan],
          skipped: list[str]) -> dict[str, dict[str, Attempt]]:
    """Every attempt in the folder, per lineage, from the ledgers' headers and record headers (``scans`` gets each
    file's scan). The attempts of one lineage must agree on the dataset; lineages may differ."""
    lineages: dict[str, dict[str, Attempt]] = {}
    reference: dict[str, tuple[dict[str, Any], Path]] = {}
    files = _ledger_files(folder, skipped)
    progress = current_progress()
    for number, path in enumerate(files):
        progress.update(number, len(files), 'scanned {done} of {total} ledger files')
        scan = scan_ledger(path)
        scans.append(scan)
        header = scan.header
        typed = LedgerHeader.read(path, header)
        if scan.torn:
            torn.append(scan.torn)
        first, first_path = reference.setdefault(header['lineage'], (header, path))
        for key in _SAME_FOR_A_RUN:
            if header[key] != first[key]:
                raise LedgerError(
                    f'ledgers of different runs are mixed: {first_path.name} has {key}={first[key]!r}, '
                    f'{path.name} has {key}={header[key]!r}, both of lineage {header["lineage"]}; audit one run '
                    'folder at a time')
        attempts = lineages.setdefault(header['lineage'], {})
        origin = typed.resumed_from or {}
        attempt = attempts.setdefault(typed.attempt, Attempt(
            typed.attempt, origin.get('attempt'), origin.get('batch'), typed.start_batch,
            typed.world_size, typed.replication, 0.0, typed.started, header, {}))
        if header['rank'] in attempt.ranks:
            raise LedgerError(f'attempt {attempt.attempt} has two ledgers for rank {header["rank"]}; {path.name} '
                              'is the second')
        attempt.ranks[header['rank']] = scan
        attempt.schedules.update((int(scan.epochs[k]), (scan, int(k))) for k in np.flatnonzero(~scan.trained))
        attempt.ended = max(attempt.ended, path.stat().st_mtime)
    for attempts in lineages.values():
        for attempt in attempts.values():
            if len(attempt.ranks) != attempt.world_size or sorted(attempt.ranks) != list(range(attempt.world_size)):
                raise LedgerError(f'attempt {attempt.attempt} ran on {attempt.world_size} ranks but only the ledgers '
                                  f'of ranks {sorted(attempt.ranks)} are in {folder}')
    return lineages


def _pick_lineage(folder: Path, lineages: dict[str, dict[str, Attempt]], wanted: str | None,
                  final_checkpoint: FinalCheckpoint | None = None) -> tuple[str, str]:
    """Which lineage to count, and why: the one asked for, else the final checkpoint's, else the one written last.

    The final checkpoint is ``latest-rank0.pt`` of the save folder (``folder``, or the
    folder above a ``ledger/`` folder), else its ``*.pt`` written last; its
    ``SampleLedger`` state names the lineage. It is read with ``weights_only=True``, as
    ``load_path`` is checked. Without one, the lineage whose ledger files were written
    last among those that trained a batch is counted, and the report says so.
    ``final_checkpoint`` finds the checkpoint elsewhere (an object store) instead.
    """
    if wanted is not None:
        found = [lineage for lineage in lineages if lineage == wanted] or [
            lineage for lineage in lineages if lineage.startswith(wanted)]
        if len(found) != 1:
            raise LedgerError(f'--lineage {wanted} names {"no" if not found else "more than one"} lineage of the '
                              f'ledgers in {folder}; they are: {", ".join(sorted(lineages))}')
        return found[0], 'as asked'
    if len(lineages) == 1:  # nothing to choose: no checkpoint is read
        return next(iter(lineages)), 'the only lineage in the folder'
    checkpoint, lineage, why = _checkpoint_lineage(*(final_checkpoint or _local_final_checkpoint)(folder))
    if lineage in lineages:
        return lineage, f'the lineage of the final checkpoint {checkpoint}'
    trained = [lineage for lineage, attempts in lineages.items()
               if any(scan.trained.any() for attempt in attempts.values() for scan in attempt.ranks.values())]
    last = max(trained or lineages, key=lambda lineage: max((a.ended, a.started) for a in lineages[lineage].values()))
    if checkpoint is not None and lineage is not None:
        why = f'the final checkpoint {checkpoint} names lineage {lineage}, whose ledgers are not here'
    return last, f'the lineage whose ledger files were written last ({why})'


#: Finds a run's final checkpoint: the local file to read and the name to show, or None and what was found instead.
FinalCheckpoint = Callable[[Path], tuple[Path | None, str]]


def _local_final_checkpoint(folder: Path) -> tuple[Path | None, str]:
    """``latest-rank0.pt`` of the save folder (``folder``, or the one above ``ledger/``), else its newest ``*.pt``."""
    for place in ((folder.parent, folder) if folder.name == 'ledger' else (folder,)):
        latest = place / 'latest-rank0.pt'
        checkpoints = [latest] if latest.is_file() else sorted(
            (path for path in place.glob('*.pt') if path.is_file()), key=lambda path: path.stat().st_mtime)
        if checkpoints:
            return checkpoints[-1], str(checkpoints[-1])
    return None, f'no checkpoint in {folder}'


def _checkpoint_lineage(checkpoint: Path | None, shown: str) -> tuple[str | None, str | None, str]:
    """The checkpoint's name, the lineage its SampleLedger state names, and what was found if none.

    Read with ``weights_only=True``, as ``load_path`` is checked.
    """
    if checkpoint is None:
        return None, None, shown
    from composer_sampling._checkpoint.envelope import payload_of
    from composer_sampling._checkpoint.safe_load import CheckpointError, load_checked_checkpoint

    try:
        loaded = load_checked_checkpoint(checkpoint, shown_as=shown)
    except CheckpointError as error:
        return shown, None, f'the final checkpoint cannot be read: {error}'
    state = payload_of((loaded['state'].get('callbacks') or {}).get('SampleLedger')) or {}
    lineage = state.get('lineage')
    if not isinstance(lineage, str):
        return shown, None, f'the final checkpoint {shown} holds no SampleLedger state'
    return shown, lineage, ''


def _ancestors(attempt: Attempt, attempts: dict[str, Attempt]) -> list[str]:
    """The ids of ``attempt``'s ancestors present in ``attempts``, nearest first."""
    seen: list[str] = []
    current = attempt
    while current.resumed_from in attempts and current.start_batch > current.root:
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
    while path[-1].start_batch > path[-1].root:
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
        for rank, scan in sorted(parent.ranks.items()):
            reached = scan.last_batch(parent.start_batch)
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


def audit_folder(folder: str | os.PathLike[str], lineage: str | None = None) -> AuditReport:
    """Account for every epoch of the run whose ledgers are in ``folder`` (or ``folder/ledger``).

    ``folder`` may be a URI (``s3://bucket/run``, or any scheme Composer has an
    object store for): its ledger files are downloaded into a temporary folder and
    audited there (:func:`_audit_uri`), with boto3 directly for ``s3://`` and through
    Composer's object store for the other schemes. When no ledger is there, the error
    names the first folders below the URI that hold ledger files.

    A folder may hold several lineages (a rerun with ``save_overwrite``, a later fit on
    another dataloader): one is counted, ``lineage`` (an id or a prefix of one) or
    else the final checkpoint's (:func:`_pick_lineage`), and the others are listed.

    Two passes, in memory bounded by the dataset (``dataset_len / 4`` bytes) and the
    number of records, not by the samples recorded: the lineage is chosen from the
    files' headers and record headers, then its records are counted epoch by epoch
    and every other record is checked. A damaged ledger is refused as a whole read
    of each file refuses it: on any error, the files are checked in order first.
    Both passes report their progress to the command's progress line on a terminal
    (:func:`~composer_sampling._proofs.progress.showing_progress`); called from
    Python, they draw nothing.
    """
    text = os.fspath(folder)
    scheme = object_store_scheme(text)
    if scheme is not None and f'{scheme}://' in text:
        return _audit_uri(text, lineage)
    if scheme is not None:
        raise LedgerError(f'{text} looks like a URI ({scheme}:) whose "//" was lost (a path joined as a local one?): '
                          f'give it as {scheme}://..., or give a local folder whose name ends in a colon by its '
                          'absolute path')
    return _audit_local(Path(text), lineage)


def _audit_local(folder: Path, lineage: str | None, final_checkpoint: FinalCheckpoint | None = None) -> AuditReport:
    torn: list[str] = []
    scans: list[LedgerScan] = []
    skipped: list[str] = []
    try:
        return _audit(folder, lineage, torn, scans, skipped, final_checkpoint)
    except LedgerError:
        for scan in scans:
            verify_ledger(scan)  # damage is named before what it may have caused, file by file
        raise


def _is_ledger_object(name: str) -> bool:
    """A ``*.bin`` object in the save folder or its ``ledger/`` folder (where a local audit looks)."""
    parts = name.split('/')
    return name.endswith('.bin') and (len(parts) == 1 or (len(parts) == 2 and parts[0] == 'ledger'))


_CHECKPOINT_BATCH = re.compile(r'ba(\d+)')
#: How many folders below an audited URI that hold ledger files its error names.
_FOLDERS_SHOWN = 10


def _folders_below(shown: str, names: list[str]) -> str:
    """The run folders below ``shown`` whose ledger files ``names`` lists (the first few, sorted), as an error names
    them; empty when there are none.

    Example:
        >>> _folders_below('s3://b', ['runs/a/ledger/a1-rank0.bin', 'runs/b/x1-rank0.bin', 'runs/a/ep1.pt'])
        ': the folders below it that hold ledger files are s3://b/runs/a, s3://b/runs/b; audit one of them'
    """
    folders = set()
    for name in names:
        parts = name.split('/')
        if name.endswith('.bin') and len(parts) > 1:
            run = parts[:-2] if parts[-2] == 'ledger' else parts[:-1]
            if run:
                folders.add('/'.join(run))
    if not folders:
        return ''
    listed = sorted(folders)
    more = f' and {len(listed) - _FOLDERS_SHOWN} more' if len(listed) > _FOLDERS_SHOWN else ''
    return (f': the folders below it that hold ledger files are '
            f'{", ".join(f"{shown}/{folder}" for folder in listed[:_FOLDERS_SHOWN])}{more}; audit one of them')


def _audit_uri(uri: str, lineage: str | None) -> AuditReport:
    """Audit the run at ``uri``: its ledger objects downloaded (:func:`~composer_sampling._stores.remote.reader_of`),
    then as a folder.

    Only the ledger files are downloaded, and the final checkpoint only when the
    folder holds more than one lineage: ``latest-rank0.pt`` (Composer uploads it as
    ``latest-rank0.pt.symlink``, which Composer's ``get_file`` follows), else the
    ``*.pt`` of the save folder with the highest batch in its name (an object store
    gives no write times). Errors name the URI, not the temporary folder.
    """
    from composer_sampling._stores.remote import RemoteError, download_file, download_folder, reader_of, split_uri

    shown = uri.rstrip('/')
    with tempfile.TemporaryDirectory(prefix='composer-sampling-audit-') as temporary:
        local = Path(temporary)
        try:
            names = download_folder(uri, local, _is_ledger_object)
        except RemoteError as error:
            raise LedgerError(str(error)) from None
        if not any(_is_ledger_object(name) for name in names):
            raise LedgerError(f'nothing recorded: no ledger file in {shown} or {shown}/ledger (it holds '
                              f'{len(names)} other objects){_folders_below(shown, names) or "; " + _NO_LEDGER_HELP}')

        def final_checkpoint(_: Path) -> tuple[Path | None, str]:
            top = {name for name in names if '/' not in name}
            latest = next((name for name in ('latest-rank0.pt', 'latest-rank0.pt.symlink') if name in top), None)
            candidates = sorted((name for name in top if name.endswith('.pt')),
                                key=lambda name: [int(n) for n in _CHECKPOINT_BATCH.findall(name)] or [-1])
            chosen = latest.removesuffix('.symlink') if latest else (candidates[-1] if candidates else None)
            if chosen is None:
                return None, f'no checkpoint in {shown}'
            target = local / 'final-checkpoint' / 'checkpoint.pt'
            target.parent.mkdir()
            key = split_uri(uri)[2].rstrip('/')
            try:
                download_file(reader_of(uri), f'{key}/{chosen}' if key else chosen, str(target),
                              f'{shown}/{chosen}')
            except RemoteError as error:
                return None, f'the final checkpoint cannot be downloaded: {error}'
            return target, f'{shown}/{chosen}'

        try:
            return _audit_local(local, lineage, final_checkpoint)
        except LedgerError as error:
            raise LedgerError(str(error).replace(temporary, shown)) from None


def _audit(folder: Path, wanted: str | None, torn: list[str], scans: list[LedgerScan],
           skipped: list[str], final_checkpoint: FinalCheckpoint | None) -> AuditReport:
    lineages = _load(folder, torn, scans, skipped)
    chosen, why = _pick_lineage(folder, lineages, wanted, final_checkpoint)
    attempts = lineages[chosen]
    path, tie = choose_lineage(attempts)
    if not any(scan.trained.any() for attempt in path for scan in attempt.ranks.values()):
        raise LedgerError(f'nothing recorded: the ledgers in {folder} hold no trained batch (attempts '
                          f'{", ".join(attempt.attempt for attempt in path)} stopped before their first)')
    fingerprint = _one_dataset(chosen, path)
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
            counted += [(number, attempt, rank, scan, scan.trained & (scan.batches <= cut))
                        for rank, scan in sorted(attempt.ranks.items())]
    report = AuditReport(first['dataset_len'], rows, 0, [attempt.attempt for attempt in path], tie=tie, torn=torn,
                         skipped=skipped, lineage_id=chosen, chosen=why, data_fingerprint=fingerprint,
                         other_lineages=[_lineage_row(key, lineages[key]) for key in _by_start(lineages)
                                         if key != chosen])
    report.superseded = sum(int(scan.counts[scan.trained & (scan.batches > cut)].sum())
                            for attempt, cut in zip(path, cuts, strict=True) for scan in attempt.ranks.values())
    for attempt in off_path:
        report.abandoned.append({
            'attempt': attempt.attempt,
            'origin': (f'resumed from {attempt.resumed_from} at batch {attempt.start_batch}' if attempt.resumed_from
                       else f'started at batch {attempt.start_batch}'),
            'trained': _span(attempt.start_batch, attempt.last_batch),
            'samples': sum(int(scan.counts[scan.trained].sum()) for scan in attempt.ranks.values()),
        })
    _count_epochs(report, path, _per_epoch(counted, first['sub_epochs_per_epoch'], report.per_rank), scans)
    return report


def _by_start(lineages: dict[str, dict[str, Attempt]]) -> list[str]:
    return sorted(lineages, key=lambda key: min(attempt.started for attempt in lineages[key].values()))


def _lineage_row(lineage: str, attempts: dict[str, Attempt]) -> dict[str, Any]:
    """A lineage not counted, as the report lists it."""
    scans = [scan for attempt in attempts.values() for scan in attempt.ranks.values()]
    first = next(iter(attempts.values())).header
    return {'lineage': lineage, 'attempts': len(attempts), 'run_name': first.get('run_name'),
            'dataset_len': first['dataset_len'], 'last_batch': max(a.last_batch for a in attempts.values()),
            'samples': sum(int(scan.counts[scan.trained].sum()) for scan in scans)}


def _per_epoch(counted: list[tuple[int, Attempt, int, LedgerScan, np.ndarray]], sub_epochs: int,
               per_rank: dict[tuple[int, int, int], int]) -> dict[int, list[tuple[LedgerScan, np.ndarray]]]:
    """Per data epoch, the counted records of each file; ``per_rank`` gets the samples per (attempt, rank, epoch)."""
    per_epoch: dict[int, list[tuple[LedgerScan, np.ndarray]]] = {}
    for number, attempt, rank, scan, chosen in counted:
        if rank % attempt.replication:
            continue  # a replication group records its samples once per rank: count its first rank only
        records = np.flatnonzero(chosen)
        epochs = scan.epochs[records] // sub_epochs
        values, firsts = np.unique(epochs, return_index=True)
        for epoch in values[np.argsort(firsts, kind='stable')].tolist():
            mine = records[epochs == epoch]
            key = (number, rank, epoch)
            per_rank[key] = per_rank.get(key, 0) + int(scan.counts[mine].sum())
            per_epoch.setdefault(epoch, []).append((scan, mine))
    return per_epoch


def _count_epochs(report: AuditReport, path: list[Attempt], per_epoch: dict[int, list[tuple[LedgerScan, np.ndarray]]],
                  scans: list[LedgerScan]) -> None:
    """Count each epoch's records into one saturating structure, then check every record not counted."""
    padded = max(attempt.header.get('padded', 0) for attempt in path)
    dropped = max(attempt.header.get('dropped', 0) for attempt in path)
    final_epoch = max(per_epoch, default=-1)
    schedules = {epoch: schedule for attempt in path for epoch, schedule in attempt.schedules.items()}
    read = {id(scan): np.zeros(scan.offsets.size, dtype=bool) for scan in scans}
    progress = _ReadProgress(current_progress(), sum(int(scan.counts.sum()) for scan in scans))
    counts = None
    if set(per_epoch) - set(schedules):
        _check_memory(report.dataset_len, path[-1])
        counts = SaturatingCounts(report.dataset_len)
    for epoch in sorted(per_epoch):
        if epoch in schedules:
            # counted exactly, in memory the size of the epoch: its samples may repeat any number of times by design
            scan, record = schedules[epoch]
            schedule = _gathered([(scan, np.array([record]))], read, progress)
            trained = _gathered(per_epoch[epoch], read, progress)
            report.epochs.append(_against_schedule(epoch, trained, schedule, epoch == final_epoch, path[-1]))
            continue
        assert counts is not None
        counts.planes.fill(0)
        total = 0
        for indices in _chunks(per_epoch[epoch], read, progress):
            counts.add(indices)
            total += indices.size
        coverage = saturated_coverage(counts.at_least_once(), counts.at_least_twice(), total, report.dataset_len)
        if exactly_once_problem(coverage, epoch, padded, dropped, complete=epoch != final_epoch):
            status = 'VIOLATION'
        elif coverage.missing > dropped:
            status = f'partial (run ended at batch {path[-1].last_batch})'
        else:
            status = 'ok'
        report.epochs.append(EpochAudit(epoch, coverage.trained, coverage.exactly_once, coverage.repeated,
                                        coverage.missing, status))
    for _ in _chunks([(scan, np.flatnonzero(~read[id(scan)])) for scan in scans], read, progress):
        pass  # every record is checked, counted or not, as a whole read of the file would


def _one_dataset(lineage: str, path: list[Attempt]) -> str:
    """The dataset fingerprint the counted attempts share, as text (empty when none recorded one); attempts that
    trained on different data are refused, naming both: their samples are not one dataset's to count."""
    recorded = [(attempt, Fingerprint(fields['digest'], fields['source'], fields['covers_content']))
                for attempt in path if (fields := attempt.header.get('data_fingerprint')) is not None]
    if not recorded:
        return ''
    first, before = recorded[0]
    for attempt, fingerprint in recorded[1:]:
        if fingerprint.digest != before.digest:
            raise LedgerError(
                f'the attempts of lineage {lineage} trained on different data: attempt {first.attempt} on dataset '
                f'{before}, attempt {attempt.attempt} on {fingerprint} (a resume onto changed data, which '
                'SamplerSync allowed with allow_data_change); audit counts the samples of one dataset, so it cannot '
                'count this lineage as one')
    return str(before)


def _check_memory(dataset_len: int, last: Attempt) -> None:
    """Refuse, before allocating, to count an epoch in more memory than the machine has (2 bits per sample)."""
    needed = 2 * -(-dataset_len // 8)
    try:
        total = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')
    except (AttributeError, ValueError, OSError):
        return  # the machine does not say: numpy's own MemoryError will
    if needed > total:
        files = [str(scan.path) for _, scan in sorted(last.ranks.items())]
        shown = ', '.join(files[:3]) + (f' and {len(files) - 3} more' if len(files) > 3 else '')
        raise LedgerError(f'dataset_len={dataset_len} in the headers of attempt {last.attempt}: audit counts an '
                          f'epoch in 2 bits per sample, {needed} bytes, more than the {total} bytes of memory of this '
                          f'machine; audit on a larger machine, or check the header of {shown}, which may be forged or '
                          'damaged')


class _ReadProgress:
    """The second pass's progress: the recorded samples read so far, of every record of every file scanned."""

    def __init__(self, line: Progress, total: int) -> None:
        self.line, self.total, self.done = line, total, 0

    def add(self, samples: int) -> None:
        self.done += samples
        self.line.update(self.done, self.total, 'counted {done} of {total} recorded samples')


def _gathered(files: list[tuple[LedgerScan, np.ndarray]], read: dict[int, np.ndarray],
              progress: _ReadProgress) -> np.ndarray:
    return np.concatenate([np.empty(0, np.int64), *_chunks(files, read, progress)]).astype(np.int64)


def _chunks(files: list[tuple[LedgerScan, np.ndarray]], read: dict[int, np.ndarray],
            progress: _ReadProgress) -> Iterator[np.ndarray]:
    """The indices of the given records of each file, checked, in chunks; ``read`` marks them, ``progress`` counts
    them once they are used."""
    for scan, records in files:
        if records.size:
            with open_ledger(scan.path) as file:
                for indices in read_records(file, scan, records):
                    yield indices
                    progress.add(indices.size)
            read[id(scan)][records] = True


def _against_schedule(epoch: int, trained: np.ndarray, schedule: np.ndarray, final: bool, last: Attempt) -> EpochAudit:
    """An epoch whose samples repeat or are left out by design: what was trained against what was meant to be.

    ``repeated`` counts trainings beyond the schedule's, ``missing`` samples the schedule has and the run did not
    train.
    """
    samples = np.unique(np.concatenate([trained, schedule]))  # memory the size of the epoch, not of the largest index
    got = np.bincount(np.searchsorted(samples, trained), minlength=samples.size)
    meant = np.bincount(np.searchsorted(samples, schedule), minlength=samples.size)
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
