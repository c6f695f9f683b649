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

from composer_sampling._graph.walk import iter_samplers
from composer_sampling.permutation import derive_seed

__all__ = [
    'default_seed',
    'draws_from_generator',
    'epoch_generator_seed',
    'generator_nodes',
    'is_streaming_dataset',
]

#: Stream tag separating the seeds of samplers' generators from every other seed derived from the data seed.
_GENERATOR_STREAM = 0x6E7E2A
#: The seed of a ``torch.Generator()`` nobody seeded: a generator with it was not chosen by anybody.
UNSEEDED_GENERATOR = 67280421310721

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


def generator_nodes(obj: Any) -> Iterator[Any]:
    """The samplers below ``obj`` that draw their order from a ``generator`` attribute (torch's ``RandomSampler``).

    Example:
        >>> from torch.utils.data import BatchSampler, RandomSampler
        >>> [type(node).__name__ for node in generator_nodes(BatchSampler(RandomSampler(range(4)), 2, False))]
        ['RandomSampler']
    """
    return (node for node in iter_samplers(obj) if draws_from_generator(node))


def draws_from_generator(node: Any) -> bool:
    """Whether ``node`` draws its order from a ``generator`` attribute (None or a ``torch.Generator``) now.

    Example:
        >>> from torch.utils.data import RandomSampler, SequentialSampler
        >>> draws_from_generator(RandomSampler(range(4))), draws_from_generator(SequentialSampler(range(4)))
        (True, False)
    """
    import torch

    generator = getattr(node, 'generator', _MISSING)
    return generator is None or isinstance(generator, torch.Generator)


def epoch_generator_seed(seed: int, epoch: int) -> int:
    """The seed of the generator a generator-driven sampler draws epoch ``epoch`` from.

    Example:
        >>> epoch_generator_seed(5, 0) != epoch_generator_seed(5, 1)
        True
    """
    return derive_seed(derive_seed(seed, _GENERATOR_STREAM), epoch)
