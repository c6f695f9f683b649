"""The sampler contract: what a sampler (or dataset) can do, one Protocol a capability.

A third-party sampler takes part in everything ``composer-sampling`` does by
having the members below; it never needs to subclass anything of ours. Each
capability is written once, as a ``runtime_checkable`` Protocol: its methods and
annotated attributes *are* the capability, and :func:`supports` reads them from
the Protocol class itself (no table restates them). The rules follow the
annotations:

* a method must be callable;
* an attribute annotated ``Literal[True]`` (a class flag such as
  ``keeps_child_order``) must be ``True``;
* an attribute annotated ``int`` must hold an ``int`` (not a bool);
* any other attribute (``seed: int | None``: a sampler may be waiting for its seed)
  must exist.

``isinstance(node, EpochAware)`` reads well in your own code, but the package asks
:func:`supports` (or the ``TypeGuard`` helpers such as :func:`is_stateful`, which
let mypy narrow the type):

* ``isinstance`` against a Protocol looks members up statically from Python 3.12
  (``inspect.getattr_static``), so a wrapper that forwards attributes through
  ``__getattr__`` matches on 3.10 and 3.11 and stops matching on 3.12;
* it checks only that a member exists, not that a method is callable or that a
  flag is set.

Example:
    >>> from torch.utils.data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=0)
    >>> supports(sampler, EpochAware), supports(sampler, Offsettable)
    (True, False)
    >>> members(Sharded)
    (('num_replicas', 'int'), ('rank', 'int'))
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Literal, Protocol, TypeGuard, get_args, get_origin, get_type_hints, runtime_checkable

from composer_sampling._validate import is_integer

__all__ = [
    'CAPABILITIES',
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
    'capabilities',
    'has_order_signature',
    'has_pass_indices',
    'has_pass_positions',
    'has_sub_epochs',
    'is_epoch_aware',
    'is_offsettable',
    'is_order_preserving',
    'is_seed_forwarding',
    'is_seeded',
    'is_sharded',
    'is_stateful',
    'is_torch_own',
    'members',
    'reports_sources',
    'supports',
]


@runtime_checkable
class EpochAware(Protocol):
    """Draws a new order each epoch: ``set_epoch(epoch)``, harmless when repeated with the same epoch."""

    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class Seeded(Protocol):
    """Holds the seed of its order in ``seed``; :class:`~composer_sampling.SamplerSync` sets it to the data seed.

    ``None`` is a seed still to be set (a wrapper forwarding to samplers below that have none yet).
    """

    seed: int | None


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

    Torch's own ``BatchSampler`` is treated as one without the attribute
    (:func:`composer_sampling._graph.grouping.keeps_child_order`, through :func:`is_torch_own`).
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

    The epoch's order is fixed by the class, ``order_signature()``, ``seed`` and
    ``epoch``: ``plan`` concatenates the positions of every rank whose sampler has
    the same four and maps them in one call, so all four are part of this contract.
    """

    seed: int | None
    epoch: int

    def order_signature(self) -> dict[str, Any]: ...

    def pass_positions(self) -> Any: ...

    def indices_at(self, positions: Any) -> Any: ...


@runtime_checkable
class ShuffleSeeded(Protocol):
    """An iterable dataset that shuffles with ``shuffle_seed`` (mosaicml-streaming's ``StreamingDataset``)."""

    shuffle_seed: int | None




#: Every capability, in the order the docs list them.
CAPABILITIES: tuple[type, ...] = (
    EpochAware, Seeded, SeedForwarding, Offsettable, Stateful, OrderPreserving, Sharded, EpochUsage,
    HasOrderSignature, SubEpochs, ReportsSources, PassIndices, PassPositions, ShuffleSeeded,
)
_MISSING = object()


@functools.cache
def members(protocol: type) -> tuple[tuple[str, str], ...]:
    """What ``protocol`` asks for, read from the class: ``(name, rule)`` with rule ``method``, ``True``, ``int``
    or ``exists``, attributes in declaration order, then methods in name order.

    Example:
        >>> members(Stateful)
        (('load_state_dict', 'method'), ('state_dict', 'method'))
        >>> members(OrderPreserving), members(Seeded)
        ((('keeps_child_order', 'True'),), (('seed', 'exists'),))
    """
    if protocol not in CAPABILITIES:
        raise TypeError(f'supports() knows the Protocols of composer_sampling.protocols '
                        f'({", ".join(p.__name__ for p in CAPABILITIES)}), got {protocol!r}')
    hints = get_type_hints(protocol)
    data = [(name, _rule(hints[name])) for name in inspect.get_annotations(protocol)]
    methods = sorted(name for name, value in vars(protocol).items()
                     if inspect.isfunction(value) and not name.startswith('_'))
    return (*data, *((name, 'method') for name in methods))


def _rule(hint: Any) -> str:
    if get_origin(hint) is Literal and get_args(hint) == (True,):
        return 'True'
    return 'int' if hint is int else 'exists'


