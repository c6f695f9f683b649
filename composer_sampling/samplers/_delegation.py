"""Checkpoints of wrappers: a wrapper is stateful exactly when every node below it that orders indices is.

torchdata's ``StatefulDataLoader`` trusts a sampler that is an instance of its
``Stateful`` Protocol (it has ``state_dict`` and ``load_state_dict``) and then skips
its own fast-forward, so a wrapper must not claim a state that it cannot restore. A
wrapper (``NestedBatchSampler``, ``DistributedBatchAdapter``) only groups or passes
on, in order, the indices below it; the nodes below that do not (index samplers,
custom batch samplers) decide the order. The rule is plain: when all of those have
``state_dict``/``load_state_dict``, the wrapper's ``__init__`` gives the instance
both methods (:meth:`DelegatedState._offer_state`), which delegate to them;
otherwise the instance has neither. The class never changes; a copy or an unpickled
wrapper decides again over its own graph.

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

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._graph.walk import deciding
from composer_sampling.protocols import is_stateful

__all__ = ['STATE_METHODS', 'WRAPPER_STATE', 'DelegatedState', 'can_delegate_state']

#: Versions of a wrapper's state: 1, ``{'version': 1, 'states': [...]}``.
WRAPPER_STATE = VersionPolicy(current=1)
#: The methods that a wrapper offers exactly when it can restore a state.
STATE_METHODS = ('state_dict', 'load_state_dict')


class DelegatedState:
    """``state_dict``/``load_state_dict`` of a wrapper over ``batch_sampler``: the states of the order-deciding nodes
    below it, offered on the instance only when every one of them has a state."""

    __slots__ = ()  # a mixin: the wrapper keeps its own layout
    batch_sampler: Any
    requires_state = False  # a strict variant refuses a graph that cannot restore a state

    def _offer_state(self) -> None:
        """Give the instance ``state_dict`` and ``load_state_dict`` when it can delegate a state; else remove them."""
        offered = can_delegate_state(self.batch_sampler)
        if self.requires_state and not offered:
            name = type(self).__name__
            raise TypeError(
                f'{name} needs every sampler below it that decides the order to have state_dict and '
                f'load_state_dict, and {type(self.batch_sampler).__name__}\'s graph has one without; build '
                f'{name.removeprefix("Stateful")}, which is stateful exactly when it can be',
            )
        methods = (self._delegated_state_dict, self._load_delegated_state)
        for name, method in zip(STATE_METHODS, methods, strict=True):
            if offered:
                vars(self)[name] = method
            else:
                vars(self).pop(name, None)

    def __getstate__(self) -> dict[str, Any]:
        """The instance's attributes without the offered methods, which a copy decides again over its own graph."""
        return {key: value for key, value in vars(self).items() if key not in STATE_METHODS}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._offer_state()

    def _state_kind(self) -> str:
        """The wrapper's class name without the ``Stateful`` of its strict variant, for messages."""
        return type(self).__name__.removeprefix('Stateful')

    def _delegated_state_dict(self) -> dict[str, Any]:
        """The version and the state of every order-deciding node below, in walking order."""
        states = [node.state_dict() for node in deciding(self)]
        return write_state(WRAPPER_STATE.current, {'states': states})

    def _load_delegated_state(self, state: dict[str, Any]) -> None:
        """Give each order-deciding node below its state; they resume at their next pass."""
        kind = self._state_kind()
        payload = read_state(state, kind, WRAPPER_STATE)
        states = payload.get('states')
        if not isinstance(states, list):
            raise TypeError(f'{kind} state must hold a list "states", got {states!r:.200}')
        nodes = deciding(self)
        if len(nodes) != len(states):
            raise ValueError(
                f'{kind} state holds {len(states)} sampler states but the graph below has {len(nodes)} '
                f'samplers that decide the order ({", ".join(type(node).__name__ for node in nodes)})',
            )
        for node, node_state in zip(nodes, states, strict=True):
            node.load_state_dict(node_state)


def can_delegate_state(below: Any) -> bool:
    """Whether a wrapper over ``below`` can restore a state: every node of ``below``'s graph that decides the order
    has one (and there is at least one).

    Example:
        >>> from torch.utils.data import BatchSampler, RandomSampler
        >>> can_delegate_state(BatchSampler(RandomSampler(range(4)), 2, False))
        False
    """
    nodes = deciding(below)
    return bool(nodes) and all(is_stateful(node) for node in nodes)
