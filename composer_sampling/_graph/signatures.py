"""Order signatures: what fixes the global order a sampler draws, and the one check that compares them on resume.

A checkpoint carries the signature of the order it was taken in (dataset length,
shuffle, world size where the order depends on it, ...). Resuming into a sampler
whose signature differs would skip or repeat samples, so both a sampler's own
``load_state_dict`` and :class:`~composer_sampling.SamplerSync` refuse it, with
the difference found by :func:`signature_difference`.

Example:
    >>> signature_difference({'dataset_len': 10, 'shuffle': True}, {'dataset_len': 12, 'shuffle': True})
    ('dataset_len', 10, 12)
"""

from __future__ import annotations

from typing import Any

from torch.utils.data import DistributedSampler

from composer_sampling.protocols import HasOrderSignature, is_torch_own, supports

__all__ = ['order_signature', 'signature_difference']


def order_signature(node: Any) -> dict[str, Any] | None:
    """What fixes the global order a node draws, for refusing a mismatched resume; None if unknown.

    Example:
        >>> from torch.utils.data import DistributedSampler
        >>> order_signature(DistributedSampler(range(4), num_replicas=1, rank=0))
        {'sampler': 'DistributedSampler', 'dataset_len': 4, 'shuffle': True}
    """
    if supports(node, HasOrderSignature):
        return node.order_signature()
    if is_torch_own(node, DistributedSampler):
        return {'sampler': 'DistributedSampler', 'dataset_len': len(node.dataset), 'shuffle': node.shuffle}
    return None


def signature_difference(saved: dict[str, Any], current: dict[str, Any]) -> tuple[str, Any, Any] | None:
    """The first field (in name order) whose value differs, as ``(field, saved, current)``; ``None`` if they match.

    A field present on one side only differs (its other value is ``None``).

    Example:
        >>> signature_difference({'shuffle': True}, {'shuffle': True}) is None
        True
    """
    for key in sorted(set(saved) | set(current)):
        if saved.get(key) != current.get(key):
            return key, saved.get(key), current.get(key)
    return None
