"""The bounded counting behind plan and audit agrees with a plain ``np.bincount`` on any stream of indices.

Streams are drawn with repeats (3 and more times), gaps, empty ranks and chunk
boundaries anywhere; the reference counts the concatenated indices exactly.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling._proofs.counting import RankOverlap, SaturatingCounts, group_bits, popcount
from composer_sampling._proofs.coverage import EpochAccounting, count_coverage, epoch_coverage, stream_coverage

SIZES = st.integers(min_value=1, max_value=70)


@st.composite
def rank_streams(draw: st.DrawFn) -> tuple[int, list[list[np.ndarray]]]:
    """A dataset size and, per rank, its indices cut into chunks (some ranks and chunks empty)."""
    size = draw(SIZES)
    # few distinct values so that repeats of 3+ are common
    pool = draw(st.lists(st.integers(0, size - 1), min_size=1, max_size=6))
    ranks = []
    for _ in range(draw(st.integers(0, 6))):
        values = draw(st.lists(st.one_of(st.sampled_from(pool), st.integers(0, size - 1)), max_size=40))
        cuts = sorted(draw(st.lists(st.integers(0, len(values)), max_size=4)))
        ranks.append([np.array(values[a:b], dtype=np.int64) for a, b in
                      zip([0, *cuts], [*cuts, len(values)], strict=True)])
    return size, ranks


@settings(max_examples=300, deadline=None)
@given(rank_streams())
def test_saturating_counts_agree_with_bincount(stream: tuple[int, list[list[np.ndarray]]]) -> None:
    size, ranks = stream
    counts = SaturatingCounts(size)
    for chunks in ranks:
        for chunk in chunks:
            counts.add(chunk)
    reference = np.bincount(np.concatenate([np.empty(0, np.int64), *(c for r in ranks for c in r)]), minlength=size)
    assert counts.at_least_once() == np.count_nonzero(reference)
    assert counts.at_least_twice() == np.count_nonzero(reference >= 2)
    assert counts.exactly_once() == np.count_nonzero(reference == 1)
    assert popcount(counts.once[size // 8 + 1:]) == 0  # nothing past the dataset is ever set


@settings(max_examples=300, deadline=None)
@given(rank_streams())
def test_rank_overlap_agrees_with_bincount_of_each_rank_unique(stream: tuple[int, list[list[np.ndarray]]]) -> None:
    size, ranks = stream
    overlap = RankOverlap(size)
    for chunks in ranks:
        overlap.start_rank()
        for chunk in chunks:
            overlap.add(chunk)
    everything = [np.concatenate([np.empty(0, np.int64), *chunks]) for chunks in ranks]
    counts = np.bincount(np.concatenate([np.empty(0, np.int64), *everything]), minlength=size)
    holders = np.bincount(np.concatenate([np.empty(0, np.int64), *map(np.unique, everything)]), minlength=size)
    assert overlap.at_least_once() == np.count_nonzero(counts)
    assert overlap.at_least_twice() == np.count_nonzero(counts >= 2)
    assert overlap.on_several_ranks() == np.count_nonzero(holders > 1)


def _reference(epoch: int, per_rank: list[np.ndarray], accounting: EpochAccounting) -> tuple[int, ...]:
    """The numbers epoch_coverage gave before the bounded counting: one bincount, one np.unique per rank."""
    everything = np.concatenate([np.empty(0, np.int64), *per_rank])
    coverage = count_coverage(everything, accounting.dataset_len)
    counts = np.bincount(everything, minlength=accounting.dataset_len)
    holders = np.bincount(np.concatenate([np.empty(0, np.int64), *map(np.unique, per_rank)]),
                          minlength=accounting.dataset_len)
    assert (coverage.exactly_once, coverage.missing) == (np.count_nonzero(counts == 1), np.count_nonzero(counts == 0))
    return (everything.size, coverage.exactly_once, coverage.repeated, coverage.missing,
            int(np.count_nonzero(holders > 1)))


@settings(max_examples=300, deadline=None)
@given(rank_streams(), st.integers(0, 3), st.integers(0, 3), st.booleans())
def test_streamed_coverage_equals_the_whole_array_count(stream: tuple[int, list[list[np.ndarray]]], padded: int,
                                                       dropped: int, complete: bool) -> None:
    size, ranks = stream
    accounting = EpochAccounting(dataset_len=size, trained=size + padded - dropped, padded=padded, dropped=dropped,
                                 steps=1)
    per_rank = [np.concatenate([np.empty(0, np.int64), *chunks]) for chunks in ranks]
    streamed = stream_coverage(4, ranks, accounting, complete)
    whole = epoch_coverage(4, per_rank, accounting, complete)
    assert streamed == whole
    expected = _reference(4, per_rank, accounting)
    assert (streamed.trained, streamed.exactly_once, streamed.repeated, streamed.missing, streamed.overlap) == expected


def test_a_rank_spread_over_many_chunks_clears_all_it_set() -> None:
    # rank 0 touches more bytes than its positions' list may hold: the whole scratch is cleared, then reused
    size = 4096
    overlap = RankOverlap(size)
    overlap.start_rank()
    for lo in range(0, size, 100):
        overlap.add(np.arange(lo, min(lo + 100, size)))
    overlap.start_rank()
    overlap.add(np.array([5, 5, 7]))
    assert (overlap.at_least_once(), overlap.at_least_twice(), overlap.on_several_ranks()) == (size, 2, 2)


def test_an_index_outside_the_dataset_stops_the_count_and_names_its_rank() -> None:
    accounting = EpochAccounting(dataset_len=4, trained=4, padded=0, dropped=0, steps=1)
    coverage = stream_coverage(0, [[np.array([0, 1])], [np.array([2]), np.array([9, 3])], [np.array([3])]],
                               accounting, complete=True)
    assert coverage.problem == 'indices within the dataset: rank 1 yields index 9 in epoch 0, outside [0, 4)'
    assert coverage.trained == 6


def test_group_bits_sets_each_byte_once() -> None:
    bytes_, bits, again = group_bits(np.array([17, 16, 3, 17, 17, 23], dtype=np.uint32))
    assert bytes_.tolist() == [0, 2] and bits.tolist() == [0b1000, 0b10000011] and again.tolist() == [0, 0b10]
