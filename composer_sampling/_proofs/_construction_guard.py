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
from composer_sampling.positions import rank_positions

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

    The positions are drawn from those that one data epoch trains across all ranks
    (``epoch_usage``); the sampler's ``indices_at`` maps them to samples and its
    ``positions_of`` must give each position back, below the dataset length. The
    sampler's epoch must be a trainer epoch of ``data_epoch`` (its order is read from it).

    Example:
        >>> from composer_sampling import SubEpochDistributedSampler
        >>> from composer_sampling._proofs._rank_shape import RankShape
        >>> shape = RankShape(SubEpochDistributedSampler(1000, 3, num_replicas=4, rank=0), (), ('SubEpoch',))
        >>> guard_positions(shape, data_epoch=0, samples=100)
        100
    """
    sampler = shape.sampler
    n, end = sampler.epoch_usage()
    if not end:
        return 0
    positions = np.random.default_rng([seed, data_epoch]).integers(0, end, size=samples, dtype=np.int64)
    got = sampler.indices_at(positions)  # the call the plan's counted proof and pass_indices make
    _expect((got >= 0) & (got < n), f'an index outside [0, {n}) in data epoch {data_epoch}')
    _expect(sampler.positions_of(got) == positions % n,
            f'the inverse of data epoch {data_epoch}\'s order does not give back the positions')
    return samples


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
    expected = sampler.indices_at(positions)
    items = iter(graph.root)
    if getattr(graph.loader, 'batch_sampler', None) is not None:
        items = chain.from_iterable(items)
    got = np.fromiter(islice(items, count), dtype=np.int64)
    _expect(np.array_equal(got, expected), f'rank {sampler.rank} yields {got.tolist()} first in epoch '
            f'{trainer_epoch}, the construction gives {expected.tolist()}')
    return count
