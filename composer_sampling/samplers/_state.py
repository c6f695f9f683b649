"""Sampler checkpoints, refused when they belong to another sampler class or another order.

A state is ``{'version': 1, 'order_signature', 'epoch', 'sample_in_epoch', 'seed'}``
(:mod:`composer_sampling._checkpoint.envelope`); the order signature names the
sampler class that wrote it.
"""

from __future__ import annotations

from typing import Any

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._graph.signatures import signature_difference
from composer_sampling.protocols import HasOrderSignature

__all__ = ['SAMPLER_STATE', 'sampler_payload', 'sampler_state']

_SIGNATURE = 'order_signature'


def _sampler_class(state: dict[str, Any]) -> Any:
    """The class a state names: its order signature's ``sampler``."""
    signature = state.get(_SIGNATURE)
    return signature.get('sampler') if isinstance(signature, dict) else None


#: Versions of a sampler state: 1, the only one so far.
SAMPLER_STATE = VersionPolicy(current=1, kind_of=_sampler_class)


def sampler_state(sampler: HasOrderSignature, **values: Any) -> dict[str, Any]:
    """A checkpoint: the sampler's class, the version, its order signature and ``values``.

    Example:
        >>> from composer_sampling.samplers.resumable import ResumableDistributedSampler
        >>> state = sampler_state(ResumableDistributedSampler(5, 1, 0), epoch=2)
        >>> state['version'], state['order_signature']['sampler'], state['epoch']
        (1, 'ResumableDistributedSampler', 2)
    """
    payload = {_SIGNATURE: sampler.order_signature(), **values}
    return write_state(SAMPLER_STATE.current, payload)


def sampler_payload(sampler: HasOrderSignature, state: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """The payload of a checkpoint of ``sampler``'s class and order, with ``keys``; else raise.

    Raises ``TypeError``/``ValueError`` naming the first difference: not a dict,
    another sampler class, a version this code does not read, a missing key, or
    another order signature (dataset length, shuffle, ...).
    """
    name = type(sampler).__name__
    payload = read_state(state, name, SAMPLER_STATE)
    missing = [key for key in (_SIGNATURE, *keys) if key not in payload]
    if missing:
        raise ValueError(f'{name} state is missing {missing}; it holds {sorted(payload)}')
    saved = payload[_SIGNATURE]
    if not isinstance(saved, dict):
        raise TypeError(f'{name} state order_signature must be a dict, got {saved!r:.200}')
    difference = signature_difference(saved, sampler.order_signature())
    if difference:
        key, was, now = difference
        raise ValueError(f'{name} state was saved with {key}={was!r} but this sampler has {key}={now!r}; resuming '
                         'would skip or repeat samples')
    return payload
