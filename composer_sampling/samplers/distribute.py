"""Make any DataLoader distributed: replace its innermost index sampler, however deep it is nested."""

from __future__ import annotations

import copy
from typing import Any

from torch.utils.data import (
    BatchSampler,
    DataLoader,
    DistributedSampler,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)

from composer_sampling._graph.grouping import grouping
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.walk import labelled_children
from composer_sampling._validate import resolve_replicas, valid_int
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.protocols import is_torch_own
from composer_sampling.samplers._base import OrderedSampler
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.nested import NestedBatchSampler, StatefulNestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler

__all__ = ['distribute', 'rebuild_loader']

_LOADER_SETTINGS = (
    'num_workers', 'collate_fn', 'pin_memory', 'timeout', 'worker_init_fn', 'multiprocessing_context', 'generator',
    'prefetch_factor', 'persistent_workers', 'pin_memory_device', 'in_order',
)


def distribute(dataloader: DataLoader[Any], num_replicas: int | None = None, rank: int | None = None,
               seed: int = 0) -> DataLoader[Any]:
    """A copy of ``dataloader`` whose innermost index sampler is a :class:`ResumableDistributedSampler`.

    The graph is followed from the DataLoader through every ``batch_sampler`` or
    ``sampler`` attribute down to the index sampler at its bottom, which is
    replaced: a ``RandomSampler`` by a shuffled ``ResumableDistributedSampler``, a
    ``SequentialSampler`` by an unshuffled one, a ``DistributedSampler`` by one with
    its ``shuffle`` and ``drop_last``. Every level above is built anew over its new
    child: torch's ``BatchSampler`` and our wrappers through their constructors (so a
    wrapper is stateful exactly when its new graph is), any other class as a shallow
    copy with the child attribute set; the input DataLoader is left untouched. A custom batch sampler on
    top is wrapped in :class:`~composer_sampling.samplers.DistributedBatchAdapter`,
    so Composer's multi-rank check accepts the result; an adapter already in the graph
    is left out (a subclass with an ``__iter__`` of its own is no adapter but a
    sampler of yours, :func:`~composer_sampling._graph.grouping.grouping`). Dataset, workers, collate
    function, pin_memory and the other settings are kept.

    Args:
        dataloader (DataLoader): a map-style DataLoader.
        num_replicas (int, optional): world size; defaults to ``composer.utils.dist.get_world_size()``.
        rank (int, optional): global rank; defaults to ``composer.utils.dist.get_global_rank()``.
        seed (int): data seed of the new sampler (``SamplerSync`` replaces it at fit start).

    Raises:
        ValueError: a level that has no ``sampler``/``batch_sampler`` to replace, or
            several (a ``samplers`` group), or an index sampler that cannot be made
            distributed exactly (weighted, subset, with replacement), naming its class.

    Example:
        >>> from torch.utils.data import BatchSampler, RandomSampler
        >>> from composer_sampling.samplers import NestedBatchSampler
        >>> inner = BatchSampler(RandomSampler(range(30)), 3, drop_last=False)
        >>> loader = DataLoader(range(30), batch_sampler=NestedBatchSampler(inner, num_batches=5))
        >>> ranked = distribute(loader, num_replicas=2, rank=1)
        >>> [len(batch) for batch in ranked]
        [15]
        >>> hasattr(ranked.batch_sampler, 'state_dict'), hasattr(loader.batch_sampler, 'state_dict')
        (True, False)
    """
    if not isinstance(dataloader, DataLoader):
        raise TypeError(f'distribute expects a torch DataLoader, got {type(dataloader).__name__}')
    if isinstance(dataloader.dataset, IterableDataset):
        raise ValueError('distribute applies to map-style datasets; an IterableDataset must shard itself')
    num_replicas, rank = resolve_replicas(num_replicas, rank)
    valid_int('seed', seed, 0, MAX_DATA_SEED)

    def replace(node: Any, depth: int) -> Any:
        if isinstance(node, DistributedBatchAdapter) and grouping(node) is not None:
            return replace(node.batch_sampler, depth)  # the new top gets an adapter of its own
        leaf = _distributed_leaf(node, dataloader.dataset, num_replicas, rank, seed)
        if leaf is not None:
            if leaf is not node:  # refusals then speak of the sampler the user wrote
                leaf.distributed_from = type(node).__name__
            return leaf
        edges = labelled_children(node)
        if len(edges) != 1 or edges[0][0] not in ('batch_sampler', 'sampler'):
            found = ', '.join(label for label, _ in edges) or 'none'
            raise ValueError(
                f'distribute cannot rebuild {type(node).__name__} at depth {depth}: it needs exactly one sampler or '
                f'batch_sampler attribute to replace (found: {found}). Build that level on a '
                'ResumableDistributedSampler yourself and wrap the top in DistributedBatchAdapter',
            )
        (name, child), = edges
        return _rebuilt(node, name, replace(child, depth + 1))

    custom_batches = dataloader.batch_sampler is not None and dataloader.batch_size is None
    if custom_batches:
        return rebuild_loader(dataloader, batch_sampler=DistributedBatchAdapter(replace(dataloader.batch_sampler, 1)))
    return rebuild_loader(dataloader, batch_size=dataloader.batch_size, drop_last=dataloader.drop_last,
                          sampler=replace(dataloader.sampler, 1))


