"""The sample ledger file: per rank and attempt, which sample indices every trained batch held.

A file is ``MAGIC``, a length-prefixed JSON header followed by the CRC32 of its
length and text, then one record per trained batch: ``(epoch: u32, batch: i64,
count: u32)``, ``count`` indices and a CRC32 of the record. Format version 3
stores the indices in the narrowest width the dataset length allows (header
``index_bytes``: 4 below ``2**32``, else 8) and may hold *schedule* records (``batch``
of ``-1``): the samples an epoch is meant to train, with their multiplicity,
written by rank 0 for a dataset whose epochs repeat or leave out samples by design
(mosaicml-streaming's ``epoch_size``, ``proportion``, ``repeat``, ``choose``).
Version 2 files (8-byte indices, no schedule records) are read as they are.

A write (one record, or the many :meth:`LedgerWriter.extend` is given) is appended
whole or not at all (a short write is completed, a failed one undone). A process
killed while writing can still leave a *torn* last record: reading stops there,
reports it, and returns the records before it, as a write-ahead log recovers. A
torn record is only ever the last bytes of a file: a record whose count runs past
the end while a whole record (checksum holding) ends the file after it, or that is
whole itself read with the count its bytes give it, has a damaged count, and the
file is corrupted at that record. Damage anywhere else (a header or record failing
its checksum) is an error too, the first damaged record named. When the header
names a ``dataset_len``, every index must lie in ``[0, dataset_len)``. Nothing is allocated from a header or record
field before it is checked against the file's size, and a path that is not a
regular file (a FIFO) is refused, never waited on (:func:`open_ledger`).

Version 1 files (no header checksum) are refused, not read: without the checksum
an edited header (a changed ``dataset_len``, ``start_batch`` or ``rank``) would
change the verdict unnoticed. Newer versions are refused too.

The header's fields are those of :class:`LedgerHeader`: the callback writes one with
:meth:`LedgerHeader.to_dict`, and ``audit`` checks each file's header with
:meth:`LedgerHeader.read`.

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / 'rank0.bin'
    >>> writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 5})
    >>> writer.append(epoch=0, batch=1, indices=[4, 2])
    >>> ledger = read_ledger(path)
    >>> ledger.header['rank'], ledger.records[0].batch, ledger.records[0].indices.tolist(), ledger.torn
    (0, 1, [4, 2], None)
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import sys
import zlib
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from composer_sampling._checkpoint.envelope import valid_version
from composer_sampling._fingerprint import Fingerprint
from composer_sampling._validate import first_outside, is_integer, is_real

__all__ = ['LEDGER_VERSION', 'MAGIC', 'SCHEDULE_BATCH', 'Ledger', 'LedgerError', 'LedgerHeader', 'LedgerRecord',
           'LedgerScan', 'LedgerWriter', 'OutsideDatasetError', 'index_bytes', 'not_a_file', 'object_store_scheme',
           'open_ledger', 'read_ledger', 'read_records', 'scan_ledger', 'verify_ledger']

MAGIC = b'CSLEDGER'
LEDGER_VERSION = 3  # 3: narrow indices, schedule records; 2 added the header checksum (still read); 1 is refused
_OLDEST = 2
#: The ``batch`` of a schedule record: the samples an epoch is meant to train.
SCHEDULE_BATCH = -1
_LENGTH = struct.Struct('<I')
_RECORD = struct.Struct('<IqI')
_CRC = struct.Struct('<I')
_BLOCK = 1 << 16  # bytes read at a time while scanning the headers of large records
_SCAN_BYTES = 1 << 20  # bytes read at a time while scanning the headers of records of at most _BLOCK bytes
_RUN_BYTES = 1 << 24  # bytes of neighbouring records read at a time


class LedgerError(ValueError):
    """A ledger file that cannot be read: the message names the file and what is wrong."""


#: A URI's scheme and the slashes after it; one slash is what ``Path('s3://bucket')`` leaves (``s3:/bucket``).
_URI = re.compile(r'([A-Za-z][A-Za-z0-9+.-]+):(//?)')


def object_store_scheme(location: str) -> str | None:
    """The scheme of ``location`` if it names a folder in an object store, or ``None`` if it names a local folder.

    A location that starts with ``scheme://``, or with ``scheme:/`` as a Path collapses
    the two slashes, is a URI of an object store and is never read as the local folder
    ``scheme:/...``. One-letter schemes are Windows drive letters, not URIs. This answers
    where a ledger is written or read; whether Composer would download a checkpoint path
    is another question, answered by
    :func:`composer_sampling._checkpoint.safe_load.download_scheme`.

    Example:
        >>> object_store_scheme('s3://bucket/run'), object_store_scheme(str(Path('gs://bucket/run')))
        ('s3', 'gs')
        >>> object_store_scheme('runs/s3/run'), object_store_scheme('C:/runs')
        (None, None)
    """
    match = _URI.match(location)
    return match.group(1) if match else None


#: Header fields that audit needs; ``lineage`` and ``attempt`` are ids, the others numbers.
_REQUIRED = ('lineage', 'attempt', 'started', 'rank', 'world_size', 'start_batch', 'dataset_len',
             'sub_epochs_per_epoch')
#: Integer fields every header has, with the least value each may take.
_INTS = {'rank': 0, 'world_size': 1, 'start_batch': 0, 'dataset_len': 0, 'sub_epochs_per_epoch': 1}
#: Integer fields that older files may lack, with the value that they mean there, which is also their least value.
_OPTIONAL_INTS = {'replication': 1, 'padded': 0, 'dropped': 0, 'lineage_start': 0}
#: Fields that are left out of the file when they are ``None``; the others are always written.
_LEFT_OUT_WHEN_NONE = ('dataset_len', 'padded', 'dropped', 'lineage_start', 'data_fingerprint')


@dataclass(frozen=True, kw_only=True)
class LedgerHeader:
    """The header of one rank's ledger file for one attempt: the run, the rank, where the attempt starts, the dataset.

    :class:`~composer_sampling.SampleLedger` writes it and ``audit`` reads it, both through
    this class, so that the fields, the defaults of older files and the valid ranges are
    stated in one place. :class:`LedgerWriter` adds ``version`` and ``index_bytes``.

    Attributes:
        lineage: one id for every attempt of a run; checkpoints carry it.
        attempt: the id of this fit, which is also the prefix of the file name.
        resumed_from: ``{'attempt': str, 'batch': int}``, the attempt and batch that this fit
            continues from, or ``None`` for a fresh start.
        started: the time when the fit started, in seconds since the epoch.
        run_name: the Trainer's run name.
        rank: the global rank that wrote the file, in ``[0, world_size)``.
        world_size: the number of ranks of the attempt.
        start_batch: the trainer's batch count when this fit started.
        start_epoch: the trainer's epoch count when this fit started.
        source: where the indices came from: ``sampler``, ``stream`` or ``batch``.
        sub_epochs_per_epoch: how many passes over the sampler make one pass over the data.
        replication: how many ranks in a row read the same samples.
        dataset_len: every recorded index lies in ``[0, dataset_len)``; ``None`` when it is unknown.
        padded: the samples that the sampler repeats in each pass to fill the last batches.
        dropped: the samples that the sampler leaves out of each pass.
        lineage_start: the batch at which a new lineage began, for a fit on another dataloader.
        data_fingerprint: the train dataset's fingerprint as every rank agreed on it at fit start,
            ``{'digest', 'source', 'covers_content'}``; ``None`` in files written before it existed.

    Example:
        >>> header = LedgerHeader(lineage='l', attempt='a', resumed_from=None, started=0.0, run_name='r', rank=0,
        ...                       world_size=1, start_batch=0, start_epoch=0, source='sampler', dataset_len=6)
        >>> sorted(header.to_dict())[:4]
        ['attempt', 'dataset_len', 'lineage', 'rank']
        >>> LedgerHeader.read(Path('a-rank0.bin'), header.to_dict()) == header
        True
    """

    lineage: str
    attempt: str
    resumed_from: dict[str, Any] | None = None
    started: float
    run_name: str | None = None
    rank: int
    world_size: int
    start_batch: int
    start_epoch: int = 0
    source: str | None = None
    sub_epochs_per_epoch: int = 1
    replication: int = 1
    dataset_len: int | None = None
    padded: int | None = None
    dropped: int | None = None
    lineage_start: int | None = None
    data_fingerprint: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The fields as the file's JSON holds them: ``dataset_len``, ``padded``, ``dropped`` and
        ``lineage_start`` are left out when they are ``None``."""
        return {key: value for key, value in asdict(self).items()
                if value is not None or key not in _LEFT_OUT_WHEN_NONE}

    @classmethod
    def read(cls, path: Path, header: dict[str, Any]) -> LedgerHeader:
        """The header of the file ``path``, checked: :class:`LedgerError` names the first field that is wrong.

        A header that ``audit`` can count names ``dataset_len``. A field that older files
        lack gets its default here; ``audit`` counts a missing ``padded``, ``dropped`` or
        ``lineage_start`` as 0.
        """
        missing = [key for key in _REQUIRED if key not in header]
        if missing:
            raise LedgerError(f'{path} has no {sorted(set(missing))} in its header')
        for key, least in _INTS.items():
            value = header[key]
            if not is_integer(value) or value < least:
                raise LedgerError(f'{path} has {key}={value!r} in its header; it must be an int >= {least}')
        if not is_real(header['started']):
            raise LedgerError(f'{path} has started={header["started"]!r} in its header; it must be a time in seconds')
        if header['rank'] >= header['world_size']:
            raise LedgerError(f'{path} has rank={header["rank"]} in its header, outside [0, {header["world_size"]}) '
                              'for its world_size')
        for key, least in _OPTIONAL_INTS.items():
            value = header.get(key, least)
            if not is_integer(value) or value < least:
                raise LedgerError(f'{path} has {key}={value!r} in its header; it must be an int >= {least}')
        for key in ('attempt', 'lineage'):
            if not isinstance(header[key], str):
                raise LedgerError(f'{path} has {key}={header[key]!r} in its header; it must be a str (an id)')
        origin = header.get('resumed_from')
        if origin is not None and not (isinstance(origin, dict) and isinstance(origin.get('attempt'), str)
                                       and isinstance(origin.get('batch'), int)):
            raise LedgerError(f'{path} has resumed_from={origin!r} in its header; it must be None or '
                              "{'attempt': str, 'batch': int}")
        fingerprint = header.get('data_fingerprint')
        if fingerprint is not None and not (isinstance(fingerprint, dict) and Fingerprint.well_formed(
                fingerprint.get('digest'), fingerprint.get('source'), fingerprint.get('covers_content'))):
            raise LedgerError(f'{path} has data_fingerprint={fingerprint!r:.200} in its header; it must be None or '
                              "{'digest': 32 hexadecimal digits, 'source': str, 'covers_content': bool}")
        names = cls.__dataclass_fields__
        return cls(**{key: value for key, value in header.items() if key in names})


