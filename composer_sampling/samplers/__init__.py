"""Samplers, one per module, each a thin layer over the `permutation` and `positions` modules.

:data:`SAMPLERS` names each sampler and the module of this folder that defines it; the
samplers (and ``composer_sampling``'s top level, which exports every one of them) are
imported on first use. A new sampler is one line here. A module that carries a
``RECIPE`` (plain data: the name recipes give it, its builder, a line, its options)
gives its sampler that name in recipes; the recipe runner reads it from here.
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
