"""An example of the custom batch samplers found in the field: it shuffles whole batches every epoch.

It stands for the length-bucketing and batch-shuffling samplers that users write
themselves: it is not a ``DistributedSampler``, it needs ``set_epoch`` for a new
order every epoch, and it does not forward ``set_epoch`` to the sampler it wraps.
Composer's trainer never reaches it; :class:`~composer_sampling.SamplerSync` does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
from torch.utils.data import Sampler

__all__ = ['BatchShuffleSampler']


class BatchShuffleSampler(Sampler[list[int]]):
    """Yields the batches of ``batch_sampler`` in an order shuffled by ``(seed, epoch)``.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> sampler = BatchShuffleSampler(BatchSampler(SequentialSampler(range(6)), 2, False), seed=1)
        >>> sorted(sampler)
        [[0, 1], [2, 3], [4, 5]]
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
