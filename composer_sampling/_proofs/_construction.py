"""The proof by construction: how our own orders cover the dataset, computed instead of counted.

Our samplers put an epoch's samples in a global order (position ``p`` holds
sample ``f(p mod N)`` for a bijection ``f`` of ``[0, N)``; a mixture maps the
positions of its pass one-to-one into the sources) and rank ``r`` of ``W`` reads
positions ``first + r, first + r + W, ...``. Torch's ``BatchSampler`` and our
order-keeping wrappers only group what a rank reads, and with ``drop_last`` keep
a prefix of it. So each trainer epoch of a data epoch trains the positions
``[first, first + kept * W)`` (``kept`` indices on every rank), and how often each
sample is trained follows from those intervals folded modulo ``N``: in O(number of
trainer epochs), for any ``N`` up to ``2**62``. :func:`constructed_coverage` turns
them into the same :class:`~composer_sampling._proofs.coverage.EpochCoverage` the counted
proof (:func:`~composer_sampling._proofs.coverage.stream_coverage`) gives, judged by the
same function.

Example: 10 samples on 4 ranks, padded to 12 positions.
    >>> accounting = EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=3)
    >>> first, count = rank_window(10, 4, drop_last=False)
    >>> coverage = constructed_coverage(0, [(first, first + count * 4)], accounting, ranks=4, complete=True)
    >>> coverage.exactly_once, coverage.repeated, coverage.overlap, coverage.problem
    (8, 2, 2, None)
"""

from __future__ import annotations

from collections.abc import Sequence

from composer_sampling._proofs.coverage import EpochAccounting, EpochCoverage, judged_coverage, saturated_coverage
from composer_sampling.positions import samples_per_rank, split_window

__all__ = ['constructed_coverage', 'folded_counts', 'kept_by_batching', 'rank_window']


def rank_window(dataset_len: int, num_replicas: int, drop_last: bool, sub_epochs: int = 1,
                sub_epoch: int = 0) -> tuple[int, int]:
    """First global position and per-rank count of one pass of a (sub-epoch) sampler of ours, from the start.

    A rank's share of a data epoch is torch's ``num_samples`` (padded, or cut with
    ``drop_last``); sub-epoch ``s`` of ``S`` takes the ``s``-th of ``S`` runs of it whose
    sizes differ by at most one, at global positions from ``run start * W``.

    Example:
        >>> rank_window(10, 4, drop_last=False), rank_window(10, 4, drop_last=True)
        ((0, 3), (0, 2))
        >>> [rank_window(103, 2, False, sub_epochs=5, sub_epoch=s) for s in (0, 4)]
        [(0, 11), (84, 10)]
    """
    start, stop = split_window(samples_per_rank(dataset_len, num_replicas, drop_last), sub_epochs, sub_epoch)
    return start * num_replicas, stop - start


def kept_by_batching(count: int, layers: Sequence[tuple[int, bool]]) -> int:
    """How many of a rank's ``count`` indices the batching layers above its sampler keep (a prefix, in order).

    ``layers`` are ``(group, drop_last)`` from the innermost up: torch's
    ``BatchSampler`` groups ``batch_size`` indices, a ``NestedBatchSampler`` joins
    ``num_batches`` batches of the layer below. Every batch is full but the last;
    ``drop_last`` drops a last incomplete group (and the indices in it).

    Example: 10 indices in batches of 3 (the last of 1); in batches of 4 (the last of 2) joined 2 at a time.
        >>> kept_by_batching(10, [(3, True)]), kept_by_batching(10, [(4, False), (2, True)])
        (9, 8)
        >>> kept_by_batching(10, [(3, False), (4, True)])  # batches of 3, 3, 3 and 1 make one group of 4
        10
    """
    unit = 1  # indices in one full item of the layer below
    for group, drop_last in layers:
        if drop_last:
            items = -(-count // unit)
            count = min(count, items // group * group * unit)
        unit *= group
    return count


def folded_counts(intervals: Sequence[tuple[int, int]], n: int) -> tuple[int, int]:
    """Samples trained at least once and at least twice when position ``p`` holds sample ``f(p mod n)``.

    ``intervals`` are disjoint ``[lo, hi)`` ranges of positions; ``f`` is any
    bijection of ``[0, n)``, so only the positions' residues count. Each interval is
    folded onto ``[0, n)`` (whole turns add one to every sample) and the steps of the
    resulting count are swept: O(intervals), whatever ``n``.

    Example: 10 samples, positions 0..11 (2 padded) and 20..21.
        >>> folded_counts([(0, 12)], 10), folded_counts([(0, 12), (20, 22)], 10)
        ((10, 2), (10, 2))
        >>> folded_counts([(0, 25)], 10)  # two whole turns and a half
        (10, 10)
    """
    base = 0
    steps: dict[int, int] = {}
    for lo, hi in intervals:
        whole, rest = divmod(max(hi - lo, 0), n)
        base += whole
        if not rest:
            continue
        a = lo % n
        pieces = [(a, a + rest)] if a + rest <= n else [(a, n), (0, a + rest - n)]
        for start, stop in pieces:
            steps[start] = steps.get(start, 0) + 1
            steps[stop] = steps.get(stop, 0) - 1
    held = twice = 0
    level, at = base, 0
    for edge in [*sorted(steps), n]:
        held += (edge - at) * (level >= 1)
        twice += (edge - at) * (level >= 2)
        level, at = level + steps.get(edge, 0), edge
    return held, twice


def constructed_coverage(epoch: int, intervals: Sequence[tuple[int, int]], accounting: EpochAccounting, ranks: int,
                         complete: bool) -> EpochCoverage:
    """One data epoch's coverage from the global positions its trainer epochs train, judged as the counted one.

    ``intervals`` are the ``[first, first + kept * ranks)`` of each trainer epoch of
    the data epoch (every rank reads ``kept`` positions of each). One sample's
    positions are ``N`` apart and a rank's are ``ranks`` apart, and a pass ends at most
    ``ranks - 1`` positions past ``N`` (or at ``ranks``, when ``N`` is smaller): so a
    sample trained twice is trained on two ranks (no rank repeats one itself), and the
    samples on several ranks are the ones trained twice. Any other interval is refused.

    Example: 3 samples on 8 ranks, each rank reading one position (5 ranks train only padding).
        >>> accounting = EpochAccounting(dataset_len=3, trained=8, padded=5, dropped=0, steps=1)
        >>> coverage = constructed_coverage(0, [(0, 8)], accounting, ranks=8, complete=True)
        >>> coverage.exactly_once, coverage.repeated, coverage.overlap, coverage.problem[:47]
        (0, 5, 3, 'every rank trains: the dataset has 3 samples fo')
    """
    size = accounting.dataset_len
    end = max(size + ranks - 1, ranks)
    for lo, hi in intervals:
        if not 0 <= lo <= hi <= end or lo % ranks or (hi - lo) % ranks:
            raise ValueError(f'intervals must be [lo, hi) of whole rows of {ranks} positions within [0, {end}] '
                             f'(dataset_len={size} on {ranks} ranks), got {(lo, hi)}')
    held, twice = folded_counts(intervals, size)
    trained = sum(hi - lo for lo, hi in intervals)
    coverage = saturated_coverage(held, twice, trained, size)
    idle = ranks if trained == 0 else 0  # every rank reads the same number of positions
    return judged_coverage(epoch, coverage, twice, accounting, ranks, idle, complete)
