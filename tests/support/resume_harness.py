"""The referee of every resume: a run stopped and resumed ends as the run that never stopped.

One configuration (sampler graph, workers, randomness) trains once without stopping,
writing checkpoints at the chosen stops as it goes (a checkpoint changes nothing in
the run). Each stop is then resumed in a new Trainer from its checkpoint and trained
to the end. The verdict compares, bit for bit:

* the final weights and optimizer state (``torch.equal``) where the row claims exactness;
* the batches trained after the stop, in order, with those of the uninterrupted run
  (on another world size: the multiset of samples of each epoch);
* the samples read by the resumed run with the samples it trained: a sample of a
  batch trained before the stop is never loaded again.

Rows run on one rank in process, or on every rank of a launcher invocation
(``tests/dist``), where each rank checks its own part.
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from composer import Trainer
from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.models import ComposerModel
from composer.utils import dist
from torch import nn
from torch.utils.data import (
    BatchSampler,
    ConcatDataset,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Subset,
)

from composer_sampling import (
    MixtureDistributedSampler,
    NestedBatchSampler,
    PerSampleRNG,
    ResumableDistributedSampler,
    SamplerSync,
    SubEpochDistributedSampler,
    distribute,
)
from composer_sampling.recipes.build_data import worker_start
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.recipes.demo.data import NUM_CLASSES, NUM_FEATURES, SyntheticDataset

from support.harness_data import CountedData

SIZE = 40
BATCH = 4  # device batch
RANDOMNESS = ('none', 'global', 'per_sample')
STOPS = ('boundary', 'end_of_epoch', 'last_batch', 'mid')


class DropoutMLP(ComposerModel):
    """A small classifier of the demo's dict batches, with dropout when asked."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(NUM_FEATURES, 16), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(16, NUM_CLASSES))

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.net(batch['input'])

    def loss(self, outputs: torch.Tensor, batch: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        return F.cross_entropy(outputs, batch['target'])


def _workers(workers: int, data: Dataset) -> dict[str, Any]:
    """DataLoader worker settings as the recipe runner's: on two ranks, workers started by a fork server."""
    return worker_start(workers, dist.get_world_size(), data)


def _resumable(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=ResumableDistributedSampler(data, world, rank),
                      **_workers(workers, data))


def _sub_epoch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=SubEpochDistributedSampler(data, 2, world, rank),
                      **_workers(workers, data))


