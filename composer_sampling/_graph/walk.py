"""Walking sampler graphs: every sampler reachable from a DataLoader, each once.

A sampler graph is what a DataLoader draws its indices through: its
``batch_sampler`` and ``sampler``, then for every node its own ``batch_sampler``,
``sampler`` and the items of a ``samplers`` list, tuple or dict. Nodes are told
apart by ``id()`` because samplers may be unhashable, and the walk never iterates
a sampler nor touches a dataset.

Example:
    >>> from torch.utils.data import BatchSampler, DataLoader, SequentialSampler
    >>> loader = DataLoader(range(8), batch_size=4)
    >>> [type(node).__name__ for node in iter_samplers(loader)]
    ['BatchSampler', 'SequentialSampler']
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Sequence
from typing import Any

from torch.utils.data import DataLoader, IterableDataset, Sampler

from composer_sampling._graph.grouping import grouping, keeps_child_order
from composer_sampling._validate import is_integer, replication_problem
from composer_sampling.protocols import Sharded, supports

__all__ = [
    'Visit',
    'active_root',
    'deciding',
    'describe',
    'device_batch',
    'is_map_style',
    'is_sampler_like',
    'iter_samplers',
    'labelled_children',
    'render_tree',
    'replication_layout',
    'sharding_nodes',
    'sharding_problem',
    'walk',
]

_CHILD_ATTRIBUTES = ('batch_sampler', 'sampler')
_SHOWN_ATTRIBUTES = (
    'batch_size',
    'num_batches',
    'sub_epochs_per_epoch',
    'source_sizes',
    'num_replicas',
    'rank',
    'seed',
    'shuffle',
    'drop_last',
)


def labelled_children(node: Any) -> list[tuple[str, Any]]:
    """The samplers directly below ``node`` with the attribute each hangs from, in walking order."""
    edges = [(name, child) for name in _CHILD_ATTRIBUTES if (child := getattr(node, name, None)) is not None]
    group = getattr(node, 'samplers', None)
    if isinstance(group, dict):
        edges.extend((f'samplers[{key!r}]', child) for key, child in group.items())
    elif isinstance(group, (list, tuple)):
        edges.extend((f'samplers[{i}]', child) for i, child in enumerate(group))
    return edges


#: Deepest sampler graph walked; deeper means a cycle of new objects (a mock invents a child per attribute).
MAX_DEPTH = 64


def is_sampler_like(node: Any) -> bool:
    """Whether the walk descends below ``node``: a torch ``Sampler``, or an object whose *type* defines ``__iter__``.

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> is_sampler_like(SequentialSampler(range(3))), is_sampler_like(object())
        (True, False)
    """
    return isinstance(node, Sampler) or callable(getattr(type(node), '__iter__', None))


def _path(labels: list[str]) -> str:
    return '.'.join(labels) if len(labels) <= 8 else '.'.join([*labels[:4], '...', *labels[-3:]])


@dataclasses.dataclass(frozen=True)
class Visit:
    """One node a walk reached: the node and the edges ``(parent, attribute)`` it was first reached by.

    ``labels`` names those edges from the root (a sampler root's class name first).
    """

    node: Any
    edges: tuple[tuple[Any, str], ...]
    labels: tuple[str, ...]

    @property
    def path(self) -> str:
        """The labels joined with dots (long paths shortened)."""
        return _path(list(self.labels))


def walk(obj: Any) -> Iterator[Visit]:
    """The one walk of a sampler graph: every sampler-like node reachable from ``obj``, each once, depth first.

    ``obj`` may be a DataLoader or a loader-like object (not visited) or any
    sampler (which is). The root's ``sampler`` and ``batch_sampler``, and the ``sampler`` of its
    ``batch_sampler``, are reached whatever they are (as Lightning does); below
    them the walk descends only into sampler-like nodes (:func:`is_sampler_like`).
    Cycles are followed once; a graph deeper than :data:`MAX_DEPTH` is an error.
    Everything that needs the graph goes through here (:func:`iter_samplers`,
    :class:`~composer_sampling._graph.snapshot.GraphSnapshot`).

    Example:
        >>> from torch.utils.data import DataLoader
        >>> [visit.path for visit in walk(DataLoader(range(4), batch_size=2))]
        ['batch_sampler', 'batch_sampler.sampler']
    """
    seen: set[int] = set()
    stack: list[tuple[Any, tuple[tuple[Any, str], ...], tuple[str, ...], bool]] = []
    if isinstance(obj, DataLoader) or not is_sampler_like(obj):
        # A loader (or a loader-like object, not visited): its edges and its batch sampler's are always followed.
        seen.add(id(obj))
        stack = [(child, ((obj, label),), (label,), label == 'batch_sampler')
                 for label, child in reversed(labelled_children(obj))]
    else:
        stack = [(obj, (), (type(obj).__name__,), False)]
    while stack:
        node, edges, labels, force_children = stack.pop()
        if id(node) in seen:
            continue
        if len(labels) > MAX_DEPTH:
            raise ValueError(
                f'the sampler graph is deeper than {MAX_DEPTH} levels at {_path(list(labels))} '
                f'({type(node).__name__}); a sampler graph that deep is a cycle of new objects (a mock?), '
                'not a real sampler graph',
            )
        seen.add(id(node))
        yield Visit(node, edges, labels)
        if force_children or is_sampler_like(node):
            below = labelled_children(node)
            if force_children and not is_sampler_like(node):
                below = [(label, child) for label, child in below if label == 'sampler']
            stack.extend((child, (*edges, (node, label)), (*labels, label), False) for label, child in reversed(below))


def iter_samplers(obj: Any) -> Iterator[Any]:
    """Yield every sampler-like object reachable from ``obj``, each exactly once, depth first (:func:`walk`).

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> root = SequentialSampler(range(3))
        >>> root.samplers = [root]  # a cycle
        >>> [type(node).__name__ for node in iter_samplers(root)]
        ['SequentialSampler']
    """
    return (visit.node for visit in walk(obj))


def active_root(dataloader: DataLoader) -> Any:
    """The node the DataLoader really draws from: its batch sampler, else its sampler.

    A DataLoader built with ``batch_sampler=`` still creates a ``sampler`` that it
    never uses; only the active root's graph decides the data order.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> type(active_root(DataLoader(range(4), batch_size=2))).__name__
        'BatchSampler'
    """
    return dataloader.batch_sampler if dataloader.batch_sampler is not None else dataloader.sampler


def device_batch(loader: DataLoader, nodes: Sequence[Any] | None = None) -> int | None:
    """Samples per batch the loader yields, as far as the loader or its sampler graph says; None if nothing does.

    The loader's ``batch_size``, else, down the graph, the size of the first grouping
    of single indices (:func:`~composer_sampling._graph.grouping.grouping`) or the
    first ``batch_size`` a node of yours names, times the size of every grouping of
    batches above it (or the ``num_batches`` a node of yours names). ``nodes`` is the
    active graph when the caller has it (a snapshot's), else it is walked here.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> device_batch(DataLoader(range(8), batch_size=4))
        4
    """
    if loader.batch_size is not None:
        return loader.batch_size
    factor = 1
    for node in iter_samplers(active_root(loader)) if nodes is None else nodes:
        group = grouping(node)
        if group is not None:
            if group.attribute == 'sampler':
                return group.size * factor
            factor *= group.size
            continue
        size = getattr(node, 'batch_size', None)
        if is_integer(size):
            return int(size) * factor
        joined = getattr(node, 'num_batches', None)
        if is_integer(joined):
            factor *= int(joined)
    return None


def is_map_style(dataloader: DataLoader) -> bool:
    """Whether the DataLoader indexes a map-style dataset (the only kind samplers apply to)."""
    return not isinstance(dataloader.dataset, IterableDataset)


def sharding_nodes(root: Any) -> list[Any]:
    """Nodes that shard by rank: they carry int ``num_replicas`` and ``rank`` attributes.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> len(sharding_nodes(DistributedSampler(range(4), num_replicas=2, rank=0)))
        1
    """
    return [node for node in iter_samplers(root) if supports(node, Sharded)]


def replication_layout(num_replicas: int, node_rank: int, world_size: int, rank: int) -> int | None:
    """The replication ``R > 1`` whose layout a sampler of ``(num_replicas, node_rank)`` matches, or None.

    With replication ``R`` (tensor or sequence parallelism, llm-foundry's ``replication``)
    every group of ``R`` consecutive ranks reads the same data: ``num_replicas = W / R``
    and ``rank = global_rank // R``.

    Example:
        >>> replication_layout(2, 1, world_size=4, rank=3), replication_layout(4, 3, world_size=4, rank=3)
        (2, None)
    """
    if num_replicas < 1 or world_size % num_replicas:
        return None
    factor = world_size // num_replicas
    return factor if factor > 1 and node_rank == rank // factor else None


def sharding_problem(root: Any, world_size: int, rank: int, replication: int = 1,
                     nodes: Sequence[Any] | None = None) -> str | None:
    """Why the graph under ``root`` would train the wrong data on ``rank`` of ``world_size``, or None.

    Composer only checks that a ``DistributedSampler`` sits at the top; this checks
    that some node shards by rank and that every sharding node uses the expected
    layout: ``num_replicas = world_size / replication`` and ``rank = rank // replication``.
    A graph that matches a replication layout nobody asked for is refused with the
    ``replication`` that would accept it: on two ranks, ``num_replicas=1`` is both
    a forgotten ``num_replicas`` and a replication of 2. ``nodes`` is the graph under
    ``root`` when the caller has it (a snapshot's), else it is walked here.

    Example:
        >>> from torch.utils.data import RandomSampler
        >>> sharding_problem(RandomSampler(range(4)), world_size=2, rank=0)[:40]
        'world size is 2 but no sampler of the tr'
    """
    problem = replication_problem(replication, world_size)
    if problem is not None:
        return problem
    want_replicas, want_rank = world_size // replication, rank // replication
    nodes = list(iter_samplers(root)) if nodes is None else nodes
    sharding = [node for node in nodes if supports(node, Sharded)]
    for node in sharding:
        if (node.num_replicas, node.rank) == (want_replicas, want_rank):
            continue
        expected = (
            f'num_replicas={want_replicas}, rank={want_rank} (world size {world_size} / replication {replication})'
            if replication > 1 else f'num_replicas={world_size}, rank={rank}'
        )
        text = (
            f'{describe(node)} shards for num_replicas={node.num_replicas}, rank={node.rank}, but this '
            f'process is rank {rank} of world size {world_size} and expects {expected}'
        )
        layout = replication_layout(node.num_replicas, node.rank, world_size, rank)
        if replication > 1 and (node.num_replicas, node.rank) == (world_size, rank):
            return (
                f'{text}. SamplerSync(replication={replication}) says groups of {replication} ranks read the same '
                f'data, but this sampler gives every rank a share of its own: build it with the replication too '
                f'(llm-foundry: replication: {replication} under train_loader.dataset; or num_replicas='
                f'{want_replicas}, rank=global_rank // {replication}), or drop replication from SamplerSync'
            )
        if layout is not None and layout != replication:
            return (
                f'{text}. That is the layout of replication {layout} (groups of {layout} ranks reading the same '
                f'data, as tensor or sequence parallelism does): if you meant it, pass '
                f'SamplerSync(replication={layout}) (in a YAML: sampler_sync: {{replication: {layout}}}); otherwise '
                'build the sampler with num_replicas='
                'composer.utils.dist.get_world_size() and rank=dist.get_global_rank()'
            )
        return (
            f'{text}; build the sampler with num_replicas=composer.utils.dist.get_world_size() and '
            'rank=dist.get_global_rank(), or leave them None in composer_sampling samplers'
        )
    if want_replicas > 1 and not sharding:
        names = ', '.join(type(node).__name__ for node in nodes)
        return (
            f'world size is {world_size} but no sampler of the train dataloader shards by rank ({names}): '
            'every rank would train on the same samples. Use ResumableDistributedSampler as the sampler, '
            'or composer_sampling.distribute(dataloader) for a custom batch sampler'
        )
    return None


def deciding(obj: Any) -> list[Any]:
    """The nodes reachable from ``obj`` that decide the order: those that do not only group or forward what is below.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> [type(node).__name__ for node in deciding(BatchSampler(SequentialSampler(range(4)), 2, False))]
        ['SequentialSampler']
    """
    return [node for node in iter_samplers(obj) if not keeps_child_order(node)]


def describe(node: Any) -> str:
    """One line: the class and the arguments that decide the data order.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> describe(BatchSampler(SequentialSampler(range(5)), 2, False))
        'BatchSampler(batch_size=2, drop_last=False, len=3)'
    """
    if isinstance(node, DataLoader):
        return f'DataLoader(batch_size={node.batch_size}, drop_last={node.drop_last}, num_workers={node.num_workers})'
    parts = [f'{name}={getattr(node, name)!r}' for name in _SHOWN_ATTRIBUTES if hasattr(node, name)]
    with contextlib.suppress(TypeError):
        parts.append(f'len={len(node)}')
    source = getattr(node, 'distributed_from', None)
    made = f' (which distribute() put in place of your {source})' if isinstance(source, str) else ''
    return f'{type(node).__name__}({", ".join(parts)}){made}'


def render_tree(obj: Any, active: Sequence[Any] | None = None) -> str:
    """The sampler graph as an indented tree, one node a line; a node reached twice says so.

    ``active`` is the nodes the loader's batch sampler draws through when the caller
    has them (a snapshot's), else they are walked here.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> print(render_tree(DataLoader(range(4), batch_size=2)))
        DataLoader(batch_size=2, drop_last=False, num_workers=0)
        └─ batch_sampler: BatchSampler(batch_size=2, drop_last=False, len=2)
           └─ sampler: SequentialSampler(len=4)
    """
    lines = [describe(obj)]
    seen: set[int] = set() if isinstance(obj, DataLoader) else {id(obj)}
    edges = labelled_children(obj)
    notes: dict[int, str] = {}
    if isinstance(obj, DataLoader) and obj.batch_sampler is not None:
        drawn = iter_samplers(obj.batch_sampler) if active is None else active
        if any(node is obj.sampler for node in drawn):
            edges = [(label, child) for label, child in edges if label != 'sampler']
        else:
            notes[id(obj.sampler)] = '  (unused: the batch_sampler draws the indices)'

    def draw(edges: list[tuple[str, Any]], prefix: str) -> None:
        for position, (label, child) in enumerate(edges):
            last = position == len(edges) - 1
            branch = prefix + ('└─ ' if last else '├─ ')
            if id(child) in seen:
                lines.append(f'{branch}{label}: {type(child).__name__} (shown above)')
                continue
            seen.add(id(child))
            lines.append(f'{branch}{label}: {describe(child)}{notes.get(id(child), "")}')
            draw(labelled_children(child), prefix + ('   ' if last else '│  '))

    draw(edges, '')
    return '\n'.join(lines)
