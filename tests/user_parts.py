"""Parts a user's package might register or name by target, for the registry tests."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset


class Numbers(Dataset):
    """``size`` samples ``{'input': float32[4], 'target': int, 'index': int}``; counts its reads."""

    reads = 0

    def __init__(self, size: int, classes: int = 2) -> None:
        self.size, self.classes = size, classes

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> dict[str, Any]:
        Numbers.reads += 1
        return {'input': torch.full((4,), float(index % self.classes)), 'target': index % self.classes,
                'index': index}


def numbers(size: int, classes: int = 2) -> Numbers:
    return Numbers(size, classes)


def three_sources(sizes: tuple[int, ...] = (600, 400, 300)) -> list[Numbers]:
    return [Numbers(size) for size in sizes]


def not_a_dataset() -> int:
    return 7


def linear(classes: int = 2, with_num_classes: bool = True) -> torch.nn.Module:
    module = torch.nn.Linear(4, classes)
    if with_num_classes:
        module.num_classes = classes
    return module


def not_an_optimizer(params: Any, lr: float = 0.1) -> str:
    return 'sgd'


def junk_sampler(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int) -> int:
    return 3


NOT_CALLABLE = 42


def concatenated(sizes: tuple[int, ...] = (120, 80)) -> ConcatDataset:
    """One dataset that happens to be a ConcatDataset (not the sources of a mixture)."""
    return ConcatDataset([Numbers(size) for size in sizes])


def failing(size: int) -> Numbers:
    """A dataset builder that fails as a user's might: its data is not where it looks."""
    raise ValueError(f'no sample {size} in this folder')


def raising_model() -> torch.nn.Module:
    raise RuntimeError('out of memory while building the model')
