"""Record, per rank and epoch, which sample indices were trained, for ``composer-sampling audit``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling.coverage import epoch_accounting
from composer_sampling.graph import active_root, iter_samplers
from composer_sampling.ledger_format import LedgerWriter
from composer_sampling.protocols import SubEpochs, supports

__all__ = ['IndexKey', 'SampleLedger', 'read_indices']

IndexKey = str | int | Callable[[Any], Any]


class SampleLedger(Callback):
    """Writes every trained batch's sample indices to a compact per-rank file.

    How it learns the indices: from the batch itself, at ``BATCH_END``, so it
    records what the model really trained on, whatever the sampler graph. The
    dataset must return each sample's dataset index; ``index_key`` says where it
    is in the collated batch: a key of a mapping batch (the recipes' datasets
    return ``{'input', 'target', 'index'}``), a position in a tuple or list batch
    (``TensorDataset(x, y, torch.arange(n))`` gives ``index_key=2``), or a callable
    ``batch -> indices``. A batch without integer indices in ``[0, dataset_len)``
    stops the run at the first batch with a :class:`ValueError` that says what the
    batch holds. A batch counts as trained once its optimizer step ran, so a crash
    between the step and the record loses at most that batch's record.

    Every fit writes new files ``{folder}/{attempt}-rank{r}.bin``. Their header
    holds the attempt's start batch, a *lineage* id shared by every attempt of one
    run, and ``resumed_from``: the attempt and batch whose state it continues (the
    checkpoint carries the writing attempt's id in this callback's state; ``None``
    for a fresh start or a checkpoint written without it). ``composer-sampling
    audit`` follows these links from the attempt that trained furthest back to the
    start, so abandoned branches and records a crash lost are not counted.

    Args:
        folder (str): where the ledger files go (the recipes use ``{save_folder}/ledger``).
        index_key (str | int | Callable): where the sample indices are in a batch: a mapping key,
            a position in a tuple or list, or a callable ``batch -> indices``. Default: ``'index'``.

    Example:
        >>> from composer import Trainer
        >>> from composer_sampling.callbacks.sample_ledger import SampleLedger
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     model=model,
        ...     train_dataloader=train_dataloader,  # batches (inputs, targets, indices)
        ...     max_duration='2ep',
        ...     callbacks=[SamplerSync(), SampleLedger('checkpoints/ledger', index_key=2)],
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
    | ``start_batch``     | the trainer's batch count when this fit started                  |
    +---------------------+------------------------------------------------------------------+
    | ``dataset_len``     | every recorded index lies in ``[0, dataset_len)``                |
    +---------------------+------------------------------------------------------------------+
    """

    def __init__(self, folder: str, index_key: IndexKey = 'index') -> None:
        if not isinstance(folder, (str, Path)) or not str(folder):
            raise TypeError(f'folder must be a path, got {folder!r}')
        if isinstance(index_key, bool) or not (isinstance(index_key, (str, int)) or callable(index_key)):
            raise TypeError(f'index_key must be a str (a mapping key), an int (a position in a tuple or list batch) '
                            f'or a callable batch -> indices, got {index_key!r}')
        self.folder = Path(folder)
        self.index_key = index_key
        self.lineage: str | None = None
        self._attempt: str | None = None  # the attempt that wrote the state this callback holds
        self._batch: int | None = None  # the last batch it recorded (or its start batch)
        self._dataset_len: int | None = None
        self._writer: LedgerWriter | None = None

    def __repr__(self) -> str:
        return f'SampleLedger(folder={str(self.folder)!r}, index_key={self.index_key!r})'

    def fit_start(self, state: State, logger: Logger) -> None:
        resumed_from = None if self._attempt is None else {'attempt': self._attempt, 'batch': self._batch}
        shared = [self.lineage or uuid.uuid4().hex, uuid.uuid4().hex[:16], time.time(), resumed_from]
        dist.broadcast_object_list(shared, src=0)
        self.lineage, attempt, started, resumed_from = shared
        loader = state.train_dataloader
        header: dict[str, Any] = {
            'lineage': self.lineage,
            'attempt': attempt,
            'resumed_from': resumed_from,
            'started': started,
            'run_name': state.run_name,
            'rank': dist.get_global_rank(),
            'world_size': dist.get_world_size(),
            'start_batch': int(state.timestamp.batch),
            'start_epoch': int(state.timestamp.epoch),
            'sub_epochs_per_epoch': 1,
            'replication': _replication(state),
        }
        self._dataset_len = None
        if isinstance(loader, DataLoader):
            accounting = epoch_accounting(loader, dist.get_world_size() // header['replication'])
            header.update(dataset_len=accounting.dataset_len, padded=accounting.padded, dropped=accounting.dropped)
            header['sub_epochs_per_epoch'] = next(
                (node.sub_epochs_per_epoch for node in iter_samplers(active_root(loader))
                 if supports(node, SubEpochs)), 1)
            self._dataset_len = accounting.dataset_len
        self.close()
        self._writer = LedgerWriter(self.folder / f'{attempt}-rank{header["rank"]}.bin', header)
        self._attempt, self._batch = attempt, header['start_batch']

    def batch_end(self, state: State, logger: Logger) -> None:
        indices = read_indices(state.batch, self.index_key)
        batch = int(state.timestamp.batch)
        if self._dataset_len is not None and indices.size:
            bad = indices[(indices < 0) | (indices >= self._dataset_len)]
            if bad.size:
                raise ValueError(f'SampleLedger(index_key={_name(self.index_key)}) read sample index {int(bad[0])} '
                                 f'in batch {batch}, outside [0, {self._dataset_len}) for a dataset of '
                                 f'{self._dataset_len} samples: index_key must select the dataset indices')
        assert self._writer is not None, 'fit_start opens the ledger'
        self._writer.append(int(state.timestamp.epoch), batch, indices)
        self._batch = batch

    def fit_end(self, state: State, logger: Logger) -> None:
        self.close()

    def close(self, state: State | None = None, logger: Logger | None = None) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def state_dict(self) -> dict[str, Any]:
        return {'lineage': self.lineage, 'attempt': self._attempt, 'batch': self._batch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads a state; ``attempt`` and ``batch`` are missing from older checkpoints and default to ``None``."""
        for key, kind in (('lineage', str), ('attempt', str), ('batch', int)):
            value = state.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, kind)):
                raise ValueError(f'SampleLedger state has {key}={value!r}; it must be a {kind.__name__} or None')
        self.lineage = state.get('lineage')
        self._attempt = state.get('attempt')
        self._batch = state.get('batch')


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
            raise ValueError(f'{where} found no sample indices: the batch is {_describe(batch)}. {_fix(batch)}')
        found = batch[index_key]
    else:
        if not isinstance(batch, (tuple, list)):
            raise ValueError(f'{where} found no sample indices: an int index_key is a position in a tuple or list '
                             f'batch, and the batch is {_describe(batch)}. {_fix(batch)}')
        if not -len(batch) <= index_key < len(batch):
            raise ValueError(f'{where} found no sample indices: the position {index_key} is outside [0, '
                             f'{len(batch)}) for a batch that is {_describe(batch)}')
        found = batch[index_key]
    values = found.detach().cpu().numpy() if isinstance(found, torch.Tensor) else np.asarray(found)
    if not np.issubdtype(values.dtype, np.integer):
        raise ValueError(f'{where} read {_describe(found)} from a batch that is {_describe(batch)}: sample indices '
                         f'must be integers (the dataset index of each sample). {_fix(batch)}')
    return values.astype(np.int64, copy=False).reshape(-1)


