"""Check any DataLoader's order at any world size: every rank's order computed, the guarantees checked.

No training, no process group and no sample is read: each rank's loader is built
with its own ``num_replicas``/``rank`` and its sampler graph gets the epoch as
:class:`~composer_sampling.SamplerSync` would set it. Where every rank's order is
ours (:func:`choose_proof`), coverage follows from the samplers' parameters
(:mod:`composer_sampling._proofs._construction`, guarded by
:mod:`composer_sampling._proofs._construction_guard`); else the indices each rank would
yield are computed and counted (:mod:`composer_sampling._proofs.coverage`).
``composer-sampling plan`` runs the same check on a recipe
(:func:`composer_sampling.recipes.dry_run.plan_recipe`).

Example:
    >>> from composer_sampling import ResumableDistributedSampler
    >>> def make_loader(rank, world_size):
    ...     return DataLoader(range(12), batch_size=3, sampler=ResumableDistributedSampler(12, world_size, rank))
    >>> check_plan(make_loader, world_size=4, epochs=1).ok
    True
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import chain, islice
from typing import Any

import numpy as np
from torch.utils.data import BatchSampler, DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import is_map_style, render_tree, sharding_problem
from composer_sampling._proofs._construction import constructed_coverage
from composer_sampling._proofs._construction_guard import GuardError, guard_first_indices, guard_positions
from composer_sampling._proofs._rank_shape import RankShape, read_shape
from composer_sampling._proofs.coverage import (
    EpochAccounting,
    EpochCoverage,
    stream_coverage,
    verdict,
)
from composer_sampling._validate import replication_problem, valid_int
from composer_sampling.batching import BatchSizes
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.protocols import Seeded, has_pass_indices, has_pass_positions, is_torch_own

__all__ = [
    'CHUNK',
    'PROOFS',
    'ConstructionError',
    'PlanReport',
    'check_plan',
    'choose_proof',
    'epoch_indices',
    'plan_loaders',
    'rank_chunks',
]

#: Indices computed and counted at a time by the plan (a rank read in one call may exceed it).
CHUNK = 1 << 20
#: The proofs of coverage: ``'auto'`` (by construction where every rank's order is ours, else counted),
#: ``'construction'`` (refused where it does not apply) and ``'counted'``.
PROOFS = ('auto', 'construction', 'counted')


class ConstructionError(ValueError):
    """``proof='construction'`` was asked for a plan whose orders are not all ours; the message says why."""


@dataclass
class PlanReport:
    """Everything ``composer-sampling plan`` prints; ``problems`` empty means every guarantee holds."""

    batch_sizes: BatchSizes
    accounting: EpochAccounting
    data_seed: int
    tree: str
    sources: list[dict[str, int]]
    sub_epochs: int
    epochs: list[EpochCoverage] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: Which proof gave ``epochs`` and why: ``by construction (...)`` or ``counted (...)``; empty if none ran.
    proof: str = ''

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str | None:
        """The line ``plan`` prints when every guarantee holds (:func:`~composer_sampling._proofs.coverage.verdict`)."""
        if not self.ok:
            return None
        return verdict(self.accounting, self.epochs, self.batch_sizes.data_parallel, self.sub_epochs)

    @property
    def plan(self) -> BatchSizes:
        """Deprecated, read-only: :attr:`batch_sizes` under its old name (``plan`` is the coverage dry run only)."""
        return self.batch_sizes


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
        sampler = getattr(root, 'sampler', None)
        if is_torch_own(root, BatchSampler) and has_pass_positions(sampler):
            key = (type(sampler), tuple(sorted(sampler.order_signature().items())), sampler.seed, sampler.epoch)
            groups.setdefault(key, []).append((k, sampler, np.asarray(sampler.pass_positions(), dtype=np.int64)))
            continue
        if is_torch_own(root, BatchSampler) and has_pass_indices(sampler):
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
    return is_torch_own(graph.root, BatchSampler) and (has_pass_indices(sampler) or has_pass_positions(sampler))


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


def check_plan(make_loader: Callable[[int, int], DataLoader], world_size: int, epochs: int = 2, seed: int = 0,
               replication: int = 1, proof: str = 'auto') -> PlanReport:
    """The coverage check of ``composer-sampling plan`` for any DataLoader: no recipe, no training, no sample read.

    ``make_loader(rank, world_size)`` builds one rank's train DataLoader, as your
    training script does. Every rank's loader is built, seeded with ``seed`` (as
    :class:`~composer_sampling.SamplerSync` would seed it), and its order computed
    for ``epochs`` epochs; the report says whether every guarantee holds. A failed
    guarantee is in ``report.problems``, never an exception.

    Args:
        make_loader: ``(rank, world_size) -> DataLoader`` over a map-style dataset.
        world_size (int): ranks to plan for, at least 1.
        epochs (int): trainer epochs to check, at least 1. Default: ``2``.
        seed (int): the data seed. Default: ``0``.
        replication (int): groups of that many ranks read the same data (as
            ``SamplerSync(replication=...)``); must divide ``world_size``. Default: ``1``.
        proof (str): ``'auto'`` proves coverage by construction where every rank's
            graph is our sampler under order-keeping wrappers with equal parameters
            (computed from them, for any dataset length), else counts every rank's
            indices; ``'construction'`` refuses a plan it does not apply to
            (:class:`ValueError`), ``'counted'`` always counts. Both give the same
            numbers; ``report.proof`` says which ran and why. Default: ``'auto'``.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> def make_loader(rank, world_size):
        ...     sampler = ResumableDistributedSampler(100, num_replicas=world_size, rank=rank)
        ...     return DataLoader(range(100), batch_size=10, sampler=sampler)
        >>> report = check_plan(make_loader, world_size=4)
        >>> report.ok, [epoch.exactly_once for epoch in report.epochs]
        (True, [100, 100])
        >>> report.proof
        'by construction (every rank: ResumableDistributedSampler under BatchSampler)'
    """
    world_size = valid_int('world_size', world_size, minimum=1)
    epochs = valid_int('epochs', epochs, minimum=1)
    seed = valid_int('seed', seed, 0, MAX_DATA_SEED)
    replication = valid_int('replication', replication, minimum=1)
    _check_proof(proof)
    problem = replication_problem(replication, world_size)
    if problem is not None:
        raise ValueError(problem)
    loaders, graphs = [], []
    for rank in range(world_size):
        loader = make_loader(rank, world_size)
        if not isinstance(loader, DataLoader) or not is_map_style(loader):
            raise TypeError(f'make_loader({rank}, {world_size}) must return a DataLoader over a map-style dataset, '
                            f'got {type(loader).__name__}')
        graph = take_snapshot(loader)
        for node in graph.seeded():
            node.seed = seed
        loaders.append(loader)
        graphs.append(graph)
    size = graphs[0].device_batch() or 1
    ranks = world_size // replication
    batch_sizes = BatchSizes(world_size, size * ranks, size, size, 1, replication)
    return plan_loaders(batch_sizes, seed, loaders, epochs, graphs, proof)


def plan_loaders(batch_sizes: BatchSizes, data_seed: int, rank_loaders: list[DataLoader], epochs: int,
                  rank_graphs: list[GraphSnapshot] | None = None, proof: str = 'auto') -> PlanReport:
    """Check the guarantees on every rank's loader (``rank_loaders[r]`` is rank r's).

    Coverage is proved on the first rank of each replication group, by construction
    where every rank's order is ours, else counted (``proof``: see :func:`check_plan`);
    ``report.proof`` says which and why. ``rank_graphs`` are the loaders' snapshots
    when the caller has them (else they are taken here).
    """
    _check_proof(proof)
    world_size = len(rank_loaders)
    if rank_graphs is None:
        rank_graphs = [take_snapshot(loader) for loader in rank_loaders]
    loaders, graphs = rank_loaders[::batch_sizes.replication], rank_graphs[::batch_sizes.replication]
    first, graph = loaders[0], graphs[0]
    sub_epochs = graph.sub_epochs()
    accounting = graph.accounting(batch_sizes.data_parallel)
    tree = render_tree(first, graph.active)
    report = PlanReport(batch_sizes, accounting, data_seed, tree, graph.sources(), sub_epochs)

    problems = [(rank, text) for rank, rank_graph in enumerate(rank_graphs)
                if (text := sharding_problem(rank_graph.root, world_size, rank, batch_sizes.replication,
                                             nodes=rank_graph.active))]
    if problems:
        rank, text = problems[0]
        report.problems.append(f'real sharding (rank {rank}): {text}')
        return report
    seeds = {tuple(node.seed for node in rank_graph.with_capability(Seeded, active_only=False))
             for rank_graph in rank_graphs}
    if len(seeds) > 1:
        report.problems.append(f'identical seeds: the ranks draw with different seeds {sorted(seeds)}')

    shapes = choose_proof(rank_graphs, batch_sizes.replication, accounting.dataset_len, proof)
    if isinstance(shapes, str):
        report.proof = f'counted ({shapes})'
    else:
        report.proof = f'by construction (every rank: {shapes[0].describe()})'
    for data_epoch in range(-(-epochs // sub_epochs)):
        trainer_epochs = range(data_epoch * sub_epochs, min((data_epoch + 1) * sub_epochs, epochs))
        complete = len(trainer_epochs) == sub_epochs
        if isinstance(shapes, str):
            coverage = stream_coverage(data_epoch, rank_chunks(loaders, trainer_epochs, graphs), accounting, complete)
        else:
            coverage = _constructed(data_epoch, trainer_epochs, rank_graphs, shapes, batch_sizes.replication,
                                    accounting, complete)
        report.epochs.append(coverage)
        if coverage.problem:
            report.problems.append(coverage.problem)
    return report



def _check_proof(proof: str) -> None:
    """Refuse a ``proof`` argument that is none of :data:`PROOFS`."""
    if proof not in PROOFS:
        raise ValueError(f'proof must be one of {", ".join(map(repr, PROOFS))}, got {proof!r}')


def choose_proof(rank_graphs: list[GraphSnapshot], replication: int, dataset_len: int,
                 proof: str = 'auto') -> list[RankShape] | str:
    """Every rank's :class:`~composer_sampling._proofs._rank_shape.RankShape` when the construction applies, else
    why the plan counts (``rank 0's graph has BatchShuffleSampler, which may reorder``).

    It applies when every rank's graph is our sampler under order-keeping layers only
    (:func:`~composer_sampling._proofs._rank_shape.read_shape`), the parameters that fix the
    order are equal on every rank, the samplers' ranks are ``0 .. W/R - 1`` (each on
    one group of ``replication`` ranks), the dataset length is the accounting's and no
    pass starts at an offset. Each graph is set to epoch 0 here, as the plan's first
    pass sets it. ``proof='construction'`` raises :class:`ValueError` where it does
    not apply (:class:`ConstructionError`); ``'counted'`` always counts.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loaders = [DataLoader(range(8), batch_size=2, sampler=ResumableDistributedSampler(8, 2, r))
        ...            for r in range(2)]
        >>> [shape.sampler.rank for shape in choose_proof([take_snapshot(loader) for loader in loaders], 1, 8)]
        [0, 1]
    """
    _check_proof(proof)
    found = 'the counted proof was asked for' if proof == 'counted' else _shapes(rank_graphs, replication,
                                                                                 dataset_len)
    if isinstance(found, str) and proof == 'construction':
        raise ConstructionError(f"proof='construction' needs every rank's order to be ours, but {found}")
    return found


def _shapes(rank_graphs: list[GraphSnapshot], replication: int, dataset_len: int) -> list[RankShape] | str:
    shapes = []
    for rank, graph in enumerate(rank_graphs):
        shape = read_shape(graph)
        if isinstance(shape, str):
            return f"rank {rank}'s graph has {shape}"
        shapes.append(shape)
    reference = shapes[0].parameters()
    for rank, shape in enumerate(shapes):
        for name, value in shape.parameters().items():
            if value != reference[name]:
                return f"rank {rank}'s {name} is {value!r}, rank 0's is {reference[name]!r}"
    groups = len(shapes) // replication
    if reference['num_replicas'] != groups or [shape.sampler.rank for shape in shapes] != [
            rank // replication for rank in range(len(shapes))]:
        return f"the samplers' ranks are not 0 to {groups - 1}, each on one group of {replication} ranks"
    if dataset_len != reference['dataset_len']:
        return f"the sampler's dataset_len {reference['dataset_len']} is not the accounting's {dataset_len}"
    for rank, (graph, shape) in enumerate(zip(rank_graphs, shapes, strict=True)):
        graph.set_epoch(0)
        if shape.sampler.sample_in_epoch:
            return (f"rank {rank}'s {shape.names[0]} starts its next pass at sample {shape.sampler.sample_in_epoch} "
                    'of the epoch')
    return shapes


def _constructed(data_epoch: int, trainer_epochs: range, rank_graphs: list[GraphSnapshot], shapes: list[RankShape],
                 replication: int, accounting: EpochAccounting, complete: bool) -> EpochCoverage:
    """One data epoch proved by construction, each trainer epoch set and checked on every rank, then guarded."""
    intervals = []
    for epoch in trainer_epochs:
        for rank, (graph, shape) in enumerate(zip(rank_graphs, shapes, strict=True)):
            graph.set_epoch(epoch)
            sampler = shape.sampler
            if sampler.epoch != epoch or sampler.sample_in_epoch or shape.data_epoch(epoch) != data_epoch:
                raise GuardError(f'rank {rank}\'s {shape.names[0]} is at epoch {sampler.epoch}, sample '
                                 f'{sampler.sample_in_epoch} after set_epoch({epoch}); the construction needs epoch '
                                 f'{epoch} from its start')
        first, _, end = shapes[0].interval(epoch)
        intervals.append((first, end))
        if epoch == trainer_epochs[0]:
            guard_positions(shapes[0], data_epoch)
        for rank in sorted({0, len(shapes) - replication}):
            guard_first_indices(rank_graphs[rank], shapes[rank], epoch)
    return constructed_coverage(data_epoch, intervals, accounting, len(shapes) // replication, complete)
