"""A tap on top of a DataLoader's batch sampler that every attribute probe of a trainer sees through, for a ledger
that records a loader which no order object placed.

A trainer that gives the sampler graph its epoch itself reaches the graph along fixed
attribute paths. accelerate's ``DataLoaderShard.set_epoch`` calls ``set_epoch`` on
``batch_sampler``, ``batch_sampler.sampler`` and ``batch_sampler.batch_sampler.sampler``,
and the loop of transformers on ``batch_sampler.batch_sampler``. An
:class:`~composer_sampling._graph.index_tap.IndexTap` on top of the graph would end those
paths one level early, so that the ledger would change the order it records. A
:class:`SeeThroughTap` hands on every attribute of the batch sampler below it, reading
and writing alike. Each path therefore reaches what it reached without the tap, and the
ledger records the order that the trainer trains without it.

Example:
    >>> from torch.utils.data import DataLoader, RandomSampler
    >>> loader = DataLoader(range(6), batch_size=2, sampler=RandomSampler(range(6)))
    >>> told = []
    >>> tap, tapped = tap_seen_through(loader, lambda number, indices: told.append(indices))
    >>> tapped.batch_sampler.sampler is loader.sampler, tapped.batch_sampler.batch_size
    (True, 2)
    >>> [batch.tolist() for batch in tapped] == told, tap.passes
    (True, 1)
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

from torch.utils.data import BatchSampler, DataLoader

from composer_sampling._graph.index_tap import Listener
from composer_sampling.samplers.distribute import rebuild_loader

__all__ = ['SeeThroughTap', 'tap_seen_through']

#: The attributes a SeeThroughTap keeps for itself; every other one is the batch sampler's below it.
_OWN = frozenset({'_below', 'passes', '_listeners'})


class SeeThroughTap(BatchSampler):
    """Yields the index lists of ``batch_sampler`` unchanged and tells each one to its listeners; every other
    attribute is the one of ``batch_sampler``.

    It is a ``BatchSampler`` for ``isinstance`` checks only (accelerate asks whether a loader's ``sampler`` is
    one). It does not call ``BatchSampler.__init__``, so ``sampler``, ``batch_size`` and ``drop_last`` are read
    from the batch sampler below it. Like an ``IndexTap``, it counts its passes and tells a listener
    ``(pass number, indices)`` for each batch, before the batch leaves.

    Args:
        batch_sampler: the node at the top of the DataLoader, which yields the index list of each batch.
        listener: told every batch of indices, if given.
    """

    def __init__(self, batch_sampler: Any, listener: Listener | None = None) -> None:  # no BatchSampler.__init__
        self._below = batch_sampler
        self.passes = 0  # passes started
        self._listeners: list[Listener] = [] if listener is None else [listener]

    def __getattr__(self, name: str) -> Any:
        if name in _OWN:  # before __init__ has run (a copy): not the batch sampler's
            raise AttributeError(name)
        return getattr(self._below, name)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self._below, name, value)

    def listen(self, listener: Listener) -> None:
        """Tell ``listener`` every batch of indices from the next pass on (once, however often it is given)."""
        if all(listener != known for known in self._listeners):
            self._listeners.append(listener)

    def forget(self, listener: Listener) -> None:
        """Stop telling ``listener``."""
        self._listeners = [known for known in self._listeners if known != listener]

    def __iter__(self) -> Iterator[Any]:
        return self._pass()

    def _pass(self) -> Iterator[Any]:
        self.passes += 1  # at the first next(): a DataLoader with workers calls iter() twice and reads the second
        number = self.passes
        for batch in self._below:
            indices = _as_list(batch)
            for listener in self._listeners:
                listener(number, indices)
            yield batch

    def __len__(self) -> int:
        return len(self._below)

    def __repr__(self) -> str:
        return f'SeeThroughTap({self._below!r})'


def tap_seen_through(loader: Any, listener: Listener) -> tuple[SeeThroughTap | None, DataLoader | None]:
    """The :class:`SeeThroughTap` on top of ``loader``, telling ``listener``, and the DataLoader built around it (no
    attribute of torch's DataLoader can be reassigned); the trainer must then iterate that one.

    A loader built around such a tap already keeps it (no new loader). ``(None, None)``: ``loader`` is not a torch
    ``DataLoader`` itself (a subclass such as torchdata's ``StatefulDataLoader`` is not rebuilt).
    """
    if type(loader) is not DataLoader:
        return None, None
    edge = 'batch_sampler' if loader.batch_sampler is not None else 'sampler'
    top = getattr(loader, edge)
    if isinstance(top, SeeThroughTap):
        top.listen(listener)
        return top, None
    tap = SeeThroughTap(top, listener)
    samplers = {'batch_sampler': tap} if edge == 'batch_sampler' else {'sampler': tap, 'batch_size': None}
    return tap, rebuild_loader(loader, **samplers)


def _as_list(batch: Any) -> list[int]:
    """The indices of one item of the top of a DataLoader, as ints: an index list, or one index."""
    if isinstance(batch, int) or getattr(batch, 'ndim', None) == 0:
        return [operator.index(batch)]
    return [operator.index(index) for index in batch]
