"""What the Lightning tests train: a tiny dataset that names its samples, a model with dropout, the loaders of each
kind a Lightning user has, and one fit of a real Lightning ``Trainer`` (one process, or a rank of a launch).

Nothing here imports Composer: these tests run in the environment without it too.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, Sampler

from composer_sampling import NestedBatchSampler, ResumableDistributedSampler, distribute
from composer_sampling.audit import AuditReport, audit_folder
from composer_sampling.ledger_format import LedgerError
from composer_sampling.lightning import SamplerSync

#: The loaders a Lightning user has, as the tests name them.
KINDS = ('torch', 'ours', 'user batch sampler', 'stateful')
QUIET = {'logger': False, 'enable_progress_bar': False, 'enable_model_summary': False, 'accelerator': 'cpu'}


class Named(Dataset):
    """``size`` samples ``(features, label, index)``: each batch says which samples it holds; ``seed`` draws them,
    and the fingerprint names both, as a user's dataset may."""

    def __init__(self, size: int = 96, seed: int = 0) -> None:
        self.fingerprint = f'named samples, seed {seed}, {size} samples'
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, 8, generator=generator)
        self.labels = torch.randint(0, 3, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.features[index], self.labels[index], index


class Model(pl.LightningModule):
    """A linear classifier with dropout, recording every batch it trains: ``(epoch, batch_idx, indices)``."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
        self.trained: list[tuple[int, int, list[int]]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        features, labels, indices = batch
        self.trained.append((self.current_epoch, batch_idx, indices.tolist()))
        return torch.nn.functional.cross_entropy(self.net(features), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)


class ShuffledBatches(Sampler[list[int]]):
    """A user's batch sampler: the batches of ``BatchSampler(sampler)``, their order shuffled by ``set_epoch``."""

    def __init__(self, sampler: Sampler[int], batch_size: int) -> None:
        self.batch_sampler = BatchSampler(sampler, batch_size, drop_last=False)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        batches = list(self.batch_sampler)
        order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(1000 + self.epoch))
        return iter([batches[k] for k in order.tolist()])

    def __len__(self) -> int:
        return len(self.batch_sampler)


def world() -> tuple[int, int]:
    """This process's world size and rank, as the launcher set them (one process: 1 and 0)."""
    return int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))


def loader(kind: str, workers: int = 0, size: int = 96, batch: int = 8, seed: int = 0) -> DataLoader:
    """This rank's train loader of ``kind`` (:data:`KINDS`) over :class:`Named` drawn with ``seed``."""
    data = Named(size, seed)
    world_size, rank = world()
    settings: dict[str, Any] = {'num_workers': workers, 'persistent_workers': False}
    if kind == 'torch':
        return DataLoader(data, batch_size=batch, sampler=DistributedSampler(data, world_size, rank), **settings)
    if kind == 'ours':
        return DataLoader(data, batch_size=batch, sampler=ResumableDistributedSampler(data, world_size, rank),
                          **settings)
    if kind == 'user batch sampler':
        return DataLoader(data, batch_sampler=ShuffledBatches(DistributedSampler(data, world_size, rank), batch),
                          **settings)
    if kind == 'stateful':
        from torchdata.stateful_dataloader import StatefulDataLoader

        return StatefulDataLoader(data, batch_size=batch, sampler=ResumableDistributedSampler(data, world_size, rank),
                                  **settings)
    raise ValueError(f'kind must be one of {", ".join(KINDS)}, got {kind!r}')