@dataclass(frozen=True)
class LedgerRecord:
    """One trained batch (or, with ``batch == SCHEDULE_BATCH``, an epoch's schedule): epoch, batch, sample indices."""

    epoch: int
    batch: int
    indices: np.ndarray


@dataclass
class Ledger:
    """A ledger file's header and records; ``torn`` says what a damaged last record lost, if one was."""

    header: dict[str, Any]
    records: list[LedgerRecord] = field(default_factory=list)
    torn: str | None = None

    @property
    def trained(self) -> list[LedgerRecord]:
        """The records of trained batches (schedule records left out)."""
        return [record for record in self.records if record.batch != SCHEDULE_BATCH]


def index_bytes(dataset_len: int | None) -> int:
    """Bytes a stored index takes: 4 when every index of the dataset fits 32 bits, else 8.

    Example:
        >>> index_bytes(1000), index_bytes(2**32 + 1), index_bytes(None)
        (4, 8, 8)
    """
    return 4 if dataset_len is not None and dataset_len <= 2**32 else 8


def _dtype(width: int) -> str:
    return '<u4' if width == 4 else '<i8'


#: The :mod:`array` type codes of ``_dtype``'s widths (C's unsigned int and long long), and whether to byteswap.
_TYPECODES = {4: 'I' if array('I').itemsize == 4 else 'L', 8: 'q'}
_SWAP = sys.byteorder == 'big'


