"""Randomness of a sample drawn from ``(data seed, epoch, index)``: augmentations that resume bit for bit.

A random augmentation in ``__getitem__`` draws from the global RNG of the
process that reads the sample. In the main process that stream depends on every
batch read before; in a DataLoader worker it depends on which batches that worker
served. Neither survives a resume, a change of ``num_workers`` or of world size.
:class:`PerSampleRNG` makes a sample's randomness a pure function of the data
seed, the epoch and the sample's index (as Google Grain seeds each record):
before a sample is read, Python's ``random``, numpy's global RNG and torch's CPU
generator are seeded from those three numbers.

Example:
    >>> import random
    >>> class Noisy:
    ...     def __len__(self): return 4
    ...     def __getitem__(self, index): return index, random.random()
    >>> data = PerSampleRNG(Noisy(), seed=3)
    >>> data[2] == data[2], data[2] == data[1]
    (True, False)
    >>> first = data[2]; data.set_epoch(1); data[2] == first
    False
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from composer_sampling._validate import valid_int
from composer_sampling.permutation import MAX_DATA_SEED, derive_seed, splitmix64

__all__ = ['PerSampleRNG', 'iter_datasets', 'sample_seed']

_MASK64 = (1 << 64) - 1
#: Stream tag separating per-sample seeds from every other seed derived from the data seed.
_STREAM = 0x5A3D1E
#: Deepest dataset nesting searched (``Subset`` of ``ConcatDataset`` of ...).
_MAX_DEPTH = 32


def sample_seed(key: int, epoch: int, index: int) -> int:
    """The 64-bit seed of sample ``index`` in ``epoch``, from a key derived from the data seed.

    Example:
        >>> sample_seed(1, 0, 5) == sample_seed(1, 0, 5) != sample_seed(1, 1, 5)
        True
    """
    return derive_seed(derive_seed(key, epoch), index)


class PerSampleRNG(Dataset):
    """Reads every sample of ``dataset`` with the global RNGs seeded from ``(data seed, epoch, index)``.

    Python's ``random``, numpy's global RNG (``np.random``, seeded in ``[0, 2**32)``)
    and torch's CPU generator (``torch.default_generator``; CUDA generators are left
    alone) are seeded before each read, so a random augmentation in ``__getitem__``
    (a torchvision transform included) gives the same result with 0, 2 or 4 workers,
    persistent workers included, after a resume and on another world size. In the
    main process the previous states are restored after the read (once per batch
    when the DataLoader reads through ``__getitems__``), so the training loop's own
    stream (dropout) does not depend on the data.

    :class:`~composer_sampling.SamplerSync` finds it wherever it sits in the dataset
    (under ``Subset``, ``ConcatDataset`` or any wrapper with a ``dataset`` or
    ``datasets`` attribute) and sets its ``seed`` to the data seed at fit start and
    its epoch at every epoch start. Seed and epoch live in shared memory, so workers
    started in an earlier epoch (``persistent_workers=True``) see the new epoch.

    Randomness drawn outside the dataset (in the collate function or the model)
    is not covered: Composer's checkpointed RNG state (restored by ``SamplerSync``)
    covers the main process; a collate function in a worker stays worker-dependent.

    Args:
        dataset: a map-style dataset; its samples are read by index.
        seed (int): the data seed, in ``[0, 2**64 - 1]``; ``SamplerSync`` replaces it. Default: ``0``.
    """

    #: Its sample ``i`` is sample ``i`` of ``dataset``: the train dataset's fingerprint sees through it, so adding or
    #: removing it is not a change of data.
    passes_indices_through = True

    def __init__(self, dataset: Any, seed: int = 0) -> None:
        if not callable(getattr(dataset, '__getitem__', None)):
            raise TypeError(f'dataset must be a map-style dataset with __getitem__, got {type(dataset).__name__}')
        self.dataset = dataset
        # key (as int64 bits) and epoch, shared with worker processes
        self._shared = torch.zeros(2, dtype=torch.int64).share_memory_()
        self._epoch_key = (-1, -1, 0)  # (key bits, epoch, splitmix64 of that epoch's key): one derivation an epoch
        self.seed = seed

    @property
    def seed(self) -> int:
        """The data seed the per-sample seeds derive from."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._seed = valid_int('seed', value, 0, MAX_DATA_SEED)
        key = derive_seed(self._seed, _STREAM)
        self._shared[0] = key - (1 << 64) if key >= 1 << 63 else key

    @property
    def epoch(self) -> int:
        return int(self._shared[1])

    def set_epoch(self, epoch: int) -> None:
        """Draw the samples' randomness for ``epoch`` (seen by workers already running, too)."""
        self._shared[1] = valid_int('epoch', epoch, 0, 2**63 - 1)

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        if torch.utils.data.get_worker_info() is not None:  # a worker: its RNG serves nothing else
            return self._read_seeded(self._epoch_mix(), [index])[0]
        saved = _save_all()
        try:
            return self._read_seeded(self._epoch_mix(), [index])[0]
        finally:
            _restore_all(saved)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        """A batch read: each sample seeded on its own, the main process's states saved once."""
        if torch.utils.data.get_worker_info() is not None:
            return self._read_seeded(self._epoch_mix(), indices)
        saved = _save_all()
        try:
            return self._read_seeded(self._epoch_mix(), indices)
        finally:
            _restore_all(saved)

    def _read_seeded(self, mix: int, indices: list[int]) -> list[Any]:
        """Each sample of ``indices`` read with the three generators seeded from its own seed (see :meth:`_seed_of`)."""
        dataset, seed_python, seed_numpy = self.dataset, random.seed, np.random.seed
        seed_torch = torch.default_generator.manual_seed
        samples = []
        for index in indices:
            seed = splitmix64(mix ^ splitmix64(int(index) & _MASK64))
            seed_python(seed)
            seed_numpy(seed & 0xFFFF_FFFF)
            seed_torch(seed)
            samples.append(dataset[index])
        return samples

    def _epoch_mix(self) -> int:
        """``splitmix64`` of this epoch's key: a sample's seed is one more mix with its index (one derivation an epoch).

        ``sample_seed(key, epoch, index) == derive_seed(epoch_key, index)
        == splitmix64(splitmix64(epoch_key) ^ splitmix64(index))``.
        """
        key, epoch = self._shared.tolist()
        cached_key, cached_epoch, mix = self._epoch_key
        if (key, epoch) != (cached_key, cached_epoch):
            mix = splitmix64(derive_seed(key & _MASK64, epoch))
            self._epoch_key = (key, epoch, mix)
        return mix

    def _seed_of(self, index: int) -> int:
        """The seed of sample ``index`` in this epoch: ``sample_seed(key, epoch, index)``."""
        return splitmix64(self._epoch_mix() ^ splitmix64(int(index) & _MASK64))

    def __repr__(self) -> str:
        return f'PerSampleRNG(dataset={type(self.dataset).__name__}, seed={self._seed}, epoch={self.epoch})'


