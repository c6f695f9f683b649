"""How a fit continues an epoch, decided from the sampler graph alone (no Trainer): composer_sampling._resume.decide."""

from __future__ import annotations

import pytest
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler, Sampler

from composer_sampling import NestedBatchSampler, ResumableDistributedSampler
from composer_sampling._graph.grouping import Grouping, grouping
from composer_sampling._graph.walk import active_root
from composer_sampling._resume.decide import Layout, Position, continuation
from composer_sampling.errors import DataOrderError
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.samplers import DistributedBatchAdapter

DATA = range(48)


def _torch(world: int = 2, rank: int = 0, batch: int = 4) -> DataLoader:
    return DataLoader(DATA, batch_size=batch, sampler=DistributedSampler(DATA, world, rank))


def test_our_samplers_start_at_the_sample_offset_on_any_layout() -> None:
    loader = DataLoader(DATA, batch_size=4, sampler=ResumableDistributedSampler(DATA, 3, 1))
    chosen = continuation(loader, Position(2, 16), Layout(8, 2), Layout(12, 3))
    assert (chosen.kind, chosen.offset, chosen.limit) == ('offset', 16, None)


def test_torchs_sampler_skips_this_ranks_share_of_the_trained_samples_on_another_layout() -> None:
    chosen = continuation(_torch(world=3, batch=2), Position(3, 24), Layout(8, 2), Layout(6, 3))
    assert (chosen.kind, chosen.skip, chosen.edge[1]) == ('window', 8, 'sampler')


def test_a_layout_that_cannot_share_the_trained_samples_is_refused_with_advice_that_works() -> None:
    refusal = (r'the checkpoint stopped after 24 samples of this epoch, which 5 data-parallel ranks cannot share '
               r"evenly.*Resume with a data-parallel world size that divides 24, such as the checkpoint's 2")
    with pytest.raises(DataOrderError, match=refusal):
        continuation(_torch(world=5), Position(3, 24), Layout(8, 2), Layout(20, 5))
    assert continuation(_torch(world=2), Position(3, 24), Layout(8, 2), Layout(8, 2)).skip == 12  # the advice


def test_a_batch_sampler_of_yours_skips_whole_batches_on_the_same_layout_only() -> None:
    custom = BatchShuffleSampler(BatchSampler(DistributedSampler(DATA, 2, 0), 4, False))
    loader = DataLoader(DATA, batch_sampler=DistributedBatchAdapter(custom))
    chosen = continuation(loader, Position(3, 24), Layout(8, 2), Layout(8, 2))
    assert (chosen.kind, chosen.skip, chosen.edge) == ('window', 3, None)
    with pytest.raises(DataOrderError, match=r'trained on 2 data-parallel ranks, this run has 4.*'
                                                 r'BatchShuffleSampler'):
        continuation(loader, Position(3, 24), Layout(8, 2), Layout(16, 4))


def test_composers_cut_of_an_epoch_becomes_the_windows_limit() -> None:
    chosen = continuation(_torch(), Position(3, 24, subset_batches=5), None, Layout(8, 2))
    assert (chosen.skip, chosen.limit) == (12, 8)  # 2 batches of 4 left in the cut epoch
    ours = DataLoader(DATA, batch_size=4, sampler=ResumableDistributedSampler(DATA, 2, 0))
    assert continuation(ours, Position(3, 24, subset_batches=5), None, Layout(8, 2)).limit == 2


class _Counting(Sampler[int]):
    def __iter__(self):
        return iter(range(48))

    def __len__(self) -> int:
        return 48


def test_only_a_sampler_without_set_epoch_or_generator_keeps_the_spin() -> None:
    assert continuation(DataLoader(DATA, batch_size=4, sampler=_Counting()), Position(3, 12), None,
                       Layout(4, 1)).kind == 'spin'
    shuffled = DataLoader(DATA, batch_size=4, sampler=RandomSampler(DATA))
    assert continuation(shuffled, Position(3, 12), None, Layout(4, 1)).kind == 'window'


def test_the_top_tap_goes_below_the_top_or_over_a_batch_sampler_of_yours() -> None:
    nested = NestedBatchSampler(BatchSampler(RandomSampler(DATA), 2, False), 3, drop_last=True)
    assert grouping(active_root(DataLoader(DATA, batch_sampler=nested))) == Grouping('batch_sampler', 3, False)
    custom = BatchShuffleSampler(BatchSampler(RandomSampler(DATA), 4, False))
    assert grouping(active_root(DataLoader(DATA, batch_sampler=custom))) is None
