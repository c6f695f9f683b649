"""The resume grid, whatever the trainer: its rows, the loaders a user has by name, the stops, and the verdict.

A row (sampler graph, workers, randomness, how the run's length is given, where the
stops fall) trains once without stopping, writing a checkpoint at each of its stops
as it goes (a checkpoint changes nothing in the run). Each stop is then resumed in a
new run from its checkpoint and trained to the end. The verdict compares, bit for bit:

* the batches trained after the stop, in order, with those of the uninterrupted run;
* the final weights and optimizer state (``torch.equal``), dropout on, where the row
  claims exactness (everywhere but augmentations drawn from the global RNG inside
  DataLoader workers, docs/resume.md);
* the samples read by the resumed run with the samples it trained: a sample of a
  batch trained before the stop is never loaded again;
* the run that never stopped, on every rank together: no sample twice in an epoch,
  and every sample equally often over the run.

One runner per trainer trains a row and returns an :class:`Outcome`:
``resume_harness.py`` (Composer's ``Trainer`` and ``SamplerSync``),
``grid_lightning.py`` (a Lightning ``Trainer`` with its ``SamplerSync``) and
``grid_loop.py`` (a loop written by hand on ``DataOrder``). This module imports no
trainer. The stops map onto each trainer's checkpoints, after the batches that
:func:`stop_batches` gives:

============  ==============================  ==================================  ==============================
stop          Composer                        Lightning                           loop written by hand
============  ==============================  ==================================  ==============================
mid           a batch checkpoint in the       ``every_n_train_steps`` at that     a checkpoint after that step
              middle of the second epoch      step
last_batch    a batch checkpoint before the   the same, before the last batch     the same, before the last batch
              first epoch's last batch
end_of_epoch  a batch checkpoint after the    the same, after the last batch      a checkpoint after the last
              first epoch's last batch                                            batch, inside the epoch's pass
boundary      an epoch checkpoint             ``every_n_epochs=1``, at the        a checkpoint after the epoch's
              (``EPOCH_CHECKPOINT``)          epoch's end                         pass, before the next epoch
============  ==============================  ==================================  ==============================

Lightning's checkpoints are ``ModelCheckpoint`` callbacks. A row's ``duration`` gives
the run's length in epochs (Composer ``'2ep'``, Lightning ``max_epochs``, a loop over
epochs) or in steps (Composer ``'20ba'``, Lightning ``max_steps``, a loop that counts
its steps), so each stop is met under both.

:data:`GRID` covers every pair of its factors rather than their full product, and
every trainer runs it; :data:`SHAPES` holds the batch samplers users write, also run
by every trainer, and :data:`TWO_RANK_SUBSET` the two-rank rows of all three. The
mixture rows need only the mixture sampler's own batch size, so they run everywhere.
Some rows are Composer's own paths and run under Composer only, as
:attr:`Row.composer_only` says:

* ``train_subset_num_batches``, which cuts each epoch short and resumes inside the cut;
* evaluation during training, whose loader Composer iterates between train batches;
* persistent workers, which Composer's loop keeps across epochs and evaluations;
* replication, whose rows resume a checkpoint on another layout, which only the
  Composer runner does (``resume_elsewhere``).

Composer's spin, which loads the trained batches again where nothing else can place a
graph, has tests of its own (``tests/resume/test_resume.py``) and no row here.
"""

from __future__ import annotations

import collections
import dataclasses
import multiprocessing
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    Subset,
)

from composer_sampling import (
    MixtureDistributedSampler,
    NestedBatchSampler,
    PerSampleRNG,
    ResumableDistributedSampler,
    SubEpochDistributedSampler,
    distribute,
)
from composer_sampling.samplers import DistributedBatchAdapter

from support.harness_data import NUM_CLASSES, NUM_FEATURES, CountedData

SIZE = 40
BATCH = 4  # device batch
#: The seed of every run: the trainer's seed, which is also the data seed.
SEED = 17
LEARNING_RATE = 0.01
RANDOMNESS = ('none', 'global', 'per_sample')
STOPS = ('boundary', 'end_of_epoch', 'last_batch', 'mid')
DURATIONS = ('epochs', 'steps')


