"""What a wrapper groups, under which attribute: the one answer, and the edge where a tap sees every batch."""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph import active_root, batches_as_torch
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.nested import NestedBatchSampler

__all__ = ['Grouping', 'grouping', 'top_edge']


@dataclasses.dataclass(frozen=True)
class Grouping:
    """How a node that only groups, in order, the items of the one edge below it does so."""

    attribute: str  # the edge below: 'sampler' or 'batch_sampler'
    size: int  # items of that edge per item of the node
    keep_partial: bool  # whether a last, shorter group is an item


def grouping(node: Any) -> Grouping | None:
    """How ``node`` groups the items below it, or None when it may do anything else (decide, reorder, yield batches
    of its own making). The one answer to "what does this node group, under which attribute", subclasses included:
    torch's ``BatchSampler`` or a subclass that keeps its ``__iter__``
    (:func:`~composer_sampling._graph.batches_as_torch`), :class:`~composer_sampling.NestedBatchSampler` and
    :class:`~composer_sampling.samplers.DistributedBatchAdapter`. Anything else, a ``DistributedSampler`` subclass
    that yields whole batches included, is not a grouping: the resume decision and the top tap treat it as a node that
    decides the batches it yields (:func:`~composer_sampling._graph.keeps_child_order` agrees).

    Example:
        >>> from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler
        >>> grouping(BatchSampler(SequentialSampler(range(5)), 2, drop_last=True))
        Grouping(attribute='sampler', size=2, keep_partial=False)
        >>> grouping(DistributedSampler(range(5), num_replicas=1, rank=0)) is None
        True
    """
    if batches_as_torch(node):
        return Grouping('sampler', int(node.batch_size), not node.drop_last)
    if isinstance(node, NestedBatchSampler):
        return Grouping('batch_sampler', node.num_batches, not node.drop_last)
    if isinstance(node, DistributedBatchAdapter):
        return Grouping('batch_sampler', 1, True)
    return None


def top_edge(loader: DataLoader) -> tuple[Any, str, int, bool]:
    """Where a tap sees every batch the DataLoader reads: the edge below the top when the top is ours or torch's.

    Returns ``(parent, attribute, items of that edge per batch, whether a last shorter group is a batch)``;
    ``parent`` None means the top itself is a batch sampler of yours, which only a new DataLoader with the
    tap as its batch sampler can see.

    Example:
        >>> loader = DataLoader(range(8), batch_size=4, drop_last=True)
        >>> parent, attribute, group, keep_partial = top_edge(loader)
        >>> type(parent).__name__, attribute, group, keep_partial
        ('BatchSampler', 'sampler', 4, False)
    """
    top = active_root(loader)
    group = grouping(top)
    if group is None:
        return None, 'batch_sampler', 1, True
    return top, group.attribute, group.size, group.keep_partial
