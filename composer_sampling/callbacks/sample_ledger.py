"""Record, per rank and epoch, which sample indices were trained, for ``composer-sampling audit``."""

from __future__ import annotations

import collections
import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._graph.index_tap import IndexTap
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._graph.walk import active_root, describe, is_map_style
from composer_sampling._validate import first_outside
from composer_sampling.callbacks._fit_graph import fit_graph, forget_fit_graph
from composer_sampling.callbacks._ledger_upload import RemoteLedger, UploadSchedule, discard_staging, staging_folder
from composer_sampling.callbacks._top_tap import end_top_tap, top_tap
from composer_sampling.ledger_format import SCHEDULE_BATCH, LedgerWriter, OutsideDatasetError, uri_scheme

__all__ = ['IndexKey', 'SampleLedger', 'read_indices']

IndexKey = str | int | Callable[[Any], Any]
#: 1: ``{'version', 'lineage', 'attempt', 'batch'}``; the oldest states had only ``lineage`` and no ``version``.
_STATE = VersionPolicy(current=1, missing_version=1)
#: Indices held in memory before they are written whatever comes (some 9 MB of Python ints); checkpoints write sooner.
_HOLD = 1 << 18
#: The events SampleLedger has a handler for (``Event.value``); Composer hands it every event of every batch.
_HANDLED = frozenset(event.value for event in (
    Event.INIT, Event.FIT_START, Event.BEFORE_DATALOADER, Event.BATCH_START, Event.BATCH_END, Event.BATCH_CHECKPOINT,
    Event.EPOCH_END, Event.EPOCH_CHECKPOINT, Event.ITERATION_CHECKPOINT, Event.FIT_END))