def world() -> tuple[int, int]:
    """This process's world size and rank, as the launcher set them (one process: 1 and 0)."""
    return int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))


def worker_settings(workers: int, data: Dataset) -> dict[str, Any]:
    """DataLoader worker settings as the recipe runner's (``worker_start``): on several ranks, workers started by a
    fork server whose process imports ``torch`` and the dataset's modules once."""
    if workers == 0 or world()[0] == 1 or 'forkserver' not in multiprocessing.get_all_start_methods():
        return {'num_workers': workers}
    from composer_sampling.per_sample_rng import iter_datasets

    context = multiprocessing.get_context('forkserver')
    context.set_forkserver_preload(['__main__', 'torch', *dict.fromkeys(type(node).__module__
                                                                           for node in iter_datasets(data))])
    return {'num_workers': workers, 'multiprocessing_context': context}


class BatchShuffleSampler(Sampler[list[int]]):
    """A user's batch sampler: the batches of ``batch_sampler`` in an order shuffled by ``(seed, epoch)``.

    It is not a ``DistributedSampler``, it needs ``set_epoch`` for a new order every
    epoch, and it does not forward ``set_epoch`` to the sampler it wraps, as the demo's
    ``BatchShuffleSampler`` and the batch-shuffling samplers found in the field.
    """

    def __init__(self, batch_sampler: Any, seed: int = 0) -> None:
        self.batch_sampler = batch_sampler
        self.seed = seed
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Iterator[list[int]]:
        batches = list(self.batch_sampler)
        order = np.random.default_rng([self.seed, self.epoch]).permutation(len(batches))
        return (batches[i] for i in order)

    def __len__(self) -> int:
        return len(self.batch_sampler)


def _resumable(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=ResumableDistributedSampler(data, world, rank),
                      **worker_settings(workers, data))


def _sub_epoch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=SubEpochDistributedSampler(data, 2, world, rank),
                      **worker_settings(workers, data))


