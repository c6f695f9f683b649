"""What the Hugging Face tests train: a tiny dataset that names its samples, a model with dropout that records the
samples of every batch, the ``Trainer`` subclasses of each kind of loader a Hugging Face user has, and one fit of a
real ``transformers.Trainer`` (one process, or a rank of a torchrun launch, gloo on the CPU).

Nothing here imports Composer: these tests run in the environment without it.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler
from transformers import Trainer, TrainerCallback, TrainingArguments

from composer_sampling import NestedBatchSampler, ResumableDistributedSampler, distribute
from composer_sampling.audit import AuditReport, audit_folder
from composer_sampling.ledger_format import LedgerError, read_ledger
from composer_sampling.transformers import SampleLedger, SamplerSync

#: The loaders a Hugging Face user has, as the tests name them: a VILA-like subclass whose ``_get_train_sampler``
#: returns its own rank-aware sampler, our sampler returned by ``_get_train_sampler``, a batch of batches made
#: distributed by ``distribute()`` in ``get_train_dataloader``, and the Trainer's own random sampler.
KINDS = ('vila', 'ours', 'nested', 'default')


class Named(Dataset):
    """``size`` samples ``{'features', 'labels', 'index'}``: each batch says which samples it holds; ``seed`` draws
    them, and the fingerprint names both, as a user's dataset may."""

    def __init__(self, size: int = 96, seed: int = 0) -> None:
        self.fingerprint = f'named samples, seed {seed}, {size} samples'
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, 8, generator=generator)
        self.labels = torch.randint(0, 3, (size,), generator=generator)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {'features': self.features[index], 'labels': self.labels[index], 'index': index}


class Model(torch.nn.Module):
    """A linear classifier with dropout that records the samples of every batch it trains."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))
        self.trained: list[list[int]] = []

    def forward(self, features: torch.Tensor, labels: torch.Tensor, index: torch.Tensor) -> dict[str, torch.Tensor]:
        if self.training:
            self.trained.append(index.tolist())
        logits = self.net(features)
        return {'loss': torch.nn.functional.cross_entropy(logits, labels), 'logits': logits}


class VilaLikeSampler(DistributedSampler):
    """A rank-aware sampler in the manner of VILA's ``VILADistributedSampler``: a ``DistributedSampler`` subclass
    whose own ``__iter__`` cuts the data into ``sources``, gives each rank a contiguous share of every source, and
    shuffles each share with Python's ``random`` seeded ``seed + epoch``."""

    def __init__(self, dataset: Any, num_replicas: int, rank: int, seed: int = 0, sources: int = 2) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.sources = sources

    def __iter__(self) -> Any:
        size = len(self.dataset)  # type: ignore[arg-type]
        share = size // self.sources // self.num_replicas
        mine: list[int] = []
        for source in range(self.sources):
            start = source * (size // self.sources) + self.rank * share
            indices = list(range(start, start + share))
            random.Random(self.seed + self.epoch).shuffle(indices)
            mine.extend(indices)
        random.Random(self.seed + self.epoch).shuffle(mine)
        return iter(mine)

    def __len__(self) -> int:
        return len(self.dataset) // self.sources // self.num_replicas * self.sources  # type: ignore[arg-type]


class VilaLikeTrainer(Trainer):
    """VILA's way: ``_get_train_sampler(self)`` without the dataset argument transformers 5 passes."""

    def _get_train_sampler(self) -> Any:  # type: ignore[override]
        return VilaLikeSampler(self.train_dataset, self.args.world_size, self.args.process_index,
                               seed=self.args.data_seed if self.args.data_seed is not None else self.args.seed)


class OursTrainer(Trainer):
    """Our sampler returned by ``_get_train_sampler``."""

    def _get_train_sampler(self, train_dataset: Any = None) -> Any:
        return ResumableDistributedSampler(train_dataset or self.train_dataset, self.args.world_size,
                                           self.args.process_index)


class NestedTrainer(Trainer):
    """A batch of batches (3 samples grouped ``per_device_train_batch_size / 3`` at a time) made distributed by
    ``distribute()``, prepared by accelerate in ``get_train_dataloader``."""

    def get_train_dataloader(self) -> Any:
        data = self.train_dataset
        groups = NestedBatchSampler(BatchSampler(RandomSampler(data), 3, False),
                                    self.args.per_device_train_batch_size // 3)
        one_process = DataLoader(data, batch_sampler=groups, collate_fn=self.data_collator)
        return self.accelerator.prepare(distribute(one_process, self.args.world_size, self.args.process_index))


TRAINERS = {'vila': VilaLikeTrainer, 'ours': OursTrainer, 'nested': NestedTrainer, 'default': Trainer}


class StopAfterSave(TrainerCallback):
    """Stops the fit right after the checkpoint of step ``step``, as a run killed there would stop; with ``copy``,
    first copies the ledger folder ``copy[0]`` to ``copy[1]``: what a process killed right after the checkpoint
    leaves on disk."""

    def __init__(self, step: int, copy: tuple[Path, Path] | None = None) -> None:
        self.step, self.copy = step, copy

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == self.step:
            if self.copy is not None:
                shutil.copytree(*self.copy)
            control.should_training_stop = True


def world() -> tuple[int, int]:
    """This process's world size and rank, as the launcher set them (one process: 1 and 0)."""
    return int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))


