"""Python-API inputs that used to get an opaque answer get a named error; iterators pickle as torch's do.

Also the ``DistributedSampler`` contract our samplers declare: torch's attributes
are there (the mixture's ``dataset`` too), and the computed ones cannot be set.
"""

from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Callable
from itertools import islice
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler

from composer_sampling import (
    DistributedBatchAdapter,
    MixtureDistributedSampler,
    ResumableDistributedSampler,
    SubEpochDistributedSampler,
    distribute,
)
from composer_sampling._validate import MAX_EPOCH, MAX_REPLICAS

SAMPLERS: dict[str, Callable[[], Any]] = {
    'resumable': lambda: ResumableDistributedSampler(range(37), 3, 1, seed=4),
    'sub-epoch': lambda: SubEpochDistributedSampler(range(37), 3, 3, 1, seed=4),
    'mixture': lambda: MixtureDistributedSampler([20, 17], 2, 3, 1, seed=4),
}


@pytest.mark.parametrize('make', [lambda d: ResumableDistributedSampler(d, 2, 0),
                                  lambda d: SubEpochDistributedSampler(d, 1, 2, 0)], ids=['resumable', 'sub-epoch'])
def test_a_string_dataset_is_a_type_error_naming_dataset(make: Callable[[Any], Any]) -> None:
    with pytest.raises(TypeError, match=r"^dataset must be a sized .* got the string '10'$"):
        make('10')


@pytest.mark.parametrize('kind', list(SAMPLERS))
@pytest.mark.parametrize('epoch', [2**64, MAX_EPOCH + 1, -1])
def test_an_epoch_outside_its_range_is_refused(kind: str, epoch: int) -> None:
    sampler = SAMPLERS[kind]()
    with pytest.raises(ValueError, match=re.escape(f'epoch must be in the interval [0, {MAX_EPOCH}], got {epoch}')):
        sampler.set_epoch(epoch)
    state = sampler.state_dict()
    with pytest.raises(ValueError, match=re.escape(f'epoch must be in the interval [0, {MAX_EPOCH}], got {epoch}')):
        SAMPLERS[kind]().load_state_dict({**state, 'epoch': epoch})
    sampler.set_epoch(MAX_EPOCH)  # the largest is taken, and draws its own order
    assert list(sampler) != list(SAMPLERS[kind]())


@pytest.mark.parametrize(('kind', 'limit'), [('sub-epoch', 37), ('mixture', 37)])
def test_a_start_offset_past_the_end_is_refused_with_the_range(kind: str, limit: int) -> None:
    sampler = SAMPLERS[kind]()
    with pytest.raises(ValueError, match=re.escape(f'sample_in_epoch must be in the interval [0, {limit}] (the '
                                                   'dataset length, or the samples of a pass across all 3 ranks if '
                                                   f'more), got {limit + 1}')):
        sampler.set_sample_in_epoch(limit + 1)
    assert sampler.state_dict()['sample_in_epoch'] == 0, 'nothing recorded'
    state = sampler.state_dict()
    with pytest.raises(ValueError, match='sample_in_epoch must be in the interval'):
        SAMPLERS[kind]().load_state_dict({**state, 'sample_in_epoch': 10**9})


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_an_offset_at_or_past_the_pass_end_is_recorded_as_the_end(kind: str) -> None:
    sampler = SAMPLERS[kind]()
    end = len(sampler) * sampler.num_replicas  # resumable: 39 (padded); sub-epoch: 12 of 37; mixture: 30 of 37
    sampler.set_sample_in_epoch(max(end, 37))
    assert sampler.state_dict()['sample_in_epoch'] == end
    assert list(sampler) == []


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 2**62), world=st.integers(1, 64), data=st.data())
def test_the_resumable_sampler_takes_the_end_of_a_pass_on_any_world_size_and_refuses_what_is_past_them(
        n: int, world: int, data: st.DataObject) -> None:
    sampler = ResumableDistributedSampler(n, world, world - 1)
    other = data.draw(st.integers(1, MAX_REPLICAS), label='world size of the run that saved')
    ended = -(-n // other) * other  # where a pass on that world size ends (padding)
    sampler.set_sample_in_epoch(ended)  # the epoch is over on that world size: here too, once past this pass's end
    recorded = min(ended, sampler.total_size)
    assert sampler.state_dict()['sample_in_epoch'] == recorded
    limit = n + MAX_REPLICAS - 1
    assert ended <= limit
    far = data.draw(st.integers(limit + 1, 2**80), label='sample_in_epoch')
    with pytest.raises(ValueError, match=re.escape(
            f'sample_in_epoch must be in the interval [0, {limit}] (a pass over the {n} samples on at most 2**62 '
            f'ranks ends by then), got {far}')):
        sampler.set_sample_in_epoch(far)
    assert sampler.state_dict()['sample_in_epoch'] == recorded, 'the refused offset changed nothing'
    state = ResumableDistributedSampler(n, world, 0).state_dict()
    with pytest.raises(ValueError, match=re.escape(f'got {far}')):
        ResumableDistributedSampler(n, world, 0).load_state_dict({**state, 'sample_in_epoch': far})


#: Every sampler of ours, built with ``num_replicas`` (rank 0).
WITH_REPLICAS: dict[str, Callable[[int], Any]] = {
    'resumable': lambda w: ResumableDistributedSampler(10, w, 0),
    'sub-epoch': lambda w: SubEpochDistributedSampler(10, 1, w, 0),
    'mixture': lambda w: MixtureDistributedSampler([10, 6], 1, w, 0),
    'adapter': lambda w: DistributedBatchAdapter(BatchSampler(DistributedSampler(range(10), w, 0), 2, False)),
    'distribute': lambda w: distribute(DataLoader(range(10), batch_size=2), w, 0),
}


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(sorted(WITH_REPLICAS)), num_replicas=st.integers(MAX_REPLICAS + 1, 2**128))
def test_num_replicas_beyond_2_62_is_refused_at_construction(kind: str, num_replicas: int) -> None:
    with pytest.raises(ValueError, match=re.escape(
            f'num_replicas must be in the interval [1, {MAX_REPLICAS}], got {num_replicas}')):
        WITH_REPLICAS[kind](num_replicas)


