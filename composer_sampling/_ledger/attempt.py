"""One attempt's ledger file opened, and the batches a trainer has trained recorded in it, under any trainer.

Example:
    >>> import tempfile
    >>> from torch.utils.data import DataLoader
    >>> from composer_sampling._graph.snapshot import take_snapshot
    >>> from composer_sampling._ledger.sources import tap_loader
    >>> from composer_sampling._resume.ranks import torch_ranks
    >>> from composer_sampling.ledger_format import read_ledger
    >>> loader = DataLoader(range(6), batch_size=2)
    >>> graph = take_snapshot(loader)
    >>> lineage, indices = Lineage(), IndexSource(None, 'SampleLedger(index_key=None)')
    >>> indices.start(loader, graph, None, lambda listener: tap_loader(loader, graph, listener)[0])
    'sampler'
    >>> folder = Path(tempfile.mkdtemp())
    >>> recorder = open_attempt(lineage, indices, lambda attempt: folder, torch_ranks(), loader, graph, start_batch=0,
    ...                         start_epoch=0)
    >>> for batch in loader:
    ...     record_trained(recorder, lineage, indices, lineage.batch + 1, epoch=0, batch=batch)
    >>> recorder.close()
    >>> [record.indices.tolist() for record in read_ledger(recorder.path).records]
    [[0, 1], [2, 3], [4, 5]]
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._ledger.lineage import Lineage, Share
from composer_sampling._ledger.recorder import LedgerRecorder
from composer_sampling._ledger.sources import IndexSource, dataset_fields, ledger_fingerprint
from composer_sampling._resume.ranks import Ranks

__all__ = ['open_attempt', 'record_trained']


def open_attempt(lineage: Lineage, indices: IndexSource, folder: Callable[[str], Path], ranks: Ranks, loader: Any,
                 graph: GraphSnapshot | None, stream: Any = None, share: Share | None = None,
                 **fields: Any) -> LedgerRecorder:
    """The recorder of a new attempt of ``lineage``, for this rank's file in ``folder(attempt)``; a collective.

    The header holds the source that :meth:`IndexSource.start` chose for this fit, the train dataset's fingerprint
    that every rank agrees on, and the shape of a pass over the dataset that ``graph`` (or the ``stream``) describes.

    Args:
        lineage: the lineage the attempt continues or starts.
        indices: the index source, started for this fit.
        folder: the folder of the attempt's files, given the attempt's id.
        ranks: this process's rank and its gather.
        loader: the train loader of the fit.
        graph: the loader's snapshot, or ``None`` for a loader that is not a torch DataLoader.
        stream: the loader's ``StreamingDataset``, if the ledger reads its partition.
        share: the broadcast from rank 0; default: rank 0's value of the gather of ``ranks``.
        fields: the other header fields: ``start_batch`` and ``start_epoch``, and ``run_name`` or ``lineage_start``
            where the trainer has them.
    """
    share = share or (lambda values: ranks.all_gather(values)[0])
    header = lineage.begin(share, rank=ranks.rank, world_size=ranks.world_size, source=indices.kind,
                           data_fingerprint=ledger_fingerprint(loader, ranks),
                           **dataset_fields(graph, stream, ranks.world_size, ranks.rank), **fields)
    return LedgerRecorder(folder(header.attempt) / f'{header.attempt}-rank{ranks.rank}.bin', header, indices.where)


def record_trained(recorder: LedgerRecorder, lineage: Lineage, indices: IndexSource, trained: int, epoch: int,
                   batch: Any, spun: bool = False) -> None:
    """Record every batch up to the trainer's count ``trained`` that ``lineage.batch`` says is not recorded yet.

    One batch trains between two calls, except where a checkpoint is taken before the hook that records a batch:
    there the tap's next index list is that batch's, and ``batch`` (read with ``index_key``) is the one in flight.
    ``spun`` says that the trainer drew and dropped the index lists of the batches of the epoch trained before this
    fit (see :meth:`IndexSource.trained`); it is read at the first batch of a fit only.
    """
    while lineage.batch is not None and lineage.batch < trained:
        number = lineage.batch + 1
        recorder.record(epoch, number, indices.trained(batch, number, spun), None)
        lineage.batch = number
