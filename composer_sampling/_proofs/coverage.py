"""Coverage: how the samples trained in an epoch cover the dataset, and the one verdict on it.

``plan`` (before training, from every rank's computed order), ``audit`` (after
training, from the ledgers) and :class:`~composer_sampling.SampleLedger` (which
records the accounting) count and judge with these functions, so they cannot
disagree about what "exactly once" allows.

Example:
    >>> coverage = count_coverage(np.array([0, 1, 2, 2]), 4)
    >>> print(exactly_once_problem(coverage, epoch=0, padded=0, dropped=0, complete=True))
    exactly once per epoch: 1 samples trained again in epoch 0, padding allows 0
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from composer_sampling._graph.accounting import EpochAccounting
from composer_sampling._proofs.counting import RankOverlap, SaturatingCounts
from composer_sampling._validate import first_outside

if TYPE_CHECKING:  # audit's verdict needs no torch: the graph (and torch) is imported where a loader is read
    from torch.utils.data import DataLoader

__all__ = [
    'Coverage',
    'EpochAccounting',
    'EpochCoverage',
    'count_coverage',
    'epoch_accounting',
    'epoch_coverage',
    'exactly_once_problem',
    'judged_coverage',
    'saturated_coverage',
    'stream_coverage',
    'verdict',
]

#: Indices counted at a time: bounds the temporaries of one count.
_CHUNK = 1 << 22


@dataclass(frozen=True)
class Coverage:
    """How a multiset of trained sample indices covers a dataset."""

    trained: int
    exactly_once: int
    repeated: int
    missing: int


def count_coverage(indices: np.ndarray, dataset_len: int) -> Coverage:
    """Samples trained once, trainings beyond the first (repeats), and samples never trained.

    Raises :class:`ValueError` for an index outside ``[0, dataset_len)``: it would
    otherwise be counted as a sample of another dataset.

    Example:
        >>> count_coverage(np.array([0, 1, 1]), 3)
        Coverage(trained=3, exactly_once=1, repeated=1, missing=1)
    """
    if (where := first_outside(indices, dataset_len)) is not None:
        bad = int(indices[where])
        raise ValueError(f'sample index {bad} is outside [0, {dataset_len}), the range of dataset_len={dataset_len}')
    counts = SaturatingCounts(dataset_len)
    for lo in range(0, indices.size, _CHUNK):
        counts.add(indices[lo:lo + _CHUNK])
    return saturated_coverage(counts.at_least_once(), counts.at_least_twice(), int(indices.size), dataset_len)


def saturated_coverage(held: int, twice: int, trained: int, dataset_len: int) -> Coverage:
    """The coverage of ``trained`` indices of which ``held`` distinct samples were trained, ``twice`` more than once.

    Example:
        >>> saturated_coverage(held=2, twice=1, trained=3, dataset_len=3)
        Coverage(trained=3, exactly_once=1, repeated=1, missing=1)
    """
    return Coverage(trained=trained, exactly_once=held - twice, repeated=trained - held, missing=dataset_len - held)


def epoch_accounting(loader: DataLoader, world_size: int) -> EpochAccounting:
    """Samples trained, padded and dropped per epoch, read off the graph's sharding sampler
    (:meth:`~composer_sampling._graph.snapshot.GraphSnapshot.accounting` of one snapshot of ``loader``).

    Example:
        >>> from torch.utils.data import DataLoader
        >>> from composer_sampling import ResumableDistributedSampler
        >>> loader = DataLoader(range(10), batch_size=2, sampler=ResumableDistributedSampler(10, 4, 0))
        >>> epoch_accounting(loader, world_size=4)
        EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=2)
    """
    from composer_sampling._graph.snapshot import take_snapshot

    return take_snapshot(loader).accounting(world_size)


@dataclass(frozen=True)
class EpochCoverage:
    """How one pass over the data covers the dataset across all ranks."""

    epoch: int
    trained: int
    exactly_once: int
    repeated: int
    missing: int
    overlap: int
    complete: bool
    problem: str | None



def exactly_once_problem(coverage: Coverage, epoch: int, padded: int, dropped: int, complete: bool) -> str | None:
    """The exactly-once guarantee for one epoch: the broken rule in words, or ``None`` when it holds.

    Repeats beyond the sampler's padding always break it; samples missing beyond
    what the sampler drops break it only in a ``complete`` epoch (a run may stop,
    or a plan may check, part of one).

    Example:
        >>> coverage = count_coverage(np.array([0, 1]), 4)
        >>> exactly_once_problem(coverage, 3, padded=0, dropped=0, complete=False) is None
        True
        >>> print(exactly_once_problem(coverage, 3, padded=0, dropped=1, complete=True))
        exactly once per epoch: 2 samples never trained in epoch 3, the sampler drops 1
    """
    if coverage.repeated > padded:
        return (f'exactly once per epoch: {coverage.repeated} samples trained again in epoch {epoch}, '
                f'padding allows {padded}')
    if complete and coverage.missing > dropped:
        return (f'exactly once per epoch: {coverage.missing} samples never trained in epoch {epoch}, '
                f'the sampler drops {dropped}')
    return None


def epoch_coverage(epoch: int, per_rank: list[np.ndarray], accounting: EpochAccounting,
                   complete: bool) -> EpochCoverage:
    """One pass's coverage over every data-parallel rank's indices, and the first guarantee it breaks.

    Each rank's indices as one array; :func:`stream_coverage` takes them in chunks.

    Example: 3 samples on 4 ranks; the fourth rank would train a padding repeat only.
        >>> accounting = EpochAccounting(dataset_len=3, trained=4, padded=1, dropped=0, steps=1)
        >>> print(epoch_coverage(0, [np.array([i % 3]) for i in range(4)], accounting, True).problem)
        ... # doctest: +NORMALIZE_WHITESPACE
        every rank trains: the dataset has 3 samples for 4 data-parallel ranks, so 1 rank would train only
        padding (repeats of samples other ranks train) in epoch 0; use at least 4 samples or at most 3
        data-parallel ranks
    """
    return stream_coverage(epoch, ([indices] for indices in per_rank), accounting, complete)


def _outside(indices: np.ndarray, dataset_len: int) -> int | None:
    """The first index of the chunk outside ``[0, dataset_len)``, or None."""
    where = first_outside(indices, dataset_len)
    return None if where is None else int(indices[where])


def stream_coverage(epoch: int, ranks: Iterable[Iterable[np.ndarray]], accounting: EpochAccounting,
                    complete: bool) -> EpochCoverage:
    """:func:`epoch_coverage` over each rank's indices given as chunks, in ``dataset_len / 2`` bytes and a chunk.

    Samples are counted 0, 1 or 2+ times, and by how many ranks, in
    :class:`~composer_sampling._proofs.counting.RankOverlap`; no array of a rank's or an
    epoch's indices is built.

    Example:
        >>> accounting = EpochAccounting(dataset_len=4, trained=4, padded=0, dropped=0, steps=1)
        >>> chunks = [[np.array([0]), np.array([2])], [np.array([1, 3])]]
        >>> stream_coverage(0, chunks, accounting, complete=True).exactly_once
        4
    """
    size = accounting.dataset_len
    counts = RankOverlap(size)
    trained, ranks_seen, idle, problem = 0, 0, 0, None
    for rank, chunks in enumerate(ranks):
        counts.start_rank()
        rank_size = 0
        for indices in chunks:
            rank_size += indices.size
            if problem is None and (bad := _outside(indices, size)) is not None:
                # counting it would credit a sample of another dataset
                problem = (f'indices within the dataset: rank {rank} yields index {bad} in epoch {epoch}, '
                           f'outside [0, {size})')
            if problem is None:
                counts.add(indices)
        trained, ranks_seen, idle = trained + rank_size, ranks_seen + 1, idle + (rank_size == 0)
    if problem is not None:
        return EpochCoverage(epoch, trained, 0, 0, 0, 0, complete, problem)
    coverage = saturated_coverage(counts.at_least_once(), counts.at_least_twice(), trained, size)
    return judged_coverage(epoch, coverage, counts.on_several_ranks(), accounting, ranks_seen, idle, complete)


def judged_coverage(epoch: int, coverage: Coverage, overlap: int, accounting: EpochAccounting, ranks: int, idle: int,
                    complete: bool) -> EpochCoverage:
    """One pass's coverage with the first guarantee it breaks, however it was found (counted or constructed).

    ``overlap`` samples were trained by several of the ``ranks`` data-parallel ranks, ``idle`` ranks trained nothing.

    Example:
        >>> accounting = EpochAccounting(dataset_len=4, trained=4, padded=0, dropped=0, steps=1)
        >>> coverage = Coverage(trained=4, exactly_once=4, repeated=0, missing=0)
        >>> judged_coverage(0, coverage, 0, accounting, ranks=2, idle=0, complete=True).problem is None
        True
    """
    return EpochCoverage(epoch, coverage.trained, coverage.exactly_once, coverage.repeated, coverage.missing, overlap,
                         complete, _problem(epoch, coverage, overlap, accounting, ranks, idle, complete))


def _problem(epoch: int, coverage: Coverage, overlap: int, accounting: EpochAccounting, ranks: int, idle: int,
             complete: bool) -> str | None:
    """The first guarantee one pass breaks, in words, or None."""
    size = accounting.dataset_len
    fix = f'; use at least {ranks} samples or at most {size} data-parallel ranks' if size < ranks else ''
    if idle and (complete or size < ranks):
        return (f'every rank trains: {idle} of the {ranks} data-parallel ranks would train nothing in epoch '
                f'{epoch} (the dataset has {size} samples, the sampler drops {accounting.dropped}){fix}')
    if size < ranks:
        return (f'every rank trains: the dataset has {size} samples for {ranks} data-parallel ranks, so '
                f'{ranks - size} rank{"s" * (ranks - size > 1)} would train only padding (repeats of samples other '
                f'ranks train) in epoch {epoch}{fix}')
    if coverage.repeated <= accounting.padded and overlap > accounting.padded:
        return f'no overlap between ranks: {overlap} samples trained by several ranks in epoch {epoch}'
    return exactly_once_problem(coverage, epoch, accounting.padded, accounting.dropped, complete)


def verdict(accounting: EpochAccounting, epochs: list[EpochCoverage], data_parallel: int,
            sub_epochs: int) -> str:
    """The line ``plan`` prints when every guarantee holds, in the numbers of its own table.

    Padding and dropped samples are named: a plan whose table shows repeats or
    samples on several ranks never reads "every sample exactly once".

    Example:
        >>> accounting = EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=3)
        >>> epochs = [EpochCoverage(0, 12, 8, 2, 0, 2, True, None)]
        >>> print(verdict(accounting, epochs, data_parallel=4, sub_epochs=1))  # doctest: +NORMALIZE_WHITESPACE
        every guarantee holds: 8 of 10 samples exactly once per epoch, 2 twice (padding repeats 2 so that the 4
        ranks train equal shares), no overlap between ranks except the 2 padded samples, identical seeds
    """
    ranks = data_parallel
    complete = [epoch for epoch in epochs if epoch.complete]
    parts = []
    if not complete:
        parts.append(f'no repeats beyond padding in the partial pass checked (a whole pass takes {sub_epochs} '
                     f'epochs: pass --epochs {sub_epochs} to check one)')
    elif not accounting.padded and not accounting.dropped:
        parts.append('every sample exactly once per epoch')
    else:
        epoch = min(complete, key=lambda e: e.exactly_once)
        again = accounting.dataset_len - epoch.exactly_once - epoch.missing
        numbers = [f'{epoch.exactly_once} of {accounting.dataset_len} samples exactly once per epoch']
        reasons = []
        if again:
            numbers.append(f'{again} {"twice" if epoch.repeated == again else "more than once"}')
        if epoch.missing:
            numbers.append(f'{epoch.missing} not at all')
        if accounting.padded:
            reasons.append(f'padding repeats {accounting.padded} so that the {ranks} ranks train equal shares')
        if accounting.dropped:
            reasons.append(f'the sampler drops {accounting.dropped}: drop_last, or a mixture trimmed to whole '
                           'global steps')
        parts.append(f'{", ".join(numbers)} ({"; ".join(reasons)})')
    overlap = max((epoch.overlap for epoch in epochs), default=0)
    parts.append(f'no overlap between ranks except the {overlap} padded samples' if overlap
                 else 'no overlap between ranks')
    parts.append('identical seeds')
    return 'every guarantee holds: ' + ', '.join(parts)
