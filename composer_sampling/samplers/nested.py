"""A batch of batches: ``num_batches`` consecutive batches of an inner batch sampler, joined."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import (
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
    SubsetRandomSampler,
    WeightedRandomSampler,
)

from composer_sampling._graph.grouping import GroupsUnder
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.protocols import EpochAware, OrderPreserving, PassIndices, PassPositions, supports
from composer_sampling.samplers._delegation import DelegatedState

__all__ = ['NestedBatchSampler', 'StatefulNestedBatchSampler', 'yields_indices']

_TORCH_INDEX_SAMPLERS = (SequentialSampler, RandomSampler, SubsetRandomSampler, WeightedRandomSampler)


def yields_indices(node: Any) -> bool:
    """Whether ``node`` is known to yield single indices, not batches: torch's index samplers, ours, and any
    sampler that reads its pass as indices or positions (``pass_indices``, ``pass_positions``).

    Example:
        >>> from torch.utils.data import BatchSampler
        >>> inner = SequentialSampler(range(4))
        >>> yields_indices(inner), yields_indices(BatchSampler(inner, 2, False))
        (True, False)
    """
    if isinstance(node, _TORCH_INDEX_SAMPLERS) or supports(node, PassIndices) or supports(node, PassPositions):
        return True
    return isinstance(node, DistributedSampler) and not supports(node, OrderPreserving)  # an adapter yields batches


class NestedBatchSampler(DelegatedState, Sampler[list[int]]):
    """Joins every ``num_batches`` consecutive batches of ``batch_sampler`` into one.

    An inner batch sampler of batch 3 with ``num_batches=5`` yields batches of 15.
    The last, shorter group is yielded unless ``drop_last``. ``set_epoch`` is
    forwarded to the inner batch sampler when it has one. The indices keep the
    inner order, so a graph of ours below it resumes at a sample offset, and
    :func:`~composer_sampling.samplers.distribute` can put a distributed sampler at its
    bottom however deep it is.

    The instance has ``state_dict``/``load_state_dict`` exactly when every sampler
    below it that decides the order has them; it delegates to those. Otherwise it has
    neither, and torchdata's ``StatefulDataLoader`` fast-forwards it instead. This is
    decided when it is constructed (:mod:`composer_sampling.samplers._delegation`).

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
    groups_under = GroupsUnder('batch_sampler', 'num_batches')  # what grouping() reads, for this __iter__

    def __init__(self, batch_sampler: Any, num_batches: int, drop_last: bool = False) -> None:
        if not hasattr(batch_sampler, '__iter__') or not hasattr(batch_sampler, '__len__'):
            raise TypeError(
                f'batch_sampler must be a batch sampler with __iter__ and __len__, got {type(batch_sampler).__name__}',
            )
        if yields_indices(batch_sampler):
            raise TypeError(
                f'batch_sampler must yield batches (lists of indices), got the index sampler '
                f'{type(batch_sampler).__name__}; wrap it first: NestedBatchSampler(BatchSampler(sampler, '
                'batch_size, drop_last=False), num_batches)',
            )
        self.batch_sampler = batch_sampler
        self.num_batches = valid_int('num_batches', num_batches, minimum=1)
        self.drop_last = valid_bool('drop_last', drop_last)
        self._offer_state()

    def set_epoch(self, epoch: int) -> None:
        """Forward to the inner batch sampler (harmless when SamplerSync reaches it too)."""
        if supports(self.batch_sampler, EpochAware):
            self.batch_sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[list[int]]:
        group: list[int] = []
        joined = 0
        for batch in self.batch_sampler:
            if isinstance(batch, (int, np.integer)):
                raise TypeError(
                    f'NestedBatchSampler: batch_sampler {type(self.batch_sampler).__name__} yielded the index '
                    f'{batch}, not a batch; it must yield lists of indices (wrap an index sampler in BatchSampler)',
                )
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


class StatefulNestedBatchSampler(NestedBatchSampler):
    """A :class:`NestedBatchSampler` that refuses a graph below it that cannot restore a state."""

    requires_state = True

