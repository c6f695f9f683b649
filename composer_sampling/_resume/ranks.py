"""Who this process is among the ranks, and how it hears from the others: what the checks that span ranks need.

The trainers know their ranks in their own ways (Composer's ``composer.utils.dist``,
Lightning's strategy); the resume decision and the seed check take a :class:`Ranks`
and never ask a trainer. :func:`torch_ranks` reads torch's process group, as a
Lightning run on several processes has it.

Example:
    >>> alone = torch_ranks()  # no process group in this process: one rank
    >>> alone.world_size, alone.rank, alone.all_gather('seed')
    (1, 0, ['seed'])
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

__all__ = ['Ranks', 'torch_ranks']


@dataclasses.dataclass(frozen=True)
class Ranks:
    """This process's rank of ``world_size``, and ``all_gather``: one picklable object of every rank, in rank order."""

    world_size: int
    rank: int
    all_gather: Callable[[Any], list[Any]]


def torch_ranks() -> Ranks:
    """The ranks of torch's default process group, or one rank alone when there is none."""
    import torch.distributed as torch_dist

    if not (torch_dist.is_available() and torch_dist.is_initialized()):
        return Ranks(1, 0, lambda value: [value])
    world_size = torch_dist.get_world_size()

    def gather(value: Any) -> list[Any]:
        gathered: list[Any] = [None] * world_size
        torch_dist.all_gather_object(gathered, value)
        return gathered

    return Ranks(world_size, torch_dist.get_rank(), gather)
