"""The resume grid's dataset, in a module that DataLoader workers import without any trainer.

On two ranks the grid's workers are started by a fork server (as the recipe
runner's are): each worker unpickles the dataset, which imports this module, so it
stays light (torch and numpy only) and imports neither Composer nor Lightning.
"""

from __future__ import annotations

import collections
import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

#: The features of a sample and the classes of its label, as in the demo's synthetic data.
NUM_FEATURES = 64
NUM_CLASSES = 10


class CountedData(Dataset):
    """Synthetic samples, optionally augmented from the global RNGs, with every read counted (workers too).

    Each sample is ``{'input': float32[64], 'target': int64, 'index': int}``, computed from
    its index as the demo's ``SyntheticDataset(size, seed=0)`` computes it: one of ten
    Gaussian clusters. Reads are counted in shared memory, one row per worker, so the
    count survives worker processes and no two processes write the same cell.
    """

    def __init__(self, size: int, augment: bool, max_workers: int = 4) -> None:
        self.size = size
        self.augment = augment
        self.centers = np.random.default_rng(0).normal(0.0, 1.0, size=(NUM_CLASSES, NUM_FEATURES))
        self.reads = torch.zeros(max_workers + 1, size, dtype=torch.int32).share_memory_()

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.size:
            raise IndexError(f'index {index} is out of range for a dataset of {self.size} samples')
        worker = torch.utils.data.get_worker_info()
        self.reads[0 if worker is None else worker.id + 1, index] += 1
        rng = np.random.default_rng([0, index])
        target = int(rng.integers(0, NUM_CLASSES))
        features = torch.as_tensor(self.centers[target] + rng.normal(0.0, 1.0, size=NUM_FEATURES),
                                   dtype=torch.float32)
        if self.augment:  # one draw from each global RNG a random augmentation may use
            noise = 0.1 * torch.randn(NUM_FEATURES) + random.random() * 1e-3 + float(np.random.rand()) * 1e-3
            features = features + noise
        return {'input': features, 'target': torch.tensor(target), 'index': index}

    def read_counts(self) -> collections.Counter[int]:
        """How many times each sample was read, in this process and its workers."""
        totals = self.reads.sum(dim=0)
        return collections.Counter({i: int(n) for i, n in enumerate(totals.tolist()) if n})
