"""Which objects carry a data seed, and what their class would seed them with if nobody chose.

``SamplerSync`` re-seeds every sampler (and streaming dataset) with one data seed.
Overwriting a class's default (torch's ``DistributedSampler`` seeds with 0, so does
Composer's ``dist.get_sampler``; streaming's ``StreamingDataset`` with 9176) is the
point; overwriting a seed somebody chose deserves a warning. The default is read
from the class's signature.

Example:
    >>> from torch.utils.data import DistributedSampler
    >>> default_seed(DistributedSampler(range(4), num_replicas=1, rank=0, seed=42), 'seed')
    0
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

from composer_sampling.graph import iter_samplers
from composer_sampling.protocols import Seeded, SeedForwarding, supports

__all__ = ['default_seed', 'is_streaming_dataset', 'seeded_nodes']

_MISSING = object()


def default_seed(node: Any, attribute: str) -> Any:
    """The default of the ``attribute`` parameter of ``type(node)``'s constructor; a sentinel when it has none."""
    try:
        parameter = inspect.signature(type(node)).parameters.get(attribute)
    except (TypeError, ValueError):
        return _MISSING
    if parameter is None or parameter.default is inspect.Parameter.empty:
        return _MISSING
    return parameter.default


def seeded_nodes(obj: Any) -> Iterator[Any]:
    """The samplers below ``obj`` with a ``seed`` of their own (not one forwarded to the samplers below them)."""
    for node in iter_samplers(obj):
        if supports(node, Seeded) and not supports(node, SeedForwarding):
            yield node


def is_streaming_dataset(dataset: Any) -> bool:
    """Whether ``dataset`` is a mosaicml-streaming ``StreamingDataset`` (checked without importing streaming).

    Example:
        >>> is_streaming_dataset(range(3))
        False
    """
    return any(
        cls.__name__ == 'StreamingDataset' and cls.__module__.split('.')[0] == 'streaming'
        for cls in type(dataset).__mro__
    )
