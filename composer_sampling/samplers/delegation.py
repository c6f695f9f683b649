"""Checkpoints of wrappers: a wrapper is stateful exactly when every node below it that orders indices is.

torchdata's ``StatefulDataLoader`` trusts a sampler with ``state_dict`` and skips its
own fast-forward, so a wrapper must not claim a state it cannot restore. A
wrapper (``NestedBatchSampler``, ``DistributedBatchAdapter``) only groups or passes
on, in order, the indices below it; what decides the order are the nodes below
that do not (index samplers, custom batch samplers). When all of those have
``state_dict``/``load_state_dict``, the wrapper becomes its stateful variant and
delegates to them; otherwise it has no ``state_dict`` at all.

Example:
    >>> from torch.utils.data import BatchSampler, RandomSampler
    >>> from composer_sampling import NestedBatchSampler, ResumableDistributedSampler
    >>> inner = BatchSampler(ResumableDistributedSampler(12, num_replicas=1, rank=0), 2, False)
    >>> hasattr(NestedBatchSampler(inner, 2), 'state_dict')
    True
    >>> hasattr(NestedBatchSampler(BatchSampler(RandomSampler(range(12)), 2, False), 2), 'state_dict')
    False
"""

from __future__ import annotations

from typing import Any

from composer_sampling.graph import iter_samplers, keeps_child_order
from composer_sampling.protocols import Stateful, supports

__all__ = ['DelegatedState', 'order_deciding_nodes', 'refresh_state_capability']

_VERSION = 1


def order_deciding_nodes(wrapper: Any) -> list[Any]:
    """The nodes below ``wrapper`` that decide the order: those that do not keep their children's order."""
    return [node for node in iter_samplers(wrapper) if node is not wrapper and not keeps_child_order(node)]


def _has_state(node: Any) -> bool:
    return supports(node, Stateful)


class DelegatedState:
    """``state_dict``/``load_state_dict`` of a wrapper: the states of the order-deciding nodes below it."""

    __slots__ = ()  # a mixin: the stateful variant keeps the wrapper's layout, so ``__class__`` can switch

    def state_dict(self) -> dict[str, Any]:
        """The version and the state of every order-deciding node below, in walking order."""
        return {'version': _VERSION, 'states': [node.state_dict() for node in order_deciding_nodes(self)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give each order-deciding node below its state; they resume at their next pass."""
        name = type(self).__name__
        if not isinstance(state, dict) or not isinstance(state.get('states'), list):
            raise TypeError(f'{name}.load_state_dict expects a dict with a list "states", got {state!r:.200}')
        if state.get('version') != _VERSION:
            raise ValueError(f'{name} state has version {state.get("version")!r}; this version reads {_VERSION}')
        nodes = order_deciding_nodes(self)
        if len(nodes) != len(state['states']):
            raise ValueError(
                f'{name} state holds {len(state["states"])} sampler states but the graph below has {len(nodes)} '
                f'samplers that decide the order ({", ".join(type(node).__name__ for node in nodes)})',
            )
        for node, node_state in zip(nodes, state['states'], strict=True):
            node.load_state_dict(node_state)


def refresh_state_capability(wrapper: Any, plain: type, stateful: type) -> None:
    """Make ``wrapper`` an instance of ``stateful`` if every order-deciding node below has a state, else ``plain``.

    Called when the wrapper is built and whenever the graph below it is replaced.
    """
    nodes = order_deciding_nodes(wrapper)
    wrapper.__class__ = stateful if nodes and all(_has_state(node) for node in nodes) else plain