class SampleLedger(Callback):
    """Writes every trained batch's sample indices to a compact per-rank file, for ``composer-sampling audit``.

    Where the indices come from:

    * a map-style dataset: the index lists the sampler graph hands to the DataLoader,
      seen by the :class:`~composer_sampling._graph.index_tap.IndexTap` on top of the graph
      and matched in order to the batches that trained (lists a DataLoader worker
      fetched ahead, or that Composer's cut of an epoch left behind, are dropped);
    * mosaicml-streaming's ``StreamingDataset``: its own partition of the epoch,
      computed in the main process (:mod:`composer_sampling.callbacks._stream_partition`);
    * with ``index_key``: the batch itself (a mapping key, a position in a tuple or
      list batch, or a callable ``batch -> indices``), for batches that carry the
      dataset index of each sample. Where the sampler graph is seen too, the first
      batch's values are checked against it, so a key that selects the labels stops
      the run at once.

    The ledger therefore records what the sampler handed to the DataLoader for each
    trained batch; a collate function that packs or redistributes samples across
    batches (llm-foundry's ``packing_ratio``) is not seen.

    The folder defaults to ``{save_folder}/ledger`` of the Trainer's
    ``CheckpointSaver``, its placeholders (``{run_name}``, ``{rank}``, ...) filled as
    Composer fills them for rank 0, so every rank writes into one folder. A remote
    folder (a URI, such as the ``ledger/`` of ``save_folder='s3://bucket/run'``) is
    written in a local staging folder and uploaded whole through Composer's object
    store before every checkpoint the saver saves and at fit end
    (:mod:`~composer_sampling.callbacks._ledger_upload`). Files
    ``{folder}/{attempt}-rank{r}.bin`` are created when the first batch has trained:
    a run refused at fit start, or one that dies before training, leaves the folder
    as it was. Their header holds the attempt's start batch, a *lineage* id shared by
    every attempt of one run, and ``resumed_from``: the attempt and batch whose state
    it continues (carried by the checkpoint in this callback's state). ``composer-sampling
    audit`` follows these links from the attempt that trained furthest back to the start.
    A fit on another dataloader than the fit before it starts a new lineage; a Trainer
    takes one SampleLedger (a second is refused when the Trainer is built).

    Records are held in memory and written in one system call before every checkpoint
    (Composer's save takes this callback's state on every rank before it writes a byte of
    the checkpoint file, whatever the order of the callbacks), at every epoch's end, at fit
    end, when the Trainer is closed (a clean exit, SIGTERM or Ctrl-C included), and once
    2**18 indices are held: a process killed loses only batches that no checkpoint holds.

    Args:
        folder (str, optional): where the ledger files go, a local path or a URI. Default: ``{save_folder}/ledger``.
        index_key (str | int | Callable, optional): read the indices from the batch here instead of
            the sampler graph. Default: ``None``.

    Example:
        >>> from composer import Trainer
        >>> from composer_sampling import SampleLedger, SamplerSync
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     model=model,
        ...     train_dataloader=train_dataloader,
        ...     max_duration='2ep',
        ...     save_folder='checkpoints',
        ...     callbacks=[SamplerSync(), SampleLedger()],  # ledger in checkpoints/ledger
        ... )

    +---------------------+------------------------------------------------------------------+
    | header key          | what                                                             |
    +=====================+==================================================================+
    | ``lineage``         | one id for every attempt of a run (carried by checkpoints)       |
    +---------------------+------------------------------------------------------------------+
    | ``attempt``         | this fit's id, also the file name's prefix                       |
    +---------------------+------------------------------------------------------------------+
    | ``resumed_from``    | ``{'attempt', 'batch'}`` this fit continues from, or ``None``    |
    +---------------------+------------------------------------------------------------------+
    | ``lineage_start``   | the batch a new lineage began at (a fit on another dataloader)   |
    +---------------------+------------------------------------------------------------------+
    | ``start_batch``     | the trainer's batch count when this fit started                  |
    +---------------------+------------------------------------------------------------------+
    | ``dataset_len``     | every recorded index lies in ``[0, dataset_len)``                |
    +---------------------+------------------------------------------------------------------+
    | ``source``          | ``sampler``, ``stream`` or ``batch``: where the indices came from|
    +---------------------+------------------------------------------------------------------+
    """

    def __init__(self, folder: str | None = None, index_key: IndexKey | None = None) -> None:
        if folder is not None and (not isinstance(folder, (str, Path)) or not str(folder)):
            raise TypeError(f'folder must be a path or None (the save folder\'s ledger/), got {folder!r}')
        if index_key is not None and (isinstance(index_key, (bool, np.bool_)) or not (
                isinstance(index_key, (str, int, np.integer)) or callable(index_key))):
            raise TypeError(f'index_key must be a str (a mapping key), an int (a position in a tuple or list batch), '
                            f'a callable batch -> indices, or None (the sampler graph), got {index_key!r}')
        self.folder = None if folder is None else str(folder)  # a str: a URI's '//' must survive
        self.index_key: IndexKey | None = int(index_key) if isinstance(index_key, np.integer) else index_key
        self.lineage: str | None = None
        self._attempt: str | None = None  # the attempt that wrote the state this callback holds
        self._batch: int | None = None  # the last batch it recorded (or its start batch)
        self._dataset_len: int | None = None
        self._writer: LedgerWriter | None = None
        self._pending: list[tuple[int, int, Any]] = []  # (epoch, batch, indices) recorded, not yet written
        self._held = 0  # the indices in _pending
        self._path: Path | None = None
        self._header: dict[str, Any] = {}
        self._source = 'batch'
        self._tap: IndexTap | None = None
        self._told: collections.deque[tuple[int, list[int]]] = collections.deque()
        self._check_first = False
        self._spun = 0
        self._stream: list[np.ndarray] = []
        self._stream_epoch = -1
        self._schedules: dict[int, np.ndarray] = {}
        self._loader: Any = None
        self._graph: GraphSnapshot | None = None  # the train dataloader's graph at fit start
        self._remote: RemoteLedger | None = None  # where the file goes when the folder is a URI
        self._saver: Any = None  # the Trainer's CheckpointSaver, if it has one
        self._schedule = UploadSchedule(covered=None)
        self._sent: int | None = None  # the size of the file the bucket has (it only grows)

    def __repr__(self) -> str:
        return f'SampleLedger(folder={self.folder!r}, index_key={self.index_key!r})'

    # events -------------------------------------------------------------------------------------------

    def run_event(self, event: Event, state: State, logger: Logger) -> None:
        """Composer's dispatch, without the call of a handler that does nothing (9 of a batch's 13 events)."""
        name = event._value_  # the enum's plain attribute: Event.value is a property, hashing an Event a Python call
        if name in _HANDLED:
            getattr(self, name)(state, logger)

    def init(self, state: State, logger: Logger) -> None:
        others = [callback for callback in state.callbacks if isinstance(callback, SampleLedger)]
        if len(others) > 1:
            raise ValueError(f'a Trainer records one ledger, and it has {len(others)} SampleLedger callbacks: '
                             f'{" and ".join(map(repr, others))}; keep one (its folder holds every rank\'s files)')

    def fit_start(self, state: State, logger: Logger) -> None:
        self._saver = _saver_of(state)
        covered = _saved_batch(self._saver)
        folder = self._ledger_folder(state)
        remote = RemoteLedger(folder) if uri_scheme(folder) is not None else None
        if remote is not None:
            remote.check()
        lineage_start = self._new_lineage(state)
        resumed_from = None if self._attempt is None else {'attempt': self._attempt, 'batch': self._batch}
        shared: list[Any] = [self.lineage or uuid.uuid4().hex, uuid.uuid4().hex[:16], time.time(), resumed_from]
        dist.broadcast_object_list(shared, src=0)
        self.lineage, attempt, started, resumed_from = shared
        loader = state.train_dataloader
        self._loader = loader
        rank = dist.get_global_rank()
        header: dict[str, Any] = {
            'lineage': self.lineage,
            'attempt': attempt,
            'resumed_from': resumed_from,
            'started': started,
            'run_name': state.run_name,
            'rank': rank,
            'world_size': dist.get_world_size(),
            'start_batch': int(state.timestamp.batch),
            'start_epoch': int(state.timestamp.epoch),
            'sub_epochs_per_epoch': 1,
            'replication': 1,
            **({} if lineage_start is None else {'lineage_start': lineage_start}),
        }
        self.close()
        self._dataset_len, self._told = None, collections.deque()
        self._graph = graph = fit_graph(state) if isinstance(loader, DataLoader) else None
        stream = None if graph is None or graph.map_style else graph.stream
        self._source = self._choose_source(state, loader, stream)
        header['source'] = self._source
        if graph is not None and graph.map_style:  # the pass over the data, from the one snapshot
            data = graph.epoch_data(dist.get_world_size(), rank)
            header.update(dataset_len=data.accounting.dataset_len, padded=data.accounting.padded,
                          dropped=data.accounting.dropped, sub_epochs_per_epoch=data.sub_epochs,
                          replication=data.replication)
        elif stream is not None:
            header.update(dataset_len=int(stream.size), replication=int(stream.replication or 1))
        self._dataset_len = header.get('dataset_len')
        self._header = header
        self._remote = remote
        self._schedule = UploadSchedule(covered=covered)
        self._sent = None
        local = staging_folder(state.run_name, attempt) if remote is not None else Path(folder)
        self._path = local / f'{attempt}-rank{rank}.bin'
        self._attempt, self._batch = attempt, header['start_batch']
        self._spun = int(state.timestamp.batch_in_epoch)  # trained before this fit: spun past if Composer spins
        self._stream, self._stream_epoch = [], -1  # the stream's partition is computed when its iteration starts

    def before_dataloader(self, state: State, logger: Logger) -> None:
        if self._source == 'stream' and self._stream_epoch != int(state.timestamp.epoch):
            self._next_stream_epoch(int(state.timestamp.epoch))

    def batch_end(self, state: State, logger: Logger) -> None:
        """Hold the batch's record: the first of a fit is checked (and creates the file) now, others when written."""
        batch = int(state.timestamp.batch)
        indices = self._trained(state)
        if self._writer is None:  # the first trained batch: only now does the run leave a file behind
            self._check_range(batch, indices)
            assert self._path is not None, 'fit_start names the file'
            self._writer = LedgerWriter(self._path, self._header)
        epoch = int(state.timestamp.epoch)
        if self._schedules:
            schedule = self._schedules.pop(epoch, None)
            if schedule is not None:
                self._pending.append((epoch, SCHEDULE_BATCH, schedule))
        if not isinstance(indices, list):
            indices = np.array(indices)  # a copy: the batch's tensor may be reused before the write
        self._pending.append((epoch, batch, indices))
        self._batch = batch
        self._held += len(indices)
        if self._held > _HOLD:
            self._flush()

    def batch_start(self, state: State, logger: Logger) -> None:
        if self._remote is not None:
            self._upload_if_due(state, saving=False)  # a checkpoint saved after this callback's turn at its event

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        self._at_checkpoint(state, Event.BATCH_CHECKPOINT)

    def epoch_checkpoint(self, state: State, logger: Logger) -> None:
        self._at_checkpoint(state, Event.EPOCH_CHECKPOINT)

    def iteration_checkpoint(self, state: State, logger: Logger) -> None:
        self._at_checkpoint(state, Event.ITERATION_CHECKPOINT)

    def epoch_end(self, state: State, logger: Logger) -> None:
        self._flush()

    def fit_end(self, state: State, logger: Logger) -> None:
        self.close()
        if self._remote is not None and self._path is not None and self._path.exists():
            self._upload()  # before the saver's FIT_END waits for its uploads and uploads its last symlink
            discard_staging(self._path)
        if self._tap is not None:
            self._tap.forget(self._tell)
        end_top_tap(state)
        forget_fit_graph(state)

    def close(self, state: State | None = None, logger: Logger | None = None) -> None:
        if self._writer is not None:
            self._flush()
            self._writer.close()
            self._writer = None

    def post_close(self) -> None:
        if self._remote is not None and self._path is not None:
            discard_staging(self._path)  # a fit that ended with an exception leaves no staging folder behind

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint carries; every batch up to the one it names is written first.

        Composer's save takes the callbacks' states on every rank before it writes the
        checkpoint file, whatever the order of the callbacks and whoever saves
        (``CheckpointSaver``, ``Trainer.save_checkpoint``).
        """
        self._flush()
        return write_state(_STATE.current, {'lineage': self.lineage, 'attempt': self._attempt, 'batch': self._batch})

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads a state of any version; ``version``, ``attempt`` and ``batch`` are missing from the oldest."""
        state = read_state(state, 'SampleLedger', _STATE)
        for key, kind in (('lineage', str), ('attempt', str), ('batch', int)):
            value = state.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ValueError(f'SampleLedger state has {key}={value!r}; it must be a {kind.__name__} or None')
        self.lineage = state.get('lineage')
        self._attempt = state.get('attempt')
        self._batch = state.get('batch')

    # uploads, when the folder is a URI -------------------------------------------------------------

    def _at_checkpoint(self, state: State, event: Event) -> None:
        """Upload before a checkpoint the saver is about to save in this event, or after one it saved.

        The saver's turn comes after this callback's when it follows it among the callbacks
        (the Trainer appends the saver it builds from ``save_folder`` after the user's): then
        this asks the saver's ``save_interval``, as the saver is about to, whether it saves
        now. Composer's own intervals give the same answer to the same question twice.
        """
        if self._remote is None:
            return
        saver = self._saver
        saving = False
        if saver is not None and state.callbacks.index(saver) > state.callbacks.index(self):
            batch = state.timestamp.batch
            saving = saver.last_checkpoint_batch != batch and bool(saver.save_interval(state, event))
        self._upload_if_due(state, saving)

    def _upload_if_due(self, state: State, saving: bool) -> None:
        if self._remote is None:
            return
        covered = self._schedule.due(_saved_batch(self._saver), int(state.timestamp.batch), saving)
        if covered is not None:
            self._upload()
            self._schedule.covered = covered

    def _upload(self) -> None:
        """Upload the file unless the bucket has it as it is (it only grows: the same size is the same file)."""
        assert self._remote is not None and self._path is not None
        self._flush()
        size = self._path.stat().st_size if self._path.exists() else None  # none before the first trained batch
        if size is not None and size != self._sent:
            self._remote.upload(self._path)
            self._sent = size

    def _flush(self) -> None:
        """Check and write the records held in memory, in one system call (kept for a retry if it fails).

        A record whose indices fall outside the dataset stops the run before any checkpoint
        holds its batch: the records before it are written, it and those after it dropped.
        """
        if self._pending:
            assert self._writer is not None, 'the first record creates the file'
            try:
                self._writer.extend(self._pending, within=self._dataset_len)
            except OutsideDatasetError as error:
                pending, self._pending, self._held = self._pending, [], 0
                self._writer.extend(pending[:[batch for _, batch, _ in pending].index(error.batch)])
                raise self._outside(error.batch, error.index) from None
            self._pending, self._held = [], 0

    def _check_range(self, batch: int, indices: np.ndarray | list[int]) -> None:
        where = None if self._dataset_len is None else first_outside(indices, self._dataset_len)
        if where is not None:
            raise self._outside(batch, int(indices[where]))

    def _outside(self, batch: int, index: int) -> ValueError:
        return ValueError(f'{self._where()} read sample index {index} in batch {batch}, outside [0, '
                          f'{self._dataset_len}) for a dataset of {self._dataset_len} samples: index_key must '
                          'select the dataset indices')

    def _new_lineage(self, state: State) -> int | None:
        """The batch a new lineage starts at when this fit trains another dataloader than the last fit did, else None.

        Its ledger then continues no earlier attempt: the earlier lineage stays whole, auditable on its own.
        """
        if self._loader is None or state.train_dataloader is self._loader:
            return None
        self.lineage, self._attempt, self._batch = None, None, None
        return int(state.timestamp.batch)

    # where the indices come from ----------------------------------------------------------------------

    def _choose_source(self, state: State, loader: Any, stream: Any) -> str:
        """Where the indices come from: ``'sampler'`` (the tap), ``'batch'`` (``index_key``) or ``'stream'``.

        ``stream`` is the loader's ``StreamingDataset``, if it has one.
        """
        if not isinstance(loader, DataLoader):
            if self.index_key is None:
                raise ValueError(f'SampleLedger cannot see the samples of a {type(loader).__name__}; pass '
                                 'SampleLedger(index_key=...) naming where each batch holds its sample indices')
            return 'batch'
        if is_map_style(loader):
            if getattr(loader, 'in_order', True) is False:
                raise ValueError('SampleLedger needs the DataLoader to return batches in the order of its index '
                                 'lists; build it with in_order=True (the default)')
            assert self._graph is not None  # taken in fit_start, as the loader is a DataLoader
            tap = top_tap(state, self._graph, self._tell)
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
            from composer_sampling.callbacks._stream_partition import SUPPORTED, supported_version

            if supported_version() is None:
                raise ValueError(f'SampleLedger computes a StreamingDataset\'s samples as mosaicml-streaming '
                                 f'{" or ".join(v + "x" for v in SUPPORTED)} does; this is another version: pass '
                                 'SampleLedger(index_key=...) if the batches carry their sample ids')
            return 'stream'
        raise ValueError(f'SampleLedger cannot see the samples of the iterable dataset {type(loader.dataset).__name__}'
                         ' (it orders itself); pass SampleLedger(index_key=...) naming where each batch holds its '
                         'sample indices')

    def _tell(self, number: int, indices: list[int]) -> None:
        self._told.append((number, indices))

    def _trained(self, state: State) -> np.ndarray | list[int]:
        if self._source == 'stream':
            if not self._stream:
                raise RuntimeError('SampleLedger: the stream trained more batches than its partition holds; the '
                                   'installed mosaicml-streaming partitions differently')
            return self._stream.pop(0)
        told = self._next_told(state) if self._tap is not None else None
        if self._source == 'sampler':
            assert told is not None
            return told  # the ints as the graph yielded them: checked and written without a numpy round trip
        assert self.index_key is not None
        indices = read_indices(state.batch, self.index_key)
        if self._check_first:
            self._check_first = False
            assert self._tap is not None
            self._tap.forget(self._tell)
            self._tap = None
            if told is not None and sorted(indices.tolist()) != sorted(told):
                raise ValueError(
                    f'{self._where()} read {indices.tolist()[:8]} from the first batch, but the sampler graph handed '
                    f'the DataLoader {told[:8]}: index_key must select the dataset index of each sample (not the '
                    'labels); leave index_key None to record what the sampler hands the DataLoader')
        elif self._tap is None and self._draws_without_replacement():
            values, counts = np.unique(indices, return_counts=True)
            if (counts > 1).any():
                raise ValueError(f'{self._where()} read sample {int(values[counts > 1][0])} twice in batch '
                                 f'{int(state.timestamp.batch)} from a sampler graph that draws without replacement: '
                                 'index_key must select the dataset index of each sample')
        return indices

    def _next_told(self, state: State) -> list[int]:
        """The index list of the batch that just trained: the oldest told of the current pass."""
        assert self._tap is not None
        current = self._tap.passes
        while self._told and self._told[0][0] < current:
            self._told.popleft()  # fetched ahead by workers, or left behind by Composer's cut of an epoch
        if self._spun:
            if 'train' not in state.dataset_resumption:  # Composer spun past the batches trained before this fit
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

    def _next_stream_epoch(self, epoch: int) -> None:
        """The stream's partition of ``epoch`` from where it resumes, as its iteration that has just started reads it.

        Called at the epoch's first ``BEFORE_DATALOADER``, which Composer fires after ``iter(dataloader)``: every
        callback's ``FIT_START`` and ``EPOCH_START`` have run (``SamplerSync`` has set ``shuffle_seed``, in whatever
        order the callbacks come) and DataLoader workers have copied the dataset with that seed.
        """
        from composer_sampling.callbacks._stream_partition import epoch_schedule, rank_batches

        loader = self._loader
        dataset = loader.dataset
        start, self._stream = rank_batches(dataset, epoch, loader.num_workers, loader.drop_last)
        self._stream_epoch = epoch
        if dist.get_global_rank() == 0 and start == 0:
            self._schedules[epoch] = epoch_schedule(dataset, epoch, loader.num_workers)

    # header -------------------------------------------------------------------------------------------

    def _ledger_folder(self, state: State) -> str:
        """The folder, placeholders filled for rank 0: a local path, or a URI (the saver's remote folder's ledger/)."""
        if self.folder is not None:
            folder = self.folder
        else:
            saver = self._saver
            if saver is None:
                raise ValueError('SampleLedger has no folder: give the Trainer a save_folder (the ledger goes to '
                                 '{save_folder}/ledger) or pass SampleLedger(folder=...)')
            uploader = getattr(saver, 'remote_uploader', None)  # a remote save folder: saver.folder is its staging
            base = str(saver.folder) if uploader is None else str(uploader.remote_folder)
            folder = f'{base.rstrip("/")}/ledger'
        from composer.utils import partial_format

        return partial_format(folder, run_name=state.run_name, rank=0, local_rank=0, node_rank=0,
                              world_size=dist.get_world_size(), local_world_size=dist.get_local_world_size())

    def _where(self) -> str:
        return f'SampleLedger(index_key={_name(self.index_key)})'


