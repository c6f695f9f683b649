"""Batch math: global batch, world size, device batch, microbatch and accumulation steps.

In Composer the dataloader yields the whole per-device batch and
``device_train_microbatch_size`` splits it, so gradient accumulation steps are
``device batch / microbatch`` and the global batch is ``device batch x world size``.
With replication ``R`` (groups of ``R`` ranks reading the same data, for tensor or
sequence parallelism) the global batch counts distinct samples:
``device batch x world size / R``.

Example:
    >>> batch_sizes(256, world_size=2, accumulation_steps=4)
    BatchSizes(world_size=2, global_batch=256, device_batch=128, microbatch=32, accumulation_steps=4, replication=1)
"""

from __future__ import annotations

from dataclasses import dataclass

from composer_sampling._validate import replication_problem

__all__ = ['ARGUMENT_NAMES', 'BatchSizeError', 'BatchSizes', 'batch_sizes']


#: How :class:`BatchSizeError` names each quantity by default: the arguments of :func:`batch_sizes`.
ARGUMENT_NAMES = {name: name for name in
                  ('global_batch', 'world_size', 'microbatch', 'accumulation_steps', 'replication')}


class BatchSizeError(ValueError):
    """A batch setting that does not divide, naming the argument; :meth:`render` names it otherwise.

    Example:
        >>> error = BatchSizeError('{global_batch} must be at least 1, got 0')
        >>> str(error)
        'global_batch must be at least 1, got 0'
        >>> error.render({'global_batch': 'global_train_batch_size'})
        'global_train_batch_size must be at least 1, got 0'
    """

    def __init__(self, template: str) -> None:
        self.template = template
        super().__init__(self.render(ARGUMENT_NAMES))

    def render(self, names: dict[str, str]) -> str:
        """The message with each quantity called by ``names`` (a recipe passes its field names)."""
        return self.template.format_map({**ARGUMENT_NAMES, **names})


@dataclass(frozen=True)
class BatchSizes:
    """Every batch size of a run, each an exact division of the one above."""

    world_size: int
    global_batch: int
    device_batch: int
    microbatch: int
    accumulation_steps: int
    replication: int = 1

    @property
    def data_parallel(self) -> int:
        """Ranks that read different data: ``world_size / replication``."""
        return self.world_size // self.replication


def _nearby_multiples(value: int, factor: int) -> str:
    below = value // factor * factor
    above = below + factor
    return f'{below} or {above}' if below > 0 else f'{above}'


def batch_sizes(
    global_batch: int,
    world_size: int,
    microbatch: int | None = None,
    accumulation_steps: int | None = None,
    replication: int = 1,
) -> BatchSizes:
    """Derive device batch, microbatch and accumulation steps; every division must be exact.

    Give ``microbatch``, ``accumulation_steps``, both (they must agree) or neither
    (no accumulation). A :class:`BatchSizeError` names the argument that does not
    divide.

    Example:
        >>> batch_sizes(64, world_size=1, microbatch=16).accumulation_steps
        4
    """
    for field, value in (
        ('global_batch', global_batch),
        ('world_size', world_size),
        ('microbatch', microbatch),
        ('accumulation_steps', accumulation_steps),
        ('replication', replication),
    ):
        if value is not None and value < 1:
            raise BatchSizeError(f'{{{field}}} must be at least 1, got {value}')
    problem = replication_problem(replication, world_size, name='{replication}')
    if problem is not None:
        raise BatchSizeError(problem)
    ranks = world_size // replication
    ranks_text = f'the world size {world_size}' if replication == 1 else (
        f'the {ranks} data-parallel ranks (world size {world_size} / replication {replication})')
    if global_batch % ranks:
        raise BatchSizeError(
            f'{{global_batch}}={global_batch} is not divisible by {ranks_text}; '
            f'use a multiple of {ranks}, such as {_nearby_multiples(global_batch, ranks)}',
        )
    device_batch = global_batch // ranks
    per = f'world size {world_size}' if replication == 1 else f'{ranks} data-parallel ranks'
    if microbatch is not None and device_batch % microbatch:
        raise BatchSizeError(
            f'{{microbatch}}={microbatch} does not divide the device batch {device_batch} '
            f'({{global_batch}}={global_batch} / {per}); use a divisor of {device_batch}',
        )
    if accumulation_steps is not None and device_batch % accumulation_steps:
        raise BatchSizeError(
            f'{{accumulation_steps}}={accumulation_steps} does not divide the device batch {device_batch} '
            f'({{global_batch}}={global_batch} / {per}); use a divisor of {device_batch}',
        )
    if microbatch is not None and accumulation_steps is not None and device_batch // microbatch != accumulation_steps:
        raise BatchSizeError(
            f'{{accumulation_steps}}={accumulation_steps} disagrees with {{microbatch}}='
            f'{microbatch}: the device batch {device_batch} / {microbatch} gives {device_batch // microbatch} '
            'steps; give only one of the two',
        )
    if microbatch is None:
        microbatch = device_batch // (accumulation_steps or 1)
    return BatchSizes(
        world_size=world_size,
        global_batch=global_batch,
        device_batch=device_batch,
        microbatch=microbatch,
        accumulation_steps=device_batch // microbatch,
        replication=replication,
    )
