"""One rank's sampler graph, read as the proof by construction needs it: our sampler and the layers above it.

A graph qualifies when its active nodes form one chain from the loader's root
down to a sampler whose own class states its window (:func:`states_its_window`: it
defines ``pass_window``, as each sampler of ours does), and every
node above it only groups or passes on, in order, what is below it: a grouping
(:func:`~composer_sampling._graph.grouping.grouping`: torch's ``BatchSampler``,
:class:`~composer_sampling.samplers.NestedBatchSampler`,
:class:`~composer_sampling.samplers.DistributedBatchAdapter`, or a subclass that
keeps their ``__iter__``) and an :class:`~composer_sampling._graph.index_tap.IndexTap`
without a pending window. Anything else (a custom batch sampler, torch's
``RandomSampler`` or ``DistributedSampler``, a subclass of our samplers that does not
define ``pass_window`` itself, a subclass
of a grouping with an ``__iter__`` of its own) may reorder, drop or repeat, and
:func:`read_shape` names it instead; ``plan`` then counts that graph.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from composer_sampling import ResumableDistributedSampler
    >>> from composer_sampling._graph.snapshot import take_snapshot
    >>> loader = DataLoader(range(10), batch_size=3, drop_last=True, sampler=ResumableDistributedSampler(10, 2, 1))
    >>> shape = read_shape(take_snapshot(loader))
    >>> shape.describe(), shape.layers, shape.interval(0)
    ('ResumableDistributedSampler under BatchSampler', ((3, True),), (0, 3, 6))
"""

from __future__ import annotations

import dataclasses
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph.grouping import grouping
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._graph.walk import labelled_children
from composer_sampling._proofs._construction import kept_by_batching

__all__ = ['WINDOW_CONTRACT', 'RankShape', 'read_shape', 'states_its_window']


#: What the construction reads of a sampler besides ``pass_window`` (``OrderedSampler`` has all of it).
WINDOW_CONTRACT = ('dataset_len', 'num_replicas', 'rank', 'seed', 'shuffle', 'drop_last', 'epoch', 'data_epoch',
                   'sample_in_epoch', 'order_signature', 'epoch_usage', 'indices_at', 'positions_of')


def states_its_window(node: Any) -> bool:
    """Whether ``node`` is a sampler whose own class states which positions each rank reads.

    Its class must define ``pass_window`` itself and not ``__iter__``, and the node must have
    everything in :data:`WINDOW_CONTRACT`: a subclass that only inherits ``pass_window`` may
    have changed the order. The guard (:mod:`~composer_sampling._proofs._construction_guard`)
    checks the first indices every such sampler yields against its window.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> Mine = type('Mine', (ResumableDistributedSampler,), {})
        >>> states_its_window(ResumableDistributedSampler(4, 1, 0)), states_its_window(Mine(4, 1, 0))
        (True, False)
    """
    own = vars(type(node))
    return 'pass_window' in own and '__iter__' not in own and all(hasattr(node, name) for name in WINDOW_CONTRACT)


@dataclasses.dataclass(frozen=True)
class RankShape:
    """A rank's graph that the construction covers.

    Attributes:
        sampler: the index sampler at the bottom, one that :func:`states_its_window`.
        layers: ``(group, drop_last)`` of each batching layer above it, innermost
            first (:func:`~composer_sampling._proofs._construction.kept_by_batching`).
        names: the class names of the chain, the sampler first.
    """

    sampler: Any
    layers: tuple[tuple[int, bool], ...]
    names: tuple[str, ...]

    def describe(self) -> str:
        """The chain in words, from the sampler up: ``ResumableDistributedSampler under BatchSampler``."""
        return ' under '.join(self.names)

    def parameters(self) -> dict[str, Any]:
        """Everything that fixes this rank's order but its rank: equal on every rank for the construction to hold.

        The order signature holds what else a sampler's order depends on (sub-epochs, a mixture's sources).
        """
        sampler = self.sampler
        return {
            'graph': self.describe(), 'batching layers': self.layers, 'order signature': sampler.order_signature(),
            'dataset_len': sampler.dataset_len, 'num_replicas': sampler.num_replicas, 'seed': sampler.seed,
            'shuffle': sampler.shuffle, 'drop_last': sampler.drop_last,
        }

    def interval(self, trainer_epoch: int) -> tuple[int, int, int]:
        """``(first, kept, end)``: the rank's first global position of the epoch's pass, the indices it keeps, and
        ``first + kept * num_replicas``, the end of the positions every rank together trains (from the sampler's
        :meth:`~composer_sampling.samplers._base.OrderedSampler.pass_window`)."""
        first, count = self.sampler.pass_window(trainer_epoch)
        kept = kept_by_batching(count, self.layers)
        return first, kept, first + kept * self.sampler.num_replicas


def read_shape(graph: GraphSnapshot) -> RankShape | str:
    """The graph's :class:`RankShape`, or what in it the construction does not cover (``BatchShuffleSampler, which
    may reorder``).

    Example:
        >>> from torch.utils.data import DataLoader, RandomSampler
        >>> from composer_sampling._graph.snapshot import take_snapshot
        >>> read_shape(take_snapshot(DataLoader(range(4), batch_size=2, sampler=RandomSampler(range(4)))))
        'RandomSampler, which may reorder'
    """
    node = graph.root
    batches = isinstance(graph.loader, DataLoader) and graph.loader.batch_sampler is not None
    chain: list[Any] = []
    layers: list[tuple[int, bool]] = []
    while not states_its_window(node):
        chain.append(node)
        step = _step(node, batches)
        if isinstance(step, str):
            return step
        child, batches, layer = step
        if layer is not None:
            layers.append(layer)
        if any(child is seen for seen in chain):
            return f'{type(node).__name__} drawing from a node above it'
        node = child
    chain.append(node)
    if batches:
        return f'{type(node).__name__} where batches are expected'
    if labelled_children(node) or len(chain) != len(graph.active):
        return f'{type(node).__name__} with samplers beside or below it'
    return RankShape(node, tuple(reversed(layers)), tuple(type(item).__name__ for item in reversed(chain)))


def _step(node: Any, batches: bool) -> tuple[Any, bool, tuple[int, bool] | None] | str:
    """The node below ``node``, whether it yields batches, and the batching layer ``node`` adds; else why not."""
    name = type(node).__name__
    level = 'batches' if batches else 'single indices'
    children = labelled_children(node)
    group = grouping(node)
    if group is not None:
        if not batches:
            return f'{name} where {level} are expected'
        attribute = group.attribute
        passes_on = (group.size, group.keep_partial) == (1, True)  # each batch as it is: nothing to count
        layer: tuple[int, bool] | None = None if passes_on else (group.size, not group.keep_partial)
    elif type(node) is IndexTap:
        if node.window != (0, None):
            skip, limit = node.window
            return f'IndexTap with a pending window (skip {skip}, limit {limit})'
        attribute, layer = 'sampler', None
    else:
        return f'{name}, which may reorder'
    if [label for label, _ in children] != [attribute]:
        return f'{name} with samplers beside {attribute}'
    below_batches = batches if group is None else group.attribute == 'batch_sampler'  # a tap passes on what it reads
    return children[0][1], below_batches, layer
