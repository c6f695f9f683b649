"""The guard of the proof by construction: the implementation evaluated where the construction says what it gives.

The construction proves coverage from the samplers' parameters; it trusts that the
code computes the bijection it is built on. The guard checks that trust where it is
cheap, without being the proof: the epoch's permutation and its inverse on a seeded
random sample of a few thousand positions (every sample maps back to its position),
and the first indices a rank's loader root really yields against the positions the
construction gives that rank. A mismatch is a bug in composer-sampling and raises
:class:`GuardError`, never a quiet verdict.

Example:
    >>> from torch.utils.data import DataLoader
    >>> from composer_sampling import ResumableDistributedSampler
    >>> from composer_sampling._proofs._rank_shape import read_shape
    >>> from composer_sampling._graph.snapshot import take_snapshot
    >>> sampler = ResumableDistributedSampler(10**12, num_replicas=8, rank=3)
    >>> graph = take_snapshot(DataLoader(range(10**12), batch_size=4, sampler=sampler))
    >>> shape = read_shape(graph)
    >>> guard_positions(shape, data_epoch=0), guard_first_indices(graph, shape, trainer_epoch=0)
    (4096, 8)
"""

from __future__ import annotations

from itertools import chain, islice
from typing import Any

import numpy as np

from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._proofs._rank_shape import RankShape
from composer_sampling.permutation import Permutation, derive_seed
from composer_sampling.positions import IndexArray, global_indices, rank_positions, samples_per_rank
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler

__all__ = ['FIRST_INDICES', 'GUARD_POSITIONS', 'GuardError', 'guard_first_indices', 'guard_positions']

#: Positions of each data epoch's order evaluated, and mapped back, by the guard.
GUARD_POSITIONS = 4096
#: Indices read from a rank's loader root and compared with the construction.
FIRST_INDICES = 8


class GuardError(RuntimeError):
    """The implementation disagrees with the construction it is proved by: a bug, to be reported."""


def _expect(agrees: Any, what: str) -> None:
    if not bool(np.all(agrees)):
        raise GuardError(f'the proof by construction\'s guard failed: {what}. This is a bug in composer-sampling; '
                         "please report it (check_plan(..., proof='counted') counts this plan instead)")


def guard_positions(shape: RankShape, data_epoch: int, samples: int = GUARD_POSITIONS, seed: int = 0) -> int:
    """Evaluate the order of ``data_epoch`` and its inverse at ``samples`` seeded random positions; how many.

    The sampler's epoch must be a trainer epoch of ``data_epoch`` (its order is read from it).

    Example:
        >>> from composer_sampling import SubEpochDistributedSampler
        >>> from composer_sampling._proofs._rank_shape import RankShape
        >>> shape = RankShape(SubEpochDistributedSampler(1000, 3, num_replicas=4, rank=0), (), ('SubEpoch',))
        >>> guard_positions(shape, data_epoch=0, samples=100)
        100
    """
    sampler = shape.sampler
    rng = np.random.default_rng([seed, data_epoch])
    if isinstance(sampler, MixtureDistributedSampler):
        return _guard_mixture(sampler, rng, samples)
    n = sampler.dataset_len
    end = samples_per_rank(n, sampler.num_replicas, sampler.drop_last) * sampler.num_replicas
    if not end:
        return 0
    positions = rng.integers(0, end, size=samples, dtype=np.int64)
    if isinstance(sampler, ResumableDistributedSampler):
        got = sampler.indices_at(positions)  # the call the plan's counted proof and pass_indices make
    else:
        got = global_indices(positions, n, sampler.shuffle, sampler.seed, data_epoch)
    _expect((got >= 0) & (got < n), f'an index outside [0, {n}) in data epoch {data_epoch}')
    wrapped = positions % n
    if sampler.shuffle:
        order = Permutation.cached(n, sampler.seed, data_epoch)
        _expect(order.at(int(wrapped[0])) == got[0], f'Permutation.at and the vectorised call differ at {wrapped[0]}')
        got = order.inverse(got)
    _expect(got == wrapped, f'the inverse of data epoch {data_epoch}\'s order does not give back the positions')
    return samples


def _guard_mixture(sampler: MixtureDistributedSampler, rng: np.random.Generator, samples: int) -> int:
    """Each position's source is the step's, and the source's inverse permutation gives back its place in it."""
    sources, within = sampler.schedule()
    global_batch = sampler.global_batch
    steps = [size // global_batch for size in sampler.source_sizes]
    _expect(np.bincount(sources, minlength=len(steps)).tolist() == steps, 'the schedule does not hold every '
            f'source\'s whole global steps {steps}')
    positions = rng.integers(0, len(sources) * global_batch, size=samples, dtype=np.int64)
    got = sampler.indices_at(positions)
    step, column = np.divmod(positions, global_batch)
    starts = np.cumsum([0, *sampler.source_sizes])
    source = np.searchsorted(starts, got, side='right') - 1
    _expect(source == sources[step], 'a position maps into another source than its global step\'s')
    for k in np.unique(source).tolist():
        mask = source == k
        place = got[mask] - starts[k]
        if sampler.shuffle:
            place = Permutation.cached(sampler.source_sizes[k], derive_seed(sampler.seed, k), sampler.epoch).inverse(
                place)
        _expect(place == within[step[mask]] * global_batch + column[mask],
                f'the inverse of source {k}\'s order does not give back the positions')
    return samples


def _indices_at(shape: RankShape, positions: IndexArray, data_epoch: int) -> IndexArray:
    sampler = shape.sampler
    if isinstance(sampler, MixtureDistributedSampler):
        return sampler.indices_at(positions)
    return global_indices(positions, sampler.dataset_len, sampler.shuffle, sampler.seed, data_epoch)


def guard_first_indices(graph: GraphSnapshot, shape: RankShape, trainer_epoch: int,
                        count: int = FIRST_INDICES) -> int:
    """Compare the first ``count`` indices the loader's root yields in ``trainer_epoch`` with the construction's.

    The graph's epoch must be ``trainer_epoch``. Returns how many were compared (fewer if the rank keeps fewer).
    """
    first, kept, _ = shape.interval(trainer_epoch)
    count = min(count, kept)
    if not count:
        return 0
    sampler = shape.sampler
    positions = rank_positions(first, sampler.rank, sampler.num_replicas, count)
    expected = _indices_at(shape, positions, shape.data_epoch(trainer_epoch))
    items = iter(graph.root)
    if getattr(graph.loader, 'batch_sampler', None) is not None:
        items = chain.from_iterable(items)
    got = np.fromiter(islice(items, count), dtype=np.int64)
    _expect(np.array_equal(got, expected), f'rank {sampler.rank} yields {got.tolist()} first in epoch '
            f'{trainer_epoch}, the construction gives {expected.tolist()}')
    return count
