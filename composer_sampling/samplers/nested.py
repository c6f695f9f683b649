"""A batch of batches: ``num_batches`` consecutive batches of an inner batch sampler, joined."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import Sampler

from composer_sampling.protocols import EpochAware, supports
from composer_sampling.samplers.delegation import DelegatedState, refresh_state_capability
from composer_sampling.validate import check_bool, check_int

__all__ = ['NestedBatchSampler', 'StatefulNestedBatchSampler']


class NestedBatchSampler(Sampler[list[int]]):
    """Joins every ``num_batches`` consecutive batches of ``batch_sampler`` into one.

    An inner batch sampler of batch 3 with ``num_batches=5`` yields batches of 15.
    The last, shorter group is yielded unless ``drop_last``. ``set_epoch`` is
    forwarded to the inner batch sampler when it has one. The indices keep the
    inner order, so a graph of ours below it resumes at a sample offset, and
    :func:`~composer_sampling.distribute` can put a distributed sampler at its
    bottom however deep it is.

    It has ``state_dict``/``load_state_dict`` (it is then a
    :class:`StatefulNestedBatchSampler`) exactly when every sampler below it that
    decides the order has them; it delegates to those. Otherwise it has none, and
    torchdata's ``StatefulDataLoader`` fast-forwards it instead.

    Args:
        batch_sampler: any batch sampler (an iterable of index lists with ``len``).
        num_batches (int): inner batches per yielded batch, at least 1.
        drop_last (bool): drop a last group of fewer than ``num_batches`` batches.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> nested = NestedBatchSampler(BatchSampler(SequentialSampler(range(7)), 2, False), num_batches=2)
        >>> list(nested), len(nested)
        ([[0, 1, 2, 3], [4, 5, 6]], 2)
    """

    keeps_child_order = True

    def __init__(self, batch_sampler: Any, num_batches: int, drop_last: bool = False) -> None:
        if not hasattr(batch_sampler, '__iter__') or not hasattr(batch_sampler, '__len__'):
            raise TypeError(
                f'batch_sampler must be a batch sampler with __iter__ and __len__, got {type(batch_sampler).__name__}',
            )
        self.batch_sampler = batch_sampler
        self.num_batches = check_int('num_batches', num_batches, minimum=1)
        self.drop_last = check_bool('drop_last', drop_last)
        refresh_state_capability(self, NestedBatchSampler, StatefulNestedBatchSampler)

    def set_epoch(self, epoch: int) -> None:
        """Forward to the inner batch sampler (harmless when SamplerSync reaches it too)."""
        if supports(self.batch_sampler, EpochAware):
            self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        group: list[int] = []
        joined = 0
        for batch in self.batch_sampler:
            group.extend(batch)
            joined += 1
            if joined == self.num_batches:
                yield group
                group, joined = [], 0
        if joined and not self.drop_last:
            yield group

    def __len__(self) -> int:
        inner = len(self.batch_sampler)
        return inner // self.num_batches if self.drop_last else -(-inner // self.num_batches)

    def __repr__(self) -> str:
        return (f'NestedBatchSampler(batch_sampler={self.batch_sampler!r}, num_batches={self.num_batches}, '
                f'drop_last={self.drop_last})')


class StatefulNestedBatchSampler(NestedBatchSampler, DelegatedState):
    """A :class:`NestedBatchSampler` whose order-deciding samplers below all have a state; it delegates to them."""
