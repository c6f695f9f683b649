"""Present a custom batch-sampler graph to Composer as the ``DistributedSampler`` it insists on."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from torch.utils.data import DistributedSampler

from composer_sampling._graph.grouping import GroupsUnder
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.walk import iter_samplers
from composer_sampling._validate import resolve_replicas
from composer_sampling.protocols import EpochAware, Seeded, Sharded, supports
from composer_sampling.samplers._delegation import DelegatedState

__all__ = ['DistributedBatchAdapter', 'StatefulDistributedBatchAdapter']


class DistributedBatchAdapter(DelegatedState, DistributedSampler[int]):
    """Wraps a batch sampler whose graph already shards by rank, so that Composer accepts it.

    Composer (``composer/core/data_spec.py``) refuses a DataLoader in a multi-rank
    run unless ``dataloader.sampler`` or ``dataloader.batch_sampler`` *is* a
    ``DistributedSampler``; a custom batch sampler wrapping
    ``BatchSampler(DistributedSampler(...))`` fails that check although it shards
    correctly. This adapter is a ``DistributedSampler`` subclass that yields the
    wrapped batches unchanged. It is honest about sharding: ``num_replicas`` and
    ``rank`` are read from the sharding samplers below it, and it refuses a graph
    without one (that graph would give every rank the same data).

    ``set_epoch`` and ``seed`` are forwarded to every node below that has them, so
    the trainer's own ``set_epoch`` call reaches the whole graph even without
    :class:`~composer_sampling.SamplerSync`. Like
    :class:`~composer_sampling.NestedBatchSampler`, the instance has ``state_dict``
    only when every sampler below that decides the order has one. The nodes it forwards to are found once,
    when it is built, and again only if ``batch_sampler`` is replaced (an
    :class:`~composer_sampling._graph.index_tap.IndexTap` put on top of it does not count).

    Args:
        batch_sampler: the batch sampler to present; its graph must contain a node
            with ``num_replicas`` and ``rank`` (e.g. torch's ``DistributedSampler``).

    Example:
        >>> from torch.utils.data import BatchSampler, DataLoader
        >>> from composer_sampling import ResumableDistributedSampler
        >>> inner = BatchSampler(ResumableDistributedSampler(8, num_replicas=2, rank=0), 2, False)
        >>> loader = DataLoader(range(8), batch_sampler=DistributedBatchAdapter(inner))
        >>> len(loader)
        2
    """

    keeps_child_order = True
    groups_under = GroupsUnder('batch_sampler')  # what grouping() reads, for this __iter__: each batch as it is
    forwards_seed = True  # its seed is the samplers' below: SamplerSync seeds those

    def __init__(self, batch_sampler: Any) -> None:
        self._forwarded_from: Any = None
        self._forwarded: list[Any] = []
        self.batch_sampler = batch_sampler
        below = [node for node in self._below() if supports(node, Sharded)]
        if not below:
            raise ValueError(
                f'DistributedBatchAdapter needs a sampler that shards by rank below it, but the graph of '
                f'{type(batch_sampler).__name__} has none (no node with num_replicas and rank); '
                'build it on a ResumableDistributedSampler, or call composer_sampling.distribute(dataloader)',
            )
        shapes = {(node.num_replicas, node.rank) for node in below}
        if len(shapes) > 1:
            raise ValueError(
                f'the samplers below {type(batch_sampler).__name__} disagree on (num_replicas, rank): '
                f'{sorted(shapes)}; every sharding sampler of one rank must use the same values',
            )
        (self.num_replicas, self.rank), = (resolve_replicas(*shape) for shape in shapes)
        self.epoch = 0
        self._offer_state()

    def _below(self) -> list[Any]:
        """Every node of the graph below (taps on top of it seen through), walked once per graph."""
        top = self.batch_sampler
        while isinstance(top, IndexTap):
            top = top.sampler
        if top is not self._forwarded_from:
            self._forwarded_from = top
            self._forwarded = [node for node in iter_samplers(top) if node is not self]
        return self._forwarded

    @property
    def seed(self) -> int:
        """The seed of the first seeded sampler below (torch's default 0 if none has one); setting it sets all."""
        seeds = (node.seed for node in self._below() if supports(node, Seeded))
        return next((seed for seed in seeds if seed is not None), 0)

    @seed.setter
    def seed(self, value: int) -> None:
        for node in self._below():
            if supports(node, Seeded):
                node.seed = value

    def set_epoch(self, epoch: int) -> None:
        """Forward the epoch to every node below that has ``set_epoch``."""
        self.epoch = epoch
        for node in self._below():
            if supports(node, EpochAware):
                node.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        return iter(self.batch_sampler)

    def __len__(self) -> int:
        return len(self.batch_sampler)

    def __repr__(self) -> str:
        return f'DistributedBatchAdapter(batch_sampler={self.batch_sampler!r})'


class StatefulDistributedBatchAdapter(DistributedBatchAdapter):
    """A :class:`DistributedBatchAdapter` that refuses a graph below it that cannot restore a state."""

    requires_state = True
