"""The sampler contract: what a sampler or dataset can do, with one Protocol for each capability.

A sampler of yours takes part by having the members of a Protocol; it subclasses nothing of ours. The package
asks :func:`supports`, not ``isinstance``: from Python 3.12 ``isinstance`` looks members up statically and misses
a wrapper that forwards them through ``__getattr__``, and it checks only that they exist.

Example:
    >>> from torch.utils.data import DistributedSampler
    >>> sampler = DistributedSampler(range(8), num_replicas=2, rank=0)
    >>> supports(sampler, EpochAware), supports(sampler, Offsettable)
    (True, False)
"""

from __future__ import annotations

import inspect
from typing import Any, Literal, Protocol, TypeGuard, runtime_checkable

from composer_sampling._validate import is_integer

__all__ = ['CAPABILITIES', 'EpochAware', 'EpochUsage', 'HasOrderSignature', 'Offsettable', 'OrderPreserving',
           'PassIndices', 'PassPositions', 'ReportsSources', 'SeedForwarding', 'Seeded', 'Sharded', 'Stateful',
           'SubEpochs', 'is_stateful', 'is_torch_own', 'supports']


@runtime_checkable
class EpochAware(Protocol):
    """Draws a new order each epoch: ``set_epoch(epoch)``, harmless when repeated with the same epoch."""
    def set_epoch(self, epoch: int) -> None: ...


@runtime_checkable
class Seeded(Protocol):
    """Holds the seed of its order in ``seed``, which may be ``None`` while it waits for the data seed."""
    seed: int | None


@runtime_checkable
class SeedForwarding(Protocol):
    """Has a ``seed`` that only forwards to the samplers below it (the class attribute ``forwards_seed = True``)."""
    forwards_seed: Literal[True]


@runtime_checkable
class Offsettable(Protocol):
    """Starts its next pass at a global sample offset into the epoch, for a resume without a spin."""
    def set_sample_in_epoch(self, sample_in_epoch: int) -> None: ...


@runtime_checkable
class Stateful(Protocol):
    """Saves and restores its place, as torchdata's ``StatefulDataLoader`` asks of a sampler."""
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


@runtime_checkable
class OrderPreserving(Protocol):
    """Only groups or forwards, in order, what the node below yields (the class attribute ``keeps_child_order``)."""
    keeps_child_order: Literal[True]


@runtime_checkable
class Sharded(Protocol):
    """Takes the share of rank ``rank`` of ``num_replicas`` ranks; both are ints."""
    num_replicas: int
    rank: int


@runtime_checkable
class EpochUsage(Protocol):
    """Says how one pass uses the data: ``epoch_usage() -> (dataset_len, samples trained over all ranks)``."""
    def epoch_usage(self) -> tuple[int, int]: ...


@runtime_checkable
class HasOrderSignature(Protocol):
    """Names what fixes its global order besides seed and epoch, so that a mismatched resume is refused."""
    def order_signature(self) -> dict[str, Any]: ...


@runtime_checkable
class SubEpochs(Protocol):
    """Splits one pass over the data into ``sub_epochs_per_epoch`` trainer epochs (an int)."""
    sub_epochs_per_epoch: int


@runtime_checkable
class ReportsSources(Protocol):
    """A mixture that reports, for each source, its size, what one epoch uses and trims, and its global steps."""
    def source_report(self) -> list[dict[str, int]]: ...


@runtime_checkable
class PassIndices(Protocol):
    """Gives the indices of its next pass as one array without consuming them (``plan`` reads it)."""
    def pass_indices(self) -> Any: ...


@runtime_checkable
class PassPositions(Protocol):
    """Says which global positions its next pass reads and maps positions to indices; ``plan`` maps the positions
    of every rank whose sampler has the same class, ``order_signature()``, ``seed`` and ``epoch`` in one call."""
    seed: int | None
    epoch: int
    def order_signature(self) -> dict[str, Any]: ...
    def pass_positions(self) -> Any: ...
    def indices_at(self, positions: Any) -> Any: ...


def _has(node: Any, rule: str, name: str) -> bool:
    if rule == 'exists':  # looked up statically first, so that a forwarded seed property is not run
        return inspect.getattr_static(node, name, _has) is not _has or hasattr(node, name)
    value = getattr(node, name, None)
    return callable(value) if rule == 'method' else value is True if rule == 'flag' else is_integer(value)


#: Each capability and the rule that each of its members keeps: a method must be callable, a flag must be True,
#: an int must hold an int (not a bool), and any other member must exist.
_CHECKS: dict[type, tuple[tuple[str, str], ...]] = {
    EpochAware: (('method', 'set_epoch'),), Seeded: (('exists', 'seed'),), SeedForwarding: (('flag', 'forwards_seed'),),
    Offsettable: (('method', 'set_sample_in_epoch'),),
    Stateful: (('method', 'state_dict'), ('method', 'load_state_dict')),
    OrderPreserving: (('flag', 'keeps_child_order'),), Sharded: (('int', 'num_replicas'), ('int', 'rank')),
    EpochUsage: (('method', 'epoch_usage'),), HasOrderSignature: (('method', 'order_signature'),),
    SubEpochs: (('int', 'sub_epochs_per_epoch'),), ReportsSources: (('method', 'source_report'),),
    PassIndices: (('method', 'pass_indices'),),
    PassPositions: (('exists', 'seed'), ('exists', 'epoch'), ('method', 'order_signature'),
                    ('method', 'pass_positions'), ('method', 'indices_at')),
}
CAPABILITIES: tuple[type, ...] = tuple(_CHECKS)


def supports(node: Any, protocol: type) -> bool:
    """Whether ``node`` has every member of ``protocol``, looked up as attribute access does."""
    if protocol not in _CHECKS:
        raise TypeError(f'supports() knows the Protocols of composer_sampling.protocols '
                        f'({", ".join(p.__name__ for p in CAPABILITIES)}), got {protocol!r}')
    return all(_has(node, rule, name) for rule, name in _CHECKS[protocol])


def is_stateful(node: object) -> TypeGuard[Stateful]:
    """:func:`supports` ``(node, Stateful)``, narrowing the type: ``if is_stateful(node): node.state_dict()``."""
    return supports(node, Stateful)


def is_torch_own(node: Any, torch_class: type) -> bool:
    """Whether ``node`` is an instance of torch's ``torch_class`` itself, not of a subclass that may lose its order."""
    return type(node) is torch_class
