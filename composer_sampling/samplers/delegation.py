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

from composer_sampling.checkpoint_envelope import VersionPolicy, read_state, write_state
from composer_sampling.graph import iter_samplers, keeps_child_order
from composer_sampling.protocols import Stateful, supports

__all__ = ['WRAPPER_STATE', 'DelegatedState', 'order_deciding_nodes', 'refresh_state_capability']

#: Versions of a wrapper's state: 2 in the envelope, 1 flat (``{'version': 1, 'states': [...]}``).
WRAPPER_STATE = VersionPolicy(current=2, flat=(1,))


def order_deciding_nodes(wrapper: Any) -> list[Any]:
    """The nodes below ``wrapper`` that decide the order: those that do not keep their children's order."""
    return [node for node in iter_samplers(wrapper) if node is not wrapper and not keeps_child_order(node)]


def _has_state(node: Any) -> bool:
    return supports(node, Stateful)


class DelegatedState:
    """``state_dict``/``load_state_dict`` of a wrapper: the states of the order-deciding nodes below it."""

    __slots__ = ()  # a mixin: the stateful variant keeps the wrapper's layout, so ``__class__`` can switch

    def _state_kind(self) -> str:
        """The wrapper's class name without the ``Stateful`` of its stateful variant: how it became stateful is no
        part of its state."""
        return type(self).__name__.removeprefix('Stateful')

    def state_dict(self) -> dict[str, Any]:
        """The state of every order-deciding node below, in walking order, in the envelope."""
        states = [node.state_dict() for node in order_deciding_nodes(self)]
        return write_state(self._state_kind(), WRAPPER_STATE.current, {'states': states})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Give each order-deciding node below its state; they resume at their next pass."""
        kind = self._state_kind()
        payload = read_state(state, kind, WRAPPER_STATE)
        states = payload.get('states')
        if not isinstance(states, list):
            raise TypeError(f'{kind} state must hold a list "states", got {states!r:.200}')
        nodes = order_deciding_nodes(self)
        if len(nodes) != len(states):
            raise ValueError(
                f'{kind} state holds {len(states)} sampler states but the graph below has {len(nodes)} '
                f'samplers that decide the order ({", ".join(type(node).__name__ for node in nodes)})',
            )
        for node, node_state in zip(nodes, states, strict=True):
            node.load_state_dict(node_state)


def refresh_state_capability(wrapper: Any, plain: type, stateful: type) -> None:
    """Make ``wrapper`` an instance of ``stateful`` if every order-deciding node below has a state, else ``plain``.

    Called when the wrapper is built and whenever the graph below it is replaced.
    """
    nodes = order_deciding_nodes(wrapper)
    wrapper.__class__ = stateful if nodes and all(_has_state(node) for node in nodes) else plain
