"""The resume harness's dataset, in a module DataLoader workers import without Composer.

On two ranks the harness's workers are started by a fork server (as the recipe
runner's are, ``worker_start``): each worker unpickles the dataset, which imports
this module, so it stays light (torch and the demo data only).
"""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from composer_sampling.recipes.demo.data import NUM_FEATURES, SyntheticDataset


class CountedData(Dataset):
    """Synthetic samples, optionally augmented from the global RNGs, with every read counted (workers too).

    Reads are counted in shared memory, one row per worker, so the count survives worker
    processes and no two processes write the same cell.
    """

    def __init__(self, size: int, augment: bool, max_workers: int = 4) -> None:
        self.base = SyntheticDataset(size, seed=0)
        self.augment = augment
        self.reads = torch.zeros(max_workers + 1, size, dtype=torch.int32).share_memory_()

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int) -> dict[str, Any]:
        worker = torch.utils.data.get_worker_info()
        self.reads[0 if worker is None else worker.id + 1, index] += 1
        sample = self.base[index]
        if self.augment:  # one draw from each global RNG a random augmentation may use
            noise = 0.1 * torch.randn(NUM_FEATURES) + random.random() * 1e-3 + float(np.random.rand()) * 1e-3
            sample['input'] = sample['input'] + noise
        return sample

    def read_counts(self) -> collections.Counter[int]:
        totals = self.reads.sum(dim=0)
        return collections.Counter({i: int(n) for i, n in enumerate(totals.tolist()) if n})
