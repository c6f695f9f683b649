"""What every sampler of ours shares: validated arguments, seed, epoch, one-shot start offset, checkpoints."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import DistributedSampler

from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.positions import PassCursor
from composer_sampling.samplers.state import check_state, sampler_state
from composer_sampling.validate import check_bool, check_int, resolve_replicas

__all__ = ['OrderedSampler']


class OrderedSampler(DistributedSampler):
    """Base of our samplers: a ``DistributedSampler`` whose order is a pure function of seed and epoch.

    Subclasses set ``dataset_len`` (or what defines their order), implement
    :meth:`_iter_pass`, :meth:`_pass_end`, ``num_samples`` and
    :meth:`order_signature`, and list in ``_repr_fields`` the constructor arguments
    ``__repr__`` shows.

    Positions are global: a pass that starts at position ``s`` and of which this
    rank has yielded ``k`` indices stands at ``s + k * num_replicas``, whatever the
    rank, so a state taken on one world size resumes on another. A start offset
    (:meth:`set_sample_in_epoch` or :meth:`load_state_dict`) applies to the next
    pass only; ``set_epoch`` with the same epoch keeps a pending offset (the
    trainer repeats it after a resume), a new epoch clears it.
    """

    _repr_fields: tuple[str, ...] = ()

    def __init__(
        self,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int,
        drop_last: bool = False,
    ) -> None:
        self.num_replicas, self.rank = resolve_replicas(num_replicas, rank)
        self.shuffle = check_bool('shuffle', shuffle)
        self.drop_last = check_bool('drop_last', drop_last)
        self._seed = check_int('seed', seed, 0, MAX_DATA_SEED)
        self.epoch = 0
        self._next_start = 0
        self._cursor: PassCursor | None = None

    @property
    def seed(self) -> int:
        """The data seed; must be identical on every rank."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = check_int('seed', value, 0, MAX_DATA_SEED)

    @property
    def total_size(self) -> int:  # type: ignore[override]
        """Indices across all ranks in the current epoch, padding included."""
        return self.num_samples * self.num_replicas

    @property
    def sample_in_epoch(self) -> int:
        """The global position the next pass starts at (0 unless an offset is pending)."""
        return self._next_start

    def __len__(self) -> int:
        return self.num_samples

    def epoch_usage(self) -> tuple[int, int]:
        """Dataset length and samples trained across ranks in one pass over the data (padding included)."""
        return self.dataset_len, self.total_size

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's order; a new epoch starts at its beginning, the same epoch keeps a pending offset."""
        epoch = check_int('epoch', epoch)
        if epoch != self.epoch:
            self._next_start = 0
            self._cursor = None
        self.epoch = epoch

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None:
        """Start the next pass after ``sample_in_epoch`` samples of this epoch trained across all ranks."""
        self._next_start = check_int('sample_in_epoch', sample_in_epoch)
        self._cursor = None

    def __iter__(self) -> Iterator[int]:
        if self._next_start == 0:
            return self._iter_pass(0)
        return self._offset_pass()

    def _offset_pass(self) -> Iterator[int]:
        # A generator: the offset is taken at the first next(), not at iter(). A DataLoader with workers calls
        # iter() on its batch sampler twice and reads only the second iterator.
        start, self._next_start = self._next_start, 0
        yield from self._iter_pass(start)

    def _cursor_for(self, start: int, count: int) -> PassCursor:
        """A new cursor for the pass about to start; :meth:`state_dict` reads it."""
        self._cursor = PassCursor(start=start, end=self._pass_end(), num_replicas=self.num_replicas, count=count)
        return self._cursor

    def _iter_pass(self, start: int) -> Iterator[int]:
        """This rank's indices of the current epoch from global position ``start``; calls :meth:`_cursor_for`."""
        raise NotImplementedError

    def _pass_end(self) -> int:
        """The global position at which the current epoch's pass ends."""
        raise NotImplementedError

    def pass_indices(self) -> np.ndarray:
        """The indices the next ``iter()`` would yield, as one array; nothing is consumed (plan reads this).

        Example:
            >>> from composer_sampling import ResumableDistributedSampler
            >>> sampler = ResumableDistributedSampler(10, num_replicas=2, rank=1, shuffle=False)
            >>> sampler.pass_indices().tolist() == list(sampler)
            True
        """
        saved = self._cursor
        try:
            return np.fromiter(self._iter_pass(self._next_start), dtype=np.int64)
        finally:
            self._cursor = saved

    def position(self) -> int:
        """Where the current pass stands as a global position: the next index a resume starts at.

        Before a pass starts it is the pending offset; after a finished pass, the end of the epoch.
        """
        return self._next_start if self._cursor is None else self._cursor.position

    def order_signature(self) -> dict[str, Any]:
        """What fixes the global order besides seed and epoch; a resume must not change it."""
        raise NotImplementedError

    def state_dict(self) -> dict[str, Any]:
        """Epoch, seed and :meth:`position`: resuming from it continues at the next index, on any rank."""
        return sampler_state(self, epoch=self.epoch, sample_in_epoch=self.position(), seed=self._seed)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume from :meth:`state_dict` at the next pass; refuses a state saved by a sampler of another order.

        The state's epoch and position apply unless this sampler was already moved to a later epoch
        (torchdata's ``StatefulDataLoader`` loads a state only when it next iterates, after the
        loop's ``set_epoch``): then the state belongs to an epoch that is over, and the new epoch
        starts at its beginning.
        """
        values = check_state(self, state, ('epoch', 'sample_in_epoch', 'seed'))
        epoch = check_int('epoch', values['epoch'])
        position = check_int('sample_in_epoch', values['sample_in_epoch'])
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
