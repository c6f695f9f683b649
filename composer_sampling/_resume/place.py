"""The resume decision carried out on a graph: offsets and windows set where the fit starts in its epoch.

Any trainer's callback gives :func:`place_in_epoch` the graph of its train loader,
where the fit starts (a :class:`~composer_sampling._resume.decide.Position`), the
layout the checkpoint trained with and this fit's, and a way to put a tap on top of
the loader (``top``: ``None`` where the trainer's loader cannot be rebuilt). Offsets
and windows of an earlier fit are cleared first, so none survives into this one. What
is left to the trainer is what the decision cannot do itself: a ``spin`` (Composer
loads and skips the trained batches; Lightning has none) and telling the trainer that
its loader is placed.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from composer_sampling._graph.snapshot import take_snapshot
    >>> from composer_sampling.samplers.resumable import ResumableDistributedSampler
    >>> sampler = ResumableDistributedSampler(40, num_replicas=2, rank=0, seed=0)
    >>> graph = take_snapshot(DataLoader(range(40), batch_size=4, sampler=sampler))
    >>> now = current_layout(graph, replication=1, world_size=2)
    >>> place_in_epoch(graph, Position(batches=3, samples=24), now, now, top=lambda: None).kind
    'offset'
    >>> sampler.sample_in_epoch
    24
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from torch.utils.data import DataLoader

from composer_sampling._graph.grouping import grouping
from composer_sampling._graph.index_tap import IndexTap, Listener, install_tap
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._graph.walk import describe
from composer_sampling._resume.decide import Continuation, Layout, Position, continuation
from composer_sampling.errors import DataOrderError
from composer_sampling.protocols import Offsettable, supports
from composer_sampling.samplers.distribute import rebuild_loader

__all__ = ['Place', 'Position', 'current_layout', 'place_in_epoch', 'saved_layout', 'tap_at_top']


@dataclasses.dataclass(frozen=True)
class Place:
    """A place in a fit: the epoch, and the batches of it each rank trained before the place.

    Example:
        >>> str(Place(epoch=1, batches=3)), Place(1, 12).after_batches(12)
        ('epoch 1, batch 3', True)
    """

    epoch: int
    batches: int

    def after_batches(self, batches_in_epoch: float) -> bool:
        """Whether the place is at the epoch's end: no batch of it is left."""
        return self.batches >= batches_in_epoch

    def __str__(self) -> str:
        return f'epoch {self.epoch}, batch {self.batches}'


def current_layout(graph: GraphSnapshot, replication: int, world_size: int) -> Layout:
    """The layout this fit trains with: the distinct global batch and the data-parallel ranks."""
    ranks = max(world_size // replication, 1)
    size = graph.device_batch()
    return Layout(None if size is None else size * ranks, ranks)


def saved_layout(saved: Layout | None, position: Position) -> Layout | None:
    """The checkpoint's layout; a state before version 2 did not record its global batch, but the position does.

    Mid-epoch every trained batch is whole, so the distinct samples trained over the
    batches trained is the global batch the checkpoint ran with.

    Example:
        >>> saved_layout(Layout(None, 2), Position(batches=3, samples=48))
        Layout(global_batch=16, data_parallel_ranks=2)
    """
    if saved is None or saved.global_batch is not None or position.batches == 0 or position.samples % position.batches:
        return saved
    return Layout(position.samples // position.batches, saved.data_parallel_ranks)


def place_in_epoch(graph: GraphSnapshot, position: Position, saved: Layout | None, now: Layout,
                   top: Callable[[], IndexTap | None]) -> Continuation:
    """Decide how the fit continues its epoch and place the graph there; the decision (``spin``: not placed).

    Raises :class:`~composer_sampling._resume.decide.DataOrderError` for a resume
    that cannot continue exactly, its message starting ``SamplerSync:``.
    """
    loader, root = graph.loader, graph.root
    for node in graph.active:  # no offset or window of an earlier fit (reset_time, ...) survives
        if supports(node, Offsettable):
            node.set_sample_in_epoch(0)
        elif isinstance(node, IndexTap):
            node.set_window(0)
    try:
        chosen = continuation(loader, position, saved_layout(saved, position), now, graph=graph)
    except DataOrderError as error:
        raise DataOrderError(f'SamplerSync: {error}') from None
    if chosen.kind in ('window', 'offset') and chosen.edge is None and (chosen.skip or chosen.limit is not None):
        tap = top()
        if tap is None:
            return Continuation('spin', reason=f'{describe(root)} is the top of a {type(loader).__name__}, which '
                                               'SamplerSync cannot rebuild')
        tap.set_window(chosen.skip * tap.group, None if chosen.limit is None else chosen.limit * tap.group)
    elif chosen.edge is not None:
        parent, attribute = chosen.edge
        install_tap(parent, attribute).set_window(chosen.skip, chosen.limit)
    if chosen.kind == 'offset':
        for node in graph.active:
            if supports(node, Offsettable):
                node.set_sample_in_epoch(chosen.offset)
    return chosen


def tap_at_top(loader: DataLoader, graph: GraphSnapshot,
               listener: Listener | None = None) -> tuple[IndexTap | None, DataLoader | None]:
    """The tap every batch of ``loader`` passes through (telling ``listener``), and the DataLoader built around it
    when the loader itself could not take it (``None``: the tap sits in the loader's own graph).

    The tap goes on the edge below the top of ``graph`` (torch's ``BatchSampler.sampler``,
    ``DistributedBatchAdapter.batch_sampler``, ``NestedBatchSampler.batch_sampler``). A
    batch sampler of yours at the top of a plain DataLoader gets a new DataLoader over the
    same dataset, with the same settings, whose batch sampler is the tap over yours (no
    attribute of torch's DataLoader can be reassigned); the trainer must then read that
    one. ``(None, None)``: a DataLoader subclass (torchdata's ``StatefulDataLoader``, ...),
    which is not rebuilt.
    """
    top = graph.root
    group = grouping(top)
    if group is not None:
        return install_tap(top, group.attribute, group.size, group.keep_partial, listener), None
    if type(loader) is not DataLoader:
        return None, None
    tap = IndexTap(top, listener=listener)
    samplers = {'batch_sampler': tap} if loader.batch_sampler is not None else {'sampler': tap, 'batch_size': None}
    return tap, rebuild_loader(loader, **samplers)
