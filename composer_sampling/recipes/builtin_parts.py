"""The builders behind the registered sampler names (ours, torch's and the demo's) and the optimizer ``sgd``.

Every sampler builder takes the runner's keywords ``dataset``, ``num_replicas``, ``rank``, ``seed`` and
``device_batch_size``, then its inline options, and returns an index sampler or a batch sampler of device batches.

Example:
    >>> sampler = random(dataset=range(10), num_replicas=1, rank=0, seed=0, device_batch_size=5)
    >>> type(sampler).__name__, len(sampler)
    ('RandomSampler', 10)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, Sampler, SequentialSampler

from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.distribute import distribute
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler

__all__ = ['custom_batch', 'distributed', 'mixture', 'nested_batch', 'random', 'resumable', 'sgd', 'sub_epoch']


def resumable(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int, shuffle: bool = True,
              drop_last: bool = False) -> ResumableDistributedSampler:
    return ResumableDistributedSampler(dataset, num_replicas, rank, shuffle=shuffle, seed=seed, drop_last=drop_last)


def sub_epoch(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int,
              sub_epochs_per_epoch: int, shuffle: bool = True, drop_last: bool = False) -> SubEpochDistributedSampler:
    return SubEpochDistributedSampler(dataset, sub_epochs_per_epoch, num_replicas, rank, shuffle=shuffle, seed=seed,
                                      drop_last=drop_last)


def mixture(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int,
            shuffle: bool = True, source_fractions: list[float] | None = None) -> MixtureDistributedSampler:
    """A mixture over the sources of ``dataset`` (a ``ConcatDataset`` of them)."""
    sizes = [len(source) for source in dataset.datasets]
    return MixtureDistributedSampler(sizes, batch_size=device_batch_size, num_replicas=num_replicas, rank=rank,
                                     shuffle=shuffle, seed=seed)


def nested_batch(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int, num_batches: int,
                 shuffle: bool = True, drop_last: bool = False) -> Any:
    """The Lightning-style batch of batches, written for one process, then made distributed by ``distribute``."""
    if device_batch_size % num_batches:
        raise ValueError(f'num_batches={num_batches} does not divide the device batch {device_batch_size} '
                         f'(global_train_batch_size / world size); use a divisor of {device_batch_size}')
    base = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
    inner = BatchSampler(base, device_batch_size // num_batches, drop_last=False)
    nested = NestedBatchSampler(inner, num_batches, drop_last=drop_last)
    loader = distribute(DataLoader(dataset, batch_sampler=nested), num_replicas=num_replicas, rank=rank, seed=seed)
    return loader.batch_sampler


def distributed(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int, shuffle: bool = True,
                drop_last: bool = False) -> Sampler:
    from composer.utils import dist

    return dist.get_sampler(dataset, drop_last=drop_last, shuffle=shuffle, num_replicas=num_replicas, rank=rank,
                            seed=seed)


def random(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int) -> Sampler:
    return RandomSampler(dataset, generator=torch.Generator().manual_seed(seed))


def custom_batch(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int, shuffle: bool = True,
                 drop_last: bool = False) -> DistributedBatchAdapter:
    """The demo's batch-shuffling batch sampler over ``BatchSampler(DistributedSampler)``, adapted for Composer."""
    from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler

    inner = distributed(dataset, num_replicas, rank, seed, device_batch_size, shuffle=shuffle, drop_last=drop_last)
    custom = BatchShuffleSampler(BatchSampler(inner, device_batch_size, drop_last=False), seed=seed)
    return DistributedBatchAdapter(custom)


def sgd(params: Any, lr: float, weight_decay: float = 0.0, momentum: float = 0.9) -> torch.optim.Optimizer:
    """``torch.optim.SGD`` with momentum 0.9 unless told otherwise."""
    return torch.optim.SGD(params, lr=lr, momentum=momentum, weight_decay=weight_decay)
