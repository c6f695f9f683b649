"""The Composer runner of the resume grid (``grid.py``): a row trained by Composer's ``Trainer`` with ``SamplerSync``.

A row trains once without stopping, writing Composer's checkpoints at its stops (a
batch checkpoint, or an epoch checkpoint at the epoch boundary), and each stop is
resumed in a new Trainer from its checkpoint (``load_path``); ``grid.resume_row``
compares the runs. Composer's own paths run here only (``Row.composer_only``): its
per-epoch cut, evaluation, persistent workers and replication. A resume on another
world size or batch size compares the samples of each epoch (:func:`resume_elsewhere`).

Rows run on one rank in process, or on every rank of a launcher invocation
(``tests/dist``), where each rank checks its own part.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from composer import Trainer
from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.models import ComposerModel
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling import SamplerSync
from composer_sampling.recipes.demo.data import SyntheticDataset

from support.grid import (
    BATCH,
    BATCH_SHAPES,
    LEARNING_RATE,
    LOADERS,
    SEED,
    SIZE,
    Outcome,
    Row,
    batches_per_epoch,
    compare,
    data_of,
    data_parallel,
    network,
    resume_row,
    same_samples,
    stop_batches,
    worker_settings,
)
from support.harness_data import CountedData

__all__ = ['BATCH', 'BATCH_SHAPES', 'LOADERS', 'SIZE', 'CountedData', 'DropoutMLP', 'Outcome', 'Row',
           'checkpoint_file', 'compare', 'fit', 'fit_whole', 'resume_elsewhere', 'run_row', 'shared_folder',
           'stop_batches']


class DropoutMLP(ComposerModel):
    """The grid's classifier (``grid.network``) of the dict batches, with dropout when asked."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.net = network(dropout)

    def forward(self, batch: dict[str, Any]) -> torch.Tensor:
        return self.net(batch['input'])

    def loss(self, outputs: torch.Tensor, batch: dict[str, Any], *args: Any, **kwargs: Any) -> torch.Tensor:
        return F.cross_entropy(outputs, batch['target'])


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


def fit(row: Row, folder: Path, *, load: Path | None = None, save: dict[str, int] | None = None,
        sync: SamplerSync | None = None, batch: int = BATCH) -> Outcome:
    """Train ``row`` to its end on this rank (``save``: write the stops' checkpoints; ``load``: resume)."""
    data, counted = data_of(row)
    loader = LOADERS[row.sampler](data, *data_parallel(row), row.workers, batch)
    if row.persistent:
        loader = _with_persistent_workers(loader)
    extra: dict[str, Any] = {}
    if row.subset:
        extra['train_subset_num_batches'] = row.subset
    if row.evaluate:
        extra.update(eval_dataloader=DataLoader(SyntheticDataset(16, seed=1), batch_size=8), eval_interval='3ba')
    model = DropoutMLP(row.dropout)
    recorder = _Recorder()
    duration = f'{row.epochs}ep' if row.duration == 'epochs' else f'{row.epochs * len(loader)}ba'
    trainer = Trainer(
        model=model,
        train_dataloader=loader,
        max_duration=duration,
        optimizers=torch.optim.Adam(model.parameters(), lr=LEARNING_RATE),
        device_train_microbatch_size=batch,
        callbacks=[sync or SamplerSync(replication=row.replication), recorder],
        seed=SEED,
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
    reads = counted.read_counts()
    trainer.close()
    return Outcome(weights, optimizer, recorder.batches, reads)


def _with_persistent_workers(loader: DataLoader) -> DataLoader:
    assert loader.batch_size is not None, 'only loaders that batch an index sampler are rebuilt'
    return DataLoader(loader.dataset, batch_size=loader.batch_size, sampler=loader.sampler,
                      **worker_settings(loader.num_workers, loader.dataset), persistent_workers=True)


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
    return resume_row(row, shared_folder(tmp_path) / str(row), fit, checkpoint_file)


def resume_elsewhere(row: Row, folder: Path, whole_per_rank: list[list[tuple[int, list[int]]]], stop: int,
                     kind: str = 'mid', batch: int = BATCH) -> list[str]:
    """Resume a checkpoint of another world size or batch size here: the same samples in every epoch.

    ``whole_per_rank`` holds every rank's batches of the run that never stopped (one list on one rank).
    The weights are not compared: an all-reduce over other ranks sums in another order.
    """
    resumed = fit(row, folder, load=checkpoint_file(folder, stop, kind), batch=batch)
    every_rank = dist.all_gather_object(resumed.batches)[::row.replication]  # one rank of each replication group
    problems = same_samples(row, whole_per_rank, every_rank, stop)
    trained = collections.Counter(i for _, indices in resumed.batches for i in indices)
    if resumed.reads != trained:
        problems.append(f'{row}: read {sum((resumed.reads - trained).values())} samples it did not train')
    return problems


def fit_whole(row: Row, folder: Path) -> tuple[Outcome, dict[str, int]]:
    """The run that never stopped, with the row's checkpoints written; also the batch of each stop."""
    stops = stop_batches(row, batches_per_epoch(row))
    return fit(row, folder, save=stops), stops
