"""Check any DataLoader's order at any world size: every rank's order computed, the guarantees checked.

No training, no process group and no sample is read: each rank's loader is built
with its own ``num_replicas``/``rank`` and its sampler graph gets the epoch as
:class:`~composer_sampling.SamplerSync` would set it. Where every rank's order is
ours (:func:`choose_proof`), coverage follows from the samplers' parameters
(:mod:`composer_sampling._proofs._construction`, guarded by
:mod:`composer_sampling._proofs._construction_guard`); else the indices each rank would
yield are computed (:mod:`composer_sampling._proofs._indices`) and counted
(:mod:`composer_sampling._proofs.coverage`), by worker processes for a big plan
(:mod:`composer_sampling._proofs._workers`).
``composer-sampling plan`` runs the same check on a recipe
(:func:`composer_sampling.recipes.build_training.plan_recipe`).

Example:
    >>> from composer_sampling import ResumableDistributedSampler
    >>> def make_loader(rank, world_size):
    ...     return DataLoader(range(12), batch_size=3, sampler=ResumableDistributedSampler(12, world_size, rank))
    >>> check_plan(make_loader, world_size=4, epochs=1).ok
    True
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import is_map_style, render_tree, sharding_problem
from composer_sampling._proofs._construction import constructed_coverage
from composer_sampling._proofs._construction_guard import GuardError, guard_first_indices, guard_positions
from composer_sampling._proofs._indices import CHUNK, epoch_indices, rank_chunks
from composer_sampling._proofs._rank_shape import RankShape, read_shape
from composer_sampling._proofs._workers import plan_workers, tally_passes
from composer_sampling._proofs.coverage import (
    EpochAccounting,
    EpochCoverage,
    tally_coverage,
    verdict,
)
from composer_sampling._proofs.summary import fingerprint_text
from composer_sampling._validate import replication_problem, valid_int
from composer_sampling.batching import BatchSizes
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.protocols import Seeded

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
    #: The fingerprint of rank 0's train dataset, as the run summary prints it.
    fingerprint: str = ''
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


def check_plan(make_loader: Callable[[int, int], DataLoader], world_size: int, epochs: int = 2, seed: int = 0,
               replication: int = 1, proof: str = 'auto', workers: int | None = None) -> PlanReport:
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
        workers (int | None): processes that count the ranks' indices for the counted
            proof, at least 1 (forked, so ``make_loader`` need not pickle; ``1`` counts in
            this process). A rank's order must depend on its own loader only, as in
            training. Default: ``None``, one per available core, fewer for a small plan.

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
    return plan_loaders(batch_sizes, seed, loaders, epochs, graphs, proof, workers)


def plan_loaders(batch_sizes: BatchSizes, data_seed: int, rank_loaders: list[DataLoader], epochs: int,
                  rank_graphs: list[GraphSnapshot] | None = None, proof: str = 'auto',
                  workers: int | None = None) -> PlanReport:
    """Check the guarantees on every rank's loader (``rank_loaders[r]`` is rank r's).

    Coverage is proved on the first rank of each replication group, by construction
    where every rank's order is ours, else counted (``proof``, ``workers``: see
    :func:`check_plan`); ``report.proof`` says which and why. ``rank_graphs`` are the
    loaders' snapshots when the caller has them (else they are taken here).
    """
    _check_proof(proof)
    if workers is not None:
        valid_int('workers', workers, minimum=1)
    world_size = len(rank_loaders)
    if rank_graphs is None:
        rank_graphs = [take_snapshot(loader) for loader in rank_loaders]
    loaders, graphs = rank_loaders[::batch_sizes.replication], rank_graphs[::batch_sizes.replication]
    first, graph = loaders[0], graphs[0]
    sub_epochs = graph.sub_epochs()
    accounting = graph.accounting(batch_sizes.data_parallel)
    tree = render_tree(first, graph.active)
    report = PlanReport(batch_sizes, accounting, data_seed, tree, graph.sources(), sub_epochs,
                        fingerprint_text(first.dataset))

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
    passes = [(data_epoch, range(data_epoch * sub_epochs, min((data_epoch + 1) * sub_epochs, epochs)))
              for data_epoch in range(-(-epochs // sub_epochs))]
    if isinstance(shapes, str):
        count = plan_workers(workers, len(loaders), accounting.trained)
        tallies = tally_passes(loaders, graphs, passes, accounting.dataset_len, count)
        coverages = (tally_coverage(data_epoch, tally, accounting, len(trainer_epochs) == sub_epochs)
                     for (data_epoch, trainer_epochs), tally in zip(passes, tallies, strict=True))
    else:
        coverages = (_constructed(data_epoch, trainer_epochs, rank_graphs, shapes, batch_sizes.replication,
                                  accounting, len(trainer_epochs) == sub_epochs)
                     for data_epoch, trainer_epochs in passes)
    for coverage in coverages:
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
            if sampler.epoch != epoch or sampler.sample_in_epoch or sampler.data_epoch != data_epoch:
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
