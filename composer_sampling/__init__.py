"""Correct, reproducible and resumable data order for MosaicML Composer.

The public API is this module's ``__all__``, the subpackages ``samplers`` and
``callbacks`` (and their public modules), ``permutation``, ``positions``,
``protocols``, ``batching``, ``per_sample_rng``, ``ledger_format``, ``audit``, ``train``
and ``recipes``.
Modules whose names start with an underscore are internal: they may change in any
release. The public names are imported on first use, so that a part which does not
need Composer (the samplers, :func:`check_checkpoint`, recipe validation) does not
import it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from typing import TYPE_CHECKING, Any

try:
    __version__ = importlib.metadata.version('composer-sampling')
except importlib.metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = '0+unknown'

if TYPE_CHECKING:
    from composer_sampling._checkpoint.safe_load import CheckpointError, check_checkpoint
    from composer_sampling._graph.walk import iter_samplers
    from composer_sampling._proofs.plan import check_plan
    from composer_sampling._proofs.summary import summarize
    from composer_sampling.callbacks.sample_ledger import SampleLedger
    from composer_sampling.callbacks.sampler_sync import SamplerSync
    from composer_sampling.data_order import DataOrder
    from composer_sampling.errors import DataOrderError
    from composer_sampling.per_sample_rng import PerSampleRNG
    from composer_sampling.samplers import *  # noqa: F403 (every sampler SAMPLERS lists)
    from composer_sampling.samplers.distribute import distribute

from composer_sampling.samplers import SAMPLERS as _SAMPLERS  # the samplers' table: imports no sampler

#: Each public name and the module that defines it: every sampler ``composer_sampling.samplers`` lists, and the rest.
_MODULES = {
    **{name: f'composer_sampling.samplers.{module}' for name, module in _SAMPLERS.items()},
    'CheckpointError': 'composer_sampling._checkpoint.safe_load',
    'DataOrder': 'composer_sampling.data_order',
    'DataOrderError': 'composer_sampling.errors',
    'PerSampleRNG': 'composer_sampling.per_sample_rng',
    'SampleLedger': 'composer_sampling.callbacks.sample_ledger',
    'SamplerSync': 'composer_sampling.callbacks.sampler_sync',
    'check_checkpoint': 'composer_sampling._checkpoint.safe_load',
    'check_plan': 'composer_sampling._proofs.plan',
    'distribute': 'composer_sampling.samplers.distribute',
    'iter_samplers': 'composer_sampling._graph.walk',
    'summarize': 'composer_sampling._proofs.summary',
}

__all__ = [
    *_SAMPLERS,
    'CheckpointError',
    'DataOrder',
    'DataOrderError',
    'PerSampleRNG',
    'SampleLedger',
    'SamplerSync',
    '__version__',
    'check_checkpoint',
    'check_plan',
    'distribute',
    'iter_samplers',
    'summarize',
]


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first access (PEP 562)."""
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f'module {__name__!r} has no attribute {name!r}')
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *__all__])
