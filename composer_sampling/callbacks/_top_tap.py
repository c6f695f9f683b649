"""The tap every batch of the train dataloader passes through, shared by SamplerSync and SampleLedger.

:func:`top_tap` installs an :class:`~composer_sampling._graph.index_tap.IndexTap` on the
edge below the top of the train dataloader's graph (torch's ``BatchSampler.sampler``,
``DistributedBatchAdapter.batch_sampler``, ``NestedBatchSampler.batch_sampler``).
When the top is a batch sampler of yours, no attribute of torch's DataLoader can be
reassigned, so for the rest of the fit the trainer reads a new DataLoader over the
same dataset, with the same settings, whose batch sampler is the tap over yours
(``State.set_dataloader``); :func:`end_top_tap` gives the trainer its own back at fit
end. ``state.train_dataloader`` stays yours throughout. The DataLoader built here keeps the trainer's own in an
attribute of its own, so nothing is kept at module level.
"""

from __future__ import annotations

from composer.core import State
from torch.utils.data import DataLoader

from composer_sampling._graph.index_tap import IndexTap, Listener, install_tap
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._resume.place import tap_at_top

__all__ = ['end_top_tap', 'top_tap']

#: The attribute of a DataLoader this module built around a tap: (the trainer's own DataLoader, its length as
#: Composer had it).
_ORIGINAL = '_composer_sampling_original'


def top_tap(state: State, graph: GraphSnapshot, listener: Listener | None = None) -> IndexTap | None:
    """The tap every batch of the train dataloader passes through, telling ``listener``; None when it cannot be placed.

    ``graph`` is this fit's snapshot of the train dataloader (``fit_graph``): its root is the top.

    It cannot be placed on a batch sampler of yours at the top of a DataLoader
    subclass (torchdata's ``StatefulDataLoader``, ...), which this module does not
    rebuild.
    """
    loader = state.dataloader
    if not isinstance(loader, DataLoader):
        return None
    if hasattr(loader, _ORIGINAL):  # its tap is already there: found, and told
        return install_tap(loader, 'batch_sampler' if loader.batch_sampler is not None else 'sampler',
                           listener=listener)
    tap, rebuilt = tap_at_top(loader, graph, listener)
    if rebuilt is None:
        return tap
    length = -1 if state.dataloader_len is None else int(state.dataloader_len)
    setattr(rebuilt, _ORIGINAL, (loader, length))
    state.set_dataloader(rebuilt, 'train', length)
    return tap


def end_top_tap(state: State) -> None:
    """Give the trainer its own train dataloader back if :func:`top_tap` replaced it."""
    loader = state.dataloader
    if isinstance(loader, DataLoader) and hasattr(loader, _ORIGINAL):
        original, length = getattr(loader, _ORIGINAL)
        delattr(loader, _ORIGINAL)
        state.set_dataloader(original, 'train', length)
