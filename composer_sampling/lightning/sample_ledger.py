"""Record, per rank and epoch, which sample indices a Lightning run trained, for ``composer-sampling audit``."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._ledger.attempt import open_attempt, record_trained
from composer_sampling._ledger.batch_indices import IndexKey, key_name, valid_index_key
from composer_sampling._ledger.lineage import Lineage
from composer_sampling._ledger.recorder import LedgerRecorder
from composer_sampling._ledger.sources import IndexSource, tap_loader
from composer_sampling._resume.ranks import torch_ranks
from composer_sampling.ledger_format import object_store_scheme
from composer_sampling.lightning._compat import CALLBACK_BASES
from composer_sampling.lightning._process import LoaderHook, placed_graph

__all__ = ['SampleLedger']


class SampleLedger(*CALLBACK_BASES):  # type: ignore[misc]
    """Writes the sample indices of every batch that a Lightning run trains to one file per rank, for ``audit``.

    The files have the format of the Composer ``SampleLedger``, and ``composer-sampling audit FOLDER``
    reads both. The indices come from a tap at the top of the train loader's sampler graph, matched in
    order to the batches that trained; index lists that DataLoader workers drew ahead are dropped. The
    tap goes on the loader that Lightning iterates: the one that the Trainer's ``SamplerSync`` placed
    (its graph is shared), or the loader itself without one. For that, the ledger wraps the strategy's
    ``process_dataloader`` from the fit's start to its end.

    Records are held in memory and written before every checkpoint (Lightning asks every rank for this
    state before it writes the file), at every epoch's end, at the fit's end and when the fit raises: a
    process killed after a checkpoint loses only batches that no checkpoint holds. The state names the
    run's lineage, the attempt that wrote it and the last batch recorded, so a fit resumed with
    ``ckpt_path`` writes a new attempt's files that continue the lineage from that batch.

    Args:
        folder (str | os.PathLike): the local folder of the files ``{attempt}-rank{r}.bin``.
        index_key (str | int | Callable, optional): read the indices from each batch (a mapping key, a
            position in a tuple or list batch, or a callable ``batch -> indices``) instead of the sampler
            graph. Default: ``None``.

    Example:
        >>> import lightning.pytorch as pl  # doctest: +SKIP
        >>> ledger = SampleLedger(folder='checkpoints/ledger')  # then: composer-sampling audit checkpoints/ledger
        >>> trainer = pl.Trainer(max_epochs=2, callbacks=[SamplerSync(), ledger])  # doctest: +SKIP
    """

    def __init__(self, folder: str | os.PathLike[str], *, index_key: IndexKey | None = None) -> None:
        super().__init__()
        if not isinstance(folder, (str, os.PathLike)) or not str(folder):
            raise TypeError(f'folder must be a local path (the folder of the ledger files), got {folder!r}')
        if object_store_scheme(str(folder)) is not None:
            raise ValueError(f'folder must be a local path, got the URI {folder!r}: the Lightning SampleLedger '
                             'writes local files; copy the folder to the object store after the run')
        self.folder = str(folder)
        self.index_key = valid_index_key(index_key)
        self._lineage = Lineage()
        self._loaded = False  # whether a checkpoint gave this callback its state since the last fit
        self._indices = IndexSource(self.index_key, f'SampleLedger(index_key={key_name(self.index_key)})')
        self._recorder: LedgerRecorder | None = None  # the file of the current fit
        self._trainer: Any = None
        self._in_flight: Any = None  # the batch in training, read with index_key
        self._hook = LoaderHook()

    def __repr__(self) -> str:
        return f'SampleLedger(folder={self.folder!r}, index_key={self.index_key!r})'

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self._close()
        self._recorder, self._trainer = None, trainer
        self._hook.wrap(trainer, lambda loader: self._start(trainer, loader))  # after every setup: the loader placed

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        self._in_flight = batch

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._record()

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        self._write()

    def on_fit_end(self, trainer: Any, pl_module: Any) -> None:
        self._close()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._hook.unwrap()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._close()  # Lightning calls no teardown after an exception in the fit
        self._hook.unwrap()

    def state_dict(self) -> dict[str, Any]:
        """The lineage, the attempt and the last batch; every batch up to that one is written to the file first."""
        self._write()
        return self._lineage.state_dict()

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        self._write()  # finds nothing left: Lightning has asked for state_dict just before

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._lineage.load_state_dict(state_dict)
        self._loaded = True

    def _start(self, trainer: Any, loader: Any) -> Any:
        """Tap the train loader that Lightning is about to iterate, and open the fit's file at its first loader."""
        graph = placed_graph(trainer, loader)
        rebuilt: list[DataLoader] = []

        def find_tap(listener: Any) -> Any:
            tap, new = tap_loader(loader, graph, listener) if graph is not None else (None, None)
            rebuilt.extend([new] if new is not None else [])
            return tap

        self._indices.start(loader, graph, None, find_tap)
        if self._recorder is None:  # a loader reloaded later in the fit keeps the fit's file
            trained = int(trainer.fit_loop.epoch_loop.batch_progress.total.processed)  # restored from ckpt_path
            if not self._loaded and trained == 0:
                self._lineage.restart()  # a fresh run, which continues no earlier attempt
            self._loaded = False
            self._recorder = open_attempt(self._lineage, self._indices, lambda attempt: Path(self.folder),
                                          torch_ranks(), loader, graph, start_batch=trained,
                                          start_epoch=int(trainer.current_epoch))
        return rebuilt[0] if rebuilt else loader

    def _record(self) -> None:
        """Record every batch that Lightning has trained and this ledger has not, whatever the order of the hooks."""
        if self._recorder is not None:
            trainer = self._trainer
            record_trained(self._recorder, self._lineage, self._indices,
                           int(trainer.fit_loop.epoch_loop.batch_progress.total.processed),
                           int(trainer.current_epoch), self._in_flight)

    def _write(self) -> None:
        self._record()
        if self._recorder is not None:
            self._recorder.flush()

    def _close(self) -> None:
        """Write what is held, close the file and stop listening to the tap; again, or before any fit, does nothing."""
        if self._recorder is not None:
            self._recorder.close()
        self._indices.end()
