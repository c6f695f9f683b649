"""Samplers, one per module, each a thin layer over the `permutation` and `positions` modules.

:data:`SAMPLERS` names each sampler and the module of this folder that defines it; the
samplers (and ``composer_sampling``'s top level, which exports every one of them) are
imported on first use. A new sampler is one line here. A sampler gets a name in
recipes only through the recipe runner's registry (:mod:`composer_sampling.recipes.registry`),
which holds the name, the options and the builder; docs/samplers.md lists what else
a new sampler touches.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter as DistributedBatchAdapter
    from composer_sampling.samplers.mixture import MixtureDistributedSampler as MixtureDistributedSampler
    from composer_sampling.samplers.nested import NestedBatchSampler as NestedBatchSampler
    from composer_sampling.samplers.resumable import ResumableDistributedSampler as ResumableDistributedSampler
    from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler as SubEpochDistributedSampler

#: Each sampler and the module of this folder that defines it.
SAMPLERS = {
    'DistributedBatchAdapter': 'batch_adapter',
    'MixtureDistributedSampler': 'mixture',
    'NestedBatchSampler': 'nested',
    'ResumableDistributedSampler': 'resumable',
    'SubEpochDistributedSampler': 'sub_epoch',
}

__all__ = [  # SAMPLERS' keys, written out for type checkers (tests/test_api_boundary.py holds them equal)
    'DistributedBatchAdapter',
    'MixtureDistributedSampler',
    'NestedBatchSampler',
    'ResumableDistributedSampler',
    'SubEpochDistributedSampler',
]


def __getattr__(name: str) -> Any:
    """Import a sampler from its module on first access (PEP 562)."""
    module = SAMPLERS.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(importlib.import_module(f'{__name__}.{module}'), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
