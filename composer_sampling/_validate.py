"""Argument checks shared by the samplers: clear errors that name the argument and the valid range."""

from __future__ import annotations

import numbers
import operator
from collections.abc import Sequence, Sized
from typing import Any, TypeGuard

import numpy as np

from composer_sampling.permutation import MAX_DATASET_LEN

__all__ = [
    'MAX_EPOCH',
    'MAX_REPLICAS',
    'dataset_length',
    'first_outside',
    'is_integer',
    'is_real',
    'process_ranks',
    'replication_problem',
    'resolve_replicas',
    'valid_bool',
    'valid_int',
]

#: The largest epoch a sampler takes (as ``PerSampleRNG``): the order mixes the epoch in as 64 bits, so a larger
#: one would silently repeat an earlier epoch's order.
MAX_EPOCH = 2**63 - 1
#: The most ranks a sampler takes: global positions (below dataset length + ranks) stay within int64.
MAX_REPLICAS = 2**62


def is_integer(value: Any) -> TypeGuard[int]:
    """Whether ``value`` is an integer, Python's or numpy's, and not a bool (which Python counts as one).

    Example:
        >>> is_integer(3), is_integer(np.int64(3)), is_integer(True), is_integer(3.0)
        (True, True, False, False)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def is_real(value: Any) -> TypeGuard[float]:
    """Whether ``value`` is an int or a float (numpy's too), and not a bool.

    Example:
        >>> is_real(0.5), is_real(2), is_real(False), is_real('1')
        (True, True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _as_int(name: str, value: Any) -> int:
    """``value`` as a Python int when it is an integer (numpy's too, through ``operator.index``); never a bool."""
    if isinstance(value, (bool, np.bool_)) or str(getattr(value, 'dtype', '')) in ('bool', 'torch.bool'):
        raise TypeError(f'{name} must be an int, got {value!r} ({type(value).__name__})')
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f'{name} must be an int, got {value!r} ({type(value).__name__})') from None


def valid_int(name: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    """Return ``value`` as an int if it is an integer (not a bool) in ``[minimum, maximum]``, else raise.

    numpy integers are accepted and returned as Python ints, as torch accepts them.

    Example:
        >>> import numpy as np
        >>> valid_int('seed', 3), valid_int('seed', np.int64(3))
        (3, 3)
    """
    number = _as_int(name, value)
    if number < minimum or (maximum is not None and number > maximum):
        upper = 'inf)' if maximum is None else f'{maximum}]'
        raise ValueError(f'{name} must be in the interval [{minimum}, {upper}, got {number}')
    return number


def valid_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (numpy's too), else raise ``TypeError``.

    Example:
        >>> valid_bool('shuffle', True)
        True
    """
    if isinstance(value, np.bool_):
        return bool(value)
    if not isinstance(value, bool):
        raise TypeError(f'{name} must be a bool, got {value!r} ({type(value).__name__})')
    return value


def dataset_length(dataset: Any) -> int:
    """The length of a sized dataset (tensors and arrays too), or ``dataset`` itself when it is an integer.

    The length must be in ``[1, 2**62]``; a string is refused rather than taken for a dataset of characters.

    Example:
        >>> import torch
        >>> dataset_length(range(7)), dataset_length(7), dataset_length(torch.arange(5))
        (7, 7, 5)
    """
    if isinstance(dataset, (str, bytes)):
        raise TypeError(f'dataset must be a sized (map-style) dataset or an int length, got the string {dataset!r:.40}')
    if isinstance(dataset, (bool, np.bool_)):
        raise TypeError(f'dataset must be a sized (map-style) dataset or an int length, got {dataset!r}')
    if isinstance(dataset, numbers.Integral):
        length = int(dataset)
    elif isinstance(dataset, Sized):
        try:
            length = len(dataset)
        except TypeError:  # a 0-d tensor or array has __len__ but no length: an integer scalar is a length
            length = _as_int('dataset', dataset)
    else:
        raise TypeError(f'dataset must be a sized (map-style) dataset or an int length, got {type(dataset).__name__}')
    if length < 1:
        raise ValueError(f'dataset must hold at least one sample, got length {length}')
    if length > MAX_DATASET_LEN:
        raise ValueError(
            f'dataset length must be in the interval [1, 2**62] (the largest order the samplers compute), '
            f'got {length}',
        )
    return length


def resolve_replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """Fill ``num_replicas``/``rank`` from this process's ranks (:func:`process_ranks`) and check them as torch does.

    ``num_replicas`` must be in ``[1, 2**62]`` (:data:`MAX_REPLICAS`).

    Example:
        >>> resolve_replicas(4, 3)
        (4, 3)
        >>> resolve_replicas(2**63, 0)
        Traceback (most recent call last):
        ...
        ValueError: num_replicas must be in the interval [1, 4611686018427387904], got 9223372036854775808
    """
    if num_replicas is None or rank is None:
        world_size, global_rank = process_ranks()
        num_replicas = world_size if num_replicas is None else num_replicas
        rank = global_rank if rank is None else rank
    num_replicas = valid_int('num_replicas', num_replicas, 1, MAX_REPLICAS)
    rank = _as_int('rank', rank)
    if not 0 <= rank < num_replicas:
        raise ValueError(f'Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]')
    return num_replicas, rank


def process_ranks() -> tuple[int, int]:
    """This process's world size and global rank: ``composer.utils.dist``'s when Composer is installed, else torch's
    process group when it is started, else the launcher's ``WORLD_SIZE`` and ``RANK`` (as torchrun and Lightning set
    them; one process: 1 and 0, as Composer reads them).

    Example:
        >>> process_ranks()  # a process no launcher started
        (1, 0)
    """
    try:
        from composer.utils import dist
    except ModuleNotFoundError:
        import os

        import torch.distributed as torch_dist

        if torch_dist.is_available() and torch_dist.is_initialized():
            return torch_dist.get_world_size(), torch_dist.get_rank()
        return int(os.environ.get('WORLD_SIZE', '1')), int(os.environ.get('RANK', '0'))
    return dist.get_world_size(), dist.get_global_rank()


def replication_problem(replication: int, world_size: int, name: str = 'replication') -> str | None:
    """Why ``replication`` cannot group ``world_size`` ranks (it must be at least 1 and divide it), else None.

    Example:
        >>> replication_problem(3, 4)
        'replication=3 does not divide the world size 4; valid: 1, 2, 4'
        >>> replication_problem(2, 4) is None
        True
    """
    if replication >= 1 and world_size % replication == 0:
        return None
    valid = ', '.join(str(r) for r in range(1, world_size + 1) if world_size % r == 0)
    return f'{name}={replication} does not divide the world size {world_size}; valid: {valid}'


def first_outside(indices: np.ndarray | Sequence[int], length: int) -> int | None:
    """Where in ``indices`` the first value outside ``[0, length)`` sits, or None when all are inside.

    One pass of ``min``/``max`` when every index is valid (the common case). A list of
    Python ints (a batch's indices as the sampler graph yields them) is checked with
    the builtins: for one batch they take a few microseconds less than numpy's.

    Example:
        >>> first_outside(np.array([3, 0, 7, -1]), 5), first_outside([3, 0, 7, -1], 5)
        (2, 2)
        >>> first_outside(np.array([3, 0]), 5) is None, first_outside([3, 0], 5) is None
        (True, True)
    """
    if not isinstance(indices, np.ndarray):
        if not indices or (min(indices) >= 0 and max(indices) < length):
            return None
        return next(where for where, index in enumerate(indices) if not 0 <= index < length)
    if not indices.size or (indices.min() >= 0 and indices.max() < length):
        return None
    return int(np.flatnonzero((indices < 0) | (indices >= length))[0])
