"""One walk of a DataLoader's graph, recorded: what seeding, epochs, resume, plan, summary and ledger ask.

:func:`take_snapshot` walks the sampler graph once (:func:`~composer_sampling._graph.walk.walk`,
from the DataLoader, so a DataLoader's unused ``sampler`` is seen too) and the
dataset's wrappers once (:func:`~composer_sampling.per_sample_rng.iter_datasets`),
and records every node with its path, its capabilities
(each Protocol of :mod:`composer_sampling.protocols` that it supports) and whether the active root
(:func:`~composer_sampling._graph.walk.active_root`) draws through it. A fit start takes
one snapshot and every question is answered from it: which nodes to seed, to give
the epoch, to compare order signatures of, to place at an offset, to count.

Values that change during a run (a sampler's ``seed``, ``epoch``, ``generator``)
are read from the nodes when asked; the graph's shape and the nodes' capabilities
are what the snapshot fixes.

Example:
    >>> from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
    >>> from composer_sampling import ResumableDistributedSampler
    >>> loader = DataLoader(range(8), batch_sampler=BatchSampler(ResumableDistributedSampler(8, 2, 0), 2, False))
    >>> graph = take_snapshot(loader)
    >>> [type(node).__name__ for node in graph.active], [type(node).__name__ for node in graph.unused]
    (['BatchSampler', 'ResumableDistributedSampler'], ['SequentialSampler'])
    >>> graph.sub_epochs(), graph.device_batch()
    (1, 2)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.data import DataLoader, IterableDataset

import composer_sampling._graph.walk as sampler_graph
from composer_sampling._graph.accounting import EpochAccounting
from composer_sampling._graph.grouping import keeps_child_order
from composer_sampling._graph.seeding import draws_from_generator, is_streaming_dataset
from composer_sampling._graph.signatures import order_signature
from composer_sampling._graph.walk import Visit, active_root, describe, device_batch, replication_layout
from composer_sampling.per_sample_rng import PerSampleRNG, iter_datasets
from composer_sampling.protocols import (
    CAPABILITIES,
    EpochAware,
    EpochUsage,
    ReportsSources,
    Seeded,
    SeedForwarding,
    Sharded,
    SubEpochs,
    supports,
)

__all__ = ['EpochAccounting', 'EpochData', 'GraphSnapshot', 'take_snapshot']


@dataclasses.dataclass(frozen=True)
class EpochData:
    """What one pass over the data is, as one rank of a run sees it: what a ledger's header records of it.

    ``replication``: the groups of ranks the sharding samplers were built for (1 if none);
    ``accounting``: the pass across the data-parallel ranks; ``sub_epochs``: trainer epochs per pass.
    """

    replication: int
    accounting: EpochAccounting
    sub_epochs: int


@dataclasses.dataclass(frozen=True)
class GraphSnapshot:
    """The graph of ``loader`` as one walk found it.

    Attributes:
        loader: what was walked (a DataLoader, or a sampler).
        root: the node the loader draws from (the sampler itself for a sampler).
        visits: every sampler reached from ``loader``, in walk order, with its edges.
        active: the nodes the root draws through (the root first), in walk order.
        unused: nodes reached from the loader that the root does not draw through.
        datasets: the loader's dataset and every dataset it wraps.
        stream: the loader's dataset when it is a mosaicml-streaming ``StreamingDataset``, else None.
    """

    loader: Any
    root: Any
    visits: tuple[Visit, ...]
    active: tuple[Any, ...]
    unused: tuple[Any, ...]
    datasets: tuple[Any, ...]
    stream: Any
    _capabilities: dict[int, frozenset[type]] = dataclasses.field(repr=False)

    @property
    def nodes(self) -> tuple[Any, ...]:
        """Every sampler reached from the loader, the unused ones included, in walk order."""
        return tuple(visit.node for visit in self.visits)

    @property
    def map_style(self) -> bool:
        """Whether the loader indexes a map-style dataset (the only kind samplers apply to)."""
        return not isinstance(getattr(self.loader, 'dataset', None), IterableDataset)

    def has(self, node: Any, protocol: type) -> bool:
        """Whether ``node`` had ``protocol`` when the snapshot was taken."""
        return protocol in self._capabilities.get(id(node), frozenset())

    def with_capability(self, protocol: type, active_only: bool = True) -> list[Any]:
        """The nodes with ``protocol``: of the active graph, or of every sampler the loader holds."""
        return [node for node in (self.active if active_only else self.nodes) if self.has(node, protocol)]

    def seeded(self) -> list[Any]:
        """Every sampler with a ``seed`` of its own (not one forwarded to the samplers below), unused ones too."""
        return [node for node in self.nodes if self.has(node, Seeded) and not self.has(node, SeedForwarding)]

    def epoch_aware(self) -> list[Any]:
        """Every sampler with ``set_epoch``, unused ones too."""
        return self.with_capability(EpochAware, active_only=False)

    def set_epoch(self, epoch: int) -> None:
        """``set_epoch(epoch)`` on every sampler that has one, unused ones too."""
        for node in self.epoch_aware():
            node.set_epoch(epoch)

    def generator_nodes(self, active_only: bool = False) -> list[Any]:
        """The samplers that draw their order from a ``generator`` attribute now (torch's ``RandomSampler``)."""
        return [node for node in (self.active if active_only else self.nodes) if draws_from_generator(node)]

    def sharding(self) -> list[Any]:
        """The active nodes that shard by rank (:class:`~composer_sampling.protocols.Sharded`)."""
        return self.with_capability(Sharded)

    def deciding(self) -> list[Any]:
        """The active nodes that decide the order: those that do not only group or forward what is below them."""
        return [node for node in self.active if not keeps_child_order(node)]

    def signatures(self) -> list[dict[str, Any]]:
        """The order signature of every active node that has one, in walk order."""
        return [signature for node in self.active if (signature := order_signature(node))]

    def signature_nodes(self) -> list[str]:
        """The active nodes that have an order signature, described as the user wrote them, in walk order."""
        return [describe(node) for node in self.active if order_signature(node)]

    def sub_epochs(self) -> int:
        """Trainer epochs per pass over the data: the first active node's ``sub_epochs_per_epoch``, else 1."""
        return next((node.sub_epochs_per_epoch for node in self.active if self.has(node, SubEpochs)), 1)

    def sources(self) -> list[dict[str, int]]:
        """The per-source report of the first active mixture (``source_report()``), else none."""
        return next((node.source_report() for node in self.active if self.has(node, ReportsSources)), [])

    def accounting(self, world_size: int) -> EpochAccounting:
        """Samples trained, padded and dropped per pass over ``world_size`` data-parallel ranks, read off the first
        sharding node that tells (its ``epoch_usage()``, or its ``num_samples`` and dataset); else the dataset's.

        Example:
            >>> from composer_sampling import ResumableDistributedSampler
            >>> loader = DataLoader(range(10), batch_size=2, sampler=ResumableDistributedSampler(10, 4, 0))
            >>> take_snapshot(loader).accounting(world_size=4)
            EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=2)
        """
        dataset_len = len(self.loader.dataset)
        trained = dataset_len
        for node in self.sharding():
            if self.has(node, EpochUsage):
                dataset_len, trained = node.epoch_usage()
                break
            node_len = _dataset_len(node)
            if node_len is not None and isinstance(getattr(node, 'num_samples', None), int):
                dataset_len, trained = node_len, node.num_samples * world_size
                break
        return EpochAccounting(dataset_len=dataset_len, trained=trained, padded=max(trained - dataset_len, 0),
                               dropped=max(dataset_len - trained, 0), steps=len(self.loader))

    def epoch_data(self, world_size: int, rank: int) -> EpochData:
        """One pass over the data as ``rank`` of ``world_size`` sees it: replication, accounting, sub-epochs.

        The replication is the layout the first sharding node matches
        (:func:`~composer_sampling._graph.walk.replication_layout`), 1 if none does; the
        accounting is over the ``world_size // replication`` data-parallel ranks.

        Example:
            >>> from composer_sampling import ResumableDistributedSampler
            >>> loader = DataLoader(range(8), batch_size=2, sampler=ResumableDistributedSampler(8, 2, 1))
            >>> data = take_snapshot(loader).epoch_data(world_size=4, rank=3)
            >>> data.replication, data.accounting.trained, data.sub_epochs
            (2, 8, 1)
        """
        sharding = self.sharding()
        layouts = (replication_layout(node.num_replicas, node.rank, world_size, rank) for node in sharding)
        replication = next((layout for layout in layouts if layout is not None), 1)
        return EpochData(replication, self.accounting(world_size // replication), self.sub_epochs())

    def edges_to(self, node: Any) -> list[tuple[Any, str, Any]] | None:
        """The edges ``(parent, attribute, child)`` from the root down to ``node``, or None if the root does not
        draw through it; ``[]`` for the root itself.

        Example:
            >>> from torch.utils.data import DataLoader
            >>> graph = take_snapshot(DataLoader(range(4), batch_size=2))
            >>> graph.edges_to(graph.root), [attribute for _, attribute, _ in graph.edges_to(graph.active[1])]
            ([], ['sampler'])
        """
        visit = next((visit for visit in self.visits if visit.node is node), None)
        if visit is None or not any(node is active for active in self.active):
            return None
        children = [*(parent for parent, _ in visit.edges[1:]), node]
        path = [(parent, attribute, child) for (parent, attribute), child in zip(visit.edges, children, strict=True)]
        if path and path[0][0] is self.loader and self.root is not self.loader:
            path = path[1:]  # from the root, not from the loader
        return path

    def device_batch(self) -> int | None:
        """Samples per batch the loader yields (:func:`~composer_sampling._graph.walk.device_batch`)."""
        return device_batch(self.loader, self.active) if isinstance(self.loader, DataLoader) else None

    def per_sample_rngs(self) -> list[PerSampleRNG]:
        """Every :class:`~composer_sampling.PerSampleRNG` in the dataset, in walk order."""
        return [node for node in self.datasets if isinstance(node, PerSampleRNG)]



def _dataset_len(node: Any) -> int | None:
    if isinstance(getattr(node, 'dataset_len', None), int):
        return node.dataset_len
    dataset = getattr(node, 'dataset', None)
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:
        return None


def take_snapshot(obj: Any) -> GraphSnapshot:
    """Walk ``obj`` (a DataLoader or a sampler) once and record its graph and its datasets.

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> [type(node).__name__ for node in take_snapshot(SequentialSampler(range(3))).deciding()]
        ['SequentialSampler']
    """
    visits = tuple(sampler_graph.walk(obj))  # looked up on the module: the one walk, wherever it is wrapped
    if isinstance(obj, DataLoader):
        root = active_root(obj)
        label = 'batch_sampler' if obj.batch_sampler is not None else 'sampler'
        active = tuple(visit.node for visit in visits if visit.labels[0] == label)
    else:
        root = obj
        active = tuple(visit.node for visit in visits)
    active_ids = {id(node) for node in active}
    unused = tuple(visit.node for visit in visits if id(visit.node) not in active_ids)
    dataset = getattr(obj, 'dataset', None) if isinstance(obj, DataLoader) else None
    datasets = tuple(iter_datasets(dataset)) if dataset is not None else ()
    found = {id(visit.node): frozenset(p for p in CAPABILITIES if supports(visit.node, p)) for visit in visits}
    stream = datasets[0] if datasets and is_streaming_dataset(datasets[0]) else None
    return GraphSnapshot(obj, root, visits, active, unused, datasets, stream, found)
