"""The counted proof in worker processes gives the serial count's report: numbers, problems, messages, verdict.

The plans are real loaders of our sampler under user batch samplers (one that
shuffles batches, one that trains a sample again and leaves one out, one that
yields an index outside the dataset) and under torch's ``BatchSampler`` counted
(read as arrays); each is checked in this process (``workers=1``) and by forked
workers, and the two reports must be equal field for field.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, Sampler

from composer_sampling import ResumableDistributedSampler, check_plan
from composer_sampling._proofs._workers import MIN_WORKER_SAMPLES, plan_workers
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter

ROOT = Path(__file__).resolve().parents[2]


class FaultyBatches(Sampler[list[int]]):
    """A user's batch sampler that breaks a guarantee on one rank from one epoch on: ``fault`` is ``(kind, rank,
    epoch)``; kind ``within`` trains the rank's last index again in place of its first (a repeat and a gap),
    ``across`` the next sample (another rank's, unshuffled), ``outside`` an index past the dataset, ``raise``
    raises."""

    def __init__(self, batch_sampler: BatchSampler, fault: tuple[str, int, int] | None) -> None:
        self.batch_sampler = batch_sampler
        self.fault = fault
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = [list(batch) for batch in self.batch_sampler]
        inner = self.batch_sampler.sampler
        if self.fault is not None and batches and self.epoch >= self.fault[2] and inner.rank == self.fault[1]:
            kind, first = self.fault[0], batches[0][0]
            if kind == 'raise':
                raise LookupError(f'rank {inner.rank} cannot read its batches in epoch {self.epoch}')
            flat = [index for batch in batches for index in batch]
            batches[0][0] = {'within': flat[-1], 'across': (first + 1) % inner.dataset_len,
                             'outside': inner.dataset_len + first}[kind]
        return iter(batches)

    def __len__(self) -> int:
        return len(self.batch_sampler)


def make_loaders(kind: str, size: int, batch: int, drop_last: bool, shuffle: bool,
                 fault: tuple[str, int, int] | None = None) -> Callable[[int, int], DataLoader]:
    def make_loader(rank: int, world_size: int) -> DataLoader:
        inner = ResumableDistributedSampler(size, world_size, rank, shuffle=shuffle, drop_last=drop_last)
        batches = BatchSampler(inner, batch, drop_last)
        if kind == 'ours':
            return DataLoader(range(size), batch_sampler=batches)
        user: Any = BatchShuffleSampler(batches) if kind == 'shuffled' else FaultyBatches(batches, fault)
        return DataLoader(range(size), batch_sampler=DistributedBatchAdapter(user))
    return make_loader


def both(make_loader: Callable[[int, int], DataLoader], world_size: int, epochs: int, workers: int) -> tuple[Any, Any]:
    """The report counted here and the one counted by ``workers`` processes."""
    proof = 'counted'
    serial = check_plan(make_loader, world_size, epochs=epochs, seed=3, proof=proof, workers=1)
    forked = check_plan(make_loader, world_size, epochs=epochs, seed=3, proof=proof, workers=workers)
    return serial, forked


def _fields(report: Any) -> tuple[Any, ...]:
    return report.epochs, report.problems, report.verdict, report.proof, report.accounting


FAULTS = st.one_of(st.none(), st.tuples(st.sampled_from(['within', 'across', 'outside']), st.integers(0, 6),
                                        st.integers(0, 2)))


@settings(max_examples=40, deadline=None)
@given(kind=st.sampled_from(['ours', 'shuffled', 'faulty']), size=st.integers(1, 300), world_size=st.integers(1, 7),
       batch=st.integers(1, 9), drop_last=st.booleans(), shuffle=st.booleans(), epochs=st.integers(1, 3),
       workers=st.integers(2, 4), fault=FAULTS)
def test_workers_report_what_one_process_counts(kind: str, size: int, world_size: int, batch: int, drop_last: bool,
                                                shuffle: bool, epochs: int, workers: int,
                                                fault: tuple[str, int, int] | None) -> None:
    make_loader = make_loaders(kind, size, batch, drop_last, shuffle, fault)
    serial, forked = both(make_loader, world_size, epochs, workers)
    assert _fields(forked) == _fields(serial)


def test_a_repeat_and_a_gap_fail_with_the_serial_message() -> None:
    # rank 2 of 4 trains its last index twice (first index replaced) from epoch 1: one repeat, one gap
    make_loader = make_loaders('faulty', 400, 10, False, True, ('within', 2, 1))
    serial, forked = both(make_loader, 4, epochs=2, workers=2)
    assert forked.problems == serial.problems == [
        'exactly once per epoch: 1 samples trained again in epoch 1, padding allows 0']
    assert forked.epochs[1].missing == serial.epochs[1].missing == 1
    assert _fields(forked) == _fields(serial)


def test_samples_of_another_rank_and_outside_the_dataset_fail_with_the_serial_messages() -> None:
    across = both(make_loaders('faulty', 400, 10, False, False, ('across', 3, 0)), 4, epochs=1, workers=3)
    assert across[0].problems == across[1].problems == [
        'exactly once per epoch: 1 samples trained again in epoch 0, padding allows 0']
    assert across[0].epochs[0].overlap == across[1].epochs[0].overlap == 1
    outside = both(make_loaders('faulty', 400, 10, False, False, ('outside', 1, 0)), 4, epochs=1, workers=2)
    assert outside[0].problems == outside[1].problems == [
        'indices within the dataset: rank 1 yields index 401 in epoch 0, outside [0, 400)']


def test_what_a_rank_s_sampler_raises_in_a_worker_is_raised_by_the_plan() -> None:
    make_loader = make_loaders('faulty', 400, 10, False, True, ('raise', 3, 1))
    messages = []
    for workers in (1, 2):
        with pytest.raises(LookupError) as raised:
            check_plan(make_loader, 4, epochs=2, proof='counted', workers=workers)
        messages.append(str(raised.value))
    assert messages == ['rank 3 cannot read its batches in epoch 1'] * 2


def test_the_default_counts_a_small_plan_here_and_a_big_one_on_every_core() -> None:
    assert plan_workers(None, ranks=1024, samples=MIN_WORKER_SAMPLES - 1) == 1
    assert plan_workers(None, ranks=16384, samples=10**9) >= 1
    assert plan_workers(8, ranks=3, samples=10) == 3
    with pytest.raises(ValueError, match='workers'):
        check_plan(make_loaders('ours', 10, 2, False, True), 2, workers=0)


def test_cli_refuses_workers_below_one(capsys) -> None:
    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--workers', '0']) == 2
    assert '--workers must be at least 1, got 0' in capsys.readouterr().err
