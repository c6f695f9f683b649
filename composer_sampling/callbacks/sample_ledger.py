"""Record, per rank and epoch, which sample indices were trained, for ``composer-sampling audit``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from composer.core import Callback, Event, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._ledger.attempt import open_attempt
from composer_sampling._ledger.batch_indices import IndexKey, key_name, read_indices, valid_index_key
from composer_sampling._ledger.lineage import Lineage
from composer_sampling._ledger.recorder import LedgerRecorder
from composer_sampling._ledger.sources import IndexSource
from composer_sampling.callbacks._composer_resume import composer_ranks
from composer_sampling.callbacks._fit_graph import FitGraph, fit_graph, forget_fit_graph
from composer_sampling.callbacks._interrupted_save import refuse_at_init, set_aside_at_fit_start
from composer_sampling.callbacks._ledger_folder import ledger_folder, saver_of
from composer_sampling.callbacks._ledger_upload import LedgerUploader, RemoteLedger, discard_staging, staging_folder
from composer_sampling.callbacks._one_per_trainer import refuse_a_second
from composer_sampling.callbacks._top_tap import end_top_tap, top_tap
from composer_sampling.ledger_format import object_store_scheme

__all__ = ['IndexKey', 'SampleLedger', 'read_indices']

#: The name of the handler of each event that SampleLedger handles, keyed by the ``id`` of the Event member.
#: Enum members are singletons, and ``id`` is a C call, where hashing an Event or reading ``Event.value`` calls
#: Python code; Composer hands every callback each of the 13 events of every batch.
_HANDLERS = {id(event): event.value for event in (
    Event.INIT, Event.FIT_START, Event.BEFORE_DATALOADER, Event.BATCH_START, Event.BATCH_END, Event.BATCH_CHECKPOINT,
    Event.EPOCH_END, Event.EPOCH_CHECKPOINT, Event.ITERATION_CHECKPOINT, Event.FIT_END)}


class SampleLedger(Callback):
    """Writes every trained batch's sample indices to a compact per-rank file, for ``composer-sampling audit``.

    The indices come from the index lists that the sampler graph hands to the DataLoader
    (a tap on top of the graph, matched in order to the batches that trained), from a
    mosaicml-streaming ``StreamingDataset``'s own partition of the epoch, or with
    ``index_key`` from the batch itself; the recording is the ledger core's
    (``composer_sampling/_ledger/``), which the Lightning ``SampleLedger`` shares. A
    collate function that packs or redistributes samples across batches (llm-foundry's
    ``packing_ratio``) is not seen.

    The folder defaults to ``{save_folder}/ledger`` of the Trainer's ``CheckpointSaver``,
    its placeholders filled as Composer fills them for rank 0. A remote folder (a URI) is
    staged locally and uploaded whole through Composer's object store before every
    checkpoint the saver saves and at fit end (``_ledger_upload.py``). The files
    ``{folder}/{attempt}-rank{r}.bin`` are created when the first batch has trained. Their
    header names the run's *lineage*, the attempt, and the attempt and batch it resumed
    from, which the checkpoint carries in this callback's state, so ``audit`` follows a
    resumed run back to its start. A fit on another dataloader starts a new lineage; a
    second SampleLedger is a ``ValueError`` when the Trainer is built.

    Records are held in memory and written in one system call before every checkpoint
    (Composer's save takes this callback's state on every rank before it writes the file,
    whatever the order of the callbacks), at every epoch's end, at fit end, when the
    Trainer is closed, and once 2**18 indices are held: a process killed loses only batches
    that no checkpoint holds. docs/plan-and-audit.md describes all of it.

    Args:
        folder (str, optional): where the ledger files go, a local path or a URI. Default: ``{save_folder}/ledger``.
        index_key (str | int | Callable, optional): read the indices from the batch here (a mapping key, a
            position in a tuple or list batch, or a callable ``batch -> indices``) instead of the sampler
            graph; the first batch's values are checked against the graph where it is seen. Default: ``None``.

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

    The fields of each file's header are those of :class:`~composer_sampling.ledger_format.LedgerHeader`.
    """

    def __init__(self, folder: str | None = None, index_key: IndexKey | None = None) -> None:
        if folder is not None and (not isinstance(folder, (str, Path)) or not str(folder)):
            raise TypeError(f'folder must be a path or None (the save folder\'s ledger/), got {folder!r}')
        self.folder = None if folder is None else str(folder)  # a str: a URI's '//' must survive
        self.index_key = valid_index_key(index_key)
        self._lineage = Lineage()  # the lineage, the attempt that wrote this state, the last batch recorded
        self._loader: Any = None  # the train dataloader of the last fit
        self._indices = IndexSource(self.index_key, f'SampleLedger(index_key={key_name(self.index_key)})')
        self._recorder: LedgerRecorder | None = None  # the file of the current fit
        self._uploader: LedgerUploader | None = None  # its uploads, when the folder is a URI
        self._fit_graph = FitGraph()  # the fit start's snapshot, shared with the trainer's SamplerSync

    def __repr__(self) -> str:
        return f'SampleLedger(folder={self.folder!r}, index_key={self.index_key!r})'

    @property
    def lineage(self) -> str | None:
        """The id of the run's lineage that this callback continues, or ``None`` before the first fit."""
        return self._lineage.lineage

    def run_event(self, event: Event, state: State, logger: Logger) -> None:
        """Composer's dispatch, without the call of a handler that does nothing (9 of a batch's 13 events)."""
        name = _HANDLERS.get(id(event))
        if name is not None:
            getattr(self, name)(state, logger)

    def init(self, state: State, logger: Logger) -> None:
        refuse_a_second(SampleLedger, state, lambda count, ledgers: (
            f'a Trainer records one ledger, and it has {count} SampleLedger callbacks: {" and ".join(ledgers)}; '
            'keep one (its folder holds every rank\'s files)'))
        refuse_at_init(state, self)  # a save cut short that Composer's saver would refuse before fit_start

    def fit_start(self, state: State, logger: Logger) -> None:
        set_aside_at_fit_start(state, self)  # what a save cut short left, before Composer's saver checks the folder
        saver = saver_of(state)
        folder = ledger_folder(self.folder, state, saver)
        remote = RemoteLedger(folder) if object_store_scheme(folder) is not None else None
        if remote is not None:
            remote.check()
        lineage_start = self._new_lineage(state)
        loader = self._loader = state.train_dataloader
        self.close()
        graph = fit_graph(state) if isinstance(loader, DataLoader) else None
        stream = None if graph is None or graph.map_style else graph.stream
        self._indices.start(loader, graph, stream, lambda tell: None if graph is None else top_tap(state, graph, tell),
                            int(state.timestamp.batch_in_epoch))

        def local(attempt: str) -> Path:  # an object store's file is staged in a local folder, then uploaded
            return staging_folder(state.run_name, attempt) if remote is not None else Path(folder)

        self._recorder = open_attempt(self._lineage, self._indices, local, composer_ranks(), loader, graph, stream,
                                      _broadcast, run_name=state.run_name, start_batch=int(state.timestamp.batch),
                                      start_epoch=int(state.timestamp.epoch), lineage_start=lineage_start)
        self._uploader = None if remote is None else LedgerUploader(remote, saver)

    def before_dataloader(self, state: State, logger: Logger) -> None:
        if self._indices.kind == 'stream':  # nothing to do before the batches of other sources
            self._indices.before_dataloader(int(state.timestamp.epoch), dist.get_global_rank())

    def batch_end(self, state: State, logger: Logger) -> None:
        """Hold the batch's record: the first of a fit is checked, and creates the file, now; others when written."""
        assert self._recorder is not None, 'fit_start names the file'
        batch, epoch = int(state.timestamp.batch), int(state.timestamp.epoch)
        indices = self._indices.trained(state.batch, batch, 'train' not in state.dataset_resumption)
        schedules = self._indices.schedules
        self._recorder.record(epoch, batch, indices, schedules.pop(epoch, None) if schedules else None)
        self._lineage.batch = batch

    def batch_start(self, state: State, logger: Logger) -> None:
        if self._uploader is not None:  # a checkpoint saved after this callback's turn at its event
            assert self._recorder is not None
            self._uploader.if_due(int(state.timestamp.batch), False, self._recorder)

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
        if self._uploader is not None and self._recorder is not None:
            self._uploader.finish(self._recorder)
        self._indices.end()
        end_top_tap(state)
        forget_fit_graph(state)

    def close(self, state: State | None = None, logger: Logger | None = None) -> None:
        """Write what is held and close the file; closing again, or before any fit, does nothing."""
        if self._recorder is not None:
            self._recorder.close()

    def post_close(self) -> None:
        if self._uploader is not None and self._recorder is not None:
            discard_staging(self._recorder.path)  # a fit that ended with an exception leaves no staging folder

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint carries; every batch up to the one it names is written first.

        Composer's save takes the callbacks' states on every rank before it writes the
        checkpoint file, whatever the order of the callbacks and whoever saves
        (``CheckpointSaver``, ``Trainer.save_checkpoint``).
        """
        self._flush()
        return self._lineage.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads a state of any version; ``version``, ``attempt`` and ``batch`` are missing from the oldest."""
        self._lineage.load_state_dict(state)

    def _at_checkpoint(self, state: State, event: Event) -> None:
        if self._uploader is not None and self._recorder is not None:
            self._uploader.at_checkpoint(state, event, self, self._recorder)

    def _flush(self) -> None:
        if self._recorder is not None:
            self._recorder.flush()

    def _new_lineage(self, state: State) -> int | None:
        """The batch a new lineage starts at when this fit trains another dataloader than the last fit did, else None.

        Its ledger then continues no earlier attempt: the earlier lineage stays whole, auditable on its own.
        """
        if self._loader is None or state.train_dataloader is self._loader:
            return None
        self._lineage.restart()
        return int(state.timestamp.batch)


def _broadcast(values: list[Any]) -> list[Any]:
    """Rank 0's ``values`` on every rank."""
    dist.broadcast_object_list(values, src=0)
    return values
