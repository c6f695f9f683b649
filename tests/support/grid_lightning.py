"""The Lightning runner of the resume grid (``grid.py``): a row trained by a real Lightning ``Trainer`` with the
Lightning ``SamplerSync``, one process or every rank of a torchrun launch (``strategy='ddp'``, gloo).

The run that never stopped writes a ``ModelCheckpoint`` at each stop:
``every_n_train_steps`` at the stop's step (mid-epoch, before and after an epoch's last
batch), and ``every_n_epochs=1`` at the epoch boundary, each into a folder of its own.
A resume is a new Trainer fitted with ``ckpt_path``. The run's length is ``max_epochs``
or ``max_steps``, as the row's duration says. Nothing here imports Composer.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
import torch.nn.functional as F  # noqa: N812
from pytorch_lightning.callbacks import ModelCheckpoint

from composer_sampling.lightning import SamplerSync

from support.grid import (
    LEARNING_RATE,
    LOADERS,
    SEED,
    Outcome,
    Row,
    data_of,
    data_parallel,
    network,
    resume_row,
    world,
)


class GridModule(pl.LightningModule):
    """The grid's classifier (``grid.network``), recording ``(epoch, indices)`` of every batch it trains."""

    def __init__(self, dropout: float) -> None:
        super().__init__()
        self.net = network(dropout)
        self.batches: list[tuple[int, list[int]]] = []

    def training_step(self, batch: dict[str, Any], batch_idx: int) -> torch.Tensor:
        loss = F.cross_entropy(self.net(batch['input']), batch['target'])
        self.batches.append((self.current_epoch, batch['index'].tolist()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)


def _checkpoints(folder: Path, save: dict[str, int]) -> list[ModelCheckpoint]:
    """One ModelCheckpoint a stop, each writing ``step=N.ckpt`` into the stop's own folder."""
    return [ModelCheckpoint(dirpath=folder / kind, filename='{step}', save_top_k=-1,
                            **({'every_n_epochs': 1} if kind == 'boundary' else {'every_n_train_steps': batch}))
            for kind, batch in save.items()]


def fit(row: Row, folder: Path, *, load: Path | None = None, save: dict[str, int] | None = None) -> Outcome:
    """Train ``row`` to its end on this rank (``save``: write the stops' checkpoints; ``load``: resume)."""
    assert row.composer_only is None, row.composer_only
    pl.seed_everything(SEED, verbose=False)
    data, counted = data_of(row)
    loader = LOADERS[row.sampler](data, *data_parallel(row), row.workers)
    model = GridModule(row.dropout)
    checkpoints = _checkpoints(folder, save or {})
    world_size, _ = world()
    length = {'max_epochs': row.epochs} if row.duration == 'epochs' else \
        {'max_steps': row.epochs * len(loader), 'max_epochs': -1}
    trainer = pl.Trainer(devices=world_size, strategy='ddp' if world_size > 1 else 'auto', accelerator='cpu',
                         use_distributed_sampler=False, callbacks=[SamplerSync(), *checkpoints],
                         enable_checkpointing=bool(checkpoints), logger=False, enable_progress_bar=False,
                         enable_model_summary=False, **length)
    trainer.fit(model, loader, ckpt_path=None if load is None else str(load))
    weights = {name: tensor.detach().clone() for name, tensor in model.net.state_dict().items()}
    return Outcome(weights, trainer.optimizers[0].state_dict(), model.batches, counted.read_counts())


def checkpoint_file(folder: Path, batch: int, kind: str) -> Path:
    """The checkpoint the stop ``kind`` wrote after ``batch`` steps."""
    return folder / kind / f'step={batch}.ckpt'


def run_row(row: Row, folder: Path) -> list[str]:
    """Train ``row`` whole and from each of its stops in ``folder`` (the same on every rank); what differs."""
    return resume_row(row, folder / str(row), fit, checkpoint_file)

