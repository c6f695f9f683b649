"""The GPU check's Lightning part: exact mid-epoch resume through a Lightning ``Trainer`` with our SamplerSync.

It needs no Composer: the lent GPU machine's image has pytorch-lightning, so this part
runs even where Composer cannot. A small MLP with dropout trains on synthetic data
(64 batches per epoch) whole, then stopped right after its checkpoint at step 72 (epoch 1,
batch 8), then resumed from that checkpoint with ``ckpt_path``. The check compares the
batches the two runs trained after step 72 and the final weights and optimizer state,
bit for bit, under Lightning's ``deterministic=True``.

Example:
    >>> CASES[0].name, CASES[0].workers
    ('ours, 0 workers', 0)
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, Sampler

from gpu.table import Row, verdict

__all__ = ['CASES', 'PRECISION', 'LightningCase', 'measure']

#: Lightning's precision setting on each device.
PRECISION = {'gpu': 'bf16-mixed', 'cpu': '32-true'}
SAMPLES, FEATURES, CLASSES, BATCH = 4096, 32, 10, 64
WHOLE, STOP, SAVE_EVERY = 96, 75, 36  # steps: the run that never stopped, the stopped run, its checkpoints


@dataclass(frozen=True)
class LightningCase:
    """One loader: ``ours`` (ResumableDistributedSampler) or ``user`` (a user's batch sampler over torch's
    DistributedSampler), with ``workers`` DataLoader workers."""

    name: str
    sampler: str
    workers: int


CASES = (LightningCase('ours, 0 workers', 'ours', 0), LightningCase('user batch sampler, 2 workers', 'user', 2))


class _Named(Dataset):
    """Synthetic samples ``(features, label, index)``: each batch says which samples it holds."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(0)
        self.features = torch.randn(SAMPLES, FEATURES, generator=generator)
        self.labels = torch.randint(0, CLASSES, (SAMPLES,), generator=generator)

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        return self.features[index], self.labels[index], index


class _ShuffledBatches(Sampler[list[int]]):
    """A user's batch sampler: torch's batches of ``sampler``, their order shuffled by ``set_epoch``."""

    def __init__(self, sampler: Sampler[int]) -> None:
        self.batches = BatchSampler(sampler, BATCH, drop_last=False)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        batches = list(self.batches)
        order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(1000 + self.epoch))
        return iter([batches[k] for k in order.tolist()])

    def __len__(self) -> int:
        return len(self.batches)


def _loader(case: LightningCase) -> DataLoader:
    from composer_sampling import ResumableDistributedSampler

    data = _Named()
    if case.sampler == 'ours':
        return DataLoader(data, batch_size=BATCH, sampler=ResumableDistributedSampler(data, 1, 0),
                          num_workers=case.workers)
    return DataLoader(data, batch_sampler=_ShuffledBatches(DistributedSampler(data, 1, 0)), num_workers=case.workers)


def _lightning() -> Any:
    """The Lightning package installed: ``pytorch_lightning``, else ``lightning.pytorch``."""
    try:
        import pytorch_lightning as pl
    except ImportError:
        import lightning.pytorch as pl
    return pl


def _fit(case: LightningCase, device: str, folder: Path, max_steps: int, save: bool,
         ckpt_path: str | None = None) -> tuple[list[tuple[int, int, list[int]]], dict[str, torch.Tensor]]:
    """One fit: the batches it trained ``(epoch, batch_idx, indices)`` and its weights and optimizer state."""
    pl = _lightning()
    from composer_sampling.lightning import SamplerSync

    trained: list[tuple[int, int, list[int]]] = []

    class Model(pl.LightningModule):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(FEATURES, 256), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                           torch.nn.Linear(256, CLASSES))

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            features, labels, indices = batch
            trained.append((self.current_epoch, batch_idx, indices.tolist()))
            return torch.nn.functional.cross_entropy(self.net(features), labels)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters(), lr=1e-3)

    pl.seed_everything(17, verbose=False)
    model = Model()
    callbacks: list[Any] = [SamplerSync()]
    if save:
        callbacks.append(pl.callbacks.ModelCheckpoint(dirpath=folder, every_n_train_steps=SAVE_EVERY, save_top_k=-1,
                                                      filename='{step}'))
    trainer = pl.Trainer(accelerator=device, devices=1, precision=PRECISION[device], deterministic=True,
                         max_steps=max_steps, callbacks=callbacks, enable_checkpointing=save, logger=False,
                         enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=False)
    trainer.fit(model, _loader(case), ckpt_path=ckpt_path)
    state = {f'weight {key}': value.detach().cpu() for key, value in model.state_dict().items()}
    for number, buffers in trainer.optimizers[0].state_dict()['state'].items():
        state.update({f'optimizer {number} {key}': value.detach().cpu() for key, value in buffers.items()
                      if isinstance(value, torch.Tensor)})
    return trained, state


def _largest_difference(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> tuple[str, float]:
    """The tensor that differs most between two states, and by how much (``('', 0.0)`` when equal)."""
    worst = ('', 0.0)
    for key in first:
        difference = (first[key].double() - second[key].double()).abs().max().item()
        if difference > worst[1]:
            worst = (key, difference)
    return worst


def check(case: LightningCase, device: str, folder: Path) -> list[Row]:
    """The rows of one case: the same batches after the checkpoint, and the same weights and optimizer state."""
    os.environ.setdefault('CUBLAS_WORKSPACE_CONFIG', ':4096:8')
    whole, whole_state = _fit(case, device, folder / 'whole', WHOLE, save=False)
    _fit(case, device, folder / 'stopped', STOP, save=True)
    checkpoint = folder / 'stopped' / f'step={2 * SAVE_EVERY}.ckpt'
    resumed, resumed_state = _fit(case, device, folder / 'resumed', WHOLE, save=False, ckpt_path=str(checkpoint))
    part = f'Lightning, {case.name}'
    expected = whole[2 * SAVE_EVERY:]
    same_batches = resumed == expected
    rows = [Row(part, 'samples', verdict(same_batches),
                f'{len(resumed)} batches after step {2 * SAVE_EVERY}: '
                f'{"the same batches as" if same_batches else "not the batches of"} the run that never stopped')]
    same_keys = whole_state.keys() == resumed_state.keys()
    equal = same_keys and all(torch.equal(whole_state[key], resumed_state[key]) for key in whole_state)
    if equal:
        detail = f'{len(whole_state)} tensors torch.equal'
    elif not same_keys:
        detail = 'the states hold other tensors'
    else:
        key, difference = _largest_difference(whole_state, resumed_state)
        detail = f'largest difference {difference:.3g} in {key}'
    rows.append(Row(part, 'weights and optimizer', verdict(equal), detail))
    return rows


def measure(device: str, workdir: Path | None = None) -> list[Row]:
    """Every case's rows, its runs in ``workdir`` (a new temporary folder by default)."""
    folder = workdir or Path(tempfile.mkdtemp(prefix='check-gpu-lightning-'))
    return [row for number, case in enumerate(CASES) for row in check(case, device, folder / f'case{number}')]