def fit(kind: str, folder: Path, max_steps: int, *, size: int = 96, batch: int = 4, accumulate: int = 1,
        seed: int = 17, save_steps: int | None = None, stop_at: int | None = None, resume: str | bool | None = None,
        sync: bool | SamplerSync = True, data_seed: int = 0, workers: int = 0, attach: bool = True,
        arguments: dict[str, Any] | None = None, ledger: SampleLedger | None = None, ledger_first: bool = False,
        crash_copy: Path | None = None) -> Trainer:
    """One fit of a real Hugging Face Trainer of ``kind`` (:data:`KINDS`) on every rank of this process's launch,
    with ``SamplerSync`` attached unless ``sync`` is False (a ``SamplerSync`` given is used as it is; with
    ``attach=False`` it is only put in ``callbacks=[...]``). A checkpoint every ``save_steps`` steps into ``folder``;
    ``stop_at`` stops right after the checkpoint of that step, copying the ledger's folder to ``crash_copy`` first if
    given; ``arguments`` are more ``TrainingArguments``. ``ledger`` is attached after ``SamplerSync``, or before it
    with ``ledger_first``. The trainer's model records what it trained."""
    torch.manual_seed(seed)
    model = Model()
    args = TrainingArguments(
        output_dir=str(folder), per_device_train_batch_size=batch, gradient_accumulation_steps=accumulate,
        max_steps=max_steps, seed=seed, learning_rate=0.05, lr_scheduler_type='linear', optim='adamw_torch',
        weight_decay=0.01, save_strategy='steps' if save_steps else 'no', save_steps=save_steps or 500,
        report_to=[], use_cpu=True, disable_tqdm=True, logging_strategy='no', dataloader_num_workers=workers,
        ddp_backend='gloo' if world()[0] > 1 else None, **(arguments or {}))
    copy = None if crash_copy is None or ledger is None else (Path(ledger.folder), crash_copy)
    callbacks: list[Any] = [StopAfterSave(stop_at, copy)] if stop_at is not None else []
    given = sync if isinstance(sync, SamplerSync) else SamplerSync() if sync else None
    if given is not None and not attach:
        callbacks.append(given)
    trainer = TRAINERS[kind](model=model, args=args, train_dataset=Named(size, data_seed), callbacks=callbacks)
    if ledger is not None and ledger_first:
        ledger.attach(trainer)
    if given is not None and attach:
        given.attach(trainer)
    if ledger is not None and not ledger_first:
        ledger.attach(trainer)
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def epochs_of(trained: list[list[int]], batches_in_epoch: int) -> list[list[int]]:
    """The samples of each epoch, from one rank's batches in order."""
    return [[index for batch in trained[start:start + batches_in_epoch] for index in batch]
            for start in range(0, len(trained), batches_in_epoch)]


def same_weights(first: Trainer, second: Trainer) -> bool:
    """Whether the two trainers' weights and AdamW states are equal, bit for bit."""
    a, b = first.model.state_dict(), second.model.state_dict()
    states = first.optimizer.state_dict()['state'], second.optimizer.state_dict()['state']
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a) and \
        states[0].keys() == states[1].keys() and \
        all(torch.equal(states[0][k][name], states[1][k][name]) for k in states[0] for name in states[0][k])


def audit(folder: Path) -> tuple[int, AuditReport | None]:
    """The exit status of ``composer-sampling audit FOLDER`` and its report, computed as the command computes them: 0
    when every guarantee holds, 1 when one fails, 2 for a folder it cannot account for (no report)."""
    try:
        report = audit_folder(folder)
    except LedgerError:
        return 2, None
    return (1 if report.violations else 0), report


def epochs(report: AuditReport | None) -> list[tuple[int, int, int, int, str]]:
    """Each epoch of an audit: the epoch, the samples trained exactly once, repeated and missing, and its status."""
    assert report is not None
    return [(epoch.epoch, epoch.exactly_once, epoch.repeated, epoch.missing, epoch.status) for epoch in report.epochs]


def recorded(folder: Path, rank: int = 0) -> list[tuple[int, int, list[int]]]:
    """The records ``(epoch, batch, indices)`` of ``rank``'s ledger files in ``folder``, attempt after attempt, each
    attempt's records up to the batch the next one starts at (what ``audit`` counts)."""
    ledgers = sorted((read_ledger(path) for path in folder.glob(f'*-rank{rank}.bin')),
                     key=lambda ledger: ledger.header['started'])
    starts = [ledger.header['start_batch'] for ledger in ledgers[1:]] + [None]
    return [(record.epoch, record.batch, record.indices.tolist()) for ledger, cut in zip(ledgers, starts, strict=True)
            for record in ledger.records if cut is None or record.batch <= cut]
