"""``pass_indices()`` (what ``plan`` reads) is exactly what the next ``iter()`` yields, and consumes nothing."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from composer_sampling import MixtureDistributedSampler, ResumableDistributedSampler, SubEpochDistributedSampler


@settings(max_examples=60, deadline=None)
@given(n=st.integers(40, 400), world=st.integers(1, 9), data=st.data(), shuffle=st.booleans(),
       drop_last=st.booleans(), seed=st.integers(0, 2**32), epoch=st.integers(0, 5))
def test_pass_indices_is_the_next_pass(n: int, world: int, data: st.DataObject, shuffle: bool, drop_last: bool,
                                       seed: int, epoch: int) -> None:
    rank = data.draw(st.integers(0, world - 1))
    offset = data.draw(st.integers(0, n))
    samplers = [ResumableDistributedSampler(n, world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last),
                SubEpochDistributedSampler(n, data.draw(st.integers(1, 4)), world, rank, shuffle=shuffle, seed=seed,
                                           drop_last=drop_last)]
    if n >= world * 2:
        samplers.append(MixtureDistributedSampler([n // 2, n - n // 2], batch_size=1, num_replicas=world, rank=rank,
                                                  shuffle=shuffle, seed=seed))
    for sampler in samplers:
        sampler.set_epoch(epoch)
        sampler.set_sample_in_epoch(offset - offset % world if isinstance(sampler, MixtureDistributedSampler)
                                    else offset)
        planned = sampler.pass_indices().tolist()
        assert planned == sampler.pass_indices().tolist()  # nothing consumed
        assert planned == list(sampler), type(sampler).__name__


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 8), batch=st.integers(1, 7), drop_last=st.booleans(),
       batch_drop_last=st.booleans(), seed=st.integers(0, 2**32), epoch=st.integers(0, 3), offset=st.integers(0, 300))
def test_plan_maps_every_rank_in_one_call_as_iteration_would(n: int, world: int, batch: int, drop_last: bool,
                                                             batch_drop_last: bool, seed: int, epoch: int,
                                                             offset: int) -> None:
    from itertools import chain

    from torch.utils.data import BatchSampler, DataLoader, SequentialSampler

    from composer_sampling._proofs.plan import epoch_indices

    def loader(rank: int) -> DataLoader:
        sampler = ResumableDistributedSampler(n, world, rank, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        sampler.set_sample_in_epoch(min(offset, n))
        return DataLoader(range(n), batch_sampler=BatchSampler(sampler, batch, batch_drop_last))

    def others() -> list[DataLoader]:  # read as one array each (pass_indices), and by iteration
        sub_epoch = SubEpochDistributedSampler(max(n, world * 2), 2, world, world - 1, seed=seed, drop_last=drop_last)
        sub_epoch.set_epoch(epoch)
        return [DataLoader(range(n), batch_sampler=BatchSampler(sub_epoch, batch, batch_drop_last)),
                DataLoader(range(n), batch_sampler=BatchSampler(SequentialSampler(range(n)), batch, batch_drop_last))]

    planned = epoch_indices([*(loader(rank) for rank in range(world)), *others()], epoch)
    iterated = [list(chain.from_iterable(each.batch_sampler))
                for each in [*(loader(r) for r in range(world)), *others()]]
    assert [indices.tolist() for indices in planned] == iterated
