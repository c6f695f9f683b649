"""How a fit that starts inside an epoch continues it without loading a trained sample again.

:class:`~composer_sampling.SamplerSync` asks :func:`continuation` at fit start and
:func:`~composer_sampling._resume.place.place_in_epoch` carries the answer out. The answer depends on
what decides the order in the graph (the nodes that do not only group what is below
them, ``GraphSnapshot.deciding()``):

* **offset**: every one of them is ours (``set_sample_in_epoch``): they start at
  the global sample count, on any world size and batch size.
* **window by samples**: the only one is an index sampler under torch's
  ``BatchSampler`` (torch's ``DistributedSampler``, ``RandomSampler``,
  ``SequentialSampler``, a sampler of yours): an :class:`~composer_sampling._graph.index_tap.IndexTap`
  above it drops the indices this rank already trained. torch's
  ``DistributedSampler`` orders positions below N independently of the world size
  and gives rank ``r`` positions ``r, r + W, ...``, so it continues exactly on
  another world size or batch size too.
* **window by batches**: anything else (a batch sampler of yours deciding the
  order): a tap right below the top drops the trained batches, on the same
  distinct global batch and data-parallel world size only.
* **spin**: a node whose order depends on how often it was iterated before
  (neither ``set_epoch``, nor a ``generator``, nor ours): Composer's spin stays.

``train_subset_num_batches`` (Composer's cut of every epoch) is honoured by the
window's ``limit``, so the spin is not needed for it.

Example:
    >>> from torch.utils.data import DataLoader, DistributedSampler
    >>> data = range(40)
    >>> loader = DataLoader(data, batch_size=4, sampler=DistributedSampler(data, num_replicas=2, rank=0))
    >>> now = Layout(global_batch=8, data_parallel_ranks=2)
    >>> chosen = continuation(loader, Position(batches=3, samples=24), now, now)
    >>> chosen.kind, chosen.skip
    ('window', 12)
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.data import DataLoader, SequentialSampler

from composer_sampling._graph.grouping import grouping
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import describe
from composer_sampling.errors import DataOrderError
from composer_sampling.protocols import EpochAware, Offsettable, is_torch_own, supports

__all__ = ['Continuation', 'Layout', 'Position', 'blockers', 'continuation']


@dataclasses.dataclass(frozen=True)
class Layout:
    """What a step trains: ``global_batch`` distinct samples over ``data_parallel_ranks`` (world size / replication)."""

    global_batch: int | None
    data_parallel_ranks: int | None


@dataclasses.dataclass(frozen=True)
class Position:
    """Where the fit starts in its epoch: batches trained, distinct samples trained across ranks, Composer's cut."""

    batches: int
    samples: int
    subset_batches: int | None = None  # train_subset_num_batches when it cuts the epoch short


@dataclasses.dataclass
class Continuation:
    """The resume decision: how the fit continues its epoch. ``kind``: ``start``, ``offset``, ``window`` or ``spin``.

    A window (also an offset's cut by ``train_subset_num_batches``) goes on ``edge``,
    ``(parent, attribute)``, counted in that edge's items; with ``edge`` None it goes
    on the tap at the top of the trainer's DataLoader (in a Composer fit,
    :func:`~composer_sampling.callbacks._top_tap.top_tap`), counted in the DataLoader's batches.
    """

    kind: str
    offset: int = 0  # kind 'offset': the global sample offset of every deciding node
    edge: tuple[Any, str] | None = None
    skip: int = 0
    limit: int | None = None
    reason: str = ''


def _orders_by_epoch(node: Any, generator_driven: set[int]) -> bool:
    """Whether ``node``'s pass is a function of its seed, epoch and the nodes below, however often it ran before."""
    return (supports(node, Offsettable) or supports(node, EpochAware) or id(node) in generator_driven
            or is_torch_own(node, SequentialSampler))


def blockers(graph: GraphSnapshot) -> list[Any]:
    """The deciding nodes whose order may depend on the passes they made before: neither ``set_epoch``, nor a
    ``generator``, nor ours (a resume can only draw their trained batches again)."""
    generator_driven = {id(node) for node in graph.generator_nodes(active_only=True)}
    return [node for node in graph.deciding() if not _orders_by_epoch(node, generator_driven)]


