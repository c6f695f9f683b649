"""Parts a user's package might register or name by target, for the registry tests."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch
from torch.utils.data import BatchSampler, ConcatDataset, Dataset, DistributedSampler


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


def round_robin_mixture(dataset: Any, num_replicas: int, rank: int, seed: int, device_batch_size: int,
                        shuffle: bool = True, temperature: float = 1.0) -> Any:
    """A third-party mixture sampler: it receives the sources (a ConcatDataset), as its entry declares."""
    from composer_sampling import MixtureDistributedSampler

    sizes = [len(source) for source in dataset.datasets]
    return MixtureDistributedSampler(sizes, batch_size=device_batch_size, num_replicas=num_replicas, rank=rank,
                                     shuffle=shuffle, seed=seed)


round_robin_mixture.composer_sampling_entry = {  # type: ignore[attr-defined]
    'takes_sources': True,
    'options': {'shuffle': {'kind': 'bool', 'default': True},
                'temperature': {'kind': 'float', 'default': 1.0, 'minimum': 0, 'exclusive': True}},
}


class DictLinear(torch.nn.Module):
    """A linear classifier of the ``Numbers`` samples' ``input``, for recipes over them."""

    num_classes = 2

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(4, 2)

    def forward(self, inputs: Any) -> torch.Tensor:
        return self.linear(inputs)


def dict_model() -> Any:
    """A ComposerModel over the dict batches of ``Numbers``."""
    from composer.models import ComposerClassifier

    class OverDicts(ComposerClassifier):
        def forward(self, batch: Any) -> torch.Tensor:
            return self.module(batch['input'])

        def loss(self, outputs: torch.Tensor, batch: Any, *args: Any, **kwargs: Any) -> torch.Tensor:
            return self._loss_fn(outputs, batch['target'])

        def update_metric(self, batch: Any, outputs: Any, metric: Any) -> None:
            metric.update(outputs, batch['target'])

    return OverDicts(DictLinear(), num_classes=2)


class ShardedBatchSampler(DistributedSampler):
    """A batch sampler as Composer's DataSpec asks for on several ranks: it shards by rank and yields whole batches.

    torch's ``DistributedSampler`` order (``seed``, ``set_epoch``, padding) cut into batches of ``batch_size``,
    each made by ``as_batch`` (``list``, ``tuple``, ``numpy.array``, ...), for ``DataLoader(batch_sampler=...)``.
    """

    def __init__(self, dataset: Any, batch_size: int, num_replicas: int | None = None, rank: int | None = None,
                 shuffle: bool = True, seed: int = 0, drop_last: bool = False, as_batch: Any = list) -> None:
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed,
                         drop_last=drop_last)
        self.batch_size = batch_size
        self.as_batch = as_batch

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        indices = list(super().__iter__())
        for start in range(0, len(indices), self.batch_size):
            yield self.as_batch(indices[start:start + self.batch_size])

    def __len__(self) -> int:
        return -(-self.num_samples // self.batch_size)


class NamedBatchSampler(BatchSampler):
    """A ``BatchSampler`` subclass as users write them: torch's batches, with an argument of their own kept along."""

    def __init__(self, sampler: Any, batch_size: int, drop_last: bool, name: str = 'train') -> None:
        super().__init__(sampler, batch_size, drop_last)
        self.name = name


def checkpoint_loader(path: str) -> Any:
    """A builder that returns Composer's ``LoadCheckpoint``: the check cannot see its path before it is built."""
    from composer.callbacks import LoadCheckpoint

    return LoadCheckpoint(path)