def _saver_of(state: State) -> Any:
    """The Trainer's CheckpointSaver (the first, as the Trainer takes it), or ``None``."""
    from composer.callbacks import CheckpointSaver

    return next((callback for callback in state.callbacks if isinstance(callback, CheckpointSaver)), None)


def _saved_batch(saver: Any) -> int | None:
    """The batch of the saver's last checkpoint in this process, or ``None``."""
    saved = None if saver is None else saver.last_checkpoint_batch
    return None if saved is None else int(saved)


def read_indices(batch: Any, index_key: IndexKey) -> np.ndarray:
    """The sample indices of a collated ``batch`` as int64, found by ``index_key``.

    Raises :class:`ValueError` naming ``index_key`` and what the batch holds when
    the indices are not there or are not integers.

    Example:
        >>> x, y, i = torch.zeros(2, 3), torch.tensor([1, 0]), torch.tensor([7, 4])
        >>> read_indices({'input': x, 'index': i}, 'index').tolist(), read_indices((x, y, i), 2).tolist()
        ([7, 4], [7, 4])
        >>> read_indices((x, y), 'index')  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: SampleLedger(index_key='index') found no sample indices: the batch is a tuple of 2 (Tensor[2, 3] ...
    """
    where = f'SampleLedger(index_key={_name(index_key)})'
    if callable(index_key):
        found = index_key(batch)
    elif isinstance(index_key, str):
        if not isinstance(batch, Mapping) or index_key not in batch:
            raise ValueError(f'{where} found no sample indices: the batch is {_batch_shape(batch)}. {_fix(batch)}')
        found = batch[index_key]
    else:
        if not isinstance(batch, (tuple, list)):
            raise ValueError(f'{where} found no sample indices: an int index_key is a position in a tuple or list '
                             f'batch, and the batch is {_batch_shape(batch)}. {_fix(batch)}')
        if not -len(batch) <= index_key < len(batch):
            raise ValueError(f'{where} found no sample indices: the position {index_key} is outside [0, '
                             f'{len(batch)}) for a batch that is {_batch_shape(batch)}')
        found = batch[index_key]
    values = found.detach().cpu().numpy() if isinstance(found, torch.Tensor) else np.asarray(found)
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f'{where} read {_batch_shape(found)} from a batch that is {_batch_shape(batch)}: sample '
                         f'indices must be integers (the dataset index of each sample). {_fix(batch)}')
    return values.astype(np.int64, copy=False).reshape(-1)


