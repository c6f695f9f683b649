"""The stateful contract: samplers keep their own place, and torchdata's StatefulDataLoader resumes through it.

Every sampler of ours reports in its state's ``sample_in_epoch`` the global
position of the next index of the pass being iterated; loading that state makes the
next pass (only the next one) continue exactly where the interrupted one stopped.
Wrappers are ``Stateful`` only when everything below them that decides the order is,
so that torchdata falls back to its own fast-forward for the others.
"""

from __future__ import annotations

import collections
import pickle
from collections.abc import Callable
from itertools import islice
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler
from torchdata.stateful_dataloader import Stateful, StatefulDataLoader

from composer_sampling.order import MAX_DATASET_LEN, global_indices, samples_per_rank
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler

STATE_KEYS = {'kind', 'version', 'payload'}  # the checkpoint envelope (version 1 was the payload, flat)
PAYLOAD_KEYS = {'order_signature', 'epoch', 'seed', 'sample_in_epoch'}


def fields(state: dict[str, Any]) -> dict[str, Any]:
    """The payload of a sampler state: what it says."""
    assert set(state) == STATE_KEYS and set(state['payload']) == PAYLOAD_KEYS
    return state['payload']


def with_fields(state: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """``state`` with some of its payload's values replaced."""
    return {**state, 'payload': {**fields(state), **changes}}


class IndexDataset(Dataset[int]):
    """A map-style dataset whose sample ``i`` is the int ``i``, so batches compare as lists."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> int:
        return int(index)


def as_list(batch: list[int]) -> list[int]:
    """Collate to a plain list of ints (module level, so worker processes can use it)."""
    return [int(i) for i in batch]


def checkpoint(state: dict[str, Any]) -> dict[str, Any]:
    """What a checkpoint gives back: a pickled copy, sharing nothing with the live objects."""
    return pickle.loads(pickle.dumps(state))


# ---------------------------------------------------------------------------------------------------------------
# Loaders: each builder makes a fresh sampler graph and a fresh StatefulDataLoader, as a restarted process would.

Build = Callable[[int], StatefulDataLoader]


def with_sampler(size: int, make: Callable[[], Any], batch_size: int, epoch: int, **loader_kwargs: Any) -> Build:
    def build(num_workers: int) -> StatefulDataLoader:
        sampler = make()
        sampler.set_epoch(epoch)
        return StatefulDataLoader(IndexDataset(size), sampler=sampler, batch_size=batch_size, num_workers=num_workers,
                                  collate_fn=as_list, **loader_kwargs)

    return build


def with_batch_sampler(size: int, make: Callable[[], Any], wrap: Callable[[Any], Any], epoch: int) -> Build:
    def build(num_workers: int) -> StatefulDataLoader:
        sampler = make()
        sampler.set_epoch(epoch)
        return StatefulDataLoader(IndexDataset(size), batch_sampler=wrap(sampler), num_workers=num_workers,
                                  collate_fn=as_list)

    return build


def nested(sampler: Any) -> NestedBatchSampler:
    return NestedBatchSampler(BatchSampler(sampler, 4, False), num_batches=2)


def adapted(sampler: Any) -> DistributedBatchAdapter:
    return DistributedBatchAdapter(BatchSampler(sampler, 8, False))


OURS: dict[str, Build] = {
    'resumable-1x0': with_sampler(100, lambda: ResumableDistributedSampler(100, 1, 0, seed=7), 8, epoch=0),
    'resumable-3x1': with_sampler(100, lambda: ResumableDistributedSampler(100, 3, 1, seed=7), 8, epoch=2),
    # With workers, torchdata snapshots the sampler only every third index fetch and replays the steps since.
    'resumable-snapshot-3': with_sampler(100, lambda: ResumableDistributedSampler(100, 2, 0, seed=7), 4, epoch=1,
                                         snapshot_every_n_steps=3),
    'resumable-4x3-drop-last': with_sampler(
        101, lambda: ResumableDistributedSampler(101, 4, 3, seed=7, drop_last=True), 8, epoch=1),
    'sub-epoch': with_sampler(100, lambda: SubEpochDistributedSampler(100, 2, 2, 1, seed=7), 8, epoch=3),
    'mixture': with_sampler(98, lambda: MixtureDistributedSampler([40, 33, 25], 4, 2, 0, seed=7), 4, epoch=1),
    'nested': with_batch_sampler(100, lambda: ResumableDistributedSampler(100, 2, 1, seed=7), nested, epoch=1),
    'adapter': with_batch_sampler(100, lambda: ResumableDistributedSampler(100, 2, 0, seed=7), adapted, epoch=3),
}
# Not Stateful: torchdata must fall back to its own fast-forward, and that must stay correct.
CONTROLS: dict[str, Build] = {
    'nested-over-torch': with_batch_sampler(
        100, lambda: DistributedSampler(range(100), 2, 1, seed=7), nested, epoch=1),
    'torch-distributed': with_sampler(100, lambda: DistributedSampler(range(100), 3, 1, seed=7), 8, epoch=2),
}
CASES = {**OURS, **CONTROLS}
# Worker processes cost a fork each: every case runs in one process, these also with two workers.
WORKER_CASES = ['resumable-3x1', 'resumable-snapshot-3', 'mixture', 'nested', 'nested-over-torch']
LOADER_RUNS = [(case, 0) for case in CASES] + [(case, 2) for case in WORKER_CASES]
BOUNDARY_RUNS = [(case, 0) for case in ('resumable-3x1', 'sub-epoch', 'mixture', 'nested')] + [
    (case, 2) for case in ('resumable-3x1', 'nested')]


def reference(case: str, epoch_step: int = 0) -> list[list[int]]:
    """The uninterrupted epoch of ``case`` (``epoch_step`` epochs after its own), in one process."""
    loader = CASES[case](0)
    sampler = loader_sampler(loader)
    sampler.set_epoch(sampler.epoch + epoch_step)
    return list(loader)


def loader_sampler(loader: StatefulDataLoader) -> Any:
    """The sampler at the bottom of a loader built above: the one with ``set_epoch``."""
    node: Any = loader.batch_sampler if loader.batch_sampler is not None else loader.sampler
    while not hasattr(node, 'set_epoch') or hasattr(node, 'batch_sampler'):
        node = node.batch_sampler if hasattr(node, 'batch_sampler') else node.sampler
    return node


def stops_of(total: int) -> list[int]:
    """Where an interrupted run stops: before any batch, after the first, in the middle, before and after the last."""
    return sorted({0, 1, total // 2, total - 1, total})


def checkpoints_while_iterating(build: Build, num_workers: int, stops: list[int]) -> tuple[list[Any], dict[int, Any]]:
    """Iterate one loader up to ``max(stops)`` batches (never to StopIteration), checkpointing at every stop."""
    loader = build(num_workers)
    batches = iter(loader)
    taken, states = [], {}
    for k in range(max(stops) + 1):
        if k in stops:
            states[k] = checkpoint(loader.state_dict())
        if k < max(stops):
            taken.append(next(batches))
    return taken, states


def resumed(build: Build, num_workers: int, state: dict[str, Any]) -> list[list[int]]:
    """Everything a fresh loader (a restarted process) yields after loading ``state``."""
    loader = build(num_workers)
    loader.load_state_dict(state)
    return list(loader)


@pytest.mark.parametrize(('case', 'num_workers'), LOADER_RUNS)
def test_stateful_dataloader_resumes_with_the_rest_of_the_epoch(case: str, num_workers: int) -> None:
    whole = reference(case)
    assert len(whole) >= 4, 'a case too short to stop in its middle'
    stops = stops_of(len(whole))
    taken, states = checkpoints_while_iterating(CASES[case], num_workers, stops)
    assert taken == whole  # the interrupted run saw the same batches, with or without workers
    got = {k: resumed(CASES[case], num_workers, states[k]) for k in stops}
    assert got == {k: whole[k:] for k in stops}


@pytest.mark.parametrize(('case', 'num_workers'), [('resumable-3x1', 0), ('mixture', 0), ('nested', 0),
                                                   ('resumable-3x1', 2)])
def test_checkpoint_of_an_untouched_loader_resumes_the_whole_epoch(case: str, num_workers: int) -> None:
    state = checkpoint(CASES[case](num_workers).state_dict())  # before any iter()
    assert resumed(CASES[case], num_workers, state) == reference(case)


@pytest.mark.parametrize(('case', 'num_workers'), BOUNDARY_RUNS)
def test_stateful_dataloader_resumes_twice_in_one_epoch(case: str, num_workers: int) -> None:
    whole = reference(case)
    _, states = checkpoints_while_iterating(CASES[case], num_workers, [1])
    second = CASES[case](num_workers)
    second.load_state_dict(states[1])
    batches = iter(second)
    assert next(batches) == whole[1]
    state = checkpoint(second.state_dict())
    del batches, second  # shut its workers down
    assert resumed(CASES[case], num_workers, state) == whole[2:]


@pytest.mark.parametrize(('case', 'num_workers'), BOUNDARY_RUNS)
def test_checkpoint_at_the_end_of_an_epoch_then_the_next_epoch_is_whole(case: str, num_workers: int) -> None:
    whole = reference(case)
    _, states = checkpoints_while_iterating(CASES[case], num_workers, [len(whole)])  # not yet StopIteration
    second = CASES[case](num_workers)
    second.load_state_dict(states[len(whole)])
    assert list(second) == []  # nothing left of the checkpointed epoch
    sampler = loader_sampler(second)
    sampler.set_epoch(sampler.epoch + 1)
    following = list(second)
    assert following == reference(case, epoch_step=1)
    assert following != whole


@pytest.mark.parametrize(('case', 'num_workers'), BOUNDARY_RUNS)
def test_checkpoint_after_a_finished_epoch_then_set_epoch_gives_the_next_epoch(case: str, num_workers: int) -> None:
    first = CASES[case](num_workers)
    assert list(first) == reference(case)  # the loop ran to StopIteration: torchdata marks the state finished
    state = checkpoint(first.state_dict())
    del first
    second = CASES[case](num_workers)
    second.load_state_dict(state)
    sampler = loader_sampler(second)
    sampler.set_epoch(sampler.epoch + 1)  # the trainer moves on to the next epoch, then iterates the loader
    assert list(second) == reference(case, epoch_step=1)


# ---------------------------------------------------------------------------------------------------------------
# Plain torch DataLoader loops: an offset is used by one pass only.

SAMPLERS: dict[str, Callable[[bool], Any]] = {
    'resumable': lambda shuffle: ResumableDistributedSampler(40, 2, 0, shuffle=shuffle, seed=3),
    'sub-epoch': lambda shuffle: SubEpochDistributedSampler(80, 2, 2, 0, shuffle=shuffle, seed=3),
    'mixture': lambda shuffle: MixtureDistributedSampler([40, 33, 25], 4, 2, 0, shuffle=shuffle, seed=3),
}
DATASET_SIZE = {'resumable': 40, 'sub-epoch': 80, 'mixture': 98}


def whole_pass(kind: str, shuffle: bool, epoch: int) -> list[int]:
    sampler = SAMPLERS[kind](shuffle)
    sampler.set_epoch(epoch)
    return list(sampler)


LOOP_RUNS = [(kind, call_set_epoch, shuffle, 0) for kind in SAMPLERS for call_set_epoch in (True, False)
             for shuffle in (True, False)] + [('resumable', False, True, 2), ('mixture', True, True, 2)]


@pytest.mark.parametrize(('kind', 'call_set_epoch', 'shuffle', 'num_workers'), LOOP_RUNS)
def test_an_offset_is_used_by_the_first_epoch_of_a_loop_only(kind: str, call_set_epoch: bool, shuffle: bool,
                                                             num_workers: int) -> None:
    sampler = SAMPLERS[kind](shuffle)
    loader = DataLoader(IndexDataset(DATASET_SIZE[kind]), batch_size=4, sampler=sampler, num_workers=num_workers,
                        collate_fn=as_list)
    sampler.set_sample_in_epoch(16)  # 16 samples across the 2 ranks: 8 of this rank's
    trained = []
    for epoch in range(3):
        if call_set_epoch:
            sampler.set_epoch(epoch)
        trained.append([i for batch in loader for i in batch])
    expected = [whole_pass(kind, shuffle, epoch if call_set_epoch else 0) for epoch in range(3)]
    expected[0] = expected[0][8:]
    assert trained == expected
    if kind == 'resumable' and not shuffle and not call_set_epoch:
        assert trained[1] == trained[2] == list(range(0, 40, 2))


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_offsets_are_one_shot(kind: str) -> None:
    sampler = SAMPLERS[kind](True)
    sampler.set_epoch(2)
    whole = list(sampler)
    sampler.set_sample_in_epoch(8)
    assert list(sampler) == whole[4:]
    assert list(sampler) == whole  # without set_epoch
    sampler.set_sample_in_epoch(8)
    sampler.set_epoch(2)  # the same epoch keeps the offset
    assert list(sampler) == whole[4:]
    sampler.set_sample_in_epoch(8)
    sampler.set_epoch(3)  # a new epoch clears it
    assert list(sampler) == whole_pass(kind, True, 3)


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_a_loaded_state_is_one_shot_and_set_epoch_treats_it_as_an_offset(kind: str) -> None:
    sampler = SAMPLERS[kind](True)
    sampler.set_epoch(2)
    whole = list(sampler)
    running = iter(sampler)
    list(islice(running, 6))
    state = checkpoint(sampler.state_dict())
    fresh = SAMPLERS[kind](True)
    fresh.load_state_dict(state)
    assert list(fresh) == whole[6:]
    assert list(fresh) == whole
    fresh.load_state_dict(state)
    fresh.set_epoch(2)  # a trainer repeats set_epoch after a resume
    assert list(fresh) == whole[6:]
    fresh.load_state_dict(state)
    fresh.set_epoch(3)
    assert list(fresh) == whole_pass(kind, True, 3)


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_state_dict_reports_the_pending_offset_and_a_new_epoch_starts_at_zero(kind: str) -> None:
    sampler = SAMPLERS[kind](True)
    assert set(sampler.state_dict()) == STATE_KEYS
    assert fields(sampler.state_dict())['sample_in_epoch'] == 0
    sampler.set_epoch(2)
    sampler.set_sample_in_epoch(8)
    state = sampler.state_dict()
    assert (fields(state)['epoch'], fields(state)['sample_in_epoch']) == (2, 8)
    list(sampler)  # the whole pass: the state now points at the epoch's end
    end = fields(sampler.state_dict())['sample_in_epoch']
    assert end > 8
    sampler.set_epoch(3)  # a checkpoint taken now must not skip epoch 3
    state = sampler.state_dict()
    assert (fields(state)['epoch'], fields(state)['sample_in_epoch']) == (3, 0)
    fresh = SAMPLERS[kind](True)
    fresh.load_state_dict(state)
    assert list(fresh) == whole_pass(kind, True, 3)


@pytest.mark.parametrize('kind', list(SAMPLERS))
def test_only_the_newest_pass_is_tracked(kind: str) -> None:
    sampler = SAMPLERS[kind](True)
    whole = list(sampler)
    old = iter(sampler)
    list(islice(old, 10))
    new = iter(sampler)
    list(islice(new, 2))
    assert fields(sampler.state_dict())['sample_in_epoch'] == 2 * 2
    fresh = SAMPLERS[kind](True)
    fresh.load_state_dict(sampler.state_dict())
    assert list(fresh) == whole[2:]


# ---------------------------------------------------------------------------------------------------------------
# Properties: every rank resumes exactly; ResumableDistributedSampler and the mixture on another world size.


def epoch_end(sampler: Any) -> int:
    """The global position one past the last one a whole pass of this sampler's epoch reads."""
    return len(sampler) * sampler.num_replicas


def check_rank_resume(make: Callable[[int, int], Any], world: int, epoch: int, stops: list[int]) -> None:
    for rank in range(world):
        sampler = make(world, rank)
        sampler.set_epoch(epoch)
        whole = list(sampler)
        end = fields(sampler.state_dict())['sample_in_epoch']
        assert end == epoch_end(sampler), 'a consumed pass must point at the end of its epoch'
        k = stops[rank] % (len(whole) + 1)
        running = iter(sampler)
        assert list(islice(running, k)) == whole[:k]
        state = checkpoint(sampler.state_dict())
        assert set(state) == STATE_KEYS
        assert (fields(state)['epoch'], fields(state)['sample_in_epoch']) == (epoch, k * world)
        fresh = make(world, rank)
        fresh.load_state_dict(state)
        assert fields(fresh.state_dict())['sample_in_epoch'] == k * world  # pending until the next pass
        assert list(fresh) == whole[k:]
        assert fields(fresh.state_dict())['sample_in_epoch'] == end
        assert list(fresh) == whole  # the next pass is whole again
        done = make(world, rank)
        done.load_state_dict(with_fields(state, sample_in_epoch=end))
        assert list(done) == []


stops_strategy = st.lists(st.integers(0, 600), min_size=8, max_size=8)


@given(n=st.integers(1, 500), world=st.integers(1, 8), shuffle=st.booleans(), drop_last=st.booleans(),
       seed=st.integers(0, 2**64 - 1), epoch=st.integers(0, 5), stops=stops_strategy)
@settings(max_examples=100, deadline=None)
def test_resumable_every_rank_resumes_exactly(n, world, shuffle, drop_last, seed, epoch, stops) -> None:
    check_rank_resume(lambda w, r: ResumableDistributedSampler(n, w, r, shuffle=shuffle, seed=seed,
                                                               drop_last=drop_last), world, epoch, stops)


@given(n=st.integers(1, 500), world=st.integers(1, 8), parts=st.integers(1, 5), shuffle=st.booleans(),
       drop_last=st.booleans(), seed=st.integers(0, 10**6), epoch=st.integers(0, 9), stops=stops_strategy)
@settings(max_examples=100, deadline=None)
def test_sub_epoch_every_rank_resumes_exactly(n, world, parts, shuffle, drop_last, seed, epoch, stops) -> None:
    if parts > samples_per_rank(n, world, drop_last):
        return
    check_rank_resume(lambda w, r: SubEpochDistributedSampler(n, parts, w, r, shuffle=shuffle, seed=seed,
                                                              drop_last=drop_last), world, epoch, stops)


@given(sizes=st.lists(st.integers(0, 200), min_size=1, max_size=4), world=st.integers(1, 8), batch=st.integers(1, 6),
       shuffle=st.booleans(), seed=st.integers(0, 10**6), epoch=st.integers(0, 5), stops=stops_strategy)
@settings(max_examples=100, deadline=None)
def test_mixture_every_rank_resumes_exactly(sizes, world, batch, shuffle, seed, epoch, stops) -> None:
    if not any(size // (world * batch) for size in sizes):
        return
    check_rank_resume(lambda w, r: MixtureDistributedSampler(sizes, batch, w, r, shuffle=shuffle, seed=seed),
                      world, epoch, stops)


BIG: dict[str, Callable[[], Any]] = {  # passes longer than the samplers' chunks of 2**16 or 2**18 indices
    'resumable': lambda: ResumableDistributedSampler(2**17 + 10, 2, 1, seed=1),
    'sub-epoch': lambda: SubEpochDistributedSampler(2**17 + 10, 1, 2, 1, seed=1),
    'mixture': lambda: MixtureDistributedSampler([2**18 + 40, 2**17], 4, 1, 0, seed=1),
}


@pytest.mark.parametrize('kind', list(BIG))
def test_positions_are_exact_across_chunk_boundaries(kind: str) -> None:
    sampler = BIG[kind]()
    whole = list(sampler)
    world = sampler.num_replicas
    stops = [k for k in (1, 2**16 - 1, 2**16, 2**16 + 1, 2**18 - 1, 2**18, 2**18 + 1, len(whole) - 1, len(whole))
             if k <= len(whole)]
    for k in stops:
        running = iter(sampler)
        list(islice(running, k))
        state = sampler.state_dict()
        assert fields(state)['sample_in_epoch'] == k * world, f'after {k} indices'
        fresh = BIG[kind]()
        fresh.load_state_dict(state)
        assert list(fresh) == whole[k:], f'after {k} indices'


@given(n=st.integers(1, 500), world=st.integers(1, 8), new_world=st.integers(1, 8), shuffle=st.booleans(),
       drop_last=st.booleans(), seed=st.integers(0, 10**6), epoch=st.integers(0, 5), stop=st.integers(0, 600))
@settings(max_examples=100, deadline=None)
def test_resumable_elastic_resume_covers_exactly_the_rest(n, world, new_world, shuffle, drop_last, seed, epoch,
                                                          stop) -> None:
    states = []
    for rank in range(world):
        sampler = ResumableDistributedSampler(n, world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        sampler.set_epoch(epoch)
        k = stop % (len(sampler) + 1)
        list(islice(iter(sampler), k))
        states.append(checkpoint(sampler.state_dict()))
    start = k * world
    assert {fields(state)['sample_in_epoch'] for state in states} == {start}
    remaining = []
    for rank in range(new_world):
        sampler = ResumableDistributedSampler(n, new_world, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        sampler.load_state_dict(states[rank % world])
        remaining.append(list(sampler))
    assert len({len(indices) for indices in remaining}) == 1, 'every rank the same count'
    # Positions from ``start`` on, padded (wrapping past n) or cut to a multiple of the new world size.
    count = samples_per_rank(n, new_world, drop_last, start)
    positions = np.arange(start, start + count * new_world)
    expected = global_indices(positions, n, shuffle=shuffle, seed=seed, epoch=epoch).tolist()
    got = collections.Counter(i for indices in remaining for i in indices)
    assert got == collections.Counter(expected)
    if not drop_last:  # every position not yet consumed is covered
        assert set(got) >= set(global_indices(np.arange(start, n), n, shuffle=shuffle, seed=seed, epoch=epoch).tolist())


@pytest.mark.parametrize(('new_world', 'new_batch'), [(1, 8), (2, 4), (4, 2), (8, 1)])
@pytest.mark.parametrize('steps_done', [0, 1, 5, 11, 12])
def test_mixture_elastic_resume_for_the_same_global_batch(new_world: int, new_batch: int, steps_done: int) -> None:
    sizes = [40, 33, 25]  # 5 + 4 + 3 global steps of 8
    trained, states = [], []
    for rank in range(2):
        sampler = MixtureDistributedSampler(sizes, 4, 2, rank, seed=5)
        sampler.set_epoch(3)
        whole = list(sampler)
        list(islice(iter(sampler), steps_done * 4))
        states.append(checkpoint(sampler.state_dict()))
        trained.append(whole[steps_done * 4:])
    remaining = []
    for rank in range(new_world):
        sampler = MixtureDistributedSampler(sizes, new_batch, new_world, rank, seed=5)
        sampler.load_state_dict(states[rank % 2])
        remaining.append(list(sampler))
    assert collections.Counter(i for indices in remaining for i in indices) == collections.Counter(
        i for indices in trained for i in indices)


# ---------------------------------------------------------------------------------------------------------------
# Wrappers are Stateful exactly when everything below that decides the order is.


def test_wrappers_are_stateful_only_over_stateful_samplers() -> None:
    ours = ResumableDistributedSampler(100, 2, 1)
    theirs = DistributedSampler(range(100), 2, 1)
    assert isinstance(ours, Stateful)
    assert isinstance(nested(ours), Stateful)
    assert isinstance(adapted(ours), Stateful)
    assert isinstance(nested(MixtureDistributedSampler([40, 33], 4, 2, 1)), Stateful)
    assert isinstance(NestedBatchSampler(nested(SubEpochDistributedSampler(100, 2, 2, 1)), 3), Stateful)
    assert isinstance(DistributedBatchAdapter(nested(ours)), Stateful)
    assert not isinstance(nested(theirs), Stateful)
    assert not isinstance(nested(RandomSampler(range(100))), Stateful)
    assert not isinstance(adapted(theirs), Stateful)
    assert not isinstance(DistributedBatchAdapter(nested(theirs)), Stateful)


@pytest.mark.parametrize('wrap', [nested, adapted], ids=['nested', 'adapter'])
def test_a_wrapper_state_is_its_sampler_state(wrap: Callable[[Any], Any]) -> None:
    def make() -> tuple[ResumableDistributedSampler, Any]:
        sampler = ResumableDistributedSampler(100, 2, 1, seed=4)
        sampler.set_epoch(2)
        return sampler, wrap(sampler)

    sampler, wrapper = make()
    whole = list(wrapper)
    running = iter(wrapper)
    next(running)
    state = checkpoint(wrapper.state_dict())
    fresh_sampler, fresh = make()
    fresh.load_state_dict(state)
    assert fresh_sampler.state_dict() == sampler.state_dict()  # delegated to the sampler below
    assert list(fresh) == whole[1:]
    assert list(fresh) == whole


# ---------------------------------------------------------------------------------------------------------------
# numpy integers are ints; lengths beyond the order's domain and bools are refused.


def test_numpy_integers_are_accepted_wherever_ints_are() -> None:
    plain = ResumableDistributedSampler(100, num_replicas=3, rank=1, seed=5)
    numpy_args = ResumableDistributedSampler(np.int64(100), num_replicas=np.int64(3), rank=np.int32(1),
                                             seed=np.uint64(5))
    assert (len(numpy_args), numpy_args.num_replicas, numpy_args.rank) == (len(plain), 3, 1)
    assert list(numpy_args) == list(plain)
    plain.set_epoch(2)
    numpy_args.set_epoch(np.int64(2))
    assert list(numpy_args) == list(plain)
    plain.set_sample_in_epoch(4)
    numpy_args.set_sample_in_epoch(np.int64(4))
    indices = list(numpy_args)
    assert indices == list(plain)
    assert all(type(i) is int for i in indices)
    assert list(ResumableDistributedSampler(np.int64(100), 1, 0)) == list(ResumableDistributedSampler(100, 1, 0))


def test_numpy_integers_in_the_other_samplers() -> None:
    sub = SubEpochDistributedSampler(np.int64(100), np.int64(3), np.int64(2), np.int64(1), seed=np.int64(7))
    sub.set_epoch(np.int64(4))
    expected = SubEpochDistributedSampler(100, 3, 2, 1, seed=7)
    expected.set_epoch(4)
    assert list(sub) == list(expected)
    mixture = MixtureDistributedSampler([np.int64(40), np.int64(33)], np.int64(4), np.int64(2), np.int64(0),
                                        seed=np.int64(7))
    mixture.set_epoch(np.int64(1))
    mixture.set_sample_in_epoch(np.int64(8))
    expected_mixture = MixtureDistributedSampler([40, 33], 4, 2, 0, seed=7)
    expected_mixture.set_epoch(1)
    expected_mixture.set_sample_in_epoch(8)
    assert list(mixture) == list(expected_mixture)


def test_a_state_with_numpy_integers_loads() -> None:
    sampler = ResumableDistributedSampler(100, 2, 1, seed=3)
    sampler.set_epoch(2)
    whole = list(sampler)
    state = with_fields(sampler.state_dict(), epoch=np.int64(2), sample_in_epoch=np.int64(10), seed=np.int64(3))
    fresh = ResumableDistributedSampler(100, 2, 1)
    fresh.load_state_dict(state)
    assert list(fresh) == whole[5:]


def test_the_largest_dataset_length_is_accepted() -> None:
    sampler = ResumableDistributedSampler(MAX_DATASET_LEN, num_replicas=4, rank=3)
    first = next(iter(sampler))
    assert type(first) is int and 0 <= first < MAX_DATASET_LEN
    assert len(ResumableDistributedSampler(np.int64(MAX_DATASET_LEN), 1, 0)) == MAX_DATASET_LEN


@pytest.mark.parametrize(
    'make',
    [
        lambda: ResumableDistributedSampler(2**63, num_replicas=1, rank=0),
        lambda: ResumableDistributedSampler(MAX_DATASET_LEN + 1, num_replicas=1, rank=0),
        lambda: ResumableDistributedSampler(np.uint64(2**63), num_replicas=1, rank=0),
        lambda: SubEpochDistributedSampler(2**63, 2, num_replicas=1, rank=0),
        lambda: MixtureDistributedSampler([2**63], 4, num_replicas=1, rank=0),
    ],
    ids=['2**63', 'max+1', 'numpy-2**63', 'sub-epoch', 'mixture'],
)
def test_a_dataset_length_beyond_the_order_domain_is_refused_at_construction(make: Callable[[], Any]) -> None:
    with pytest.raises(ValueError, match='dataset length'):
        make()


@pytest.mark.parametrize(
    'call',
    [
        lambda: ResumableDistributedSampler(True, 1, 0),
        lambda: ResumableDistributedSampler(10, True, 0),
        lambda: ResumableDistributedSampler(10, 2, True),
        lambda: ResumableDistributedSampler(10, 1, 0, seed=True),
        lambda: ResumableDistributedSampler(10, np.bool_(True), 0),
        lambda: ResumableDistributedSampler(10, 1, 0).set_epoch(True),
        lambda: ResumableDistributedSampler(10, 1, 0).set_epoch(np.bool_(True)),
        lambda: ResumableDistributedSampler(10, 1, 0).set_sample_in_epoch(True),
        lambda: SubEpochDistributedSampler(10, True, 1, 0),
        lambda: MixtureDistributedSampler([10, True], 2, 1, 0),
    ],
)
def test_bools_are_still_refused(call: Callable[[], Any]) -> None:
    with pytest.raises(TypeError):
        call()


def test_a_mid_epoch_state_loaded_into_a_later_epoch_warns_that_the_rest_is_skipped() -> None:
    sampler = ResumableDistributedSampler(40, num_replicas=2, rank=0, seed=3)
    sampler.set_epoch(2)
    items = iter(sampler)
    for _ in range(5):
        next(items)
    later = ResumableDistributedSampler(40, num_replicas=2, rank=0, seed=3)
    later.set_epoch(3)
    with pytest.warns(UserWarning, match='stopped at position 10 of epoch 2, but this sampler is already at epoch 3'):
        later.load_state_dict(sampler.state_dict())
    assert later.epoch == 3 and len(list(later)) == 20
