"""The one place composer-sampling steps in between a DataLoader and the sampler graph it reads.

An :class:`IndexTap` sits on one edge of a sampler graph (for example as the
``sampler`` of torch's ``BatchSampler``) and passes on, unchanged and in order,
what the node below it yields. It does two things with that stream, both at the
index level, without loading a sample:

* **skip**: its next pass can be given a *window*: drop the first ``skip`` items
  and stop after ``limit`` more. That is how :class:`~composer_sampling.SamplerSync`
  resumes a graph that cannot start at a sample offset: the index lists of the
  trained batches are drawn and dropped, their samples never loaded. It is the one
  sanctioned replay in the package: indices are replayed, data is not.
* **tell**: listeners (:class:`~composer_sampling.SampleLedger`) receive every
  batch of indices the pass yields, as one flat list per ``group`` items of the
  edge (the batch size, for a tap under torch's ``BatchSampler``).

A window applies to the next pass only, and is taken at the first ``next()``, not
at ``iter()``: a DataLoader with workers calls ``iter()`` on its batch sampler
twice and reads only the second iterator.

Example:
    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> batches = BatchSampler(SequentialSampler(range(10)), 2, drop_last=False)
    >>> batches.sampler = tap = IndexTap(batches.sampler, group=2)
    >>> tap.set_window(skip=4, limit=4)  # two batches trained, two more in this pass
    >>> told = []
    >>> tap.listen(lambda number, indices: told.append(indices))
    >>> list(batches), len(batches)
    ([[4, 5], [6, 7]], 5)
    >>> told
    [[4, 5], [6, 7]]
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from torch.utils.data import Sampler

from composer_sampling._validate import valid_bool, valid_int

__all__ = ['HeadCheck', 'IndexTap', 'Listener', 'install_tap']

#: Receives ``(pass number, indices of one batch)`` for every batch a tap's pass yields.
Listener = Callable[[int, list[int]], None]
#: Receives the batches of indices a window's skip drops, all of them, before the pass yields anything; raises to
#: stop the pass.
HeadCheck = Callable[[Iterator[list[int]]], None]


class IndexTap(Sampler):
    """Passes on what ``sampler`` yields; the next pass can skip a head and stop early; listeners are told.

    It keeps the order of the node below (``keeps_child_order``), so the graph walk,
    seeding and checkpoints see through it to ``sampler``. ``len()`` is the full
    pass's length, as Composer expects of a resumed epoch.

    Args:
        sampler: the node below: an index sampler or a batch sampler.
        group (int): items of this edge that make one batch of the DataLoader (the
            batch size under torch's ``BatchSampler``; 1 where the items are batches).
        keep_partial (bool): whether a last, shorter group is a batch (the batch
            sampler above does not drop it).
    """

    keeps_child_order = True

    def __init__(self, sampler: Any, group: int = 1, keep_partial: bool = True,
                 listener: Listener | None = None) -> None:
        self.sampler = sampler
        self.group = valid_int('group', group, minimum=1)
        self.keep_partial = valid_bool('keep_partial', keep_partial)
        self.passes = 0  # passes started
        self._skip = 0
        self._limit: int | None = None
        self._check: HeadCheck | None = None
        self._listeners: list[Listener] = [] if listener is None else [listener]

    @property
    def window(self) -> tuple[int, int | None]:
        """The pending ``(skip, limit)`` of the next pass; ``(0, None)`` is the whole pass."""
        return self._skip, self._limit

    def set_window(self, skip: int, limit: int | None = None, check: HeadCheck | None = None) -> None:
        """Drop the first ``skip`` items of the next pass and yield at most ``limit`` after them.

        ``check``, when given, receives the dropped items as the DataLoader would have batched them (one flat list of
        indices per ``group`` items), before the pass yields anything, and may raise to stop the pass.
        """
        self._skip = valid_int('skip', skip)
        self._limit = None if limit is None else valid_int('limit', limit)
        self._check = check

    def listen(self, listener: Listener) -> None:
        """Tell ``listener`` every batch of indices from the next pass on (once, however often it is given)."""
        if all(listener != known for known in self._listeners):
            self._listeners.append(listener)

    def forget(self, listener: Listener) -> None:
        self._listeners = [known for known in self._listeners if known != listener]

    def __iter__(self) -> Iterator[Any]:
        if self._skip == 0 and self._limit is None and not self._listeners:
            self.passes += 1
            return iter(self.sampler)
        return self._pass()

    def _pass(self) -> Iterator[Any]:
        skip, limit, check = self._skip, self._limit, self._check
        self._skip, self._limit, self._check = 0, None, None
        self.passes += 1
        if check is None:
            items: Iterator[Any] = itertools.islice(self.sampler, skip, None if limit is None else skip + limit)
        else:
            stream = iter(self.sampler)
            check(self._batches(itertools.islice(stream, skip)))
            items = stream if limit is None else itertools.islice(stream, limit)
        if not self._listeners:
            yield from items
            return
        yield from self._told(self.passes, items)

    def _told(self, number: int, items: Iterable[Any]) -> Iterator[Any]:
        batch: list[int] = []
        count = 0
        for item in items:  # a batch is told before its last item leaves: before the DataLoader can use it
            _extend(batch, item)
            count += 1
            if count == self.group:
                self._tell(number, batch)
                batch, count = [], 0
            yield item
        if count and self.keep_partial:
            self._tell(number, batch)

    def _batches(self, items: Iterable[Any]) -> Iterator[list[int]]:
        """``items`` as the DataLoader batches them: one flat list of indices per ``group`` items."""
        batch: list[int] = []
        count = 0
        for item in items:
            _extend(batch, item)
            count += 1
            if count == self.group:
                yield batch
                batch, count = [], 0
        if count and self.keep_partial:
            yield batch

    def _tell(self, number: int, batch: list[int]) -> None:
        for listener in self._listeners:
            listener(number, batch)

    def __len__(self) -> int:
        return len(self.sampler)

    def __repr__(self) -> str:
        return f'IndexTap(sampler={self.sampler!r}, group={self.group})'


def _extend(batch: list[int], item: Any) -> None:
    """Add an item of a tapped edge to ``batch``: an index, or a list of them."""
    if isinstance(item, int):
        batch.append(item)
    elif getattr(item, 'ndim', None) == 0:  # a numpy integer or a 0-d tensor: one index, as an int
        batch.append(operator.index(item))
    else:
        batch.extend(int(index) for index in item)


def install_tap(parent: Any, attribute: str, group: int | None = None, keep_partial: bool | None = None,
                listener: Listener | None = None) -> IndexTap:
    """The tap on ``parent.<attribute>``, installed unless one is there already, telling ``listener`` if given.

    ``group`` and ``keep_partial`` (how the DataLoader batches the items of that edge) are set when given;
    a caller that only skips items leaves them as they are.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> batches = BatchSampler(SequentialSampler(range(4)), 2, False)
        >>> install_tap(batches, 'sampler') is install_tap(batches, 'sampler', group=2)
        True
        >>> batches.sampler.group
        2
    """
    tap = getattr(parent, attribute)
    if not isinstance(tap, IndexTap):
        tap = IndexTap(tap, listener=listener)
        setattr(parent, attribute, tap)
    elif listener is not None:
        tap.listen(listener)
    if group is not None:
        tap.group = valid_int('group', group, minimum=1)
    if keep_partial is not None:
        tap.keep_partial = valid_bool('keep_partial', keep_partial)
    return tap
