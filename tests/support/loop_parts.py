"""A loop written by hand, as EfficientViT's is, driven by ``DataOrder``: a dataset that names its samples, a model
with dropout, the loaders such a loop has, and one run that may stop after a checkpoint and resume from it.

Nothing here imports Composer or Lightning: these tests run in every environment.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler

from composer_sampling import DataOrder, ResumableDistributedSampler

#: The loaders a loop written by hand has, as the tests name them.
KINDS = ('torch', 'ours', 'user batch sampler')


class Named(Dataset):
    """``size`` samples ``(features, label, index)`` drawn with ``seed``; the fingerprint names both."""

    def __init__(self, size: int = 64, seed: int = 0) -> None:
        self.fingerprint = f'named samples, seed {seed}, {size} samples'
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, 8, generator=generator)
        self.labels = torch.randint(0, 3, (size,), generator=generator)
        self.reads: list[int] = []  # every sample loaded in this process (with 0 workers: every one)

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor, int]:
        self.reads.append(index)
        return self.features[index], self.labels[index], index


class EpochBatches(BatchSampler):
    """A user's batch sampler over a ``DistributedSampler`` whose batches come in an order set by ``set_epoch``."""

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def __iter__(self) -> Any:
        batches = list(super().__iter__())
        order = torch.randperm(len(batches), generator=torch.Generator().manual_seed(500 + getattr(self, 'epoch', 0)))
        return iter([batches[k] for k in order.tolist()])


def world() -> tuple[int, int]:
    """This process's world size and rank, as torchrun set them (one process: 1 and 0)."""
    return int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))


def loader(kind: str, workers: int = 0, size: int = 64, seed: int = 0) -> DataLoader:
    """This rank's train loader of ``kind`` (:data:`KINDS`), 8 samples a batch."""
    data = Named(size, seed)
    world_size, rank = world()
    settings: dict[str, Any] = {'num_workers': workers, 'persistent_workers': False}
    if kind == 'torch':
        return DataLoader(data, batch_size=8, sampler=DistributedSampler(data, world_size, rank), **settings)
    if kind == 'ours':
        return DataLoader(data, batch_size=8, sampler=ResumableDistributedSampler(data, world_size, rank), **settings)
    if kind == 'user batch sampler':
        return DataLoader(data, batch_sampler=EpochBatches(DistributedSampler(data, world_size, rank), 8, False),
                          **settings)
    raise ValueError(f'kind must be one of {", ".join(KINDS)}, got {kind!r}')


class Net(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.3), torch.nn.Linear(16, 3))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.layers(features)


class Run:
    """What one run trained: ``(epoch, indices)`` of every batch, and its model and optimizer at the end."""

    def __init__(self, trained: list[tuple[int, list[int]]], model: torch.nn.Module,
                 optimizer: torch.optim.Optimizer) -> None:
        self.trained, self.model, self.optimizer = trained, model, optimizer


def run(train_loader: DataLoader, steps: int, *, save_at: int | None = None, checkpoint: Path | None = None,
        resume: Path | None = None, data_seed: int = 17, **order: Any) -> Run:
    """A loop written by hand on every rank of this process's launch: ``steps`` optimizer steps in all; with
    ``save_at``, the checkpoint (model, optimizer, step, ``DataOrder`` state) is written to ``checkpoint`` after that
    step and the run stops there, as a run killed right after it would; with ``resume``, it continues from one."""
    import torch.distributed as torch_dist

    torch.manual_seed(1234)
    net = Net()
    distributed = torch_dist.is_available() and torch_dist.is_initialized()
    model: torch.nn.Module = torch.nn.parallel.DistributedDataParallel(net) if distributed else net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    data_order = DataOrder(train_loader, data_seed=data_seed, **order)
    step, trained = 0, []
    if resume is not None:
        saved = torch.load(resume, weights_only=True)
        net.load_state_dict(saved['model'])
        optimizer.load_state_dict(saved['optimizer'])
        data_order.load_state_dict(saved['data_order'])
        step = saved['step']
    for epoch in range(data_order.epoch, 100):
        data_order.set_epoch(epoch)
        for features, labels, indices in data_order:
            model.train()
            loss = torch.nn.functional.cross_entropy(model(features), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            step += 1
            trained.append((epoch, indices.tolist()))
            if step == save_at:
                state = data_order.state_dict()  # every rank: it gathers every rank's RNG state
                if world()[1] == 0:
                    assert checkpoint is not None
                    torch.save({'model': net.state_dict(), 'optimizer': optimizer.state_dict(), 'step': step,
                                'data_order': state}, checkpoint)
                if distributed:
                    torch_dist.barrier()
                return Run(trained, net, optimizer)
            if step == steps:
                return Run(trained, net, optimizer)
    raise AssertionError('the loop ran 100 epochs')


def same_weights(first: Run, second: Run) -> bool:
    """Whether the two runs' weights and momentum buffers are equal, bit for bit."""
    a, b = first.model.state_dict(), second.model.state_dict()
    states = first.optimizer.state_dict()['state'], second.optimizer.state_dict()['state']
    return a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a) and \
        states[0].keys() == states[1].keys() and \
        all(torch.equal(states[0][k]['momentum_buffer'], states[1][k]['momentum_buffer']) for k in states[0])
