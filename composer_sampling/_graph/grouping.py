"""What a wrapper groups, and under which attribute: one answer, subclasses included.

A node *groups* when it yields, in order, the items of the one edge below it, a
fixed number of them at a time: torch's ``BatchSampler`` groups the indices of
its ``sampler``, :class:`~composer_sampling.NestedBatchSampler` the batches of its
``batch_sampler``, :class:`~composer_sampling.DistributedBatchAdapter` passes the
batches of its ``batch_sampler`` on one by one. Which class a node groups like is
decided by the class its ``__iter__`` comes from:

* a subclass that keeps its parent's ``__iter__`` (one that only adds constructor
  arguments, attributes or a state) groups as the parent does;
* a subclass with an ``__iter__`` of its own is the user's own: it may reorder,
  drop or repeat, so it is no grouping, and every caller treats it as a node that
  decides what it yields.

The resume decision, the top tap, the batch math, the construction proof's rank
shape and :func:`~composer_sampling.distribute` all ask :func:`grouping`.

Example:
    >>> from torch.utils.data import BatchSampler, SequentialSampler
    >>> class Named(BatchSampler): pass
    >>> class Tuples(BatchSampler):
    ...     def __iter__(self): return (tuple(batch) for batch in super().__iter__())
    >>> [grouping(kind(SequentialSampler(range(5)), 2, True)) for kind in (Named, Tuples)]
    [Grouping(attribute='sampler', size=2, keep_partial=False), None]
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.data import BatchSampler

from composer_sampling.protocols import OrderPreserving, supports

__all__ = ['Grouping', 'GroupsUnder', 'batches_as_torch', 'grouping', 'keeps_child_order']


@dataclasses.dataclass(frozen=True)
class GroupsUnder:
    """A grouping class's declaration (class attribute ``groups_under``, next to its own ``__iter__``).

    ``attribute`` is the edge below, ``sampler`` (it groups single indices) or
    ``batch_sampler`` (it groups batches); ``size`` names the attribute holding the
    items per group, with ``drop_last`` beside it; ``None``: one item per item, and
    none dropped.
    """

    attribute: str
    size: str | None = None


@dataclasses.dataclass(frozen=True)
class Grouping:
    """How a node that only groups, in order, the items of the one edge below it does so."""

    attribute: str  # the edge below: 'sampler' (single indices) or 'batch_sampler' (batches)
    size: int  # items of that edge per item of the node
    keep_partial: bool  # whether a last, shorter group is an item (not drop_last)


#: torch's grouping classes, which cannot declare ``groups_under`` themselves.
_TORCH_GROUPINGS: dict[type, GroupsUnder] = {BatchSampler: GroupsUnder('sampler', 'batch_size')}


def _iter_owner(kind: type) -> type | None:
    """The class of ``kind``'s MRO whose ``__iter__`` an instance runs."""
    return next((klass for klass in kind.__mro__ if '__iter__' in vars(klass)), None)


def grouping(node: Any) -> Grouping | None:
    """How ``node`` groups the items below it, or None when it may do anything else (decide, reorder, yield batches
    of its own making).

    ``node`` groups when the class its ``__iter__`` comes from is torch's
    ``BatchSampler`` or declares ``groups_under`` (:class:`GroupsUnder`) itself;
    a subclass that overrides ``__iter__`` is the user's own, whatever its parent.

    Example:
        >>> from torch.utils.data import BatchSampler, DistributedSampler, SequentialSampler
        >>> grouping(BatchSampler(SequentialSampler(range(5)), 2, drop_last=True))
        Grouping(attribute='sampler', size=2, keep_partial=False)
        >>> grouping(DistributedSampler(range(5), num_replicas=1, rank=0)) is None
        True
    """
    owner = _iter_owner(type(node))
    if owner is None:
        return None
    declared = _TORCH_GROUPINGS.get(owner) or vars(owner).get('groups_under')
    if not isinstance(declared, GroupsUnder):
        return None
    if declared.size is None:
        return Grouping(declared.attribute, 1, True)
    return Grouping(declared.attribute, int(getattr(node, declared.size)), not node.drop_last)


def batches_as_torch(node: Any) -> bool:
    """Whether ``node`` batches its ``sampler`` with torch's own ``BatchSampler.__iter__``.

    Torch's ``BatchSampler`` does, and so does a subclass that keeps its ``__iter__``:
    that method groups ``node.sampler`` in order by ``node.batch_size`` and
    ``node.drop_last``, whatever the class.

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> class Named(BatchSampler): pass
        >>> class Tuples(BatchSampler):
        ...     def __iter__(self): return (tuple(batch) for batch in super().__iter__())
        >>> [batches_as_torch(kind(SequentialSampler(range(4)), 2, False)) for kind in (BatchSampler, Named, Tuples)]
        [True, True, False]
    """
    return _iter_owner(type(node)) is BatchSampler


def keeps_child_order(node: Any) -> bool:
    """Whether ``node`` only groups or forwards, in order, the indices of the nodes below it.

    A grouping does (:func:`grouping`: torch's ``BatchSampler`` included, which
    cannot say so itself); any class may say so with a class attribute
    ``keeps_child_order = True`` (:class:`~composer_sampling.protocols.OrderPreserving`).
    """
    return grouping(node) is not None or supports(node, OrderPreserving)