class Rebuilt(pl.LightningDataModule):
    """A data module whose ``train_dataloader`` builds a new loader of ``kind`` at every call, as a user's does."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind
        self.built = 0

    def train_dataloader(self) -> DataLoader:
        self.built += 1
        return loader(self.kind)


def nested_loader(size: int = 90) -> DataLoader:
    """A batch of batches (3 samples grouped 5 at a time, 15 a batch), made distributed by ``distribute``."""
    data = Named(size)
    one_process = DataLoader(data, batch_sampler=NestedBatchSampler(BatchSampler(RandomSampler(data), 3, False), 5))
    world_size, rank = world()
    return distribute(one_process, world_size, rank)


class BatchOfBatchesSampler(Sampler[list[int]]):
    """The write-up's batch of batches: ``num_batches`` consecutive batches of ``batch_sampler`` as one, with neither
    ``set_epoch`` nor a generator of its own; with ``drifting``, each pass starts one batch later than the pass
    before (an order that depends on the passes made, which a resume cannot continue)."""

    def __init__(self, batch_sampler: Sampler[list[int]], num_batches: int, drifting: bool = False) -> None:
        self.batch_sampler = batch_sampler
        self.num_batches = num_batches
        self.drifting = drifting
        self.passes = 0

    def __iter__(self) -> Any:
        batches = list(self.batch_sampler)
        if self.drifting:
            shift = self.passes % len(batches)
            batches = batches[shift:] + batches[:shift]
        self.passes += 1
        for start in range(0, len(batches), self.num_batches):
            yield [index for batch in batches[start:start + self.num_batches] for index in batch]

    def __len__(self) -> int:
        return -(-len(self.batch_sampler) // self.num_batches)  # type: ignore[arg-type]


def batch_of_batches_loader(size: int = 96, drifting: bool = False) -> DataLoader:
    """One process's batch of batches: 2 batches of 4 samples of a seeded ``RandomSampler`` a batch."""
    data = Named(size)
    inner = BatchSampler(RandomSampler(data, generator=torch.Generator().manual_seed(5)), 4, drop_last=False)
    return DataLoader(data, batch_sampler=BatchOfBatchesSampler(inner, 2, drifting))


def fit(train_loader: DataLoader, folder: Path, max_steps: int = -1, max_epochs: int = 3, ckpt_path: str | None = None,
        save_every: int | None = None, seed: int = 17, reload: int = 0, sync: bool = True, accumulate: int = 1,
        save_epochs: bool = False, callbacks: tuple[Any, ...] = (), **callback: Any) -> Model:
    """One fit of a real Lightning Trainer with ``SamplerSync`` (a checkpoint every ``save_every`` steps into
    ``folder``, and at every epoch's end with ``save_epochs``), after ``seed_everything(seed)``, on every rank of this
    process's launch. ``train_loader`` may be a ``LightningDataModule``, rebuilt every ``reload`` epochs when
    ``reload`` is positive. ``sync=False`` fits without ``SamplerSync``; ``callbacks`` are added after it."""
    pl.seed_everything(seed, verbose=False)
    model = Model()
    every: list[Any] = [SamplerSync(**callback)] if sync else []
    if save_every is not None:
        every.append(ModelCheckpoint(dirpath=folder, every_n_train_steps=save_every, save_top_k=-1,
                                     filename='{step}'))
    if save_epochs:
        every.append(ModelCheckpoint(dirpath=folder, every_n_epochs=1, save_top_k=-1, filename='end-{step}'))
    world_size, _ = world()
    trainer = pl.Trainer(max_steps=max_steps, max_epochs=max_epochs, devices=world_size, use_distributed_sampler=False,
                         strategy='ddp' if world_size > 1 else 'auto', callbacks=[*every, *callbacks],
                         enable_checkpointing=save_every is not None or save_epochs,
                         reload_dataloaders_every_n_epochs=reload, accumulate_grad_batches=accumulate, **QUIET)
    trainer.fit(model, train_loader, ckpt_path=ckpt_path)
    model.optimizer_state = trainer.optimizers[0].state_dict()  # the momentum buffers, for the comparison
    return model


def same_weights(first: Model, second: Model) -> bool:
    """Whether the two models' weights and their optimizers' momentum buffers are equal, bit for bit."""
    a, b = first.state_dict(), second.state_dict()
    states = first.optimizer_state['state'], second.optimizer_state['state']
    buffers = [(states[0][k]['momentum_buffer'], states[1][k]['momentum_buffer']) for k in states[0]]
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a) and \
        states[0].keys() == states[1].keys() and \
        all(torch.equal(x, y) for x, y in buffers)


def audit(folder: Path) -> tuple[int, AuditReport | None]:
    """The exit status of ``composer-sampling audit FOLDER`` and its report, computed as the command computes them: 0
    when every guarantee holds, 1 when one fails, 2 for a folder it cannot account for (no report). The command
    itself needs Composer in this release; its audit does not."""
    try:
        report = audit_folder(folder)
    except LedgerError:
        return 2, None
    return (1 if report.violations else 0), report


def epochs(report: AuditReport | None) -> list[tuple[int, int, int, int, str]]:
    """Each epoch of an audit: the epoch, the samples trained exactly once, repeated and missing, and its status."""
    assert report is not None
    return [(epoch.epoch, epoch.exactly_once, epoch.repeated, epoch.missing, epoch.status) for epoch in report.epochs]