def _mixture(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    sources = ConcatDataset([Subset(data, range(24)), Subset(data, range(24, SIZE))])
    sampler = MixtureDistributedSampler([24, SIZE - 24], batch_size=batch, num_replicas=world, rank=rank)
    return DataLoader(sources, batch_size=batch, sampler=sampler, **_workers(workers, sources))


def _nested(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    nested = NestedBatchSampler(BatchSampler(RandomSampler(data), batch // 2, False), num_batches=2)
    return distribute(DataLoader(data, batch_sampler=nested, **_workers(workers, data)), num_replicas=world, rank=rank)


def _torch_distributed(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    return DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, world, rank), **_workers(workers, data))


def _torch_random(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    assert world == 1, 'RandomSampler does not shard'
    return DataLoader(data, batch_size=batch, shuffle=True, **_workers(workers, data))


def _user_batch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A batch sampler of yours on top: alone on one rank, under DistributedBatchAdapter on several."""
    from composer_sampling.samplers import DistributedBatchAdapter

    custom = BatchShuffleSampler(BatchSampler(DistributedSampler(data, world, rank), batch, False))
    return DataLoader(data, batch_sampler=custom if world == 1 else DistributedBatchAdapter(custom),
                      **_workers(workers, data))


def _distributed_user_batch(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    custom = BatchShuffleSampler(BatchSampler(RandomSampler(data), batch, False))
    return distribute(DataLoader(data, batch_sampler=custom, **_workers(workers, data)), num_replicas=world, rank=rank)


def _sharded_batches(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A DistributedSampler subclass that yields whole batches, set as the batch sampler (what DataSpec accepts)."""
    from support.user_parts import ShardedBatchSampler

    return DataLoader(data, batch_sampler=ShardedBatchSampler(data, batch, world, rank), **_workers(workers, data))


def _sharded_arrays(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """The same, its batches numpy arrays."""
    from support.user_parts import ShardedBatchSampler

    sampler = ShardedBatchSampler(data, batch, world, rank, as_batch=np.array)
    return DataLoader(data, batch_sampler=sampler, **_workers(workers, data))


def _sharded_tuples(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """The same, its batches tuples."""
    from support.user_parts import ShardedBatchSampler

    sampler = ShardedBatchSampler(data, batch, world, rank, as_batch=tuple)
    return DataLoader(data, batch_sampler=sampler, **_workers(workers, data))


def _batch_subclass(data: Dataset, world: int, rank: int, workers: int, batch: int = BATCH) -> DataLoader:
    """A BatchSampler subclass over torch's DistributedSampler (under the adapter on several ranks)."""
    from composer_sampling.samplers import DistributedBatchAdapter

    from support.user_parts import NamedBatchSampler

    custom = NamedBatchSampler(DistributedSampler(data, world, rank), batch, False)
    return DataLoader(data, batch_sampler=custom if world == 1 else DistributedBatchAdapter(custom),
                      **_workers(workers, data))


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


@dataclasses.dataclass(frozen=True)
class Row:
    """One configuration and the stops it resumes from."""

    sampler: str
    workers: int = 0
    randomness: str = 'none'
    stops: tuple[str, ...] = ('last_batch', 'mid')
    epochs: int = 2
    subset: int | None = None  # train_subset_num_batches
    persistent: bool = False  # persistent_workers
    evaluate: bool = False  # a held-out evaluation every 3 batches
    replication: int = 1  # groups of ranks reading the same data (SamplerSync(replication=...))

    def __post_init__(self) -> None:
        assert self.sampler in LOADERS and self.randomness in RANDOMNESS and set(self.stops) <= set(STOPS)
        assert not {'boundary', 'end_of_epoch'} <= set(self.stops), 'Composer writes one checkpoint a batch'

    @property
    def exact(self) -> bool:
        """Whether the weights must match bit for bit (random augmentations in workers need PerSampleRNG)."""
        return not (self.workers and self.randomness == 'global')

    def __str__(self) -> str:
        extras = ''.join(f'-{name}' for name in ('persistent', 'evaluate') if getattr(self, name))
        subset = f'-subset{self.subset}' if self.subset else ''
        replication = f'-R{self.replication}' if self.replication > 1 else ''
        return f'{self.sampler}-w{self.workers}-{self.randomness}-{"+".join(self.stops)}{subset}{replication}{extras}'


@dataclasses.dataclass
class Outcome:
    """What a run ended with on this rank."""

    weights: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    batches: list[tuple[int, list[int]]]
    reads: collections.Counter[int]


class _Recorder(Callback):
    def __init__(self) -> None:
        self.batches: list[tuple[int, list[int]]] = []

    def batch_end(self, state: State, logger: Logger) -> None:
        self.batches.append((int(state.timestamp.epoch), state.batch['index'].tolist()))


def _checkpoint_at(stops: dict[str, int]) -> Callable[[State, Event], bool]:
    """A save_interval writing exactly the stops' checkpoints."""
    batches = {batch for kind, batch in stops.items() if kind != 'boundary'}

    def save_now(state: State, event: Event) -> bool:
        batch = int(state.timestamp.batch)
        if event == Event.BATCH_CHECKPOINT:
            return batch in batches
        return event == Event.EPOCH_CHECKPOINT and 'boundary' in stops and batch == stops['boundary']

    return save_now


def stop_batches(row: Row, batches_per_epoch: int) -> dict[str, int]:
    """The global batch each stop of the row checkpoints at."""
    n = batches_per_epoch
    where = {'boundary': n, 'end_of_epoch': n, 'last_batch': n - 1, 'mid': n + n // 2}
    return {kind: where[kind] for kind in row.stops}


def fit(row: Row, folder: Path, *, load: Path | None = None, save: dict[str, int] | None = None,
         sync: SamplerSync | None = None, batch: int = BATCH) -> Outcome:
    """Train ``row`` to its end on this rank (``save``: write the stops' checkpoints; ``load``: resume)."""
    world, rank = dist.get_world_size() // row.replication, dist.get_global_rank() // row.replication
    data: Dataset = CountedData(SIZE, augment=row.randomness != 'none')
    counted = data
    if row.randomness == 'per_sample':
        data = PerSampleRNG(data)
    loader = LOADERS[row.sampler](data, world, rank, row.workers, batch)
    if row.persistent:
        loader = _with_persistent_workers(loader)
    extra: dict[str, Any] = {}
    if row.subset:
        extra['train_subset_num_batches'] = row.subset
    if row.evaluate:
        extra.update(eval_dataloader=DataLoader(SyntheticDataset(16, seed=1), batch_size=8), eval_interval='3ba')
    model = DropoutMLP(dropout=0.0 if row.randomness == 'none' else 0.5)
    recorder = _Recorder()
    trainer = Trainer(
        model=model,
        train_dataloader=loader,
        max_duration=f'{row.epochs}ep',
        optimizers=torch.optim.Adam(model.parameters(), lr=0.01),
        device_train_microbatch_size=batch,
        callbacks=[sync or SamplerSync(replication=row.replication), recorder],
        seed=17,
        device='cpu',
        progress_bar=False,
        log_to_console=False,
        load_progress_bar=False,
        save_folder=str(folder) if save else None,
        save_interval=_checkpoint_at(save) if save else '1ep',
        save_overwrite=True,
        load_path=None if load is None else str(load),
        dist_timeout=60,
        **extra,
    )
    trainer.fit()
    weights = {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}
    optimizer = trainer.state.optimizers[0].state_dict()
    reads = counted.read_counts()  # type: ignore[attr-defined]
    trainer.close()
    return Outcome(weights, optimizer, recorder.batches, reads)


def _with_persistent_workers(loader: DataLoader) -> DataLoader:
    assert loader.batch_size is not None, 'only loaders that batch an index sampler are rebuilt'
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=loader.sampler,
                      **_workers(loader.num_workers, loader.dataset), persistent_workers=True)


def shared_folder(tmp_path: Path) -> Path:
    """One folder for every rank (rank 0's), so that all ranks load the same checkpoint."""
    if dist.get_world_size() == 1:
        return tmp_path
    dist.initialize_dist('cpu', timeout=60)  # a no-op once a Trainer has done it
    return Path(dist.all_gather_object(str(tmp_path))[0])


def checkpoint_file(folder: Path, batch: int, kind: str) -> Path:
    (path,) = folder.glob(f'ep*-ba{batch}-rank0.pt') if kind != 'boundary' else folder.glob(f'ep1-ba{batch}-rank0.pt')
    return path


def run_row(row: Row, tmp_path: Path) -> list[str]:
    """Train ``row`` whole and from each of its stops; the list of what differs (empty when the row holds)."""
    folder = shared_folder(tmp_path) / str(row)
    whole, stops = fit_whole(row, folder)
    problems = []
    for kind, batch in stops.items():
        resumed = fit(row, folder, load=checkpoint_file(folder, batch, kind))
        overhang = 2 * row.workers * BATCH * row.epochs if row.subset else 0  # prefetch_factor 2
        problems += [f'{row} from {kind} (batch {batch}): {text}'
                     for text in compare(whole, resumed, batch, row.exact, overhang)]
    return problems


def compare(whole: Outcome, resumed: Outcome, stop: int, exact: bool, overhang: int = 0) -> list[str]:
    """What the resumed run did differently from the uninterrupted one after ``stop`` batches.

    ``overhang`` is how many reads past Composer's cut of an epoch are allowed: DataLoader workers read
    ahead of the batches trained, and how far they got when the cut came is a matter of timing.
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
            problems.append(f'weights differ in {different} (largest gap {gap:.3g})')
        if not _equal(whole.optimizer, resumed.optimizer):
            problems.append('optimizer state differs')
    return problems


def resume_elsewhere(row: Row, folder: Path, whole_per_rank: list[list[tuple[int, list[int]]]], stop: int,
                     kind: str = 'mid', batch: int = BATCH) -> list[str]:
    """Resume a checkpoint of another world size or batch size here: the same samples in every epoch.

    ``whole_per_rank`` holds every rank's batches of the run that never stopped (one list on one rank).
    The weights are not compared: an all-reduce over other ranks sums in another order.
    """
    resumed = fit(row, folder, load=checkpoint_file(folder, stop, kind), batch=batch)
    every_rank = dist.all_gather_object(resumed.batches)[::row.replication]  # one rank of each replication group
    problems = []
    for epoch in range(row.epochs):
        before = [i for batches in whole_per_rank for e, indices in batches[:stop] if e == epoch for i in indices]
        after = [i for batches in every_rank for e, indices in batches if e == epoch for i in indices]
        whole = [i for batches in whole_per_rank for e, indices in batches if e == epoch for i in indices]
        trained, expected = collections.Counter(before + after), collections.Counter(whole)
        if trained != expected:
            problems.append(f'{row} epoch {epoch}: the samples trained differ from the run that never stopped '
                            f'(missing {sorted((expected - trained).elements())[:5]}, repeated '
                            f'{sorted((trained - expected).elements())[:5]})')
    trained = collections.Counter(i for _, indices in resumed.batches for i in indices)
    if resumed.reads != trained:
        problems.append(f'{row}: read {sum((resumed.reads - trained).values())} samples it did not train')
    return problems


def fit_whole(row: Row, folder: Path) -> tuple[Outcome, dict[str, int]]:
    """The run that never stopped, with the row's checkpoints written; also the batch of each stop."""
    world, rank = dist.get_world_size() // row.replication, dist.get_global_rank() // row.replication
    stops = stop_batches(row, row.subset or len(LOADERS[row.sampler](CountedData(SIZE, augment=False), world, rank, 0)))
    return fit(row, folder, save=stops), stops


def _equal(first: Any, second: Any) -> bool:
    if isinstance(first, torch.Tensor):
        return isinstance(second, torch.Tensor) and torch.equal(first, second)
    if isinstance(first, dict):
        return isinstance(second, dict) and first.keys() == second.keys() and all(
            _equal(first[key], second[key]) for key in first)
    if isinstance(first, (list, tuple)):
        return isinstance(second, (list, tuple)) and len(first) == len(second) and all(
            _equal(a, b) for a, b in zip(first, second, strict=True))
    return first == second
