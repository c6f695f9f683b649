"""The records of one rank's ledger file for one fit: held in memory, checked, and written in one system call."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from composer_sampling._validate import first_outside
from composer_sampling.ledger_format import SCHEDULE_BATCH, LedgerHeader, LedgerWriter, OutsideDatasetError

__all__ = ['HOLD', 'LedgerRecorder']

#: Indices held in memory before they are written whatever comes (some 9 MB of Python ints); checkpoints write sooner.
HOLD = 1 << 18


class LedgerRecorder:
    """Holds the records of the batches that one fit trains and writes them to the file ``path``.

    The file is created with ``header`` when the first batch is recorded, so a fit that
    trains no batch leaves no file behind. Records are written by :meth:`flush`, and by
    :meth:`record` once more than :data:`HOLD` indices are held.

    Args:
        path: the ledger file of this rank and attempt.
        header: its header.
        where: how messages name the callback, such as ``SampleLedger(index_key='index')``.
    """

    def __init__(self, path: Path, header: LedgerHeader, where: str) -> None:
        self.path = path
        self.header = header
        self.where = where
        self._writer: LedgerWriter | None = None
        self._pending: list[tuple[int, int, Any]] = []  # (epoch, batch, indices) recorded, not yet written
        self._held = 0  # the indices in _pending

    def record(self, epoch: int, batch: int, indices: np.ndarray | list[int], schedule: np.ndarray | None) -> None:
        """Hold the record of a trained batch, after the schedule of its epoch if one is given.

        The first record of a fit is checked against ``dataset_len`` now, and creates the
        file; the others are checked when they are written.
        """
        if self._writer is None:  # the first trained batch: only now does the run leave a file behind
            self._check_range(batch, indices)
            self._writer = LedgerWriter(self.path, self.header.to_dict())
        if schedule is not None:
            self._pending.append((epoch, SCHEDULE_BATCH, schedule))
        if not isinstance(indices, list):
            indices = np.array(indices)  # a copy: the batch's tensor may be reused before the write
        self._pending.append((epoch, batch, indices))
        self._held += len(indices)
        if self._held > HOLD:
            self.flush()

    def flush(self) -> None:
        """Check and write the records held in memory, in one system call (kept for a retry if it fails).

        A record whose indices fall outside the dataset stops the run before any checkpoint
        holds its batch: the records before it are written, it and those after it dropped.
        """
        if self._pending:
            assert self._writer is not None, 'the first record creates the file'
            try:
                self._writer.extend(self._pending, within=self.header.dataset_len)
            except OutsideDatasetError as error:
                pending, self._pending, self._held = self._pending, [], 0
                self._writer.extend(pending[:[batch for _, batch, _ in pending].index(error.batch)])
                raise self._outside(error.batch, error.index) from None
            self._pending, self._held = [], 0

    def close(self) -> None:
        """Write what is held and close the file; a second call does nothing."""
        if self._writer is not None:
            self.flush()
            self._writer.close()
            self._writer = None

    def size(self) -> int | None:
        """The size of the file after a :meth:`flush`, or ``None`` before the first trained batch."""
        self.flush()
        return self.path.stat().st_size if self.path.exists() else None

    def _check_range(self, batch: int, indices: np.ndarray | list[int]) -> None:
        dataset_len = self.header.dataset_len
        where = None if dataset_len is None else first_outside(indices, dataset_len)
        if where is not None:
            raise self._outside(batch, int(indices[where]))

    def _outside(self, batch: int, index: int) -> ValueError:
        dataset_len = self.header.dataset_len
        return ValueError(f'{self.where} read sample index {index} in batch {batch}, outside [0, '
                          f'{dataset_len}) for a dataset of {dataset_len} samples: index_key must '
                          'select the dataset indices')