def rebuild_loader(dataloader: DataLoader[Any], dataset: Any = None, **samplers: Any) -> DataLoader[Any]:
    """A new ``DataLoader`` with the same settings (workers, collate, ...), new samplers, and the same dataset
    unless ``dataset`` replaces it.

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> loader = DataLoader(range(6), batch_size=2, num_workers=0)
        >>> [batch.tolist() for batch in rebuild_loader(loader, batch_size=3)]
        [[0, 1, 2], [3, 4, 5]]
    """
    settings = {name: getattr(dataloader, name) for name in _LOADER_SETTINGS if hasattr(dataloader, name)}
    if dataloader.num_workers == 0:
        settings.pop('prefetch_factor', None)
    return DataLoader(dataloader.dataset if dataset is None else dataset, **samplers, **settings)


def _rebuilt(node: Any, name: str, child: Any) -> Any:
    """``node`` built anew over ``child`` (hung from ``name``): through the constructor for torch's
    ``BatchSampler``, our wrappers and taps; a shallow copy with ``name`` set for any other class."""
    if is_torch_own(node, BatchSampler):
        return BatchSampler(child, node.batch_size, node.drop_last)
    if type(node) in (NestedBatchSampler, StatefulNestedBatchSampler):
        return NestedBatchSampler(child, node.num_batches, node.drop_last)
    if type(node) is IndexTap:
        return IndexTap(child, node.group, node.keep_partial)
    rebuilt = copy.copy(node)
    try:
        setattr(rebuilt, name, child)
    except AttributeError:
        raise ValueError(
            f'distribute cannot set {type(node).__name__}.{name} (read-only); build that level on a '
            'ResumableDistributedSampler yourself and wrap the top in DistributedBatchAdapter',
        ) from None
    return rebuilt


def _distributed_leaf(node: Any, dataset: Any, num_replicas: int, rank: int, seed: int) -> Any:
    """The distributed replacement of an index sampler, or None when ``node`` is a level to descend."""
    if type(node) is ResumableDistributedSampler or is_torch_own(node, DistributedSampler):
        return ResumableDistributedSampler(node.dataset, num_replicas, rank, shuffle=node.shuffle, seed=seed,
                                           drop_last=node.drop_last)
    if isinstance(node, (OrderedSampler, DistributedSampler)):  # a subclass keeps its own order: never replaced
        if (node.num_replicas, node.rank) != (num_replicas, rank):
            raise ValueError(
                f'{type(node).__name__} is already distributed for num_replicas={node.num_replicas}, rank={node.rank}; '
                f'distribute cannot rebuild a subclass without losing its order: build it for '
                f'num_replicas={num_replicas}, rank={rank} yourself',
            )
        return node
    if is_torch_own(node, SequentialSampler):
        return ResumableDistributedSampler(dataset, num_replicas, rank, shuffle=False, seed=seed)
    if is_torch_own(node, RandomSampler):
        if node.replacement or node.num_samples != len(dataset):
            raise ValueError(
                f'RandomSampler(replacement={node.replacement}, num_samples={node.num_samples}) draws with '
                'replacement or a different number of samples than the dataset holds, which no distributed '
                'sampler reproduces exactly; use RandomSampler(dataset) or a ResumableDistributedSampler',
            )
        return ResumableDistributedSampler(dataset, num_replicas, rank, shuffle=True, seed=seed)
    if not labelled_children(node):
        raise ValueError(
            f'distribute cannot replace {type(node).__name__}: only RandomSampler, SequentialSampler and '
            'DistributedSampler index samplers have an exact distributed equivalent. Build the graph on a '
            'ResumableDistributedSampler (over a Subset for a subset) and wrap the top in DistributedBatchAdapter',
        )
    return None
