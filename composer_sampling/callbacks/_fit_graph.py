"""The train dataloader's graph as one walk found it at fit start, shared by SamplerSync and SampleLedger.

Both callbacks ask :func:`fit_graph` at ``FIT_START``; whichever asks first takes the
:class:`~composer_sampling._graph.snapshot.GraphSnapshot`, the other gets the same one. A
snapshot belongs to one fit start: a new train dataloader, a new timestamp (a later
fit) or :func:`forget_fit_graph` (at fit end) takes a new one.
"""

from __future__ import annotations

import weakref
from typing import Any

from composer.core import State

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot

__all__ = ['fit_graph', 'forget_fit_graph']

#: A trainer's state -> (the train dataloader walked, the timestamp it was walked at, the snapshot).
_GRAPHS: weakref.WeakKeyDictionary[State, tuple[Any, Any, GraphSnapshot]] = weakref.WeakKeyDictionary()


def fit_graph(state: State) -> GraphSnapshot:
    """The snapshot of ``state.train_dataloader`` for this fit start, taken once."""
    loader = state.train_dataloader
    entry = _GRAPHS.get(state)
    if entry is not None and entry[0] is loader and entry[1] is state.timestamp:
        return entry[2]
    graph = take_snapshot(loader)
    _GRAPHS[state] = (loader, state.timestamp, graph)
    return graph


def forget_fit_graph(state: State) -> None:
    """Drop this trainer's snapshot: the next fit start walks the graph again."""
    _GRAPHS.pop(state, None)
