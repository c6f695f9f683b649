"""The train loader that Lightning is about to iterate, for a callback: the wrapper of the strategy's
``process_dataloader`` for one fit, the one point where a Lightning train loader can be replaced after Lightning has
built it and before its loop iterates it, and the sampler graph of the loader placed there.

Several callbacks may wrap it in turn. Each one gives the strategy back what it wrapped only while its own wrapper is
still in place, so the callbacks may unwrap in any order and the strategy ends with its own method; a wrapper left
inside another one's after its fit passes every loader through unchanged.

Example:
    >>> from types import SimpleNamespace
    >>> strategy = SimpleNamespace(process_dataloader=lambda loader: loader)
    >>> trainer = SimpleNamespace(strategy=strategy, training=True)
    >>> own = strategy.process_dataloader
    >>> hook = LoaderHook()
    >>> hook.wrap(trainer, lambda loader: f'placed {loader}')
    >>> strategy.process_dataloader('loader')
    'placed loader'
    >>> hook.unwrap()
    >>> strategy.process_dataloader is own
    True
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling.data_order import DataOrder

__all__ = ['LoaderHook', 'placed_graph']


class LoaderHook:
    """Hands every train loader that the trainer's strategy processes to ``train_loader`` while a fit runs."""

    def __init__(self) -> None:
        self._wrapped: tuple[Any, Any, Any] | None = None  # (strategy, what it had, our wrapper)

    def wrap(self, trainer: Any, train_loader: Callable[[Any], Any]) -> None:
        """Wrap ``trainer.strategy.process_dataloader``: a loader processed while the trainer trains is then
        replaced by what ``train_loader`` returns for it."""
        self.unwrap()
        strategy = trainer.strategy
        own = strategy.process_dataloader

        def process_dataloader(dataloader: Any) -> Any:
            dataloader = own(dataloader)
            active = self._wrapped is not None and self._wrapped[2] is process_dataloader  # left in a chain: passes
            return train_loader(dataloader) if active and trainer.training else dataloader

        strategy.process_dataloader = process_dataloader
        self._wrapped = (strategy, own, process_dataloader)

    def unwrap(self) -> None:
        """Give the strategy back what this hook wrapped, unless another wrapper has replaced ours already."""
        if self._wrapped is not None:
            strategy, own, ours = self._wrapped
            if strategy.process_dataloader is ours:
                strategy.process_dataloader = own
            self._wrapped = None


def placed_graph(trainer: Any, loader: Any) -> GraphSnapshot | None:
    """The sampler graph of the train ``loader``: the one of the trainer's ``SamplerSync`` when its
    :class:`~composer_sampling.DataOrder` placed this loader, else a new snapshot; ``None`` for a loader that is not a
    torch DataLoader."""
    if not isinstance(loader, DataLoader):
        return None
    for callback in trainer.callbacks:
        order = getattr(callback, 'data_order', None)  # a SamplerSync's, once it has seen a train loader
        if isinstance(order, DataOrder) and order.placed is loader and order.graph is not None:
            return order.graph
    return take_snapshot(loader)
