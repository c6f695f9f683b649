"""Where a ledger finds the sample indices of each batch that trained, under any trainer.

There are three sources: the index lists that the sampler graph hands to the DataLoader,
seen by the tap on top of the graph (``sampler``); the partition of an epoch that
mosaicml-streaming computes for a ``StreamingDataset`` (``stream``); and the batch itself,
read with ``index_key`` (``batch``). The adapters hand in what their trainer knows: the
tap at the top of the loader, the batch, its number and the epoch; nothing here asks a
trainer.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np
from torch.utils.data import DataLoader

from composer_sampling._graph.index_tap import IndexTap, Listener, install_tap
from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import active_root, describe, is_map_style
from composer_sampling._ledger.batch_indices import IndexKey, read_indices
from composer_sampling._resume.data_identity import agreed_fingerprint
from composer_sampling._resume.place import tap_at_top
from composer_sampling._resume.ranks import Ranks

__all__ = ['FindTap', 'IndexSource', 'Tap', 'dataset_fields', 'ledger_fingerprint', 'order_graph', 'tap_loader']


class Tap(Protocol):
    """What a source reads of the tap that tells it the index lists: an ``IndexTap``, or a ``SeeThroughTap``."""

    passes: int  # the passes over the data that the tap has started

    def forget(self, listener: Listener) -> None:
        """Stop telling ``listener``."""


#: Places the tap that every batch of the train loader passes through, telling the listener; None when it cannot.
FindTap = Callable[[Listener], Tap | None]


class IndexSource:
    """The sample indices of the batches that a fit trains, taken from the source that :meth:`start` chose.

    One object serves every fit of a callback: :meth:`start` sets it up at each fit
    start, and the schedules of a stream's epochs that are computed but not yet written
    survive from one fit to the next.

    Args:
        index_key: where each batch holds its sample indices, or ``None`` for the sampler graph.
        where: how messages name the callback, such as ``SampleLedger(index_key='index')``.
    """

    def __init__(self, index_key: IndexKey | None, where: str) -> None:
        self.index_key = index_key
        self.where = where
        self.kind = 'batch'
        #: The schedule of each epoch that rank 0 computed for a stream, until a batch of the epoch is written.
        self.schedules: dict[int, np.ndarray] = {}
        self._graph: GraphSnapshot | None = None
        self._loader: Any = None
        self._tap: Tap | None = None
        self._told: collections.deque[tuple[int, list[int]]] = collections.deque()
        self._check_first = False
        self._spun = 0
        self._stream: list[np.ndarray] = []
        self._stream_epoch = -1

    def start(self, loader: Any, graph: GraphSnapshot | None, stream: Any, find_tap: FindTap,
              trained_in_epoch: int = 0) -> str:
        """Choose the source of this fit, ``'sampler'``, ``'batch'`` or ``'stream'``, and return it.

        Args:
            loader: the train loader of the fit.
            graph: the snapshot of the train DataLoader's graph, or ``None`` for another loader.
            stream: the loader's ``StreamingDataset``, if it has one (``None`` where the adapter reads no stream).
            find_tap: places the tap at the top of the loader that the trainer iterates.
            trained_in_epoch: the batches of the current epoch trained before this fit, which a trainer that spins
                draws again and drops (see :meth:`trained`).
        """
        self._told = collections.deque()
        self._graph, self._loader = graph, loader
        self._tap, self._check_first = None, False  # the tap of an earlier fit is not this fit's
        self.kind = self._choose(loader, stream, find_tap)
        self._spun = trained_in_epoch
        self._stream, self._stream_epoch = [], -1  # the stream's partition is computed when its iteration starts
        return self.kind

    def end(self) -> None:
        """Stop listening to the tap of this fit."""
        if self._tap is not None:
            self._tap.forget(self.tell)

    def tell(self, number: int, indices: list[int]) -> None:
        """The tap's listener: the index list ``indices`` was handed to the DataLoader in its pass ``number``."""
        self._told.append((number, indices))

    def before_dataloader(self, epoch: int, rank: int) -> None:
        """Compute the stream's partition of ``epoch`` on ``rank`` when the epoch's iteration has just started.

        Other sources do nothing here: this runs before every batch.
        """
        if self.kind == 'stream' and self._stream_epoch != epoch:
            self._next_stream_epoch(epoch, rank)

    def trained(self, batch: Any, number: int, spun: bool = False) -> np.ndarray | list[int]:
        """The sample indices of the batch that has just trained.

        Args:
            batch: the batch as the trainer trained it (read with ``index_key``).
            number: the trainer's count of batches trained, this one included (named in messages).
            spun: the trainer drew and dropped the batches of the epoch trained before this fit (Composer's spin);
                read at the first batch of a fit only.
        """
        if self.kind == 'stream':
            if not self._stream:
                raise RuntimeError('SampleLedger: the stream trained more batches than its partition holds; the '
                                   'installed mosaicml-streaming partitions differently')
            return self._stream.pop(0)
        told = self._next_told(spun) if self._tap is not None else None
        if self.kind == 'sampler':
            assert told is not None
            return told  # the ints as the graph yielded them: checked and written without a numpy round trip
        assert self.index_key is not None
        indices = read_indices(batch, self.index_key)
        if self._check_first:
            self._check_first = False
            assert self._tap is not None
            self._tap.forget(self.tell)
            self._tap = None
            if told is not None and sorted(indices.tolist()) != sorted(told):
                raise ValueError(
                    f'{self.where} read {indices.tolist()[:8]} from the first batch, but the sampler graph handed '
                    f'the DataLoader {told[:8]}: index_key must select the dataset index of each sample (not the '
                    'labels); leave index_key None to record what the sampler hands the DataLoader')
        elif self._tap is None and self._draws_without_replacement():
            values, counts = np.unique(indices, return_counts=True)
            if (counts > 1).any():
                raise ValueError(f'{self.where} read sample {int(values[counts > 1][0])} twice in batch '
                                 f'{number} from a sampler graph that draws without replacement: '
                                 'index_key must select the dataset index of each sample')
        return indices

    def _choose(self, loader: Any, stream: Any, find_tap: FindTap) -> str:
        if not isinstance(loader, DataLoader):
            if self.index_key is None:
                raise ValueError(f'SampleLedger cannot see the samples of a {type(loader).__name__}; pass '
                                 'SampleLedger(index_key=...) naming where each batch holds its sample indices')
            return 'batch'
        if is_map_style(loader):
            if getattr(loader, 'in_order', True) is False:
                raise ValueError('SampleLedger needs the DataLoader to return batches in the order of its index '
                                 'lists; build it with in_order=True (the default)')
            assert self._graph is not None  # taken at fit start, as the loader is a DataLoader
            tap = find_tap(self.tell)
            if tap is None and self.index_key is None:
                raise ValueError(
                    f'SampleLedger cannot see the index lists of {describe(active_root(loader))} at the top of a '
                    f'{type(loader).__name__}; pass SampleLedger(index_key=...) naming where each batch holds its '
                    'sample indices, or use a plain torch DataLoader')
            self._tap = tap
            self._check_first = self.index_key is not None and tap is not None
            return 'sampler' if self.index_key is None else 'batch'
        if self.index_key is not None:
            return 'batch'
        if stream is not None:
            from composer_sampling._ledger.stream_partition import SUPPORTED, supported_version

            if supported_version() is None:
                raise ValueError(f'SampleLedger computes a StreamingDataset\'s samples as mosaicml-streaming '
                                 f'{" or ".join(v + "x" for v in SUPPORTED)} does; this is another version: pass '
                                 'SampleLedger(index_key=...) if the batches carry their sample ids')
            return 'stream'
        raise ValueError(f'SampleLedger cannot see the samples of the iterable dataset {type(loader.dataset).__name__}'
                         ' (it orders itself); pass SampleLedger(index_key=...) naming where each batch holds its '
                         'sample indices')

    def _next_told(self, spun: bool) -> list[int]:
        """The index list of the batch that just trained: the oldest list that the tap told in the current pass."""
        assert self._tap is not None
        current = self._tap.passes
        while self._told and self._told[0][0] < current:
            self._told.popleft()  # fetched ahead by workers, or left behind by Composer's cut of an epoch
        if self._spun:
            if spun:  # the trainer drew and dropped the batches trained before this fit
                for _ in range(min(self._spun, len(self._told))):
                    self._told.popleft()
            self._spun = 0
        if not self._told:
            raise RuntimeError('SampleLedger: a batch trained that the sampler graph did not hand the DataLoader; '
                               'a DataLoader that does not read through its batch sampler cannot be recorded')
        return self._told.popleft()[1]

    def _draws_without_replacement(self) -> bool:
        graph = self._graph
        if graph is None or not graph.map_style:
            return False
        for node in graph.active:
            if getattr(node, 'replacement', False) or type(node).__name__ == 'WeightedRandomSampler':
                return False
        return True

    def _next_stream_epoch(self, epoch: int, rank: int) -> None:
        """The stream's partition of ``epoch`` from where it resumes, as its iteration that has just started reads it.

        Called at the epoch's first ``BEFORE_DATALOADER``, which Composer fires after ``iter(dataloader)``: every
        callback's ``FIT_START`` and ``EPOCH_START`` have run (``SamplerSync`` has set ``shuffle_seed``, in whatever
        order the callbacks come) and DataLoader workers have copied the dataset with that seed.
        """
        from composer_sampling._ledger.stream_partition import epoch_schedule, rank_batches

        loader = self._loader
        dataset = loader.dataset
        start, self._stream = rank_batches(dataset, epoch, loader.num_workers, loader.drop_last)
        self._stream_epoch = epoch
        if rank == 0 and start == 0:
            self.schedules[epoch] = epoch_schedule(dataset, epoch, loader.num_workers)