def continuation(loader: DataLoader, position: Position, saved: Layout | None, now: Layout,
                 graph: GraphSnapshot | None = None) -> Continuation:
    """How the fit continues its epoch from ``position``; raises :class:`DataOrderError` when it cannot exactly.

    ``saved`` is the layout the checkpoint was trained with (None: unknown, taken as ``now``);
    ``graph`` the loader's snapshot when the caller has one (else it is taken here).
    """
    graph = take_snapshot(loader) if graph is None else graph
    root = graph.root
    found = blockers(graph)
    if found:
        return Continuation('spin', reason=f'{describe(found[0])} has neither set_epoch nor a generator, so its '
                                           'order may depend on the passes it made before')
    if position.batches == 0:
        return Continuation('start')
    saved = saved or now
    deciding = graph.deciding()
    remaining = None if position.subset_batches is None else max(position.subset_batches - position.batches, 0)
    if deciding and all(supports(node, Offsettable) for node in deciding):
        return Continuation('offset', offset=position.samples, limit=remaining)
    sample_edge = _sample_edge(graph, deciding)
    if sample_edge is not None:
        parent, attribute, per_batch, index_sampler = sample_edge
        ranks = now.data_parallel_ranks or 1
        if saved.data_parallel_ranks not in (None, ranks) and not _rank_independent(index_sampler):
            raise DataOrderError(_changed_ranks(index_sampler, saved, now))
        if position.samples % ranks:
            raise DataOrderError(
                f'the checkpoint stopped after {position.samples} samples of this epoch, which {ranks} data-parallel '
                f'ranks cannot share evenly, so {describe(index_sampler)} cannot continue at the next sample. Resume '
                f'with a data-parallel world size that divides {position.samples}'
                + (f', such as the checkpoint\'s {saved.data_parallel_ranks}' if saved.data_parallel_ranks else ''),
            )
        skip = position.samples // ranks
        return Continuation('window', edge=(parent, attribute), skip=skip,
                            limit=None if remaining is None else remaining * per_batch)
    top = deciding[0] if deciding else root
    if saved.data_parallel_ranks not in (None, now.data_parallel_ranks):
        raise DataOrderError(_changed_ranks(top, saved, now))
    if saved.global_batch is not None and now.global_batch is not None and saved.global_batch != now.global_batch:
        raise DataOrderError(
            f'{describe(top)} decides the order of whole batches, so a resume must continue at batch '
            f'{position.batches} of the same batches: the checkpoint trained {saved.global_batch} distinct samples '
            f'a step, this run {now.global_batch}. Resume with global batch {saved.global_batch}'
            + (f' (device batch {saved.global_batch // now.data_parallel_ranks} on each of the '
               f'{now.data_parallel_ranks} data-parallel ranks)'
               if now.data_parallel_ranks and saved.global_batch % now.data_parallel_ranks == 0 else ''),
        )
    return Continuation('window', skip=position.batches, limit=remaining)


def _rank_independent(node: Any) -> bool:
    """Whether ``node`` orders positions independently of the world size and strides them by rank (torch's own)."""
    from torch.utils.data import DistributedSampler

    return is_torch_own(node, DistributedSampler)


def _changed_ranks(node: Any, saved: Layout, now: Layout) -> str:
    return (
        f'the checkpoint was trained on {saved.data_parallel_ranks} data-parallel ranks, this run has '
        f'{now.data_parallel_ranks}, and the order of {describe(node)} may depend on the world size, so the rest of '
        f'the epoch would repeat or skip samples. Resume on {saved.data_parallel_ranks} data-parallel ranks '
        '(world size / replication), or build the graph on composer_sampling samplers, which resume on any world size'
    )


def _per_batch(node: Any) -> int:
    """How many items of a node's child make one of the node's items (1 unless it groups)."""
    group = grouping(node)
    return 1 if group is None else group.size


def _sample_edge(graph: GraphSnapshot, deciding: list[Any]) -> tuple[Any, str, int, Any] | None:
    """The edge right above the graph's only deciding node when that is an index sampler under torch's BatchSampler.

    Returns ``(parent, attribute, items of that edge per top batch, the index sampler)``.
    """
    if len(deciding) != 1:
        return None
    (index_sampler,) = deciding
    path = graph.edges_to(index_sampler)
    if not path:
        return None
    parent, attribute, _ = path[-1]
    if isinstance(parent, IndexTap):  # installed by an earlier fit: reuse it
        if len(path) < 2:
            return None
        parent, attribute, _ = path[-2]
    group = grouping(parent)
    if group is None or group.attribute != 'sampler' or attribute != 'sampler':
        return None
    per_batch = 1
    for node, _, _ in path:
        per_batch *= _per_batch(node)
    return parent, attribute, per_batch, index_sampler