def _mixture(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    sources = ConcatDataset([Subset(data, range(24)), Subset(data, range(24, SIZE))])
    sampler = MixtureDistributedSampler([24, SIZE - 24], batch_size=batch, num_replicas=world, rank=rank)
    return DataLoader(sources, batch_size=batch, sampler=sampler, **worker_settings(workers, sources))


def _nested(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    nested = NestedBatchSampler(BatchSampler(RandomSampler(data), batch // 2, False), num_batches=2)
    return distribute(DataLoader(data, batch_sampler=nested, **worker_settings(workers, data)), num_replicas=world,
                      rank=rank)


def _torch_distributed(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, world, rank),
                      **worker_settings(workers, data))


def _torch_random(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    assert world == 1, 'RandomSampler does not shard'
    return DataLoader(data, batch_size=batch, shuffle=True, **worker_settings(workers, data))


def _user_batch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A batch sampler of yours on top: alone on one rank, under DistributedBatchAdapter on several."""
    custom = BatchShuffleSampler(BatchSampler(DistributedSampler(data, world, rank), batch, False))
    return DataLoader(data, batch_sampler=custom if world == 1 else DistributedBatchAdapter(custom),
                      **worker_settings(workers, data))


def _distributed_user_batch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    custom = BatchShuffleSampler(BatchSampler(RandomSampler(data), batch, False))
    return distribute(DataLoader(data, batch_sampler=custom, **worker_settings(workers, data)), num_replicas=world,
                      rank=rank)


def _sharded_batches(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A DistributedSampler subclass that yields whole batches, set as the batch sampler (what DataSpec accepts)."""
    from support.user_parts import ShardedBatchSampler

    return DataLoader(data, batch_sampler=ShardedBatchSampler(data, batch, world, rank),
                      **worker_settings(workers, data))


def _sharded_arrays(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """The same, its batches numpy arrays."""
    from support.user_parts import ShardedBatchSampler

    sampler = ShardedBatchSampler(data, batch, world, rank, as_batch=np.array)
    return DataLoader(data, batch_sampler=sampler, **worker_settings(workers, data))


def _sharded_tuples(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """The same, its batches tuples."""
    from support.user_parts import ShardedBatchSampler

    sampler = ShardedBatchSampler(data, batch, world, rank, as_batch=tuple)
    return DataLoader(data, batch_sampler=sampler, **worker_settings(workers, data))


def _batch_subclass(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A BatchSampler subclass over torch's DistributedSampler (under the adapter on several ranks)."""
    from support.user_parts import NamedBatchSampler

    custom = NamedBatchSampler(DistributedSampler(data, world, rank), batch, False)
    return DataLoader(data, batch_sampler=custom if world == 1 else DistributedBatchAdapter(custom),
                      **worker_settings(workers, data))


#: The train loaders of a user, by name: ``LOADERS[name](data, world_size, rank, workers, batch)``.
LOADERS: dict[str, Callable[..., DataLoader]] = {
    'resumable': _resumable,
    'sub_epoch': _sub_epoch,
    'mixture': _mixture,
    'nested': _nested,
    'torch_distributed': _torch_distributed,
    'torch_random': _torch_random,
    'user_batch': _user_batch,
    'distribute': _distributed_user_batch,
    'sharded_batches': _sharded_batches,
    'sharded_arrays': _sharded_arrays,
    'sharded_tuples': _sharded_tuples,
    'batch_subclass': _batch_subclass,
}


#: Batch samplers of the shapes users write (a DistributedSampler subclass yielding lists, arrays or tuples of
#: indices; a BatchSampler subclass): rows of their own, outside the pairwise grid of the loaders above them.
BATCH_SHAPES = ('sharded_batches', 'sharded_arrays', 'sharded_tuples', 'batch_subclass')


def network(dropout: float) -> nn.Sequential:
    """The classifier every trainer trains: 64 features, a hidden layer of 16 with dropout, 10 classes."""
    return nn.Sequential(nn.Linear(NUM_FEATURES, 16), nn.ReLU(), nn.Dropout(dropout), nn.Linear(16, NUM_CLASSES))


@dataclasses.dataclass(frozen=True)
class Row:
    """One configuration and the stops it resumes from."""

    sampler: str
    workers: int = 0
    randomness: str = 'none'
    stops: tuple[str, ...] = ('last_batch', 'mid')
    epochs: int = 2
    duration: str = 'epochs'  # the run's length given in epochs or in steps
    subset: int | None = None  # train_subset_num_batches
    persistent: bool = False  # persistent_workers
    evaluate: bool = False  # a held-out evaluation every 3 batches
    replication: int = 1  # groups of ranks reading the same data, as SamplerSync(replication=...) sets them

    def __post_init__(self) -> None:
        assert self.sampler in LOADERS and self.randomness in RANDOMNESS and set(self.stops) <= set(STOPS)
        assert self.duration in DURATIONS
        assert not {'boundary', 'end_of_epoch'} <= set(self.stops), 'Composer writes one checkpoint a batch'

    @property
    def exact(self) -> bool:
        """Whether the weights must match bit for bit (random augmentations in workers need PerSampleRNG)."""
        return not (self.workers and self.randomness == 'global')

    @property
    def dropout(self) -> float:
        """The model's dropout: randomness in the model wherever the row has randomness."""
        return 0.0 if self.randomness == 'none' else 0.5

    @property
    def composer_only(self) -> str | None:
        """Why only the Composer runner trains this row (one of Composer's own paths), or None."""
        paths = [name for name, used in (('train_subset_num_batches', self.subset), ('evaluation', self.evaluate),
                                          ('persistent workers', self.persistent),
                                          ('replication', self.replication > 1)) if used]
        return f"{' and '.join(paths)}: Composer's own path" if paths else None

    def __str__(self) -> str:
        extras = ''.join(f'-{name}' for name in ('persistent', 'evaluate') if getattr(self, name))
        subset = f'-subset{self.subset}' if self.subset else ''
        replication = f'-R{self.replication}' if self.replication > 1 else ''
        steps = '-steps' if self.duration == 'steps' else ''
        return (f'{self.sampler}-w{self.workers}-{self.randomness}-{"+".join(self.stops)}{steps}{subset}'
                f'{replication}{extras}')


def data_of(row: Row) -> tuple[Dataset, CountedData]:
    """The row's train dataset (under ``PerSampleRNG`` where the row asks for it) and the data that counts reads."""
    counted = CountedData(SIZE, augment=row.randomness != 'none')
    return (PerSampleRNG(counted) if row.randomness == 'per_sample' else counted), counted


def data_parallel(row: Row) -> tuple[int, int]:
    """The data-parallel world size and rank of this process: the launcher's, divided by the row's replication."""
    world_size, rank = world()
    return world_size // row.replication, rank // row.replication


def batches_per_epoch(row: Row) -> int:
    """The batches of one of the row's epochs on this rank (the subset where Composer cuts the epoch)."""
    return row.subset or len(LOADERS[row.sampler](CountedData(SIZE, augment=False), *data_parallel(row), 0))


def stop_batches(row: Row, batches_per_epoch: int) -> dict[str, int]:
    """The global batch each stop of the row checkpoints at: the batches trained before it."""
    n = batches_per_epoch
    where = {'boundary': n, 'end_of_epoch': n, 'last_batch': n - 1, 'mid': n + n // 2}
    return {kind: where[kind] for kind in row.stops}


def overhang(row: Row) -> int:
    """How many reads past Composer's cut of an epoch are allowed: DataLoader workers read ahead of the batches
    trained (``prefetch_factor`` 2 each), and how far they got when the cut came is a matter of timing."""
    return 2 * row.workers * BATCH * row.epochs if row.subset else 0


#: How :func:`compare` names a difference of weights and one of optimizer state.
_WEIGHTS, _OPTIMIZER = 'weights differ in', 'optimizer state differs'


@dataclasses.dataclass
class Outcome:
    """What a run ended with on this rank: its weights and optimizer state, the ``(epoch, indices)`` of every batch
    it trained, and how many times it read each sample."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    batches: list[tuple[int, list[int]]]
    reads: collections.Counter[int]


#: ``fit(row, folder, load=None, save=None)``: one run of a row on this rank; ``save`` maps each stop to its batch and
#: asks for its checkpoint, ``load`` resumes from a checkpoint.
Fit = Callable[..., Outcome]
#: ``checkpoint(folder, batch, stop)``: the checkpoint a run with ``save`` wrote for that stop.
Checkpoint = Callable[[Path, int, str], Path]


def resume_row(row: Row, folder: Path, fit: Fit, checkpoint: Checkpoint) -> list[str]:
    """Train ``row`` whole and from each of its stops with ``fit``; the list of what differs (empty when the row
    holds). ``folder`` must be the same on every rank."""
    stops = stop_batches(row, batches_per_epoch(row))
    whole = fit(row, folder, save=stops)
    problems = coverage(row, gather(whole.batches))
    for kind, batch in stops.items():
        resumed = fit(row, folder, load=checkpoint(folder, batch, kind))
        problems += [f'{row} from {kind} (batch {batch}): {text}'
                     for text in compare(whole, resumed, batch, row.exact, overhang(row))]
    return problems


class NotBitExact(Exception):  # noqa: N818 - a verdict, not an error of the code under test
    """The resumed runs of a row trained the batches of the run that never stopped and loaded no trained sample
    again, but ended with other weights or optimizer state."""


def holds(problems: list[str]) -> None:
    """Return when ``problems`` (what :func:`resume_row` found) is empty; raise :class:`NotBitExact` when every
    problem is a difference of weights or optimizer state, and ``AssertionError`` naming them otherwise."""
    if not problems:
        return
    text = '\n'.join(problems)
    if all(_WEIGHTS in problem or problem.endswith(_OPTIMIZER) for problem in problems):
        raise NotBitExact(text)
    raise AssertionError(text)


def gather(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order (one process: ``[value]``)."""
    import torch.distributed as torch_dist

    if not (torch_dist.is_available() and torch_dist.is_initialized()) or torch_dist.get_world_size() == 1:
        return [value]
    found: list[Any] = [None] * torch_dist.get_world_size()
    torch_dist.all_gather_object(found, value)
    return found


def compare(whole: Outcome, resumed: Outcome, stop: int, exact: bool, overhang: int = 0) -> list[str]:
    """What the resumed run did differently from the uninterrupted one after ``stop`` batches.

    ``overhang`` is how many reads of samples it did not train the resumed run may make (see :func:`overhang`).
    """
    problems = []
    if resumed.batches != whole.batches[stop:]:
        problems.append(f'trained other batches: {resumed.batches[:3]}... instead of {whole.batches[stop:stop + 3]}...')
    trained = collections.Counter(i for _, indices in resumed.batches for i in indices)
    extra = resumed.reads - trained
    if sum(extra.values()) > overhang or trained - resumed.reads:
        problems.append(f'read {sum(extra.values())} samples it did not train, such as {sorted(extra)[:5]}')
    if exact:
        different = [name for name, tensor in whole.weights.items() if not torch.equal(tensor, resumed.weights[name])]
        if different:
            gap = max(float((whole.weights[n] - resumed.weights[n]).abs().max()) for n in different)
            problems.append(f'{_WEIGHTS} {different} (largest gap {gap:.3g})')
        if not equal(whole.optimizer, resumed.optimizer):
            problems.append(_OPTIMIZER)
    return problems


def coverage(row: Row, every_rank: list[list[tuple[int, list[int]]]]) -> list[str]:
    """What is wrong with the samples of the run that never stopped, every rank's batches together: a sample twice
    in an epoch, or (where no subset cuts the epochs) samples trained unequally often over the run."""
    problems = []
    by_epoch: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for batches in every_rank[::row.replication]:  # one rank of each replication group
        for epoch, indices in batches:
            by_epoch[epoch].update(indices)
    for epoch, counts in sorted(by_epoch.items()):
        twice = sorted(index for index, count in counts.items() if count > 1)
        if twice:
            problems.append(f'{row}: the run that never stopped trained samples twice in epoch {epoch}: {twice[:5]}')
    if not row.subset:
        over_run = sum(by_epoch.values(), collections.Counter())
        if len(over_run) != SIZE or len(set(over_run.values())) != 1:
            problems.append(f'{row}: the run that never stopped trained {len(over_run)} of {SIZE} samples, '
                            f'{sorted(set(over_run.values()))} times each')
    return problems


def same_samples(row: Row, whole_per_rank: list[list[tuple[int, list[int]]]],
                 resumed_every_rank: list[list[tuple[int, list[int]]]], stop: int) -> list[str]:
    """What differs in the samples of each epoch between the run that never stopped (``whole_per_rank``, every rank's
    batches) and its first ``stop`` batches followed by a resume elsewhere (``resumed_every_rank``, one list for each
    rank of one replication group each), for a resume on another world size or batch size."""
    problems = []
    for epoch in range(row.epochs):
        before = [i for batches in whole_per_rank for e, indices in batches[:stop] if e == epoch for i in indices]
        after = [i for batches in resumed_every_rank for e, indices in batches if e == epoch for i in indices]
        whole = [i for batches in whole_per_rank for e, indices in batches if e == epoch for i in indices]
        trained, expected = collections.Counter(before + after), collections.Counter(whole)
        if trained != expected:
            problems.append(f'{row} epoch {epoch}: the samples trained differ from the run that never stopped '
                            f'(missing {sorted((expected - trained).elements())[:5]}, repeated '
                            f'{sorted((trained - expected).elements())[:5]})')
    return problems


def equal(first: Any, second: Any) -> bool:
    """Whether two optimizer states (nested dicts, lists and tensors) are equal, tensors bit for bit."""
    if isinstance(first, torch.Tensor):
        return isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, dict):
        return isinstance(second, dict) and first.keys() == second.keys() and all(
            equal(first[key], second[key]) for key in first)
    if isinstance(first, (list, tuple)):
        return isinstance(second, (list, tuple)) and len(first) == len(second) and all(
            equal(a, b) for a, b in zip(first, second, strict=True))
    return first == second


# ---------------------------------------------------------------------------------------------------------------
# The rows every trainer runs.

_END, _BOUNDARY = ('end_of_epoch', 'last_batch', 'mid'), ('boundary', 'mid')
#: The sampler graphs of the pairwise grid: every loader but the batch shapes, which have rows of their own.
PAIRWISE = [name for name in LOADERS if name not in BATCH_SHAPES]


def _grid() -> list[Row]:
    """Three rows a sampler graph, one for each kind of randomness; the row that stops at the epoch boundary moves
    along them from graph to graph, workers alternate by graph and the duration by row and pair of graphs."""
    rows = []
    for number, sampler in enumerate(PAIRWISE):
        workers = (0, 2, 0) if number % 2 == 0 else (2, 0, 2)
        for position, randomness in enumerate(RANDOMNESS):
            rows.append(Row(sampler, workers[position], randomness, _BOUNDARY if position == number % 3 else _END,
                            duration=DURATIONS[(number // 2 + position) % 2]))
    return rows


#: Every sampler graph of the loaders a user has, pairwise over workers, randomness, duration and the stops: three rows
#: a graph, one for each kind of randomness, whose stops together are all four.
GRID = _grid()

#: The batch samplers users write, at 0 workers (their workers see what any batch sampler's see): a
#: DistributedSampler subclass yielding whole batches (what Composer's DataSpec accepts on several ranks; SamplerSync
#: crashed at its first resume), its batches as numpy arrays or tuples, and a BatchSampler subclass that keeps torch's
#: batching (resumed by Composer's spin, loading the trained batches again, until SamplerSync knew it groups).
SHAPES = [
    Row('sharded_batches', randomness='global', stops=('mid',)),
    Row('sharded_arrays', stops=('mid',)),
    Row('sharded_tuples', randomness='per_sample', stops=('mid',), duration='steps'),
    Row('batch_subclass', randomness='global', stops=('mid',)),
]


def missing_pairs(rows: list[Row], samplers: list[str]) -> list[str]:
    """The pairs of factors that no row of ``rows`` covers, for the sampler graphs ``samplers``."""
    factors: dict[str, Callable[[Row], set[Any]]] = {
        'sampler': lambda row: {row.sampler}, 'workers': lambda row: {row.workers},
        'randomness': lambda row: {row.randomness}, 'duration': lambda row: {row.duration},
        'stop': lambda row: set(row.stops)}
    values = {'sampler': set(samplers), 'workers': {0, 2}, 'randomness': set(RANDOMNESS), 'duration': set(DURATIONS),
              'stop': set(STOPS)}
    missing = []
    names = list(factors)
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            covered = {(a, b) for row in rows for a in factors[first](row) for b in factors[second](row)}
            missing += [f'{first}={a}, {second}={b}' for a in sorted(values[first], key=str)
                        for b in sorted(values[second], key=str) if (a, b) not in covered]
    return missing

#: The grid on two ranks: one row per sampler graph that shards (torch's ``RandomSampler`` does not), workers and
#: randomness alternating, so that every factor meets two ranks; of the batch samplers users write, the one Composer's
#: DataSpec asks for on several ranks (a ``DistributedSampler`` subclass yielding whole batches, as the
#: ``DataLoader``'s ``batch_sampler``).
TWO_RANK_GRID = [
    Row(sampler, workers=2 * (number % 2), randomness=RANDOMNESS[(number + 2) % 3],
        stops=('end_of_epoch', 'mid') if number % 2 else ('boundary', 'last_batch'))
    for number, sampler in enumerate(name for name in PAIRWISE if name != 'torch_random')
] + [Row('sharded_batches', randomness='global', stops=('mid',))]

#: The two-rank rows the Lightning and loop runners train in their one launch of two ranks (the rest are Composer's
#: alone, to keep the launch short): a batch of batches made distributed by ``distribute``, torch's sampler in a run
#: whose length is given in steps, and a batch sampler of yours under the adapter; 0 and 2 workers, every kind of
#: randomness, both durations, every stop.
TWO_RANK_SUBSET = [dataclasses.replace(row, duration='steps') if row.sampler == 'torch_distributed' else row
                   for row in TWO_RANK_GRID if row.sampler in ('nested', 'torch_distributed', 'user_batch')]