@pytest.mark.parametrize('kind', ['resumable', 'sub-epoch'])
def test_the_most_replicas_taken_still_read_the_right_index(kind: str) -> None:
    last = {'resumable': lambda: ResumableDistributedSampler(10, MAX_REPLICAS, MAX_REPLICAS - 1, shuffle=False),
            'sub-epoch': lambda: SubEpochDistributedSampler(10, 1, MAX_REPLICAS, MAX_REPLICAS - 1, shuffle=False)}
    assert list(last[kind]()) == [(MAX_REPLICAS - 1) % 10]  # the pass is padded by wrapping around


# ---------------------------------------------------------------------------------------------------------------
# Iterators pickle as torch's list iterator does


def test_torchs_iterator_pickles() -> None:
    indices = iter(DistributedSampler(range(10), 2, 0))
    next(indices)
    assert list(pickle.loads(pickle.dumps(indices))) == list(indices)


@pytest.mark.parametrize('kind', list(SAMPLERS))
@pytest.mark.parametrize('taken', [0, 1, 5, 12])
def test_an_iterator_pickles_and_continues_where_it_was(kind: str, taken: int) -> None:
    sampler = SAMPLERS[kind]()
    sampler.set_epoch(2)
    whole = list(sampler)
    running = iter(sampler)
    assert list(islice(running, taken)) == whole[:taken]
    for copied in (pickle.loads(pickle.dumps(running)), copy.deepcopy(running)):
        assert list(copied) == whole[taken:]
    assert list(running) == whole[taken:], 'the original is untouched'
    assert list(pickle.loads(pickle.dumps(running))) == [], 'an exhausted iterator stays exhausted'


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_an_iterator_with_a_pending_offset_pickles_before_and_after_it_starts(kind: str) -> None:
    sampler = SAMPLERS[kind]()
    whole = list(sampler)
    sampler.set_sample_in_epoch(6)
    pending = iter(sampler)  # the offset is taken at the first next(), not at iter()
    copied = pickle.loads(pickle.dumps(pending))
    assert list(copied) == whole[2:]
    assert next(pending) == whole[2]
    assert list(pickle.loads(pickle.dumps(pending))) == whole[3:]
    assert list(pending) == whole[3:]
    assert list(sampler) == whole, 'the offset applied once'


# ---------------------------------------------------------------------------------------------------------------
# The DistributedSampler contract


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_torchs_attributes_are_there_and_the_computed_ones_cannot_be_set(kind: str) -> None:
    sampler = SAMPLERS[kind]()
    assert isinstance(sampler, DistributedSampler)
    for name in ('dataset', 'num_replicas', 'rank', 'epoch', 'shuffle', 'seed', 'drop_last', 'num_samples',
                 'total_size', 'dataset_len'):
        assert hasattr(sampler, name), name
    assert len(sampler.dataset) == sampler.dataset_len == 37
    assert sampler.total_size == sampler.num_samples * sampler.num_replicas == len(sampler) * 3
    for name in ('num_samples', 'total_size'):
        with pytest.raises(AttributeError, match=f'{type(sampler).__name__}.{name} .*cannot be set'):
            setattr(sampler, name, 3)


def test_the_mixture_dataset_is_its_index_space() -> None:
    sampler = MixtureDistributedSampler([20, 17], 2, 3, 1)
    assert sampler.dataset == range(37)