def _save_all() -> tuple[Any, Any, torch.Tensor]:
    return random.getstate(), np.random.get_state(), torch.default_generator.get_state()


def _restore_all(saved: tuple[Any, Any, torch.Tensor]) -> None:
    python, numpy, torch_state = saved
    random.setstate(python)
    np.random.set_state(numpy)
    torch.default_generator.set_state(torch_state)


def iter_datasets(dataset: Any) -> Iterator[Any]:
    """``dataset`` and every dataset it wraps (``dataset`` and ``datasets`` attributes), each once.

    Example:
        >>> from torch.utils.data import ConcatDataset, Subset
        >>> inner = PerSampleRNG(list(range(4)))
        >>> [type(d).__name__ for d in iter_datasets(Subset(ConcatDataset([inner, [9]]), [0]))]
        ['Subset', 'ConcatDataset', 'PerSampleRNG', 'list', 'list']
    """
    seen: set[int] = set()
    stack: list[tuple[Any, int]] = [(dataset, 0)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or depth > _MAX_DEPTH:
            continue
        seen.add(id(node))
        yield node
        below: list[Any] = []
        inner = getattr(node, 'dataset', None)
        if inner is not None and not isinstance(inner, (str, bytes)):
            below.append(inner)
        group = getattr(node, 'datasets', None)
        if isinstance(group, (list, tuple)):
            below.extend(group)
        stack.extend((child, depth + 1) for child in reversed(below))