def tap_loader(loader: DataLoader, graph: GraphSnapshot,
               listener: Listener) -> tuple[IndexTap | None, DataLoader | None]:
    """The tap that every batch of ``loader`` passes through, telling ``listener``, and the DataLoader built around it
    when ``loader`` could not take it, as :func:`~composer_sampling._resume.place.tap_at_top` places it.

    A loader that was built around a tap at its top already, by the placement of a resume, keeps that tap, so the
    ledger hears the batches that the placement lets through. ``graph`` is the snapshot of ``loader``, or of the
    loader that such a placement built it from.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> from composer_sampling._graph.snapshot import take_snapshot
        >>> loader = DataLoader(range(6), batch_size=2)
        >>> told = []
        >>> tap, rebuilt = tap_loader(loader, take_snapshot(loader), lambda number, indices: told.append(indices))
        >>> rebuilt is None, [batch.tolist() for batch in loader], told
        (True, [[0, 1], [2, 3], [4, 5]], [[0, 1], [2, 3], [4, 5]])
    """
    edge = 'batch_sampler' if loader.batch_sampler is not None else 'sampler'
    if isinstance(getattr(loader, edge), IndexTap):
        return install_tap(loader, edge, listener=listener), None
    return tap_at_top(loader, graph, listener)


def order_graph(order: Any, loader: Any) -> GraphSnapshot | None:
    """The sampler graph of the train ``loader``: the graph of the :class:`~composer_sampling.DataOrder` ``order``
    when that order placed this loader, else a new snapshot; ``None`` for a loader that is not a torch DataLoader.

    Example:
        >>> from torch.utils.data import DataLoader
        >>> order_graph(None, DataLoader(range(4), batch_size=2)).map_style, order_graph(None, range(4))
        (True, None)
    """
    if not isinstance(loader, DataLoader):
        return None
    graph = getattr(order, 'graph', None)
    if order is not None and order.placed is loader and graph is not None:
        return graph
    return take_snapshot(loader)


