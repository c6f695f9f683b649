"""The lineage, the attempt and the last batch that a ledger keeps in every checkpoint, under any trainer.

Every fit of a run writes its own *attempt* files. The checkpoint state of a ledger
names the lineage of the run, the attempt that wrote the checkpoint and the last batch
it recorded. A resumed fit reads that state, continues the lineage and names the
attempt and batch it resumed from in the header of its new files. This is how
``composer-sampling audit`` tells the attempts and the resume points apart. The state
is the same under every trainer: a dictionary of plain values, in the envelope of
every state of ours, which ``torch.load(weights_only=True)`` reads.

Example:
    >>> lineage = Lineage()
    >>> header = lineage.begin(lambda shared: shared, rank=0, world_size=1, start_batch=0, start_epoch=0)
    >>> header.resumed_from is None, lineage.batch
    (True, 0)
    >>> lineage.batch = 5
    >>> resumed = Lineage()
    >>> resumed.load_state_dict(lineage.state_dict())
    >>> resumed.begin(lambda shared: shared, rank=0, world_size=1, start_batch=5, start_epoch=1).resumed_from == {
    ...     'attempt': header.attempt, 'batch': 5}
    True
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling.ledger_format import LedgerHeader

__all__ = ['Lineage', 'Share']

#: 1: ``{'version', 'lineage', 'attempt', 'batch'}``; the oldest states had only ``lineage`` and no ``version``.
STATE = VersionPolicy(current=1, missing_version=1)
#: Returns rank 0's list of values on every rank (a broadcast from rank 0; the list itself on one rank).
Share = Callable[[list[Any]], list[Any]]


class Lineage:
    """What a ledger callback keeps in its checkpoint state: the lineage, the attempt that wrote it, the last batch.

    Attributes:
        lineage: the id every attempt of one run shares, or ``None`` before the first fit.
        attempt: the attempt that wrote the state this object holds, or ``None``.
        batch: the last batch recorded, as the trainer counts batches, or the start batch of the attempt.
    """

    def __init__(self) -> None:
        self.lineage: str | None = None
        self.attempt: str | None = None
        self.batch: int | None = None

    def begin(self, share: Share, **fields: Any) -> LedgerHeader:
        """The header of a new attempt, which continues the attempt and batch held here if any.

        Rank 0 draws the attempt id and the start time (and the lineage id of a fresh run),
        and ``share`` gives them to every rank, so every rank names its file alike.

        Args:
            share: the broadcast from rank 0 of the trainer.
            fields: the other fields of :class:`~composer_sampling.ledger_format.LedgerHeader`; ``start_batch``
                is required and becomes :attr:`batch`.
        """
        resumed_from = None if self.attempt is None else {'attempt': self.attempt, 'batch': self.batch}
        shared = share([self.lineage or uuid.uuid4().hex, uuid.uuid4().hex[:16], time.time(), resumed_from])
        self.lineage, attempt, started, resumed_from = shared
        header = LedgerHeader(lineage=self.lineage, attempt=attempt, resumed_from=resumed_from, started=started,
                              **fields)
        self.attempt, self.batch = attempt, header.start_batch
        return header

    def restart(self) -> None:
        """Forget the lineage: the next attempt starts a new one, and continues no earlier attempt."""
        self.lineage, self.attempt, self.batch = None, None, None

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps: plain values, in the envelope of every state of ours."""
        return write_state(STATE.current, {'lineage': self.lineage, 'attempt': self.attempt, 'batch': self.batch})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Load a state of any version; ``version``, ``attempt`` and ``batch`` are missing from the oldest.

        Raises:
            ValueError: a field that is neither ``None`` nor of its type, named with its value.
        """
        state = read_state(state, 'SampleLedger', STATE)
        for key, kind in (('lineage', str), ('attempt', str), ('batch', int)):
            value = state.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ValueError(f'SampleLedger state has {key}={value!r}; it must be a {kind.__name__} or None')
        self.lineage = state.get('lineage')
        self.attempt = state.get('attempt')
        self.batch = state.get('batch')