def _name(index_key: IndexKey | None) -> str:
    if index_key is None or isinstance(index_key, (str, int)):
        return repr(index_key)
    return getattr(index_key, '__qualname__', repr(index_key))


def _batch_shape(value: Any, depth: int = 0) -> str:
    """A short description of a batch or part of one: its type, keys, shapes and dtypes."""
    if isinstance(value, torch.Tensor):
        return f'Tensor{list(value.shape)} {str(value.dtype).removeprefix("torch.")}'
    if isinstance(value, np.ndarray):
        return f'ndarray{list(value.shape)} {value.dtype}'
    if isinstance(value, Mapping):
        return f'a {type(value).__name__} with keys {sorted(map(str, value))}'
    if isinstance(value, (tuple, list)) and depth == 0:
        parts = ', '.join(_batch_shape(item, 1) for item in value[:6]) + (', ...' if len(value) > 6 else '')
        return f'a {type(value).__name__} of {len(value)} ({parts})'
    return f'a {type(value).__name__}'


def _fix(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return ('Return the dataset index of each sample from the dataset and pass index_key=<its key>, or leave '
                'index_key None to record what the sampler hands the DataLoader')
    if isinstance(batch, (tuple, list)) and batch:
        return (f'For a tuple or list batch pass index_key=<the position of the indices> (0 to {len(batch) - 1}), '
                'or leave index_key None to record what the sampler hands the DataLoader')
    return 'Leave index_key None to record what the sampler hands the DataLoader, or pass a callable batch -> indices'
