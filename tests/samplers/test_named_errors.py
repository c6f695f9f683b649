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
from torch.utils.data import DistributedSampler

from composer_sampling import MixtureDistributedSampler, ResumableDistributedSampler, SubEpochDistributedSampler
from composer_sampling._validate import MAX_EPOCH

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


def test_the_resumable_sampler_takes_the_end_of_a_pass_on_any_world_size_as_its_end() -> None:
    sampler = ResumableDistributedSampler(5, 1, 0)
    sampler.set_sample_in_epoch(10**9)  # a pass on 10**9 ranks ends there (padding): the epoch is over
    assert sampler.state_dict()['sample_in_epoch'] == 5
    assert list(sampler) == []


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
