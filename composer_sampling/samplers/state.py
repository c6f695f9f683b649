"""Versioned sampler checkpoints that refuse to load into a sampler of another order."""

from __future__ import annotations

from typing import Any

from composer_sampling.protocols import HasOrderSignature
from composer_sampling.signatures import signature_difference

__all__ = ['STATE_VERSION', 'check_state', 'sampler_state']

#: Bumped whenever the meaning of a sampler state changes.
STATE_VERSION = 1
_VERSION = 'version'
_SIGNATURE = 'order_signature'


def sampler_state(sampler: HasOrderSignature, **values: Any) -> dict[str, Any]:
    """A checkpoint: the version, the sampler's order signature and ``values``.

    Example:
        >>> from composer_sampling.samplers.resumable import ResumableDistributedSampler
        >>> sampler_state(ResumableDistributedSampler(5, 1, 0), epoch=2)['epoch']
        2
    """
    return {_VERSION: STATE_VERSION, _SIGNATURE: sampler.order_signature(), **values}


def check_state(sampler: HasOrderSignature, state: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """Validate a checkpoint written by :func:`sampler_state` for ``sampler`` and return it.

    Raises ``ValueError`` naming the first difference: a missing key, another
    version, or another order signature (dataset length, shuffle, ...).
    """
    name = type(sampler).__name__
    if not isinstance(state, dict):
        raise TypeError(f'{name}.load_state_dict expects a dict, got {type(state).__name__}')
    missing = [key for key in (_VERSION, _SIGNATURE, *keys) if key not in state]
    if missing:
        raise ValueError(f'{name} state is missing {missing}; it holds {sorted(state)}')
    if state[_VERSION] != STATE_VERSION:
        raise ValueError(f'{name} state has version {state[_VERSION]!r}; this version reads {STATE_VERSION}')
    saved = state[_SIGNATURE]
    if not isinstance(saved, dict):
        raise TypeError(f'{name} state order_signature must be a dict, got {saved!r:.200}')
    difference = signature_difference(saved, sampler.order_signature())
    if difference:
        key, was, now = difference
        raise ValueError(f'{name} state was saved with {key}={was!r} but this sampler has {key}={now!r}; resuming '
                         'would skip or repeat samples')
    return state
