"""The sample ledger file: per rank and attempt, which sample indices every trained batch held.

A file (format version 2) is ``MAGIC``, a length-prefixed JSON header followed by
the CRC32 of its length and text, then one record per trained batch:
``(epoch: u32, batch: i64, count: u32)``, ``count`` int64 indices and a CRC32 of
the record. Records are appended with one ``write`` each, so a killed process
leaves whole records; a short or damaged record is corruption. When the header
names a ``dataset_len``, every index must lie in ``[0, dataset_len)``.

Version 1 files (no header checksum) are refused, not read: without the checksum
an edited header (a changed ``dataset_len``, ``start_batch`` or ``rank``) would
change the verdict unnoticed. Newer versions are refused too.

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / 'rank0.bin'
    >>> writer = LedgerWriter(path, {'rank': 0, 'dataset_len': 5})
    >>> writer.append(epoch=0, batch=1, indices=[4, 2])
    >>> header, records = read_ledger(path)
    >>> header['rank'], records[0].batch, records[0].indices.tolist()
    (0, 1, [4, 2])
"""

from __future__ import annotations

import json
import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ['LEDGER_VERSION', 'MAGIC', 'LedgerError', 'LedgerRecord', 'LedgerWriter', 'read_ledger']

MAGIC = b'CSLEDGER'
LEDGER_VERSION = 2  # 2 added the header checksum; 1 is refused
_LENGTH = struct.Struct('<I')
_RECORD = struct.Struct('<IqI')
_CRC = struct.Struct('<I')


class LedgerError(ValueError):
    """A ledger file that cannot be read: the message names the file and what is wrong."""


@dataclass(frozen=True)
class LedgerRecord:
    """One trained batch: its epoch, the global batch count after it, and its sample indices."""

    epoch: int
    batch: int
    indices: np.ndarray


class LedgerWriter:
    """Appends records to a new ledger file (created with its checksummed header)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({**header, 'version': LEDGER_VERSION}, sort_keys=True).encode()
        head = _LENGTH.pack(len(text)) + text
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(self._fd, MAGIC + head + _CRC.pack(zlib.crc32(head)))

    def append(self, epoch: int, batch: int, indices: Any) -> None:
        values = np.asarray(indices, dtype='<i8')
        body = _RECORD.pack(epoch, batch, values.size) + values.tobytes()
        os.write(self._fd, body + _CRC.pack(zlib.crc32(body)))

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(path: Path) -> tuple[dict[str, Any], list[LedgerRecord]]:
    """The header and records of a ledger file; :class:`LedgerError` on any damage or out-of-range index."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise LedgerError(f'cannot read ledger {path}: {error.strerror}') from None
    if not data.startswith(MAGIC):
        raise LedgerError(f'{path} is not a composer-sampling ledger (it does not start with {MAGIC!r})')
    header, offset = _header(path, data, len(MAGIC))
    records, starts = [], []
    while offset < len(data):
        if offset + _RECORD.size > len(data):
            raise LedgerError(f'{path} is truncated: a record header is cut off at byte {offset} of {len(data)}')
        epoch, batch, count = _RECORD.unpack_from(data, offset)
        end = offset + _RECORD.size + 8 * count
        if end + _CRC.size > len(data):
            raise LedgerError(f'{path} is truncated: the record at byte {offset} needs {end + _CRC.size - offset} '
                              f'bytes, {len(data) - offset} are left')
        (crc,) = _CRC.unpack_from(data, end)
        if crc != zlib.crc32(data[offset:end]):
            raise LedgerError(f'{path} is corrupted: the record at byte {offset} fails its checksum')
        indices = np.frombuffer(data, dtype='<i8', count=count, offset=offset + _RECORD.size).astype(np.int64)
        records.append(LedgerRecord(epoch, batch, indices))
        starts.append(offset)
        offset = end + _CRC.size
    if 'dataset_len' in header:
        _check_range(path, header['dataset_len'], records, starts)
    return header, records


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
    if isinstance(version, int) and version != LEDGER_VERSION:
        raise LedgerError(f'{path} has ledger format version {version}; this version of composer-sampling reads '
                          f'version {LEDGER_VERSION} only (version 1 has no header checksum): audit it with the '
                          'composer-sampling that wrote it')
    if end + _CRC.size > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    (crc,) = _CRC.unpack_from(data, end)
    if crc != zlib.crc32(data[offset:end]):
        raise LedgerError(f'{path} is corrupted: its header fails its checksum (was it edited?)')
    if not isinstance(header, dict) or version != LEDGER_VERSION:
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