def _name(index_key: IndexKey) -> str:
    if isinstance(index_key, (str, int)):
        return repr(index_key)
    return getattr(index_key, '__qualname__', repr(index_key))


def _describe(value: Any, depth: int = 0) -> str:
    """A short description of a batch or part of one: its type, keys, shapes and dtypes."""
    if isinstance(value, torch.Tensor):
        return f'Tensor{list(value.shape)} {str(value.dtype).removeprefix("torch.")}'
    if isinstance(value, np.ndarray):
        return f'ndarray{list(value.shape)} {value.dtype}'
    if isinstance(value, Mapping):
        return f'a {type(value).__name__} with keys {sorted(map(str, value))}'
    if isinstance(value, (tuple, list)) and depth == 0:
        parts = ', '.join(_describe(item, 1) for item in value[:6]) + (', ...' if len(value) > 6 else '')
        return f'a {type(value).__name__} of {len(value)} ({parts})'
    return f'a {type(value).__name__}'


def _fix(batch: Any) -> str:
    if isinstance(batch, Mapping):
        return ('Return the dataset index of each sample from the dataset and pass index_key=<its key>, or a '
                'callable batch -> indices')
    if isinstance(batch, (tuple, list)) and batch:
        return (f'For a tuple or list batch pass index_key=<the position of the indices> (0 to {len(batch) - 1}), '
                'or a callable batch -> indices')
    return 'Return the dataset index of each sample from the dataset, or pass a callable index_key batch -> indices'


def _replication(state: State) -> int:
    """The replication SamplerSync was given: groups of that many ranks record the same samples."""
    from composer_sampling.callbacks.sampler_sync import SamplerSync

    return next((cb.replication for cb in state.callbacks if isinstance(cb, SamplerSync)), 1)
