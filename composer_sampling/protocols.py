"""The sampler contract: what a sampler (or dataset) can do, one Protocol a capability.

A third-party sampler takes part in everything ``composer-sampling`` does by
having the members below; it never needs to subclass anything of ours. Each
Protocol is ``runtime_checkable``, so ``isinstance(node, EpochAware)`` reads well
in your own code, but the package itself asks :func:`supports`:

* ``isinstance`` against a Protocol looks members up statically from Python 3.12
  (``inspect.getattr_static``), so a wrapper that forwards attributes through
  ``__getattr__`` matches on 3.10 and 3.11 and stops matching on 3.12;
* it checks only that a member exists, not that a method is callable or that a
  flag is set.

:func:`supports` reads each member with ``getattr``, as attribute access does, so
a forwarding wrapper is recognised on every Python version, a method must be
callable, and a flag (``keeps_child_order``, ``forwards_seed``) must be ``True``.

Example:
    >>> from torch.utils.data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=0)
    >>> supports(sampler, EpochAware), supports(sampler, Offsettable)
    (True, False)
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, runtime_checkable

__all__ = [
    'EpochAware',
    'EpochUsage',
    'HasOrderSignature',
    'Offsettable',
    'OrderPreserving',
    'PassIndices',
    'PassPositions',
    'ReportsSources',
    'SeedForwarding',
    'Seeded',
    'Sharded',
    'ShuffleSeeded',
    'Stateful',
    'SubEpochs',
    'supports',
]


@runtime_checkable
class EpochAware(Protocol):
    """Draws a new order each epoch: ``set_epoch(epoch)``, harmless when repeated with the same epoch."""

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class Seeded(Protocol):
    """Holds the seed of its order in ``seed``; :class:`~composer_sampling.SamplerSync` sets it to the data seed."""

    seed: int


@runtime_checkable
class SeedForwarding(Protocol):
    """Has a ``seed`` that only forwards to the samplers below it (class attribute ``forwards_seed = True``)."""

    forwards_seed: Literal[True]


@runtime_checkable
class Offsettable(Protocol):
    """Starts its next pass at a global sample offset into the epoch (used for resume without a spin)."""

    def set_sample_in_epoch(self, sample_in_epoch: int) -> None: ...


@runtime_checkable
class Stateful(Protocol):
    """Saves and restores its place, as torchdata's ``StatefulDataLoader`` asks of a sampler."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@runtime_checkable
class OrderPreserving(Protocol):
    """Only groups or forwards, in order, what the node below yields (class attribute ``keeps_child_order = True``).

    Torch's own ``BatchSampler`` is treated as one without the attribute.
    """

    keeps_child_order: Literal[True]


@runtime_checkable
class Sharded(Protocol):
    """Takes this rank's share of the data: ``num_replicas`` ranks, this one is ``rank``."""

    num_replicas: int
    rank: int


@runtime_checkable
class EpochUsage(Protocol):
    """Says how one pass uses the data: ``epoch_usage() -> (dataset_len, samples trained over all ranks)``."""

    def epoch_usage(self) -> tuple[int, int]: ...


@runtime_checkable
class HasOrderSignature(Protocol):
    """Names what fixes its global order besides seed and epoch, for refusing a mismatched resume."""

    def order_signature(self) -> dict[str, Any]: ...


@runtime_checkable
class SubEpochs(Protocol):
    """Splits one pass over the data into ``sub_epochs_per_epoch`` trainer epochs."""

    sub_epochs_per_epoch: int


@runtime_checkable
class ReportsSources(Protocol):
    """A mixture that reports, per source, its size, what one epoch uses and trims, and its global steps."""

    def source_report(self) -> list[dict[str, int]]: ...


@runtime_checkable
class PassIndices(Protocol):
    """Gives the indices its next pass yields as one array, consuming nothing (``plan`` reads it)."""

    def pass_indices(self) -> Any: ...


@runtime_checkable
class PassPositions(Protocol):
    """Says which global positions its next pass reads and maps any positions of the epoch's order to indices.

    ``plan`` concatenates the positions of every rank whose sampler draws the same
    order (same order signature, seed and epoch) and maps them in one call.
    """

    def pass_positions(self) -> Any: ...

    def indices_at(self, positions: Any) -> Any: ...


@runtime_checkable
class ShuffleSeeded(Protocol):
    """An iterable dataset that shuffles with ``shuffle_seed`` (mosaicml-streaming's ``StreamingDataset``)."""

    shuffle_seed: int


#: Members each Protocol asks for: a method must be callable, a flag must be True, data must exist.
_METHODS = {
    EpochAware: ('set_epoch',),
    Offsettable: ('set_sample_in_epoch',),
    Stateful: ('state_dict', 'load_state_dict'),
    EpochUsage: ('epoch_usage',),
    HasOrderSignature: ('order_signature',),
    ReportsSources: ('source_report',),
    PassIndices: ('pass_indices',),
    PassPositions: ('pass_positions', 'indices_at'),
}
_FLAGS = {SeedForwarding: 'forwards_seed', OrderPreserving: 'keeps_child_order'}
_DATA = {Seeded: ('seed',), Sharded: ('num_replicas', 'rank'), SubEpochs: ('sub_epochs_per_epoch',),
         ShuffleSeeded: ('shuffle_seed',)}
_MISSING = object()


def supports(node: Any, protocol: type) -> bool:
    """Whether ``node`` has what ``protocol`` asks for, looked up as attribute access does on every Python.

    Integer data members (``rank``, ``sub_epochs_per_epoch``, ...) must hold an
    ``int`` (not a bool); ``seed`` and ``shuffle_seed`` may hold anything, since a
    sampler may be waiting for its seed.

    Example:
        >>> class Forwarding:
        ...     def __init__(self, inner): self.inner = inner
        ...     def __getattr__(self, name): return getattr(self.inner, name)
        >>> from torch.utils.data import DistributedSampler
        >>> supports(Forwarding(DistributedSampler(range(4), 1, 0)), EpochAware)
        True
    """
    if protocol in _METHODS:
        return all(callable(getattr(node, name, None)) for name in _METHODS[protocol])
    if protocol in _FLAGS:
        return getattr(node, _FLAGS[protocol], False) is True
    if protocol in _DATA:
        values = [getattr(node, name, _MISSING) for name in _DATA[protocol]]
        if protocol in (Seeded, ShuffleSeeded):
            return values[0] is not _MISSING
        return all(isinstance(value, int) and not isinstance(value, bool) for value in values)
    raise TypeError(f'supports() knows the Protocols of composer_sampling.protocols, got {protocol!r}')
