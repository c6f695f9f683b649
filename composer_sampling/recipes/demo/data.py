"""Map-style datasets for the recipes: scikit-learn's digits and a synthetic set of any size.

Every item is a dict ``{'input': float32[64], 'target': int64, 'index': int}``; the
``index`` lets callbacks and tests see exactly which samples a batch holds.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ['DigitsDataset', 'SyntheticDataset', 'digits', 'synthetic']

NUM_FEATURES = 64
DEFAULT_EVAL_FRACTION = 0.2  # the recipe runner's default held-out share
NUM_CLASSES = 10


class ArrayDataset(Dataset):
    """Features and labels held in memory; ``read_delay_ms`` simulates slow storage per read."""

    def __init__(self, features: np.ndarray, targets: np.ndarray, read_delay_ms: float = 0.0) -> None:
        assert len(features) == len(targets)
        self.features = torch.as_tensor(features, dtype=torch.float32)
        self.targets = torch.as_tensor(targets, dtype=torch.int64)
        self.read_delay_ms = read_delay_ms

    @property
    def fingerprint(self) -> str:
        """What identifies the content, for the resume's data check: the features and labels, as a TensorDataset of
        them would be fingerprinted."""
        from torch.utils.data import TensorDataset

        from composer_sampling._fingerprint import dataset_fingerprint

        return f'features and labels {dataset_fingerprint(TensorDataset(self.features, self.targets)).short}'

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self.read_delay_ms:
            time.sleep(self.read_delay_ms / 1000)
        return {'input': self.features[index], 'target': self.targets[index], 'index': index}


class DigitsDataset(ArrayDataset):
    """scikit-learn's bundled 8x8 digits (1,797 images, no download)."""


def digits(read_delay_ms: float = 0.0) -> DigitsDataset:
    """All of scikit-learn's digits, features scaled to [0, 1], rows in a fixed shuffled order.

    The recipe runner holds out the last ``eval_fraction`` of the rows; the fixed
    shuffle makes that a random split (the file lists the writers one after another).

    Example:
        >>> len(digits())
        1797
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as error:  # pragma: no cover - depends on the install
        raise ImportError(
            'the digits dataset needs scikit-learn: pip install "composer-sampling[demo]"',
        ) from error
    features, targets = load_digits(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(targets))
    # Rotated so that the default held-out fraction (the last 0.2 of the rows) leaves the same train rows, in the
    # same order, and the same held-out rows as releases that split digits themselves: same seed, same run.
    order = np.roll(order, -round(len(targets) * DEFAULT_EVAL_FRACTION))
    return DigitsDataset(features[order] / 16.0, targets[order], read_delay_ms)


def synthetic(size: int, read_delay_ms: float = 0.0) -> SyntheticDataset:
    """The registered ``synthetic`` dataset: :class:`SyntheticDataset` of ``size`` samples, seed 0."""
    return SyntheticDataset(size, seed=0, read_delay_ms=read_delay_ms)


class SyntheticDataset(Dataset):
    """``size`` samples of ten Gaussian clusters in 64 dimensions, each computed from ``(seed, index)`` on read.

    Nothing is held per sample, so any size costs the same memory: a plan or a
    benchmark can use a dataset of 1e9 samples.

    Example:
        >>> data = SyntheticDataset(100)
        >>> len(data), data[7]['index'], data[7]['input'].shape
        (100, 7, torch.Size([64]))
    """

    def __init__(self, size: int, seed: int = 0, read_delay_ms: float = 0.0) -> None:
        self.size = size
        self.seed = seed
        self.read_delay_ms = read_delay_ms
        self.centers = np.random.default_rng(seed).normal(0.0, 1.0, size=(NUM_CLASSES, NUM_FEATURES))

    @property
    def fingerprint(self) -> str:
        """What identifies the content, for the resume's data check: every sample follows from the seed."""
        return f'ten Gaussian clusters in {NUM_FEATURES} dimensions, seed {self.seed}, {self.size} samples'

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.size:
            raise IndexError(f'index {index} is out of range for a dataset of {self.size} samples')
        if self.read_delay_ms:
            time.sleep(self.read_delay_ms / 1000)
        rng = np.random.default_rng([self.seed, index])
        target = int(rng.integers(0, NUM_CLASSES))
        features = self.centers[target] + rng.normal(0.0, 1.0, size=NUM_FEATURES)
        return {'input': torch.as_tensor(features, dtype=torch.float32), 'target': torch.tensor(target),
                'index': index}
