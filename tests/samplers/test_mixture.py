"""MixtureDistributedSampler: one source per global step, whole steps only, every rank in step."""

from __future__ import annotations

import collections
from itertools import chain

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling import MixtureDistributedSampler
from composer_sampling.permutation import Permutation, derive_seed
from composer_sampling.positions import mixture_schedule

from support.helpers import all_ranks


def _maker(sizes: list[int], batch: int, **kwargs):
    return lambda world, rank: MixtureDistributedSampler(sizes, batch, num_replicas=world, rank=rank, **kwargs)


def _source_of(index: int, sizes: list[int]) -> int:
    return int(np.searchsorted(np.cumsum(sizes), index, side='right'))


sizes_strategy = st.lists(st.integers(0, 120), min_size=1, max_size=4)


@given(sizes=sizes_strategy, world=st.integers(1, 4), batch=st.integers(1, 6), seed=st.integers(0, 999),
       epoch=st.integers(0, 4), shuffle=st.booleans())
@settings(max_examples=150, deadline=None)
def test_epoch_guarantees(sizes, world, batch, seed, epoch, shuffle) -> None:
    global_batch = world * batch
    steps = [size // global_batch for size in sizes]
    if not sum(steps):
        with pytest.raises(ValueError, match='every source is smaller than one global step'):
            MixtureDistributedSampler(sizes, batch, num_replicas=world, rank=0)
        return
    per_rank = all_ranks(_maker(sizes, batch, seed=seed, shuffle=shuffle), world, epoch=epoch)
    assert {len(indices) for indices in per_rank} == {sum(steps) * batch}
    for step in range(sum(steps)):
        batches = [indices[step * batch:(step + 1) * batch] for indices in per_rank]
        sources = {_source_of(i, sizes) for rank_batch in batches for i in rank_batch}
        assert len(sources) == 1, f'step {step} mixes sources {sources}'  # every rank on the same source
    counts = collections.Counter(i for indices in per_rank for i in indices)
    assert set(counts.values()) == {1}, 'a sample twice in one epoch'
    per_source = collections.Counter(_source_of(i, sizes) for i in counts)
    assert [per_source[k] for k in range(len(sizes))] == [s * global_batch for s in steps]  # trimmed to whole steps


@given(steps=st.lists(st.integers(0, 40), min_size=1, max_size=5), seed=st.integers(0, 99), shuffle=st.booleans())
def test_steps_of_each_source_are_spread_evenly(steps, seed, shuffle) -> None:
    sources, within = mixture_schedule(steps, shuffle=shuffle, seed=seed, epoch=1)
    total = sum(steps)
    assert sorted(zip(sources.tolist(), within.tolist(), strict=True)) == [
        (k, j) for k, count in enumerate(steps) for j in range(count)]
    for k, count in enumerate(steps):
        where = np.flatnonzero(sources == k)
        ideal = total * np.arange(count) / max(count, 1)
        assert np.all(np.abs(where - ideal) <= len(steps) + total / max(count, 1)), 'a source bunched up'


def test_trimmed_samples_and_rank_shares_change_every_epoch() -> None:
    sizes, batch, world = [50, 37, 23], 4, 2
    make = _maker(sizes, batch, seed=5)
    used = [set(i for ranks in all_ranks(make, world, epoch=e) for i in ranks) for e in range(3)]
    assert used[0] != used[1] != used[2]  # a different 2 + 5 + 7 trimmed each epoch
    rank_zero = [set(all_ranks(make, world, epoch=e)[0]) for e in range(3)]
    assert len(rank_zero[0] & rank_zero[1]) < len(rank_zero[0])  # no fixed per-rank slice


def test_sources_follow_concat_dataset_offsets() -> None:
    from torch.utils.data import ConcatDataset

    sources = [list(range(0, 12)), list(range(100, 108)), list(range(200, 216))]
    dataset = ConcatDataset(sources)
    sampler = MixtureDistributedSampler([len(s) for s in sources], batch_size=4, num_replicas=1, rank=0, seed=1)
    values = [dataset[i] for i in sampler]
    batches = [values[i:i + 4] for i in range(0, len(values), 4)]
    assert all(len({v // 100 for v in batch}) == 1 for batch in batches)
    assert sorted(values) == sorted(chain.from_iterable(sources))


@given(steps_done=st.integers(0, 12), seed=st.integers(0, 50))
@settings(max_examples=40, deadline=None)
def test_resume_is_exact_and_elastic_for_the_same_global_batch(steps_done: int, seed: int) -> None:
    sizes = [40, 33, 25]
    two = all_ranks(_maker(sizes, 4, seed=seed), 2, epoch=3)  # global batch 8
    steps_done = min(steps_done, len(two[0]) // 4)
    resumed_same = all_ranks(_maker(sizes, 4, seed=seed), 2, epoch=3, start=steps_done * 8)
    assert resumed_same == [ranks[steps_done * 4:] for ranks in two]
    resumed_four = all_ranks(_maker(sizes, 2, seed=seed), 4, epoch=3, start=steps_done * 8)  # still 8 a step
    remaining = sorted(i for ranks in two for i in ranks[steps_done * 4:])
    assert sorted(i for ranks in resumed_four for i in ranks) == remaining


@pytest.mark.parametrize(
    ('args', 'error', 'message'),
    [
        (([10, -1], 2), ValueError, r'source_sizes\[1\] must be in the interval \[0, inf\), got -1'),
        (([10], 0), ValueError, r'batch_size must be in the interval \[1, inf\), got 0'),
        (([10], True), TypeError, 'batch_size must be an int'),
        (([], 2), TypeError, 'source_sizes must be a non-empty sequence'),
        (([3, 5], 4), ValueError, r'every source is smaller than one global step of 8 samples \(num_replicas 2 x '
                                  r'batch_size 4\); source_sizes=\[3, 5\]'),
    ],
)
def test_bad_arguments(args, error, message) -> None:
    with pytest.raises(error, match=message):
        MixtureDistributedSampler(*args, num_replicas=2, rank=0)


def test_report_and_repr() -> None:
    sampler = MixtureDistributedSampler([10, 6, 5], 2, num_replicas=2, rank=0, seed=3)
    assert sampler.source_report()[0] == {'source': 0, 'size': 10, 'used': 8, 'trimmed': 2, 'steps': 2}
    assert repr(sampler) == ('MixtureDistributedSampler(source_sizes=[10, 6, 5], batch_size=2, num_replicas=2, '
                             'rank=0, shuffle=True, seed=3)')


def test_known_answers() -> None:
    """The order from before the lookup-table Feistel and step-wise runs: they must not change it."""
    import hashlib

    small = MixtureDistributedSampler([50, 37, 23], 4, num_replicas=2, rank=1, seed=5)
    small.set_epoch(2)
    assert list(small)[:16] == [109, 87, 95, 97, 63, 56, 80, 84, 14, 6, 9, 27, 47, 39, 26, 41]
    large = MixtureDistributedSampler([500_000, 300_000, 200_000], 16, num_replicas=8, rank=3, seed=1)
    large.set_epoch(1)
    indices = np.fromiter(iter(large), dtype=np.int64)
    assert len(indices) == 124_976
    assert hashlib.sha256(indices.tobytes()).hexdigest() == (
        '8db7ae61cf5667434d1b8934cb60fa4190dcfa4410d04a37c902606539382951')


@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=4), seed=st.integers(0, 2**64 - 1),
       epoch=st.integers(0, 2**20))
@settings(max_examples=40, deadline=None)
def test_each_source_is_shuffled_by_its_own_shared_permutation(sizes: list[int], seed: int, epoch: int) -> None:
    """The mixture asks the permutation module for each source: no second implementation to drift."""
    if not sum(size // 2 for size in sizes):
        return
    sampler = MixtureDistributedSampler(sizes, 2, num_replicas=1, rank=0, seed=seed)
    sampler.set_epoch(epoch)
    sources, within = sampler.schedule()
    positions = np.arange(sampler.epoch_usage()[1])
    step, column = np.divmod(positions, 2)
    source, in_source = sources[step], within[step] * 2 + column
    expected = np.empty_like(positions)
    for k in np.unique(source).tolist():
        picked = in_source[source == k]
        expected[source == k] = Permutation(sizes[k], derive_seed(seed, k), epoch)(picked) + sampler.offsets[k]
    assert sampler.indices_at(positions).tolist() == expected.tolist()


@given(sizes=sizes_strategy, world=st.integers(1, 4), batch=st.integers(1, 6), seed=st.integers(0, 999),
       epoch=st.integers(0, 4), shuffle=st.booleans(), start=st.integers(0, 400))
@settings(max_examples=80, deadline=None)
def test_rank_runs_match_indices_at(sizes, world, batch, seed, epoch, shuffle, start) -> None:
    """The step-wise, read-ahead path of iteration yields what indices_at says of the same positions."""
    if not sum(size // (world * batch) for size in sizes):
        return
    for rank in range(world):
        sampler = MixtureDistributedSampler(sizes, batch, num_replicas=world, rank=rank, seed=seed, shuffle=shuffle)
        sampler.set_epoch(epoch)
        end = sampler.epoch_usage()[1]
        start_at = min(start, end)
        sampler.set_sample_in_epoch(start_at)
        positions = np.arange(start_at + rank, end, world)
        expected = sampler.indices_at(positions).tolist() if len(positions) else []
        assert list(sampler) == expected


def test_large_mixture_matches_indices_at_across_chunks_and_epochs() -> None:
    sampler = MixtureDistributedSampler([70_001, 20_000, 9_000], 8, num_replicas=3, rank=2, seed=11)
    for epoch in (0, 1):
        sampler.set_epoch(epoch)
        positions = np.arange(2, sampler.epoch_usage()[1], 3)
        assert list(sampler) == sampler.indices_at(positions).tolist()
