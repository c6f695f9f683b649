"""The sample ledger file: per rank and attempt, which sample indices every trained batch held.

A file is ``MAGIC``, a length-prefixed JSON header followed by the CRC32 of its
length and text, then one record per trained batch: ``(epoch: u32, batch: i64,
count: u32)``, ``count`` indices and a CRC32 of the record. Format version 3
stores the indices in the narrowest width the dataset length allows (header
``index_bytes``: 4 below ``2**32``, else 8) and may hold *plan* records (``batch``
of ``-1``): the samples an epoch is meant to train, with their multiplicity,
written by rank 0 for a dataset whose epochs repeat or leave out samples by design
(mosaicml-streaming's ``epoch_size``, ``proportion``, ``repeat``, ``choose``).
Version 2 files (8-byte indices, no plan records) are read as they are.

A record is appended whole or not at all (a short write is completed, a failed one
undone). A process killed while writing can still leave a *torn* last record:
reading stops there, reports it, and returns the records before it, as a
write-ahead log recovers. Damage anywhere else (a header or record failing its
checksum) is an error. When the header names a ``dataset_len``, every index must
lie in ``[0, dataset_len)``.

Version 1 files (no header checksum) are refused, not read: without the checksum
an edited header (a changed ``dataset_len``, ``start_batch`` or ``rank``) would
change the verdict unnoticed. Newer versions are refused too.

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
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from composer_sampling.checkpoint_envelope import check_version

__all__ = ['LEDGER_VERSION', 'MAGIC', 'PLAN_BATCH', 'Ledger', 'LedgerError', 'LedgerRecord', 'LedgerWriter',
           'index_bytes', 'read_ledger']

MAGIC = b'CSLEDGER'
LEDGER_VERSION = 3  # 3: narrow indices, plan records; 2 added the header checksum (still read); 1 is refused
_OLDEST = 2
#: The ``batch`` of a plan record: the samples an epoch is meant to train.
PLAN_BATCH = -1
_LENGTH = struct.Struct('<I')
_RECORD = struct.Struct('<IqI')
_CRC = struct.Struct('<I')


class LedgerError(ValueError):
    """A ledger file that cannot be read: the message names the file and what is wrong."""


@dataclass(frozen=True)
class LedgerRecord:
    """One trained batch (or, with ``batch == PLAN_BATCH``, an epoch's plan): epoch, batch count, sample indices."""

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
        """The records of trained batches (plan records left out)."""
        return [record for record in self.records if record.batch != PLAN_BATCH]


def index_bytes(dataset_len: int | None) -> int:
    """Bytes a stored index takes: 4 when every index of the dataset fits 32 bits, else 8.

    Example:
        >>> index_bytes(1000), index_bytes(2**32 + 1), index_bytes(None)
        (4, 8, 8)
    """
    return 4 if dataset_len is not None and dataset_len <= 2**32 else 8


def _dtype(width: int) -> str:
    return '<u4' if width == 4 else '<i8'


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
        values = np.asarray(indices, dtype=_dtype(self.width))
        body = _RECORD.pack(epoch, batch, values.size) + values.tobytes()
        self._write(body + _CRC.pack(zlib.crc32(body)))

    def _write(self, data: bytes) -> None:
        start, done = self._size, 0
        try:
            while done < len(data):
                written = os.write(self._fd, data[done:])
                if written <= 0:
                    raise OSError(f'no byte of the record could be written to {self.path}')
                done += written
        except OSError:
            os.ftruncate(self._fd, start)  # no partial record stays behind
            raise
        self._size = start + done

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(path: Path) -> Ledger:
    """The header and records of a ledger file; :class:`LedgerError` on any damage but a torn last record."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise LedgerError(f'cannot read ledger {path}: {error.strerror}') from None
    if not data.startswith(MAGIC):
        raise LedgerError(f'{path} is not a composer-sampling ledger (it does not start with {MAGIC!r})')
    header, offset = _header(path, data, len(MAGIC))
    width = header.get('index_bytes', 8)
    if width not in (4, 8):
        raise LedgerError(f'{path} has index_bytes={width!r} in its header; it must be 4 or 8')
    ledger, starts = Ledger(header), []
    while offset < len(data):
        torn = _torn(path, data, offset, width)
        if torn is not None:
            ledger.torn = torn
            break
        epoch, batch, count = _RECORD.unpack_from(data, offset)
        end = offset + _RECORD.size + width * count
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(data[offset:end]):
            raise LedgerError(f'{path} is corrupted: the record at byte {offset} fails its checksum')
        indices = np.frombuffer(data, dtype=_dtype(width), count=count, offset=offset + _RECORD.size)
        ledger.records.append(LedgerRecord(epoch, batch, indices.astype(np.int64)))
        starts.append(offset)
        offset = end + _CRC.size
    if 'dataset_len' in header:
        _check_range(path, header['dataset_len'], ledger.records, starts)
    return ledger


def _torn(path: Path, data: bytes, offset: int, width: int) -> str | None:
    """What a record cut off by the end of the file lost, or None when the record at ``offset`` is whole."""
    left = len(data) - offset
    if left < _RECORD.size:
        return f'{path}: the last record is torn ({left} bytes of its header were written); its samples are unknown'
    _, batch, count = _RECORD.unpack_from(data, offset)
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
        check_version(str(path), version, _OLDEST, LEDGER_VERSION, noun='ledger format version', newer_hint='',
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


def _check_range(path: Path, dataset_len: Any, records: list[LedgerRecord], starts: list[int]) -> None:
    if isinstance(dataset_len, bool) or not isinstance(dataset_len, int) or dataset_len < 0:
        raise LedgerError(f'{path} has dataset_len={dataset_len!r} in its header; it must be an int >= 0')
    if not records:
        return
    everything = np.concatenate([record.indices for record in records])
    if everything.size == 0 or (everything.min() >= 0 and everything.max() < dataset_len):
        return
    for record, start in zip(records, starts, strict=True):
        bad = record.indices[(record.indices < 0) | (record.indices >= dataset_len)]
        if bad.size:
            raise LedgerError(f'{path}: the record of batch {record.batch} (byte {start}) holds index {int(bad[0])}, '
                              f'outside [0, {dataset_len}) (dataset_len in its header): the '
                              'ledger does not belong to this dataset or index_key selects something else')
