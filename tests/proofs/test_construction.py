"""The proof by construction: the same report as the counted proof wherever it applies, and only there."""

from __future__ import annotations

import dataclasses
import re
import time
from itertools import chain
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import BatchSampler, DataLoader, DistributedSampler, RandomSampler

from composer_sampling import (
    MixtureDistributedSampler,
    ResumableDistributedSampler,
    SubEpochDistributedSampler,
    check_plan,
)
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.snapshot import take_snapshot
from composer_sampling._proofs._construction import folded_counts, kept_by_batching
from composer_sampling._proofs._construction_guard import GuardError, guard_first_indices, guard_positions
from composer_sampling._proofs._rank_shape import RankShape, read_shape
from composer_sampling._proofs.plan import ConstructionError, PlanReport
from composer_sampling.permutation import Permutation
from composer_sampling.positions import samples_per_rank
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.samplers import DistributedBatchAdapter, NestedBatchSampler

ROOT = Path(__file__).resolve().parents[2]
WRAPPINGS = ('loader', 'batch_sampler', 'tap', 'nested', 'adapter', 'unbatched')


@st.composite
def plans(draw: Any) -> dict[str, Any]:
    """A plan of one of our samplers under order-keeping wrappers, small enough to count."""
    kind = draw(st.sampled_from(['resumable', 'sub_epoch', 'mixture']))
    ranks = draw(st.integers(1, 12))
    config = dict(kind=kind, ranks=ranks, replication=draw(st.sampled_from([1, 1, 2])),
                  shuffle=draw(st.booleans()), drop_last=draw(st.booleans()), seed=draw(st.integers(0, 2**64 - 1)),
                  epochs=draw(st.integers(1, 5)), batch=draw(st.integers(1, 7)), batch_drop=draw(st.booleans()),
                  wrapping=draw(st.sampled_from(WRAPPINGS)), joined=draw(st.integers(1, 3)),
                  joined_drop=draw(st.booleans()), sub_epochs=1)
    if kind == 'mixture':
        global_batch = ranks * config['batch']
        sizes = draw(st.lists(st.integers(0, 1500), min_size=1, max_size=3))
        config['sizes'] = sizes if sum(size // global_batch for size in sizes) else [*sizes, global_batch]
        return config
    config['n'] = draw(st.integers(1, 3000))
    share = samples_per_rank(config['n'], ranks, config['drop_last'])
    if kind == 'sub_epoch':
        if not share:
            config['kind'] = 'resumable'
        else:
            config['sub_epochs'] = draw(st.integers(1, min(share, 5)))
    return config


def _sampler(config: dict[str, Any], replicas: int, rank: int) -> Any:
    common = dict(num_replicas=replicas, rank=rank, shuffle=config['shuffle'], seed=config['seed'])
    if config['kind'] == 'mixture':
        return MixtureDistributedSampler(config['sizes'], config['batch'], **common)
    if config['kind'] == 'sub_epoch':
        return SubEpochDistributedSampler(config['n'], config['sub_epochs'], drop_last=config['drop_last'], **common)
    return ResumableDistributedSampler(config['n'], drop_last=config['drop_last'], **common)


def loader_maker(config: dict[str, Any]) -> Any:
    def make_loader(rank: int, world_size: int) -> DataLoader:
        replication = config['replication']
        sampler = _sampler(config, world_size // replication, rank // replication)
        dataset = range(sampler.dataset_len)
        wrapping, batch, batch_drop = config['wrapping'], config['batch'], config['batch_drop']
        if wrapping == 'loader':
            return DataLoader(dataset, batch_size=batch, drop_last=batch_drop, sampler=sampler)
        if wrapping == 'unbatched':
            return DataLoader(dataset, batch_size=None, sampler=sampler)
        batches: Any = BatchSampler(IndexTap(sampler) if wrapping == 'tap' else sampler, batch, batch_drop)
        if wrapping in ('nested', 'adapter'):
            batches = NestedBatchSampler(batches, config['joined'], config['joined_drop'])
        if wrapping == 'adapter':
            batches = DistributedBatchAdapter(IndexTap(batches))
        return DataLoader(dataset, batch_sampler=batches)

    return make_loader


def both_proofs(config: dict[str, Any]) -> tuple[PlanReport, PlanReport]:
    world_size = config['ranks'] * config['replication']
    args = dict(world_size=world_size, epochs=config['epochs'], seed=config['seed'] % 2**63,
                replication=config['replication'])
    built = check_plan(loader_maker(config), **args, proof='construction')
    counted = check_plan(loader_maker(config), **args, proof='counted')
    return built, counted


@settings(max_examples=250)
@given(plans())
def test_the_construction_gives_the_counted_report_field_for_field(config: dict[str, Any]) -> None:
    built, counted = both_proofs(config)
    assert built.proof.startswith('by construction (every rank: ')
    assert counted.proof == 'counted (the counted proof was asked for)'
    assert dataclasses.replace(built, proof='') == dataclasses.replace(counted, proof='')
    assert built.verdict == counted.verdict


@pytest.mark.parametrize(
    ('config', 'expected'),
    [
        (dict(kind='resumable', n=10, ranks=4, drop_last=False), (8, 2, 0, 2)),  # padded: 2 twice, on 2 ranks
        (dict(kind='resumable', n=10, ranks=4, drop_last=True), (8, 0, 2, 0)),
        (dict(kind='resumable', n=3, ranks=8, drop_last=False), (0, 5, 0, 3)),  # 5 ranks train only padding
        (dict(kind='resumable', n=100, ranks=4, batch=7, batch_drop=True), (84, 0, 16, 0)),  # BatchSampler cuts
        (dict(kind='sub_epoch', n=103, ranks=2, sub_epochs=5, epochs=7), (102, 1, 0, 1)),
        (dict(kind='mixture', sizes=[10, 6, 5], ranks=2, batch=2), (16, 0, 5, 0)),  # trimmed to global steps
    ],
    ids=['padding', 'drop_last', 'idle', 'batch-drop', 'sub-epochs', 'mixture'],
)
def test_each_rule_of_the_construction_agrees_with_counting(config: dict[str, Any], expected: tuple) -> None:
    config = dict(replication=1, shuffle=True, drop_last=False, seed=3, epochs=2, batch=1, batch_drop=False,
                  wrapping='loader', joined=1, joined_drop=False, sub_epochs=1) | config
    built, counted = both_proofs(config)
    assert dataclasses.replace(built, proof='') == dataclasses.replace(counted, proof='')
    first = built.epochs[0]
    assert (first.exactly_once, first.repeated, first.missing, first.overlap) == expected


def _ours(rank: int, world_size: int) -> Any:
    return ResumableDistributedSampler(200, world_size, rank, seed=1)


REORDERING = {
    'batch shuffle on top': (lambda r, w: DistributedBatchAdapter(BatchShuffleSampler(BatchSampler(_ours(r, w), 4,
                                                                                                   False))),
                             "rank 0's graph has BatchShuffleSampler, which may reorder"),
    'a BatchSampler subclass with an __iter__ of its own in the middle': (
        lambda r, w: NestedBatchSampler(type('MyBatches', (BatchSampler,), {
            '__iter__': lambda self: BatchSampler.__iter__(self)})(_ours(r, w), 4, False), 2),
        "rank 0's graph has MyBatches, which may reorder"),
    "torch's DistributedSampler at the bottom": (
        lambda r, w: BatchSampler(DistributedSampler(range(200), w, r, seed=1), 4, False),
        "rank 0's graph has DistributedSampler, which may reorder"),
    'a subclass of our sampler': (
        lambda r, w: BatchSampler(type('Mine', (ResumableDistributedSampler,), {})(200, w, r), 4, False),
        "rank 0's graph has Mine, which may reorder"),
    'a reordering node on the last rank only': (
        lambda r, w: BatchSampler(_ours(r, w) if r < w - 1 else DistributedSampler(range(200), w, r), 4, False),
        "rank 3's graph has DistributedSampler, which may reorder"),
    "torch's RandomSampler on one rank": (
        lambda r, w: BatchSampler(RandomSampler(range(200)), 4, False), "rank 0's graph has RandomSampler, which may "
                                                                        'reorder'),
}


@pytest.mark.parametrize('case', list(REORDERING))
def test_a_node_that_may_reorder_anywhere_sends_the_plan_to_counting_and_says_so(case: str) -> None:
    build, reason = REORDERING[case]

    def make_loader(rank: int, world_size: int) -> DataLoader:
        return DataLoader(range(200), batch_sampler=build(rank, world_size))

    world_size = 1 if 'RandomSampler' in reason else 4  # on more ranks it fails real sharding before any proof
    report = check_plan(make_loader, world_size=world_size, epochs=1)
    assert report.proof == f'counted ({reason})'
    with pytest.raises(ConstructionError, match=re.escape(f"proof='construction' needs every rank's order to be ours, "
                                                          f'but {reason}')):
        check_plan(make_loader, world_size=world_size, epochs=1, proof='construction')


def test_a_pending_offset_a_tap_window_or_unequal_parameters_send_the_plan_to_counting() -> None:
    def offset(rank: int, world_size: int) -> DataLoader:
        sampler = _ours(rank, world_size)
        if rank == 2:
            sampler.set_sample_in_epoch(8)
        return DataLoader(range(200), batch_size=4, sampler=sampler)

    def window(rank: int, world_size: int) -> DataLoader:
        tap = IndexTap(_ours(rank, world_size))
        tap.set_window(skip=4)
        return DataLoader(range(200), batch_sampler=BatchSampler(tap, 4, False))

    def unequal(rank: int, world_size: int) -> DataLoader:
        sampler = ResumableDistributedSampler(200, world_size, rank, shuffle=rank != 1)
        return DataLoader(range(200), batch_size=4, sampler=sampler)

    assert check_plan(offset, 4, epochs=1).proof == (
        "counted (rank 2's ResumableDistributedSampler starts its next pass at sample 8 of the epoch)")
    assert check_plan(window, 4, epochs=1).proof == (
        "counted (rank 0's graph has IndexTap with a pending window (skip 4, limit None))")
    report = check_plan(unequal, 4, epochs=1)
    assert report.proof.startswith("counted (rank 1's order signature is {'sampler': 'ResumableDistributedSampler', "
                                   "'dataset_len': 200, 'shuffle': False}, rank 0's is {")
    assert not report.ok  # rank 1 draws another order: counting finds the overlap the construction could not assume


def test_two_to_the_62_samples_on_1024_ranks_are_proved_in_seconds() -> None:
    n = 2**62

    def make_loader(rank: int, world_size: int) -> DataLoader:
        return DataLoader(range(n), batch_size=64, sampler=ResumableDistributedSampler(n, world_size, rank))

    started = time.perf_counter()
    report = check_plan(make_loader, world_size=1024, epochs=2, seed=11)
    assert time.perf_counter() - started < 60  # about a second here; counting would take years
    assert report.ok, report.problems
    assert report.proof == 'by construction (every rank: ResumableDistributedSampler under BatchSampler)'
    assert [(e.exactly_once, e.repeated, e.missing) for e in report.epochs] == [(n, 0, 0)] * 2
    assert report.verdict == ('every guarantee holds: every sample exactly once per epoch, no overlap between ranks, '
                              'identical seeds')


def test_the_plan_of_a_recipe_at_two_to_the_62_samples_on_16384_ranks_holds(capsys) -> None:
    """The issue's command: the recipe runner holds out a share of the synthetic dataset as a Subset over a range of
    2**62 indices, whose fingerprint once picked its positions in float64 and ended in an IndexError."""
    started = time.perf_counter()
    code = main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '16384',
                 'train_loader.dataset={name: synthetic, size: 5764607523034234880}', 'global_train_batch_size=262144'])
    out = capsys.readouterr().out
    assert code == 0, out
    assert time.perf_counter() - started < 60  # about 3 s here
    assert 'data fingerprint    bb3e28a9613a332d, from the Subset of 4,611,686,018,427,387,904 indices of ' in out
    assert out.rstrip().splitlines()[-1] == ('every guarantee holds: every sample exactly once per epoch, no overlap '
                                             'between ranks, identical seeds')


