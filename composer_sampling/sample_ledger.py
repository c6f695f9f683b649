"""Record, per rank and epoch, which sample indices were trained, for ``composer-sampling audit``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling.graph import active_root, iter_samplers
from composer_sampling.ledger import LedgerWriter
from composer_sampling.summary import epoch_accounting

__all__ = ['SampleLedger']


class SampleLedger(Callback):
    """Writes every trained batch's sample indices to a compact per-rank file.

    How it learns the indices: from the batch itself. Each batch must be a mapping
    holding the samples' dataset indices under ``index_key`` (the datasets of the
    recipes return ``{'input', 'target', 'index'}``); this records what the model
    really trained on, whatever the sampler graph, at ``BATCH_END``. Its limits: a
    dataset must return its index (a tuple batch raises a clear error at the first
    batch), and a batch counts as trained once its optimizer step ran, so a crash
    between the step and the record loses at most that batch's record.

    Every fit writes new files ``{folder}/{attempt}-rank{r}.bin`` headed with the
    attempt's start batch and a *lineage* id that checkpoints carry over, so
    ``composer-sampling audit`` can tell resumed attempts of one run apart from other
    runs and drop the records a resume superseded.

    Args:
        folder (str): where the ledger files go (the recipes use ``{save_folder}/ledger``).
        index_key (str): the batch key holding sample indices. Default: ``'index'``.

    Example:
        >>> from composer import Trainer
        >>> from composer_sampling.sample_ledger import SampleLedger
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     model=model,
        ...     train_dataloader=train_dataloader,
        ...     max_duration='2ep',
        ...     callbacks=[SamplerSync(), SampleLedger('checkpoints/ledger')],
        ... )
    """

    def __init__(self, folder: str, index_key: str = 'index') -> None:
        if not isinstance(folder, (str, Path)) or not str(folder):
            raise TypeError(f'folder must be a path, got {folder!r}')
        if not isinstance(index_key, str):
            raise TypeError(f'index_key must be a str, got {index_key!r}')
        self.folder = Path(folder)
        self.index_key = index_key
        self.lineage: str | None = None
        self._writer: LedgerWriter | None = None

    def fit_start(self, state: State, logger: Logger) -> None:
        shared = [self.lineage or uuid.uuid4().hex, uuid.uuid4().hex[:16], time.time()]
        dist.broadcast_object_list(shared, src=0)
        self.lineage, attempt, started = shared
        loader = state.train_dataloader
        header: dict[str, Any] = {
            'lineage': self.lineage,
            'attempt': attempt,
            'started': started,
            'run_name': state.run_name,
            'rank': dist.get_global_rank(),
            'world_size': dist.get_world_size(),
            'start_batch': int(state.timestamp.batch),
            'start_epoch': int(state.timestamp.epoch),
            'sub_epochs_per_epoch': 1,
            'replication': _replication(state),
        }
        if isinstance(loader, DataLoader):
            accounting = epoch_accounting(loader, dist.get_world_size() // header['replication'])
            header.update(dataset_len=accounting.dataset_len, padded=accounting.padded, dropped=accounting.dropped)
            header['sub_epochs_per_epoch'] = next(
                (node.sub_epochs_per_epoch for node in iter_samplers(active_root(loader))
                 if isinstance(getattr(node, 'sub_epochs_per_epoch', None), int)), 1)
        self.close()
        self._writer = LedgerWriter(self.folder / f'{attempt}-rank{header["rank"]}.bin', header)

    def batch_end(self, state: State, logger: Logger) -> None:
        batch = state.batch
        if not isinstance(batch, Mapping) or self.index_key not in batch:
            keys = f' with keys {sorted(batch)}' if isinstance(batch, Mapping) else ''
            raise ValueError(
                f'SampleLedger needs every batch to be a mapping with the sample indices under {self.index_key!r}; '
                f'got a {type(batch).__name__}{keys}. Return the index from the dataset, or pass index_key',
            )
        indices = batch[self.index_key]
        values = indices.cpu().numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
        assert self._writer is not None, 'fit_start opens the ledger'
        self._writer.append(int(state.timestamp.epoch), int(state.timestamp.batch), values)

    def fit_end(self, state: State, logger: Logger) -> None:
        self.close()

    def close(self, state: State | None = None, logger: Logger | None = None) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def state_dict(self) -> dict[str, Any]:
        return {'lineage': self.lineage}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lineage = state.get('lineage')


def _replication(state: State) -> int:
    """The replication SamplerSync was given: groups of that many ranks record the same samples."""
    from composer_sampling.callback import SamplerSync

    return next((cb.replication for cb in state.callbacks if isinstance(cb, SamplerSync)), 1)
