"""The sample ledger file: per rank and attempt, which sample indices every trained batch held.

A file is ``MAGIC``, a length-prefixed JSON header, then one record per trained
batch: ``(epoch: u32, batch: i64, count: u32)``, ``count`` int64 indices and a
CRC32 of the record. Records are appended with one ``write`` each, so a killed
process leaves whole records; a short or damaged record is corruption.

Example:
    >>> import tempfile, pathlib, numpy as np
    >>> path = pathlib.Path(tempfile.mkdtemp()) / 'rank0.bin'
    >>> writer = LedgerWriter(path, {'rank': 0})
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
LEDGER_VERSION = 1
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
    """Appends records to a new ledger file (created with its header)."""

    def __init__(self, path: Path, header: dict[str, Any]) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps({'version': LEDGER_VERSION, **header}, sort_keys=True).encode()
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        os.write(self._fd, MAGIC + _LENGTH.pack(len(text)) + text)

    def append(self, epoch: int, batch: int, indices: Any) -> None:
        values = np.asarray(indices, dtype='<i8')
        body = _RECORD.pack(epoch, batch, values.size) + values.tobytes()
        os.write(self._fd, body + _CRC.pack(zlib.crc32(body)))

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(path: Path) -> tuple[dict[str, Any], list[LedgerRecord]]:
    """The header and records of a ledger file; :class:`LedgerError` on any damage."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise LedgerError(f'cannot read ledger {path}: {error.strerror}') from None
    if not data.startswith(MAGIC):
        raise LedgerError(f'{path} is not a composer-sampling ledger (it does not start with {MAGIC!r})')
    offset = len(MAGIC)
    header = _header(path, data, offset)
    offset += _LENGTH.size + _LENGTH.unpack_from(data, offset)[0]
    records = []
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
        offset = end + _CRC.size
    return header, records


def _header(path: Path, data: bytes, offset: int) -> dict[str, Any]:
    if offset + _LENGTH.size > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    (length,) = _LENGTH.unpack_from(data, offset)
    start = offset + _LENGTH.size
    if start + length > len(data):
        raise LedgerError(f'{path} is truncated inside its header')
    try:
        header = json.loads(data[start:start + length])
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise LedgerError(f'{path} has a corrupted header') from None
    if not isinstance(header, dict) or header.get('version') != LEDGER_VERSION:
        raise LedgerError(f'{path} has ledger version {header.get("version") if isinstance(header, dict) else "?"}; '
                          f'this version reads {LEDGER_VERSION}')
    return header