def test_the_cli_names_the_proof(capsys) -> None:
    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '4', '--epochs', '1']) == 0
    assert '\nproof: by construction (every rank: ResumableDistributedSampler under BatchSampler)\n' in (
        capsys.readouterr().out)
    assert main(['plan', str(ROOT / 'yamls' / 'custom-batch-sampler.yaml'), '--world-size', '2', '--epochs', '1']) == 0
    assert "\nproof: counted (rank 0's graph has BatchShuffleSampler, which may reorder)\n" in capsys.readouterr().out
    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--epochs', '1', '--proof', 'counted']) == 0
    assert '\nproof: counted (the counted proof was asked for)\n' in capsys.readouterr().out
    assert main(['plan', str(ROOT / 'yamls' / 'custom-batch-sampler.yaml'), '--proof', 'construction']) == 2
    assert ("error: proof='construction' needs every rank's order to be ours, but rank 0's graph has "
            'BatchShuffleSampler, which may reorder') in capsys.readouterr().err


def test_the_guard_fails_loudly_when_the_implementation_disagrees(monkeypatch) -> None:
    sampler = ResumableDistributedSampler(10**9, 4, 1, seed=5)
    graph = take_snapshot(DataLoader(range(10**9), batch_size=8, sampler=sampler))
    shape = read_shape(graph)
    assert isinstance(shape, RankShape)
    assert guard_positions(shape, 0) == 4096 and guard_first_indices(graph, shape, 0) == 8
    wrong = RankShape(ResumableDistributedSampler(10**9, 4, 1, seed=6), shape.layers, shape.names)
    with pytest.raises(GuardError, match=r'rank 1 yields \[.*\] first in epoch 0, the construction gives'):
        guard_first_indices(graph, wrong, 0)
    monkeypatch.setattr(Permutation, 'inverse', lambda self, samples: np.asarray(samples) + 1)
    with pytest.raises(GuardError, match="the inverse of data epoch 0's order does not give back the positions"):
        guard_positions(shape, 0)


def test_the_arithmetic_of_folds_and_batching_layers() -> None:
    n = 2**62
    assert folded_counts([(0, n)], n) == (n, 0)
    assert folded_counts([(0, n + 1023)], n) == (n, 1023)
    assert folded_counts([(0, 6), (6, 8)], 5) == (5, 3) == folded_counts([(0, 8)], 5)
    assert folded_counts([], 5) == (0, 0)
    indices = list(range(23))
    for layers in ([(4, True)], [(4, False), (3, True)], [(5, True), (2, True)], [(3, False), (2, False)]):
        items: list[Any] = indices
        for group, drop_last in layers:
            items = [items[i:i + group] for i in range(0, len(items), group)]
            if drop_last and len(items[-1]) < group:
                items = items[:-1]
            items = [list(chain.from_iterable(item)) if isinstance(item[0], list) else item for item in items]
        assert kept_by_batching(23, layers) == sum(map(len, items)), layers
