"""The train dataloader's graph as one walk found it at fit start, shared by the trainer's SamplerSync and SampleLedger.

Both callbacks ask :func:`fit_graph` at ``FIT_START``; whichever asks first takes the
:class:`~composer_sampling._graph.snapshot.GraphSnapshot`, the other gets the same one.
The snapshot is kept by the first of the trainer's callbacks that can keep one (its
:class:`FitGraph`), so it lives and dies with that trainer's callbacks; nothing is kept
at module level. A snapshot belongs to one fit start: a new train dataloader, a new
timestamp (a later fit) or :func:`forget_fit_graph` (at fit end) takes a new one.
"""

from __future__ import annotations

from typing import Any

from composer.core import State

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot

__all__ = ['FitGraph', 'fit_graph', 'forget_fit_graph']


class FitGraph:
    """One fit start's snapshot of the train dataloader, taken once; a callback that shares it holds one."""

    def __init__(self) -> None:
        self._entry: tuple[Any, Any, GraphSnapshot] | None = None  # (dataloader, timestamp, snapshot)

    def get(self, state: State) -> GraphSnapshot:
        loader = state.train_dataloader
        entry = self._entry
        if entry is not None and entry[0] is loader and entry[1] is state.timestamp:
            return entry[2]
        graph = take_snapshot(loader)
        self._entry = (loader, state.timestamp, graph)
        return graph

    def forget(self) -> None:
        self._entry = None


def _keeper(state: State) -> FitGraph:
    """The :class:`FitGraph` of the first of the trainer's callbacks that holds one."""
    for callback in state.callbacks:
        kept = getattr(callback, '_fit_graph', None)
        if isinstance(kept, FitGraph):
            return kept
    raise RuntimeError('fit_graph is asked by a callback that holds a FitGraph, and is one of the trainer\'s')


def fit_graph(state: State) -> GraphSnapshot:
    """The snapshot of ``state.train_dataloader`` for this fit start, taken once for the trainer's callbacks."""
    return _keeper(state).get(state)


def forget_fit_graph(state: State) -> None:
    """Drop the trainer's snapshot: the next fit start walks the graph again."""
    _keeper(state).forget()
