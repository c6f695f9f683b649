"""What Composer's algorithms read of every batch, checked on one collated sample before anything trains.

Composer finds a batch that does not fit an algorithm's keys or dimensions only at the first batch;
:func:`check_batch_readers` collates the first sample as the train loader will and refuses it before training.

Example:
    >>> batch_problem({'input': 1, 'target': 2}, 'input_key', 0)
    "input_key=0: the batch is a dict with the keys 'input', 'target' (KeyError)"
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from composer_sampling.recipes.builders import builder_of
from composer_sampling.recipes.composer_names import BATCH_READERS
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import PartSpec, RunSpec

__all__ = ['batch_problem', 'check_batch_readers']


def _readers(spec: RunSpec) -> list[tuple[PartSpec, tuple[str, ...], int]]:
    """The algorithms of ``spec`` that read batches (a ColOut with ``batch: false`` changes the dataset instead)."""
    found = []
    for part in spec.algorithms:
        reads = BATCH_READERS.get(part.target.rpartition(':')[2])
        if reads is not None and part.arguments.get('batch', True) is not False:
            found.append((part, *reads))
    return found


def batch_problem(batch: Any, name: str, key: Any) -> str | None:
    """What is wrong with reading ``batch`` at ``key`` (the algorithm's argument ``name``) as Composer reads it.

    Example:
        >>> batch_problem((1, 2), 'target_key', 1) is None
        True
    """
    from composer.utils import batch_get

    try:
        batch_get(batch, key)
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        if isinstance(batch, Mapping):
            shape = f'a dict with the keys {", ".join(repr(k) for k in batch)}'
        elif isinstance(batch, (list, tuple)):
            shape = f'a {type(batch).__name__} of {len(batch)} items'
        else:
            shape = f'a {type(batch).__name__}'
        return f'{name}={key!r}: the batch is {shape} ({type(error).__name__})'
    return None


def check_batch_readers(spec: RunSpec, train: Any, collate: Callable[[list[Any]], Any] | None) -> None:
    """Refuse an algorithm that reads a key the train batches lack, or takes images the batches do not hold.

    ``collate`` is the train loader's collate function (``None``: torch's default).
    """
    readers = _readers(spec)
    if not readers or len(train) == 0:
        return
    import torch
    from composer.utils import batch_get
    from torch.utils.data import default_collate

    batch = (collate or default_collate)([train[0]])
    dataset = spec.parts['train_loader.dataset'].label
    for part, keys, dimensions in readers:
        defaults = {name: value.default for name, value in inspect.signature(builder_of(part)).parameters.items()}
        for name in keys:
            key = part.arguments.get(name, defaults.get(name))
            problem = batch_problem(batch, name, key)
            if problem is not None:
                raise RecipeError(f'{part.arguments_field}.{problem}, as the train loader collates the {dataset} '
                                  f'dataset; {part.label} reads it there at every batch. Set {name} to where the batch '
                                  f'holds it, or remove {part.field}')
        if not dimensions:
            continue
        key = part.arguments.get('input_key', defaults.get('input_key'))
        found = batch_get(batch, key)
        if not isinstance(found, torch.Tensor) or found.ndim < dimensions:
            shown = f'of shape {list(found.shape)}' if isinstance(found, torch.Tensor) else f'a {type(found).__name__}'
            raise RecipeError(f'{part.field}: {part.label} takes image batches of at least {dimensions} dimensions '
                              f'(N, C, H, W), but the input at input_key={key!r} is {shown} (the {dataset} dataset, '
                              f'collated); remove {part.field}, or train on images')
