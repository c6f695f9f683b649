"""The builders behind the registered sampler names that are torch's or the demo's, and the SGD the optimizer
table names (each sampler of ours carries its own builder, in its ``RECIPE``).

Every sampler builder takes the keywords the recipe runner passes to any sampler
builder, ``dataset``, ``num_replicas``, ``rank``, ``seed`` and ``device_batch_size``,
plus its inline options, and returns an index sampler (batched by the device
batch) or a batch sampler that yields device batches.

Example:
    >>> sampler = random(dataset=range(10), num_replicas=1, rank=0, seed=0, device_batch_size=5)
    >>> type(sampler).__name__, len(sampler)
    ('RandomSampler', 10)
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import BatchSampler, RandomSampler, Sampler

from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter

__all__ = ['custom_batch', 'distributed', 'random', 'sgd']


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