def _has(node: Any, name: str, rule: str) -> bool:
    if rule == 'exists':  # looked up statically first: a property (a wrapper's forwarded seed) is not run
        return inspect.getattr_static(node, name, _MISSING) is not _MISSING or hasattr(node, name)
    value = getattr(node, name, _MISSING)
    if rule == 'method':
        return callable(value)
    if rule == 'True':
        return value is True
    return is_integer(value)


def supports(node: Any, protocol: type) -> bool:
    """Whether ``node`` has what ``protocol`` asks for (:func:`members`), looked up as attribute access does.

    Example:
        >>> class Forwarding:
        ...     def __init__(self, inner): self.inner = inner
        ...     def __getattr__(self, name): return getattr(self.inner, name)
        >>> from torch.utils.data import DistributedSampler
        >>> supports(Forwarding(DistributedSampler(range(4), 1, 0)), EpochAware)
        True
    """
    return all(_has(node, name, rule) for name, rule in members(protocol))


def capabilities(node: Any) -> frozenset[type]:
    """Every capability of :data:`CAPABILITIES` that ``node`` has.

    Example:
        >>> from torch.utils.data import SequentialSampler
        >>> capabilities(SequentialSampler(range(3)))
        frozenset()
    """
    return frozenset(protocol for protocol in CAPABILITIES if supports(node, protocol))


def is_torch_own(node: Any, torch_class: type) -> bool:
    """Whether ``node`` is an instance of torch's ``torch_class`` itself, not of a subclass.

    A few guarantees are torch's behaviour rather than members a class declares:
    torch's ``BatchSampler`` groups its sampler's indices in order, its
    ``DistributedSampler`` orders positions independently of the world size, its
    ``SequentialSampler`` yields the same pass every time. A subclass may override
    ``__iter__`` and lose them, so only the class itself counts; every such case in
    the package asks this one predicate.

    Example:
        >>> from torch.utils.data import BatchSampler, SequentialSampler
        >>> class Mine(BatchSampler): pass
        >>> inner = SequentialSampler(range(4))
        >>> is_torch_own(BatchSampler(inner, 2, False), BatchSampler), is_torch_own(Mine(inner, 2, False), BatchSampler)
        (True, False)
    """
    return type(node) is torch_class


# TypeGuard helpers: ``if is_stateful(node): node.state_dict()`` type-checks.

def is_epoch_aware(node: object) -> TypeGuard[EpochAware]:
    """:func:`supports` ``(node, EpochAware)``, narrowing the type."""
    return supports(node, EpochAware)


def is_seeded(node: object) -> TypeGuard[Seeded]:
    """:func:`supports` ``(node, Seeded)``, narrowing the type."""
    return supports(node, Seeded)


def is_seed_forwarding(node: object) -> TypeGuard[SeedForwarding]:
    """:func:`supports` ``(node, SeedForwarding)``, narrowing the type."""
    return supports(node, SeedForwarding)


def is_offsettable(node: object) -> TypeGuard[Offsettable]:
    """:func:`supports` ``(node, Offsettable)``, narrowing the type."""
    return supports(node, Offsettable)


def is_stateful(node: object) -> TypeGuard[Stateful]:
    """:func:`supports` ``(node, Stateful)``, narrowing the type.

    Example:
        >>> from composer_sampling import ResumableDistributedSampler
        >>> is_stateful(ResumableDistributedSampler(4, 1, 0)), is_stateful(range(4))
        (True, False)
    """
    return supports(node, Stateful)


def is_order_preserving(node: object) -> TypeGuard[OrderPreserving]:
    """:func:`supports` ``(node, OrderPreserving)``, narrowing the type."""
    return supports(node, OrderPreserving)


def is_sharded(node: object) -> TypeGuard[Sharded]:
    """:func:`supports` ``(node, Sharded)``, narrowing the type."""
    return supports(node, Sharded)


def has_order_signature(node: object) -> TypeGuard[HasOrderSignature]:
    """:func:`supports` ``(node, HasOrderSignature)``, narrowing the type."""
    return supports(node, HasOrderSignature)


def has_sub_epochs(node: object) -> TypeGuard[SubEpochs]:
    """:func:`supports` ``(node, SubEpochs)``, narrowing the type."""
    return supports(node, SubEpochs)


def reports_sources(node: object) -> TypeGuard[ReportsSources]:
    """:func:`supports` ``(node, ReportsSources)``, narrowing the type."""
    return supports(node, ReportsSources)


def has_pass_indices(node: object) -> TypeGuard[PassIndices]:
    """:func:`supports` ``(node, PassIndices)``, narrowing the type."""
    return supports(node, PassIndices)


def has_pass_positions(node: object) -> TypeGuard[PassPositions]:
    """:func:`supports` ``(node, PassPositions)``, narrowing the type."""
    return supports(node, PassPositions)