def dataset_fields(graph: GraphSnapshot | None, stream: Any, world_size: int, rank: int) -> dict[str, int]:
    """What a ledger header says about the dataset of a fit: its length and the shape of a pass over it.

    For a map-style DataLoader this is the pass of ``rank`` that ``graph`` describes; for a
    ``StreamingDataset`` ``stream``, its global size and replication; otherwise nothing.
    """
    if graph is not None and graph.map_style:  # the pass over the data, from the one snapshot
        data = graph.epoch_data(world_size, rank)
        return dict(dataset_len=data.accounting.dataset_len, padded=data.accounting.padded,
                    dropped=data.accounting.dropped, sub_epochs_per_epoch=data.sub_epochs,
                    replication=data.replication)
    if stream is not None:
        return dict(dataset_len=int(stream.size), replication=int(stream.replication or 1))
    return {}


def ledger_fingerprint(loader: Any, ranks: Ranks) -> dict[str, Any] | None:
    """The train dataset's fingerprint as a ledger header keeps it (its digest, source and whether it covers the
    content), the same on every rank of ``ranks`` (a collective), or ``None`` for a train dataloader that is not a
    torch DataLoader or a dataset that cannot be fingerprinted (SamplerSync refuses that one at fit start, naming
    it)."""
    if not isinstance(loader, DataLoader):
        return None
    try:
        fingerprint = agreed_fingerprint(loader.dataset, ranks)
    except (TypeError, ValueError):
        return None
    return {field: getattr(fingerprint, field) for field in ('digest', 'source', 'covers_content')}