class OutsideDatasetError(ValueError):
    """A record :meth:`LedgerWriter.extend` was to check holds an index outside ``[0, within)``; nothing was written."""

    def __init__(self, batch: int, index: int, within: int) -> None:
        super().__init__(f'the record of batch {batch} holds index {index}, outside [0, {within})')
        self.batch, self.index, self.within = batch, index, within


class LedgerWriter:
    """Appends records to a new ledger file (created with its checksummed header)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.width = index_bytes(header.get('dataset_len'))
        text = json.dumps({**header, 'version': LEDGER_VERSION, 'index_bytes': self.width}, sort_keys=True).encode()
        head = _LENGTH.pack(len(text)) + text
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._size = 0
        self._write(MAGIC + head + _CRC.pack(zlib.crc32(head)))

    def append(self, epoch: int, batch: int, indices: Any) -> None:
        """Append one record, whole: a short write is completed, a failed one undone before the error rises."""
        self.extend([(epoch, batch, indices)])

    def extend(self, records: Iterable[tuple[int, int, Any]], within: int | None = None) -> None:
        """Append ``(epoch, batch, indices)`` records in one write, all or none of them (as :meth:`append` one).

        A list of Python ints (what the sampler graph yields) is packed by :mod:`array`, the
        same bytes as numpy's; the file holds the bytes one :meth:`append` per record writes.
        With ``within``, every index of a batch's record (schedule records aside) must lie in
        ``[0, within)``, or :class:`OutsideDatasetError` names the first record that fails, before a
        byte is written; the lists are checked on their packed bytes, in one pass for all.

        Example:
            >>> import tempfile
            >>> path = Path(tempfile.mkdtemp()) / 'rank0.bin'
            >>> writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 9})
            >>> writer.extend([(0, 1, [4, 2]), (0, 2, np.array([8]))])
            >>> [record.indices.tolist() for record in read_ledger(path).records]
            [[4, 2], [8]]
        """
        records = list(records)
        datas: list[bytes] = []
        listed: list[bytes] = []  # the lists' bytes: packed exactly, their bytes are their values
        outside = False  # some record to check holds an index outside [0, within)
        for _, batch, indices in records:
            try:
                datas.append(self._packed(indices))
            except OverflowError:  # a list with a value its width cannot hold
                if within is None:
                    raise
                outside = True
                continue
            if within is not None and batch != SCHEDULE_BATCH:
                if isinstance(indices, list):
                    listed.append(datas[-1])
                elif first_outside(np.asarray(indices), within) is not None:
                    outside = True
        if listed and not outside:
            values = np.frombuffer(b''.join(listed), _dtype(self.width))
            outside = bool(values.size) and (values.min() < 0 or values.max() >= int(within or 0))
        if outside:
            assert within is not None, 'only a write with within checks'
            for _, batch, indices in records:
                if batch != SCHEDULE_BATCH:
                    _check_within(batch, indices, within)  # raises at the first record outside
        if len(datas) != len(records):  # within was wider than the header's dataset_len
            raise OverflowError(f'an index does not fit the {self.width} bytes an index takes in {self.path}')
        parts: list[bytes] = []
        for (epoch, batch, _), data in zip(records, datas, strict=True):
            head = _RECORD.pack(epoch, batch, len(data) // self.width)
            parts += (head, data, _CRC.pack(zlib.crc32(data, zlib.crc32(head))))
        if parts:
            self._write(b''.join(parts))

    def _packed(self, indices: Any) -> bytes:
        if isinstance(indices, list):
            values = array(_TYPECODES[self.width], indices)
            if _SWAP:
                values.byteswap()
            return values.tobytes()
        return np.asarray(indices, dtype=_dtype(self.width)).tobytes()

    def _write(self, data: bytes) -> None:
        start, done, view = self._size, 0, memoryview(data)
        try:
            while done < len(data):
                written = os.write(self._fd, view[done:])
                if written <= 0:
                    raise OSError(f'no byte of the record could be written to {self.path}')
                done += written
        except OSError:
            os.ftruncate(self._fd, start)  # no partial record stays behind
            raise
        self._size = start + done

    def close(self) -> None:
        os.close(self._fd)


def _check_within(batch: int, indices: Any, within: int) -> None:
    where = first_outside(indices, within)
    if where is not None:
        raise OutsideDatasetError(batch, int(indices[where]), within)


def not_a_file(path: Path) -> str | None:
    """What ``path`` is when it is not a regular file (``a directory``, ``a FIFO``...), or None for a regular file.

    Follows symbolic links, as reading does: a dangling one is ``a dangling symbolic link``.

    Example:
        >>> import tempfile
        >>> not_a_file(Path(tempfile.mkdtemp())), not_a_file(Path(tempfile.mkdtemp()) / 'absent.bin')
        ('a directory', 'missing')
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return 'a dangling symbolic link' if os.path.islink(path) else 'missing'
    except OSError as error:
        return f'unreadable ({error.strerror})'
    if stat.S_ISREG(mode):
        return None
    kinds = ((stat.S_ISDIR, 'a directory'), (stat.S_ISFIFO, 'a FIFO'), (stat.S_ISSOCK, 'a socket'),
             (stat.S_ISCHR, 'a character device'), (stat.S_ISBLK, 'a block device'))
    return next((name for test, name in kinds if test(mode)), 'not a regular file')


