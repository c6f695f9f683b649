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
