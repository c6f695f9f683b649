"""What every sampler of ours shares: validated arguments, seed, epoch, one-shot start offset, checkpoints."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np
from torch.utils.data import DistributedSampler

from composer_sampling._validate import MAX_EPOCH, resolve_replicas, valid_bool, valid_int
from composer_sampling.permutation import MAX_DATA_SEED, Permutation
from composer_sampling.positions import IndexArray, PassCursor, global_indices, iter_rank_indices
from composer_sampling.samplers._state import sampler_payload, sampler_state

__all__ = ['OrderedSampler', 'PassIterator']


class OrderedSampler(DistributedSampler[int]):
    """Base of our samplers: a ``DistributedSampler`` whose order is a pure function of seed and epoch.

    A subclass sets ``dataset`` and ``dataset_len`` before calling this ``__init__``,
    implements :meth:`_iter_pass`, :meth:`_pass_end`, :meth:`_rank_samples`,
    :meth:`order_signature` and :meth:`pass_window`, and lists in ``_repr_fields``
    the constructor arguments that ``__repr__`` shows. :meth:`pass_window` states the
    sampler's math: which global positions each rank reads in a pass. ``plan``'s proof
    by construction reads it, and covers a sampler only when its own class defines
    ``pass_window`` (a subclass that inherits it may have changed the order).

    Every attribute torch's ``DistributedSampler`` users read is here (``dataset``,
    ``num_replicas``, ``rank``, ``epoch``, ``shuffle``, ``seed``, ``drop_last``,
    ``num_samples``, ``total_size``), but ``DistributedSampler.__init__`` is not
    called: it asks ``torch.distributed`` for a missing world size or rank (we ask
    ``composer.utils.dist``, which also works without a process group), needs
    ``len(dataset)`` (an int is a dataset here, and the mixture has source sizes),
    accepts bools for ints, and stores ``num_samples`` and ``total_size``, which
    here are computed from the current epoch (a sub-epoch's share changes with it)
    and cannot be set.

    A *position* counts the samples of the current pass read across all ranks: a
    pass that starts at position ``s`` and of which this rank has yielded ``k``
    indices stands at ``s + k * num_replicas``. For
    :class:`~composer_sampling.ResumableDistributedSampler` and
    :class:`~composer_sampling.MixtureDistributedSampler` it is a position in the
    epoch's global order, so a state taken on one world size resumes on another;
    :class:`~composer_sampling.SubEpochDistributedSampler` counts within the current
    sub-epoch, whose windows are per-rank shares, so its states resume on the same
    world size only. A start offset (:meth:`set_sample_in_epoch` or
    :meth:`load_state_dict`) applies to the next pass only; ``set_epoch`` with the
    same epoch keeps a pending offset (the trainer repeats it after a resume), a new
    epoch clears it.
    """

    _repr_fields: tuple[str, ...] = ()
    dataset: Any
    dataset_len: int
    num_replicas: int
    rank: int
    epoch: int
    shuffle: bool
    drop_last: bool

    def __init__(
        self,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int,
        drop_last: bool = False,
    ) -> None:
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        self.shuffle = valid_bool('shuffle', shuffle)
        self.drop_last = valid_bool('drop_last', drop_last)
        self._seed = valid_int('seed', seed, 0, MAX_DATA_SEED)
        self.epoch = 0
        self._next_offset = 0
        self._cursor: PassCursor | None = None

    @property
    def seed(self) -> int:
        """The data seed; must be identical on every rank."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = valid_int('seed', value, 0, MAX_DATA_SEED)

    @property
    def num_samples(self) -> int:
        """Indices per rank in the current epoch's pass (torch's attribute, computed here)."""
        return self._rank_samples()

    @num_samples.setter
    def num_samples(self, value: int) -> None:
        raise AttributeError(f'{type(self).__name__}.num_samples is computed from the dataset, num_replicas and the '
                             'epoch; it cannot be set')

    @property
    def total_size(self) -> int:
        """Indices across all ranks in the current epoch's pass, padding included."""
        return self.num_samples * self.num_replicas

    @total_size.setter
    def total_size(self, value: int) -> None:
        raise AttributeError(f'{type(self).__name__}.total_size is num_samples * num_replicas; it cannot be set')

    def _rank_samples(self) -> int:
        """:attr:`num_samples`: indices per rank in the current epoch's pass."""
        raise NotImplementedError

    @property
    def sample_in_epoch(self) -> int:
        """The position the next pass starts at (0 unless an offset is pending)."""
        return self._next_offset

    def __len__(self) -> int:
        return self.num_samples

    def epoch_usage(self) -> tuple[int, int]:
        """Dataset length and samples trained across ranks in one pass over the data (padding included)."""
        return self.dataset_len, self.total_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a new epoch starts at its beginning, the same epoch keeps a pending offset."""
        epoch = valid_int('epoch', epoch, 0, MAX_EPOCH)
        if epoch != self.epoch:
            self._next_offset = 0
            self._cursor = None
        self.epoch = epoch

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None:
        """Start the next pass after ``sample_in_epoch`` samples of this epoch trained across all ranks.

        An offset at or past the end of the pass leaves nothing to read, and is recorded as that end.
        An offset past :meth:`_offset_limit` is refused.
        """
        offset = valid_int('sample_in_epoch', sample_in_epoch)
        limit = self._offset_limit()
        if offset > limit:
            raise ValueError(f'sample_in_epoch must be in the interval [0, {limit}] ({self._offset_rule()}), got '
                             f'{offset}')
        self._next_offset = min(offset, self._pass_end())
        self._cursor = None

    def _offset_limit(self) -> int:
        """The largest start offset taken; beyond the pass's end, offsets mean the pass is over."""
        return max(self._pass_end(), self.dataset_len)

    def _offset_rule(self) -> str:
        """Where :meth:`_offset_limit` comes from, for the message that refuses an offset past it."""
        return f'the dataset length, or the samples of a pass across all {self.num_replicas} ranks if more'

    def __iter__(self) -> Iterator[int]:
        """This rank's indices of the current pass; the iterator pickles (with its sampler) as torch's does."""
        return PassIterator.over(self, 0 if self._next_offset == 0 else None)

    def _begin_pass(self, offset: int | None) -> tuple[Iterator[int], PassCursor]:
        """Begin a pass at ``offset``, or at the pending offset (then taken, so it applies once) when ``None``."""
        if offset is None:
            offset, self._next_offset = self._next_offset, 0
        indices = self._iter_pass(offset)
        assert self._cursor is not None, '_iter_pass calls _cursor_for'
        return indices, self._cursor

    def _cursor_for(self, offset: int, count: int) -> PassCursor:
        """A new cursor for the pass about to start at ``offset``; :meth:`state_dict` reads it."""
        self._cursor = PassCursor(start=offset, end=self._pass_end(), num_replicas=self.num_replicas, count=count)
        return self._cursor

    def _iter_pass(self, offset: int) -> Iterator[int]:
        """This rank's indices of the current epoch from the offset (a global position); calls :meth:`_cursor_for`."""
        raise NotImplementedError

    def _iter_rank(self, first: int, count: int, epoch: int, offset: int) -> Iterator[int]:
        """``count`` indices of this rank from global position ``first`` of ``epoch``'s order; the pass's cursor
        counts from ``offset``."""
        return iter_rank_indices(self.dataset_len, rank=self.rank, num_replicas=self.num_replicas, count=count,
                                 start=first, shuffle=self.shuffle, seed=self.seed, epoch=epoch,
                                 cursor=self._cursor_for(offset, count))

    def _pass_end(self) -> int:
        """The global position at which the current epoch's pass ends."""
        raise NotImplementedError

    def pass_indices(self) -> IndexArray:
        """The indices the next ``iter()`` would yield, as one array; nothing is consumed (plan reads this).

        Example:
            >>> from composer_sampling import ResumableDistributedSampler
            >>> sampler = ResumableDistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
            >>> sampler.pass_indices().tolist() == list(sampler)
            True
        """
        saved = self._cursor
        try:
            return np.fromiter(self._iter_pass(self._next_offset), dtype=np.int64)
        finally:
            self._cursor = saved

    def position(self) -> int:
        """Where the current pass stands as a position (see the class): the next index a resume starts at.

        Before a pass starts it is the pending offset; after a finished pass, the end of the epoch.
        """
        return self._next_offset if self._cursor is None else self._cursor.position

    def order_signature(self) -> dict[str, Any]:
        """What fixes the global order besides seed and epoch; a resume must not change it."""
        raise NotImplementedError

    def pass_window(self, epoch: int) -> tuple[int, int]:
        """Which global positions each rank reads in the whole pass of trainer epoch ``epoch``.

        Returns ``(first, count)``: rank ``r`` of ``num_replicas`` reads positions
        ``first + r``, ``first + r + num_replicas``, and so on, ``count`` of them, and every
        rank reads the same count. The positions are those of the order of the data epoch
        that ``epoch`` belongs to (:meth:`indices_at` maps them to samples).
        """
        raise NotImplementedError

    @property
    def data_epoch(self) -> int:
        """The pass over the data that the current trainer epoch belongs to (the epoch itself here)."""
        return self.epoch

    def indices_at(self, positions: IndexArray) -> IndexArray:
        """Sample indices at global ``positions`` of the current data epoch's order (past N they wrap: padding)."""
        return global_indices(positions, self.dataset_len, self.shuffle, self.seed, self.data_epoch)

    def positions_of(self, indices: IndexArray) -> IndexArray:
        """The inverse of :meth:`indices_at`: the position of each of ``indices`` in the current data epoch's order,
        below the dataset length (a padded position ``p`` comes back as ``p - N``)."""
        if not self.shuffle:
            return np.asarray(indices, dtype=np.int64)
        return Permutation.cached(self.dataset_len, self.seed, self.data_epoch).inverse(indices)

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed and :meth:`position`: resuming from it continues at the next index, on any rank."""
        return sampler_state(self, epoch=self.epoch, sample_in_epoch=self.position(), seed=self._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` at the next pass; refuses a state of another sampler class or order.

        A state written by an earlier version of composer-sampling loads as that version
        (:mod:`composer_sampling.samplers._state`). The state's epoch and position apply
        unless this sampler was already moved to a later epoch (torchdata's
        ``StatefulDataLoader`` loads a state only when it next iterates, after the loop's
        ``set_epoch``): then the state belongs to an epoch that is over, and the new epoch
        starts at its beginning.
        """
        values = sampler_payload(self, state, ('epoch', 'sample_in_epoch', 'seed'))
        epoch = valid_int('epoch', values['epoch'], 0, MAX_EPOCH)
        position = valid_int('sample_in_epoch', values['sample_in_epoch'])
        self.seed = values['seed']
        if epoch >= self.epoch:
            self.epoch = epoch
            self.set_sample_in_epoch(position)
            return
        if position < self._pass_end():
            warnings.warn(
                f'{type(self).__name__}: the loaded state stopped at position {position} of epoch {epoch}, but this '
                f'sampler is already at epoch {self.epoch}; the rest of epoch {epoch} is skipped. Call '
                f'set_epoch({epoch}) before loading to finish it',
                stacklevel=2,
            )
        self.set_sample_in_epoch(0)

    def __repr__(self) -> str:
        fields = ', '.join(f'{name}={self._repr_value(name)}' for name in self._repr_fields)
        return f'{type(self).__name__}({fields})'

    def _repr_value(self, name: str) -> str:
        value = getattr(self, name)
        if name == 'dataset' and not isinstance(value, int):
            return f'<{type(value).__name__} len={self.dataset_len}>'
        return repr(value)


class PassIterator(chain[int]):  # a chain, so the indices flow through C, one call per index
    """One pass of an :class:`OrderedSampler`, picklable like the list iterator torch's ``DistributedSampler`` returns.

    A pass that starts at a pending offset takes it at the first ``next()``, not at
    ``iter()`` (a DataLoader with workers calls ``iter()`` on its batch sampler twice
    and reads only the second iterator). A pickled iterator carries a copy of its
    sampler and continues, once unpickled, at the index it had reached; that copy
    then tracks the unpickled pass.

    Example:
        >>> import pickle
        >>> from composer_sampling import ResumableDistributedSampler
        >>> indices = iter(ResumableDistributedSampler(10, num_replicas=2, rank=0, seed=1))
        >>> first = next(indices)
        >>> list(pickle.loads(pickle.dumps(indices))) == list(indices)
        True
    """

    _source: _PassSource

    @classmethod
    def over(cls, sampler: OrderedSampler, offset: int | None) -> PassIterator:
        """The pass of ``sampler`` from ``offset``, begun now; if None, from its pending offset at the first next()."""
        source = _PassSource(sampler, offset)
        iterator = cls(source)  # a chain asks its iterable for an iterator only when first read
        iterator._source = source
        return iterator

    def __reduce__(self) -> tuple[Any, ...]:
        source = self._source
        cursor = source.cursor
        if cursor is None and not source.given:  # not begun: the copy takes its sampler's pending offset in turn
            return PassIterator.over, (source.sampler, None)
        if cursor is None or cursor.finished:
            return _finished_pass, (source.sampler,)
        return PassIterator.over, (source.sampler, cursor.start + cursor.yielded * cursor.num_replicas)


class _PassSource:
    """The indices a :class:`PassIterator` reads, with the cursor that knows how far they were read."""

    def __init__(self, sampler: OrderedSampler, offset: int | None) -> None:
        self.sampler = sampler
        self.cursor: PassCursor | None = None
        self.given = False  # whether the chain has asked for the indices
        self._indices: Iterator[int] | None = None
        if offset is not None:
            self._indices, self.cursor = sampler._begin_pass(offset)

    def __iter__(self) -> Iterator[int]:
        if self.given:
            return iter(())
        self.given = True
        if self._indices is None:
            self._indices, self.cursor = self.sampler._begin_pass(None)
        indices, self._indices = self._indices, None
        return indices


def _finished_pass(sampler: OrderedSampler) -> PassIterator:
    """A pass read to its end: yields nothing (what an exhausted iterator unpickles to)."""
    source = _PassSource(sampler, None)
    source.given = True
    iterator = PassIterator()
    iterator._source = source
    return iterator
