"""Argument checks shared by the samplers: clear errors that name the argument and the valid range."""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

from composer.utils import dist

__all__ = ['check_bool', 'check_int', 'dataset_length', 'resolve_replicas']


def check_int(name: str, value: Any, minimum: int = 0, maximum: int | None = None) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, maximum]``, else raise.

    Example:
        >>> check_int('seed', 3)
        3
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f'{name} must be an int, got {value!r} ({type(value).__name__})')
    if value < minimum or (maximum is not None and value > maximum):
        upper = 'inf)' if maximum is None else f'{maximum}]'
        raise ValueError(f'{name} must be in the interval [{minimum}, {upper}, got {value}')
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool, else raise ``TypeError``.

    Example:
        >>> check_bool('shuffle', True)
        True
    """
    if not isinstance(value, bool):
        raise TypeError(f'{name} must be a bool, got {value!r} ({type(value).__name__})')
    return value


def dataset_length(dataset: Any) -> int:
    """The length of a sized dataset, or ``dataset`` itself when it is an int.

    Example:
        >>> dataset_length(range(7)), dataset_length(7)
        (7, 7)
    """
    if isinstance(dataset, int) and not isinstance(dataset, bool):
        length = dataset
    elif isinstance(dataset, Sized):
        length = len(dataset)
    else:
        raise TypeError(
            f'dataset must be a sized (map-style) dataset or an int length, got {type(dataset).__name__}',
        )
    if length < 1:
        raise ValueError(f'dataset must hold at least one sample, got length {length}')
    return length


def resolve_replicas(num_replicas: int | None, rank: int | None) -> tuple[int, int]:
    """Fill ``num_replicas``/``rank`` from ``composer.utils.dist`` and check them as torch does.

    Example:
        >>> resolve_replicas(4, 3)
        (4, 3)
    """
    if num_replicas is None:
        num_replicas = dist.get_world_size()
    if rank is None:
        rank = dist.get_global_rank()
    check_int('num_replicas', num_replicas, minimum=1)
    if isinstance(rank, bool) or not isinstance(rank, int):
        raise TypeError(f'rank must be an int, got {rank!r} ({type(rank).__name__})')
    if not 0 <= rank < num_replicas:
        raise ValueError(f'Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]')
    return num_replicas, rank