def open_ledger(path: Path) -> BinaryIO:
    """``path`` opened for reading, if it is a regular file: :class:`LedgerError` otherwise, never a wait.

    Opened without blocking and checked on the open file, so a FIFO (or anything a
    ``*.bin`` name was swapped for) is named, not waited on for a writer.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, 'O_NONBLOCK', 0) | getattr(os, 'O_CLOEXEC', 0))
    except OSError as error:
        raise LedgerError(f'cannot read ledger {path}: {error.strerror}') from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise LedgerError(f'{path} is {not_a_file(path) or "not a regular file"}, not a ledger file')
    return os.fdopen(fd, 'rb')


def read_ledger(path: Path) -> Ledger:
    """The header and records of a ledger file; :class:`LedgerError` on any damage but a torn last record.

    The whole file in memory, read through :func:`scan_ledger` as :func:`verify_ledger` reads it.
    """
    scan = scan_ledger(path)
    ledger = Ledger(scan.header, torn=scan.torn)
    for numbers, indices in _verified_runs(scan):
        ends = np.cumsum(scan.counts[numbers])[:-1]
        for k, part in zip(numbers.tolist(), np.split(indices, ends), strict=True):
            ledger.records.append(LedgerRecord(int(scan.epochs[k]), int(scan.batches[k]), part.astype(np.int64)))
    return ledger


def _width(path: Path, header: dict[str, Any]) -> int:
    width = header.get('index_bytes', 8)
    if width not in (4, 8):
        raise LedgerError(f'{path} has index_bytes={width!r} in its header; it must be 4 or 8')
    return int(width)


def _corrupted(path: Path, offset: int) -> LedgerError:
    return LedgerError(f'{path} is corrupted: the record at byte {offset} fails its checksum')


def _outside(path: Path, batch: int, start: int, index: int, dataset_len: int) -> LedgerError:
    return LedgerError(f'{path}: the record of batch {batch} (byte {start}) holds index {index}, outside '
                       f'[0, {dataset_len}) (dataset_len in its header): the ledger does not belong to this dataset '
                       'or index_key selects something else')


@dataclass
class LedgerScan:
    """A ledger file's header and where its records lie, read without their indices (:func:`scan_ledger`).

    Per record, in file order: its byte ``offsets``, ``epochs``, ``batches`` and
    index ``counts``. Nothing but a header and the record headers has been checked:
    :func:`read_records` checks a record's checksum and range as it reads it.
    """

    path: Path
    header: dict[str, Any]
    width: int
    offsets: np.ndarray
    epochs: np.ndarray
    batches: np.ndarray
    counts: np.ndarray
    torn: str | None = None

    @property
    def trained(self) -> np.ndarray:
        """Which records are trained batches (schedule records left out), as a boolean mask."""
        return self.batches != SCHEDULE_BATCH

    def last_batch(self, default: int) -> int:
        """The furthest trained batch recorded, or ``default`` if none was."""
        batches = self.batches[self.trained]
        return int(batches.max()) if batches.size else default


def scan_ledger(path: Path) -> LedgerScan:
    """A ledger's header and record headers, seeking over the indices: memory per record, not per sample.

    Refuses what :func:`read_ledger` refuses in a header, and reports a torn last
    record the same way; a record's checksum and indices are checked when
    :func:`read_records` reads it.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / 'rank0.bin'
        >>> writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 5})
        >>> writer.append(epoch=0, batch=1, indices=[4, 2]); writer.append(epoch=0, batch=2, indices=[0])
        >>> scan = scan_ledger(path)
        >>> scan.batches.tolist(), scan.counts.tolist()
        ([1, 2], [2, 1])
    """
    try:
        with open_ledger(path) as file:
            size = os.fstat(file.fileno()).st_size
            head = file.read(len(MAGIC) + _LENGTH.size)
            if not head.startswith(MAGIC):
                raise LedgerError(f'{path} is not a composer-sampling ledger (it does not start with {MAGIC!r})')
            length = _LENGTH.unpack_from(head, len(MAGIC))[0] if len(head) == len(MAGIC) + _LENGTH.size else 0
            if len(head) + length > size:  # before reading: the field may be damaged, memory is bounded
                raise LedgerError(f'{path} is truncated inside its header, or its length field (byte {len(MAGIC)}) '
                                  f'is corrupted: it says {length} bytes of header, {size - len(head)} bytes follow')
            head += file.read(min(length + _CRC.size, size - len(head)))  # a version 1 header has no checksum
            header, offset = _header(path, head, len(MAGIC))
            width = _width(path, header)
            if 'dataset_len' in header:
                _check_dataset_len(path, header['dataset_len'])
            fields, torn, damaged = _record_headers(file, path, offset, size, width)
    except OSError as error:
        raise LedgerError(f'cannot read ledger {path}: {error.strerror}') from None
    offsets, epochs, batches, counts = (np.frombuffer(values, dtype=np.int64) for values in fields)
    scan = LedgerScan(path, header, width, offsets, epochs, batches, counts, torn)
    if damaged is not None:
        verify_ledger(scan)  # damage before it, which may have misled the scan here, is named first
        raise damaged
    return scan


def _record_headers(file: BinaryIO, path: Path, offset: int, size: int,
                    width: int) -> tuple[list[array[int]], str | None, LedgerError | None]:
    """Offsets, epochs, batches and counts of the records from ``offset`` on, seeking past their indices; what a
    torn last record lost, or the error naming a record whose count runs past the end of a file it does not end.

    Each record's count says where the next one starts; the records after it whose
    headers the block read holds and that say the same count are taken with it
    (:func:`_same_count`): the records a walk one at a time finds, read off at once.
    """
    fields: list[array[int]] = [array('q') for _ in range(4)]
    block, start, wanted = b'', offset, _BLOCK
    while offset < size:
        if offset - start < 0 or offset - start + _RECORD.size > len(block):
            file.seek(offset)
            block, start = file.read(wanted), offset
        head = block[offset - start:offset - start + _RECORD.size]
        torn = _torn(path, size - offset, head, width)
        if torn is not None:
            ending = _record_ending_the_file(file, offset, size, width) if len(head) == _RECORD.size else None
            if ending is None:
                return fields, torn, None
            _, batch, count = _RECORD.unpack(head)
            return fields, None, LedgerError(
                f'{path} is corrupted: the record at byte {offset} (batch {batch}) says it holds {count} samples, '
                f'more than the {size - offset} bytes left, yet a whole record ends the file at byte {ending}: '
                'damage, not a torn last record')
        epoch, batch, count = _RECORD.unpack(head)
        step = _RECORD.size + width * count + _CRC.size
        # the records of this size whose headers the block holds and that the file holds whole
        ahead = min((len(block) - (offset - start) - _RECORD.size) // step + 1, (size - offset) // step)
        run = _same_count(block, offset - start, step, count, ahead) if ahead > 1 else 1
        if run == 1:
            for values, value in zip(fields, (offset, epoch, batch, count), strict=True):
                values.append(value)
        else:
            at = offset - start
            for values, column in zip(fields, (offset + step * np.arange(run, dtype=np.int64),
                                               np.ndarray((run,), '<u4', block, at, (step,)),
                                               np.ndarray((run,), '<i8', block, at + 4, (step,)),
                                               np.full(run, count)), strict=True):
                values.frombytes(column.astype(np.int64).tobytes())
        offset += step * run
        wanted = _SCAN_BYTES if step <= _BLOCK else _BLOCK
    return fields, None, None


def _same_count(block: bytes, at: int, step: int, count: int, ahead: int) -> int:
    """How many of the ``ahead`` records every ``step`` bytes from ``at`` in ``block``, in a row from the first,
    say they hold ``count`` samples (so that each next one does start ``step`` bytes on)."""
    counts: np.ndarray = np.ndarray((ahead,), '<u4', block, at + _RECORD.size - _LENGTH.size, (step,))
    differ = np.flatnonzero(counts != count)
    return int(differ[0]) if differ.size else ahead


def _record_ending_the_file(file: BinaryIO, offset: int, size: int, width: int) -> int | None:
    """Where a whole record (its checksum holding) that ends the file starts, at ``offset`` or after, if one does.

    A torn record is the last bytes of a file: if a whole record ends the file after
    the one at ``offset`` (or that one does, read with the count its bytes give it),
    the count at ``offset`` was damaged. The candidates are found from the end, a
    block of count fields at a time (a record of ``k`` samples that ends the file has
    ``k`` in its count field), and only those are checksummed.
    """
    left = size - offset - _RECORD.size - _CRC.size
    if left >= 0 and left % width == 0 and _checksum_holds(file, offset, left // width, width):
        return offset  # the record itself, whole, with a damaged count
    last = left // width  # the candidate that starts furthest back, at offset (or just after)
    first = 0
    while first <= last:
        number = min(last - first + 1, _BLOCK // width)
        low = size - 8 - (first + number - 1) * width  # the count field of candidate first + number - 1
        file.seek(low)
        block = file.read((number - 1) * width + 4)
        counts: np.ndarray = np.ndarray((number,), dtype='<u4', buffer=block, strides=(width,))[::-1]
        for found in np.flatnonzero(counts == np.arange(first, first + number)).tolist():
            start = size - _RECORD.size - _CRC.size - (first + found) * width
            if start > offset and _checksum_holds(file, start, first + found, width):
                return start
        first += number
    return None


def _checksum_holds(file: BinaryIO, start: int, count: int, width: int) -> bool:
    """Whether the record at ``start``, read as holding ``count`` indices, has a checksum that holds (streamed)."""
    file.seek(start)
    head = bytearray(file.read(_RECORD.size))
    if len(head) < _RECORD.size:
        return False
    head[_RECORD.size - 4:] = _LENGTH.pack(count)
    crc, left = zlib.crc32(head), width * count
    while left:
        chunk = file.read(min(left, _RUN_BYTES))
        if not chunk:
            return False
        crc, left = zlib.crc32(chunk, crc), left - len(chunk)
    stored = file.read(_CRC.size)
    return len(stored) == _CRC.size and _CRC.unpack(stored)[0] == crc


def read_records(file: BinaryIO, scan: LedgerScan, records: np.ndarray) -> Iterator[np.ndarray]:
    """The indices of a scanned ledger's ``records`` (numbers in file order), ``file`` open on it, in chunks.

    Neighbouring records are read together, in blocks of about 16 MB (a larger
    record alone). Each record's checksum is checked before its indices are given,
    and each chunk's indices to lie in ``[0, dataset_len)``: :class:`LedgerError`, in
    :func:`read_ledger`'s words, on damage.

    Example:
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / 'rank0.bin'
        >>> writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 5})
        >>> writer.append(epoch=0, batch=1, indices=[4, 2]); writer.append(epoch=0, batch=2, indices=[0])
        >>> with path.open('rb') as file:
        ...     [chunk.tolist() for chunk in read_records(file, scan_ledger(path), np.array([0, 1]))]
        [[4, 2, 0]]
    """
    for numbers, indices in _checked_runs(file, scan, records):
        if (bad := _first_outside(scan, numbers, indices)) is not None:
            raise bad
        yield indices


def verify_ledger(scan: LedgerScan) -> None:
    """Check every record of a scanned ledger as :func:`read_ledger` does: checksums first, then index ranges."""
    for _ in _verified_runs(scan):
        pass


def _verified_runs(scan: LedgerScan) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every record of a scanned ledger in runs, checksums checked as read; the first index out of range is
    refused after the last run, so that damage is named before what it may have caused."""
    outside: LedgerError | None = None
    try:
        with open_ledger(scan.path) as file:
            for numbers, indices in _checked_runs(file, scan, np.arange(scan.offsets.size)):
                outside = outside or _first_outside(scan, numbers, indices)
                yield numbers, indices
    except OSError as error:
        raise LedgerError(f'cannot read ledger {scan.path}: {error.strerror}') from None
    if outside is not None:
        raise outside


