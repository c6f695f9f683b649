"""Checkpoints of wrappers: a wrapper is stateful exactly when every node below it that orders indices is.

torchdata's ``StatefulDataLoader`` trusts a sampler with ``state_dict`` and skips its
own fast-forward, so a wrapper must not claim a state it cannot restore. A
wrapper (``NestedBatchSampler``, ``DistributedBatchAdapter``) only groups or passes
on, in order, the indices below it; what decides the order are the nodes below
that do not (index samplers, custom batch samplers). When all of those have
``state_dict``/``load_state_dict``, the wrapper is built as its stateful variant
and delegates to them; otherwise it has no ``state_dict`` at all. The choice is
made once, when the wrapper is constructed (:func:`wrapper_class`, called from the
wrapper's ``__new__``); no object ever changes its class afterwards.

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

__all__ = ['WRAPPER_STATE', 'DelegatedState', 'can_delegate_state', 'wrapper_class']

#: Versions of a wrapper's state: 1, ``{'version': 1, 'states': [...]}``.
WRAPPER_STATE = VersionPolicy(current=1)


class DelegatedState:
    """``state_dict``/``load_state_dict`` of a wrapper: the states of the order-deciding nodes below it."""

    __slots__ = ()  # a mixin: the stateful variant keeps the wrapper's layout

    def _state_kind(self) -> str:
        """The wrapper's class name without the ``Stateful`` of its stateful variant, for messages."""
        return type(self).__name__.removeprefix('Stateful')

    def state_dict(self) -> dict[str, Any]:
        """The version and the state of every order-deciding node below, in walking order."""
        states = [node.state_dict() for node in deciding(self)]
        return write_state(WRAPPER_STATE.current, {'states': states})

    def load_state_dict(self, state: dict[str, Any]) -> None:
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


def wrapper_class(cls: type, plain: type, stateful: type, args: tuple[Any, ...], kwargs: dict[str, Any]) -> type:
    """The class a wrapper's ``__new__`` builds: ``stateful`` when it can delegate a state, else ``plain``.

    ``args``/``kwargs`` are the constructor's; its first argument (or ``batch_sampler=``) is
    the graph below. Without one (``pickle`` and ``copy`` call ``cls.__new__(cls)``) the
    class is ``cls``. A subclass of ``plain`` that is not ours is built as itself. Asking
    for ``stateful`` over a graph that cannot restore a state is refused.
    """
    below = args[0] if args else kwargs.get('batch_sampler', _NOT_GIVEN)
    if below is _NOT_GIVEN or cls not in (plain, stateful):
        return cls
    if can_delegate_state(below):
        return stateful
    if cls is stateful:
        raise TypeError(
            f'{stateful.__name__} needs every sampler below it that decides the order to have state_dict and '
            f'load_state_dict, and {type(below).__name__}\'s graph has one without; build {plain.__name__}, which '
            'is stateful exactly when it can be',
        )
    return plain


_NOT_GIVEN = object()
