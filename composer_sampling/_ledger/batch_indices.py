"""Reading the sample indices of a collated batch, for ``SampleLedger(index_key=...)``."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

__all__ = ['IndexKey', 'key_name', 'read_indices', 'valid_index_key']

#: Where a batch holds its sample indices: a mapping key, a position in a tuple or list, or a callable.
IndexKey = str | int | Callable[[Any], Any]


def read_indices(batch: Any, index_key: IndexKey) -> np.ndarray:
    """The sample indices of a collated ``batch`` as int64, found by ``index_key``.

    Raises :class:`ValueError` naming ``index_key`` and what the batch holds when
    the indices are not there or are not integers.

    Example:
        >>> x, y, i = torch.zeros(2, 3), torch.tensor([1, 0]), torch.tensor([7, 4])
        >>> read_indices({'input': x, 'index': i}, 'index').tolist(), read_indices((x, y, i), 2).tolist()
        ([7, 4], [7, 4])
        >>> read_indices((x, y), 'index')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: SampleLedger(index_key='index') found no sample indices: the batch is a tuple of 2 (Tensor[2, 3] ...
    """
    where = f'SampleLedger(index_key={key_name(index_key)})'
    if callable(index_key):
        found = index_key(batch)
    elif isinstance(index_key, str):
        if not isinstance(batch, Mapping) or index_key not in batch:
            raise ValueError(f'{where} found no sample indices: the batch is {_batch_shape(batch)}. {_fix(batch)}')
        found = batch[index_key]
    else:
        if not isinstance(batch, (tuple, list)):
            raise ValueError(f'{where} found no sample indices: an int index_key is a position in a tuple or list '
                             f'batch, and the batch is {_batch_shape(batch)}. {_fix(batch)}')
        if not -len(batch) <= index_key < len(batch):
            raise ValueError(f'{where} found no sample indices: the position {index_key} is outside [0, '
                             f'{len(batch)}) for a batch that is {_batch_shape(batch)}')
        found = batch[index_key]
    values = found.detach().cpu().numpy() if isinstance(found, torch.Tensor) else np.asarray(found)
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f'{where} read {_batch_shape(found)} from a batch that is {_batch_shape(batch)}: sample '
                         f'indices must be integers (the dataset index of each sample). {_fix(batch)}')
    return values.astype(np.int64, copy=False).reshape(-1)


def valid_index_key(index_key: Any) -> IndexKey | None:
    """``index_key`` as a ledger keeps it (a numpy integer becomes an int), or a :class:`TypeError` naming it.

    Example:
        >>> valid_index_key(np.int64(2)), valid_index_key('index'), valid_index_key(None)
        (2, 'index', None)
    """
    if index_key is not None and (isinstance(index_key, (bool, np.bool_)) or not (
            isinstance(index_key, (str, int, np.integer)) or callable(index_key))):
        raise TypeError(f'index_key must be a str (a mapping key), an int (a position in a tuple or list batch), '
                        f'a callable batch -> indices, or None (the sampler graph), got {index_key!r}')
    return int(index_key) if isinstance(index_key, np.integer) else index_key


def key_name(index_key: IndexKey | None) -> str:
    """``index_key`` as a message shows it: its repr, or a callable's qualified name."""
    if index_key is None or isinstance(index_key, (str, int)):
        return repr(index_key)
    return getattr(index_key, '__qualname__', repr(index_key))


def _batch_shape(value: Any, depth: int = 0) -> str:
    """A short description of a batch or part of one: its type, keys, shapes and dtypes."""
    if isinstance(value, torch.Tensor):
        return f'Tensor{list(value.shape)} {str(value.dtype).removeprefix("torch.")}'
    if isinstance(value, np.ndarray):
        return f'ndarray{list(value.shape)} {value.dtype}'
    if isinstance(value, Mapping):
        return f'a {type(value).__name__} with keys {sorted(map(str, value))}'
    if isinstance(value, (tuple, list)) and depth == 0:
        parts = ', '.join(_batch_shape(item, 1) for item in value[:6]) + (', ...' if len(value) > 6 else '')
        return f'a {type(value).__name__} of {len(value)} ({parts})'
    return f'a {type(value).__name__}'


def _fix(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return ('Return the dataset index of each sample from the dataset and pass index_key=<its key>, or leave '
                'index_key None to record what the sampler hands the DataLoader')
    if isinstance(batch, (tuple, list)) and batch:
        return (f'For a tuple or list batch pass index_key=<the position of the indices> (0 to {len(batch) - 1}), '
                'or leave index_key None to record what the sampler hands the DataLoader')
    return 'Leave index_key None to record what the sampler hands the DataLoader, or pass a callable batch -> indices'
