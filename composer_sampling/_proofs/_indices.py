"""Every rank's indices of a pass, computed without reading a sample: read in one call where the sampler can say
them, else iterated.

A loader that batches one sampler of ours (torch's ``BatchSampler`` over it) is
read from that sampler's positions (:class:`~composer_sampling.protocols.PassPositions`),
the positions of all loaders whose samplers draw one order mapped in one vectorised
call, or from its whole pass (:class:`~composer_sampling.protocols.PassIndices`);
any other graph, a user's own batch sampler for one, is iterated in chunks.

Example:
    >>> from composer_sampling import ResumableDistributedSampler
    >>> loaders = [DataLoader(range(4), batch_size=2, sampler=ResumableDistributedSampler(4, 2, r, shuffle=False))
    ...            for r in range(2)]
    >>> [[part.tolist() for part in chunks] for chunks in rank_chunks(loaders, [0])]
    [[[0, 2]], [[1, 3]]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from itertools import chain, islice
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling.protocols import PassIndices, PassPositions, is_torch_own, supports

__all__ = ['CHUNK', 'epoch_indices', 'rank_chunks']

#: Indices computed and counted at a time by the plan (a rank read in one call may exceed it).
CHUNK = 1 << 20


def epoch_indices(loaders: list[DataLoader], epoch: int,
                  graphs: list[GraphSnapshot] | None = None) -> list[np.ndarray]:
    """The sample indices each loader would train in ``epoch``, without reading a sample.

    Each loader's graph gets the epoch as SamplerSync would set it. A loader that
    batches one sampler (torch's ``BatchSampler`` over it) is read from that
    sampler's own positions (:class:`~composer_sampling.protocols.PassPositions`):
    the positions of all loaders whose samplers draw the same order are mapped to
    indices in one vectorised call. Else the sampler's whole pass is read as one
    array (:class:`~composer_sampling.protocols.PassIndices`); any other graph is iterated.
    ``graphs`` are the loaders' snapshots when the caller has them (else they are taken here).

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loaders = [DataLoader(range(6), batch_size=2, sampler=ResumableDistributedSampler(6, 2, r, shuffle=False))
        ...            for r in range(2)]
        >>> [indices.tolist() for indices in epoch_indices(loaders, 0)]
        [[0, 2, 4], [1, 3, 5]]
    """
    results: list[np.ndarray | None] = [None] * len(loaders)
    groups: dict[tuple[Any, ...], list[tuple[int, Any, np.ndarray]]] = {}
    graphs = [take_snapshot(loader) for loader in loaders] if graphs is None else graphs
    for k, (loader, graph) in enumerate(zip(loaders, graphs, strict=True)):
        graph.set_epoch(epoch)
        root = graph.root
        sampler: Any = getattr(root, 'sampler', None)
        if is_torch_own(root, BatchSampler) and supports(sampler, PassPositions):
            key = (type(sampler), tuple(sorted(sampler.order_signature().items())), sampler.seed, sampler.epoch)
            groups.setdefault(key, []).append((k, sampler, np.asarray(sampler.pass_positions(), dtype=np.int64)))
            continue
        if is_torch_own(root, BatchSampler) and supports(sampler, PassIndices):
            results[k] = _batched(np.asarray(sampler.pass_indices(), dtype=np.int64), root)
            continue
        results[k] = np.fromiter(_root_items(loader, graph), dtype=np.int64)
    for members in groups.values():
        mapped = members[0][1].indices_at(np.concatenate([positions for _, _, positions in members]))
        bounds = np.cumsum([0] + [positions.size for _, _, positions in members])
        for (k, _, _), lo, hi in zip(members, bounds[:-1], bounds[1:], strict=True):
            results[k] = _batched(np.asarray(mapped[lo:hi], dtype=np.int64), graphs[k].root)
    return results  # type: ignore[return-value]


def _root_items(loader: DataLoader, graph: GraphSnapshot) -> Iterator[int]:
    """The indices the loader's active root yields, one by one (a batch sampler's batches flattened)."""
    items = iter(graph.root)
    return chain.from_iterable(items) if loader.batch_sampler is not None else items


def _vectorised(graph: GraphSnapshot) -> bool:
    """Whether :func:`epoch_indices` reads the loader's pass in one call instead of iterating it."""
    sampler = getattr(graph.root, 'sampler', None)
    return is_torch_own(graph.root, BatchSampler) and any(supports(sampler, p) for p in (PassIndices, PassPositions))


def rank_chunks(loaders: list[DataLoader], epochs: Sequence[int], graphs: list[GraphSnapshot] | None = None,
                chunk: int = CHUNK) -> Iterator[Iterator[np.ndarray]]:
    """Per loader, the indices it would train over ``epochs``, as arrays of at most about ``chunk`` indices.

    A loader's chunks are computed when they are read, the loaders one after the
    other: read each loader's chunks before asking for the next loader. Loaders read
    in one call (:func:`epoch_indices`) are computed together, as many at a time as
    make about ``chunk`` indices; any other loader is iterated ``chunk`` indices at a
    time, so no array holds more than one rank's pass, whatever the world size.
    ``graphs`` are the loaders' snapshots when the caller has them.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loaders = [DataLoader(range(6), batch_size=2, sampler=ResumableDistributedSampler(6, 2, r, shuffle=False))
        ...            for r in range(2)]
        >>> [[part.tolist() for part in chunks] for chunks in rank_chunks(loaders, [0, 1])]
        [[[0, 2, 4], [0, 2, 4]], [[1, 3, 5], [1, 3, 5]]]
    """
    graphs = [take_snapshot(loader) for loader in loaders] if graphs is None else graphs
    k = 0
    while k < len(loaders):
        if not _vectorised(graphs[k]):
            yield _iterated_chunks(loaders[k], graphs[k], epochs, chunk)
            k += 1
            continue
        share = max(1, len(graphs[k].root.sampler))
        end = k + 1
        while end < len(loaders) and (end + 1 - k) * share <= chunk and _vectorised(graphs[end]):
            end += 1
        by_epoch = [epoch_indices(loaders[k:end], epoch, graphs[k:end]) for epoch in epochs]
        for position in range(end - k):
            yield iter([indices[position] for indices in by_epoch])
        k = end


def _iterated_chunks(loader: DataLoader, graph: GraphSnapshot, epochs: Sequence[int],
                     chunk: int) -> Iterator[np.ndarray]:
    for epoch in epochs:
        graph.set_epoch(epoch)
        items = _root_items(loader, graph)
        while (indices := np.fromiter(islice(items, chunk), dtype=np.int64)).size:
            yield indices


def _batched(indices: np.ndarray, batch_sampler: BatchSampler) -> np.ndarray:
    """What ``batch_sampler`` keeps of its sampler's ``indices``: all, or whole batches only with ``drop_last``."""
    return indices[:indices.size - indices.size % batch_sampler.batch_size] if batch_sampler.drop_last else indices