def _first_outside(scan: LedgerScan, numbers: np.ndarray, indices: np.ndarray) -> LedgerError | None:
    """The error naming the first index outside ``[0, dataset_len)`` of the records ``numbers``, or None."""
    limit = scan.header.get('dataset_len')
    if limit is None or (first := first_outside(indices, limit)) is None:
        return None
    ends = np.cumsum(scan.counts[numbers])
    k = int(numbers[np.searchsorted(ends, first, side='right')])
    return _outside(scan.path, int(scan.batches[k]), int(scan.offsets[k]), int(indices[first]), int(limit))


def _checked_runs(file: BinaryIO, scan: LedgerScan, records: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Runs of neighbouring records read in one block each: their numbers and indices, checksums checked.

    The checksums of a run are computed record by record and compared at once; the
    first record whose checksum fails is named, as a check in file order names it.
    """
    sizes = _RECORD.size + scan.width * scan.counts + _CRC.size
    dtype = np.dtype(_dtype(scan.width))
    for run, end in _runs(records, sizes):
        numbers = records[run:end]
        lengths = sizes[numbers]
        file.seek(int(scan.offsets[numbers[0]]))
        data = memoryview(_read(file, scan, int(lengths.sum())))
        starts = np.cumsum(lengths) - lengths
        ends = starts + lengths - _CRC.size  # where each record's checksum lies (a multiple of 4 bytes on)
        stored = np.frombuffer(data, '<u4')[ends // _CRC.size]
        computed = np.fromiter((zlib.crc32(data[a:b]) for a, b in zip(starts.tolist(), ends.tolist(), strict=True)),
                               dtype=np.uint32, count=numbers.size)
        failed = np.flatnonzero(computed != stored)
        if failed.size:
            raise _corrupted(scan.path, int(scan.offsets[numbers[failed[0]]]))
        yield numbers, _run_indices(data, starts, scan.counts[numbers], lengths, dtype)


def _runs(records: np.ndarray, sizes: np.ndarray) -> Iterator[tuple[int, int]]:
    """``records`` (numbers in file order) in runs ``records[run:end]`` of neighbours, each as many as fit in
    ``_RUN_BYTES`` from its first (a larger record alone)."""
    ends = np.cumsum(sizes[records])
    breaks = np.flatnonzero(records[1:] != records[:-1] + 1) + 1  # where a run of neighbours ends
    run = 0
    while run < records.size:
        stretch = int(breaks[np.searchsorted(breaks, run, side='right')]) if breaks.size and breaks[-1] > run \
            else records.size
        before = int(ends[run - 1]) if run else 0
        end = min(max(int(np.searchsorted(ends, before + _RUN_BYTES, side='right')), run + 1), stretch)
        yield run, end
        run = end


def _run_indices(data: memoryview, starts: np.ndarray, counts: np.ndarray, lengths: np.ndarray,
                 dtype: np.dtype[Any]) -> np.ndarray:
    """The indices of a run's records (at ``starts`` in ``data``), in order: each stretch of records of one size
    read off in one strided copy."""
    changes = np.flatnonzero(counts[1:] != counts[:-1]) + 1
    parts: list[np.ndarray] = []
    for first, end in zip([0, *changes.tolist()], [*changes.tolist(), counts.size], strict=True):
        records, count = end - first, int(counts[first])
        parts.append(np.ndarray((records, count), dtype, data, int(starts[first]) + _RECORD.size,
                                (int(lengths[first]), dtype.itemsize)).reshape(-1))
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def _read(file: BinaryIO, scan: LedgerScan, size: int) -> bytes:
    data = file.read(size)
    if len(data) != size:
        raise LedgerError(f'{scan.path} changed while it was read: a record scanned before ends early')
    return data


def _torn(path: Path, left: int, head: bytes, width: int) -> str | None:
    """What a record cut off by the end of the file lost, or None when the record (``left`` bytes left) is whole."""
    if left < _RECORD.size:
        return f'{path}: the last record is torn ({left} bytes of its header were written); its samples are unknown'
    _, batch, count = _RECORD.unpack_from(head)
    needed = _RECORD.size + width * count + _CRC.size
    if left >= needed:
        return None
    return (f'{path}: the last record (batch {batch}, {count} samples) is torn: {left} of its {needed} bytes were '
            f'written, so its {count} samples could not be read')


def _header(path: Path, data: bytes, offset: int) -> tuple[dict[str, Any], int]:
    """The header dict and the offset of the first record."""
    if offset + _LENGTH.size > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    (length,) = _LENGTH.unpack_from(data, offset)
    end = offset + _LENGTH.size + length
    if end > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    try:
        header = json.loads(data[offset + _LENGTH.size:end])
    except (UnicodeDecodeError, json.JSONDecodeError):
        header = None
    version = header.get('version') if isinstance(header, dict) else None
    if isinstance(version, int):  # before the checksum: a version 1 file has none
        valid_version(str(path), version, _OLDEST, LEDGER_VERSION, noun='ledger format version', newer_hint='',
                      detail=' (version 1 has no header checksum): audit it with the composer-sampling that wrote it',
                      error=LedgerError)
    if end + _CRC.size > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    (crc,) = _CRC.unpack_from(data, end)
    if crc != zlib.crc32(data[offset:end]):
        raise LedgerError(f'{path} is corrupted: its header fails its checksum (was it edited?)')
    if not isinstance(header, dict) or not isinstance(version, int):
        raise LedgerError(f'{path} has a header that is not a versioned JSON object')
    return header, end + _CRC.size


def _check_dataset_len(path: Path, dataset_len: Any) -> None:
    if not is_integer(dataset_len) or dataset_len < 0:
        raise LedgerError(f'{path} has dataset_len={dataset_len!r} in its header; it must be an int >= 0')
