"""Seeds, epochs and resume position for every sampler (or streaming dataset) of the train dataloader."""

from __future__ import annotations

import logging
import warnings
from typing import Any

from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling.graph import (
    active_root,
    describe,
    device_batch,
    is_map_style,
    iter_samplers,
    keeps_child_order,
    set_epoch_everywhere,
    sharding_problem,
    supports_start_offset,
)
from composer_sampling.order import MAX_SEED
from composer_sampling.protocols import EpochAware, supports
from composer_sampling.seeding import default_seed, is_streaming_dataset, seeded_nodes
from composer_sampling.signatures import order_signature, signature_difference
from composer_sampling.validate import check_bool, check_int

__all__ = ['SamplerSync']

log = logging.getLogger(__name__)

_STATE_VERSION = 2  # 2 added 'replication' and 'global_batch'; version 1 states load without them


class SamplerSync(Callback):
    """Keeps the whole sampler graph of the train dataloader in step with the trainer.

    Composer calls ``set_epoch`` only on a ``DistributedSampler`` sitting directly at
    ``dataloader.sampler`` or ``dataloader.batch_sampler``, seeds it with ``0`` unless
    told otherwise, and resumes mid-epoch by loading every trained batch again. This
    callback closes those gaps:

    * ``FIT_START``: the data seed is ``data_seed``, else the trainer's
      ``rank_zero_seed`` (never ``state.seed``, which differs per rank); it is
      checked to be identical on every rank and set as ``seed`` on every sampler of
      the graph that has one (and as ``shuffle_seed`` of a mosaicml-streaming
      ``StreamingDataset``). A seed that differs from its class's default (a
      user's ``DistributedSampler(seed=42)``) is replaced with a warning that
      says how to keep it. Every sampler gets ``set_epoch`` for the current
      epoch, once. With ``check_sharding``, a multi-rank run whose graph does not
      shard by rank as ``replication`` says is refused. After a checkpoint load,
      the graph's order signature (dataset length, shuffle) must match the
      checkpoint's; if every index sampler can start at an offset, they start at
      ``timestamp.sample_in_epoch`` (divided by ``replication``) and Composer's
      dataloader spin is switched off, otherwise the spin stays (refused when it
      would land on another sample because the global batch changed).
    * ``EPOCH_START``: ``set_epoch(epoch)`` on every node that has it, at any depth,
      and on an iterable dataset that has it.

    Iterable datasets order themselves: a ``StreamingDataset`` gets the data seed,
    another iterable dataset with ``set_epoch`` gets the epoch, any other one a
    warning that it cannot be ordered. On resume the checkpointed data seed wins
    over the constructor's (a new seed in the middle of an epoch would repeat and
    skip samples), with a warning. One ``SamplerSync`` per Trainer.

    Args:
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``.
            Default: ``None``, the trainer's seed.
        check_sharding (bool): refuse graphs that do not shard by rank correctly.
            Default: ``True``.
        replication (int): groups of ``replication`` consecutive ranks read the same
            data (tensor or sequence parallelism, llm-foundry's ``replication``):
            samplers must then use ``num_replicas = world_size / replication`` and
            ``rank = global_rank // replication``. Default: ``1``.
        print_summary (bool): print the run summary (epoch accounting, data seed,
            sampler graph; :func:`~composer_sampling.summarize`) once on rank 0 at fit
            start. The recipe runner prints its own. Default: ``False``.

    Example:
        >>> from composer import Trainer
        >>> from composer_sampling import SamplerSync
        >>> trainer = Trainer(  # doctest: +SKIP
        ...     model=model,
        ...     train_dataloader=train_dataloader,
        ...     max_duration='2ep',
        ...     callbacks=[SamplerSync()],
        ... )

    +---------------+-------------------------------------------------------+
    | Key           | Logged data                                           |
    +===============+=======================================================+
    | ``data_seed`` | the seed of the data order (hyperparameter, at fit    |
    |               | start)                                                |
    +---------------+-------------------------------------------------------+
    """

    def __init__(self, data_seed: int | None = None, check_sharding: bool = True, replication: int = 1,
                 print_summary: bool = False) -> None:
        if data_seed is not None:
            data_seed = check_int('data_seed', data_seed, 0, MAX_SEED)
        self.data_seed = data_seed
        self.check_sharding = check_bool('check_sharding', check_sharding)
        self.replication = check_int('replication', replication, minimum=1)
        self.print_summary = check_bool('print_summary', print_summary)
        self.seed_in_use: int | None = None
        self._checkpoint_seed: int | None = None
        self._checkpoint_signatures: list[dict[str, Any]] | None = None
        self._checkpoint_replication: int | None = None
        self._checkpoint_global_batch: int | None = None
        self._global_batch: int | None = None
        self._graph_signatures: list[dict[str, Any]] | None = None
        self._epoch_set_at_fit_start: int | None = None
        self._set_resumption = False
        self._warned: set[tuple[int, int, int]] = set()

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'replication={self.replication!r}, print_summary={self.print_summary!r})')

    def fit_start(self, state: State, logger: Logger) -> None:
        _refuse_another_sync(self, state)
        loader = state.train_dataloader
        if not isinstance(loader, DataLoader):
            return
        map_style = is_map_style(loader)
        seed = self._agreed_seed(state, loader, map_style)
        self.seed_in_use = seed
        logger.log_hyperparameters({'data_seed': seed})
        epoch = int(state.timestamp.epoch)
        self._epoch_set_at_fit_start = epoch
        if not map_style:
            self._order_iterable(loader.dataset, seed, epoch)
            return
        for node in seeded_nodes(loader):
            self._reseed(node, 'seed', seed)
        self._check_signatures(loader)
        self._global_batch = _global_batch(loader)
        set_epoch_everywhere(loader, epoch)
        self._resume_in_epoch(state, loader)
        if self.print_summary and dist.get_global_rank() == 0:
            from composer_sampling.summary import summarize

            source = 'SamplerSync data_seed' if self.data_seed is not None else 'the trainer seed'
            print(summarize(loader, data_seed=seed, seed_source=source), flush=True)

    def epoch_start(self, state: State, logger: Logger) -> None:
        loader = state.train_dataloader
        epoch = int(state.timestamp.epoch)
        if self._epoch_set_at_fit_start == epoch:  # fit start has just set it: once per node per epoch
            self._epoch_set_at_fit_start = None
            return
        self._epoch_set_at_fit_start = None
        if not isinstance(loader, DataLoader):
            return
        if is_map_style(loader):
            set_epoch_everywhere(loader, epoch)
        elif supports(loader.dataset, EpochAware) and not is_streaming_dataset(loader.dataset):
            loader.dataset.set_epoch(epoch)

    def state_dict(self) -> dict[str, Any]:
        return {
            'version': _STATE_VERSION,
            'data_seed': self.seed_in_use if self.seed_in_use is not None else self.data_seed,
            'order_signatures': self._graph_signatures,
            'replication': self.replication,
            'global_batch': self._global_batch,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict):
            raise TypeError(f'SamplerSync.load_state_dict expects a dict, got {state!r:.100} ({type(state).__name__})')
        version = state.get('version', 1)
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= _STATE_VERSION:
            raise ValueError(
                f'SamplerSync state has version {version!r}; this version of composer-sampling reads versions 1 to '
                f'{_STATE_VERSION}. Upgrade composer-sampling to resume this checkpoint',
            )
        seed = state.get('data_seed')
        if seed is not None:
            seed = check_int('SamplerSync state data_seed', seed, 0, MAX_SEED)
        signatures = state.get('order_signatures')
        if signatures is not None and (
            not isinstance(signatures, list) or not all(isinstance(item, dict) for item in signatures)
        ):
            raise TypeError(
                f'SamplerSync state order_signatures must be a list of dicts or None, got {signatures!r:.200}',
            )
        replication = check_int('SamplerSync state replication', state.get('replication', 1), minimum=1)
        self._checkpoint_seed = seed
        self._checkpoint_signatures = signatures
        self._checkpoint_replication = replication
        global_batch = state.get('global_batch')
        self._checkpoint_global_batch = None if global_batch is None else check_int(
            'SamplerSync state global_batch', global_batch, minimum=1)

    def _reseed(self, node: Any, attribute: str, seed: int) -> None:
        """Set ``node.<attribute> = seed``, warning once when that overwrites a seed the user chose."""
        old = getattr(node, attribute)
        if old == seed:
            return
        default = default_seed(node, attribute)
        key = (id(node), old, seed)
        if old != default and key not in self._warned:
            self._warned.add(key)
            where = describe(node) if attribute == 'seed' else f'{type(node).__name__}.{attribute}'
            warnings.warn(
                f'SamplerSync: {where} had seed {old}; it now uses the data seed {seed} (the same on every rank). '
                f'To keep {old}, pass SamplerSync(data_seed={old})',
                stacklevel=3,
            )
        setattr(node, attribute, seed)

    def _order_iterable(self, dataset: Any, seed: int, epoch: int) -> None:
        """Seed a streaming dataset, give the epoch to one with ``set_epoch``, warn about any other."""
        if is_streaming_dataset(dataset):
            self._reseed(dataset, 'shuffle_seed', seed)
            log.info('SamplerSync: %s shuffles with seed %d', type(dataset).__name__, seed)
        elif supports(dataset, EpochAware):
            dataset.set_epoch(epoch)
        else:
            warnings.warn(
                f'SamplerSync cannot order {type(dataset).__name__}: an iterable dataset orders itself, and this one '
                'has neither set_epoch nor a shuffle_seed SamplerSync knows. Give it set_epoch(epoch) to be told '
                'the epoch, and seed it from the trainer seed yourself',
                stacklevel=3,
            )

    def _agreed_seed(self, state: State, loader: DataLoader, map_style: bool) -> int:
        """The data seed, checked identical on every rank, together with the sharding check."""
        seed = self.data_seed if self.data_seed is not None else state.rank_zero_seed
        if self._checkpoint_seed is not None and self._checkpoint_seed != seed:
            warnings.warn(
                f'SamplerSync: the checkpoint was trained with data seed {self._checkpoint_seed}, this run asks '
                f'for {seed}; keeping {self._checkpoint_seed} so that the current epoch neither repeats nor '
                'skips samples',
                stacklevel=3,
            )
            seed = self._checkpoint_seed
        problem = None
        if self.check_sharding and map_style:
            problem = sharding_problem(active_root(loader), dist.get_world_size(), dist.get_global_rank(),
                                       self.replication)
        gathered = dist.all_gather_object((seed, problem))
        seeds = [rank_seed for rank_seed, _ in gathered]
        if len(set(seeds)) > 1:
            raise RuntimeError(
                f'SamplerSync: the data seed differs between ranks ({dict(enumerate(seeds))}); every rank must '
                'use the same data seed, or ranks shuffle differently and their samples overlap. Pass the '
                'same data_seed (or trainer seed) on every rank',
            )
        problems = [(rank, text) for rank, (_, text) in enumerate(gathered) if text]
        if problems:
            rank, text = problems[0]
            raise ValueError(f'SamplerSync (rank {rank}): {text}')
        return seed

    def _check_signatures(self, loader: DataLoader) -> None:
        current = [sig for node in iter_samplers(active_root(loader)) if (sig := order_signature(node))]
        self._graph_signatures = current
        saved = self._checkpoint_signatures
        if not saved:
            return
        if len(saved) != len(current):
            raise ValueError(
                f'SamplerSync: the checkpoint was written with samplers {saved}, the train dataloader now has '
                f'{current}; resuming would skip or repeat samples. Resume with the same sampler graph',
            )
        for before, now in zip(saved, current, strict=True):
            difference = signature_difference(before, now)
            if difference:
                key, was, is_now = difference
                raise ValueError(
                    f'SamplerSync: the checkpoint was written with {before.get("sampler")} {key}={was!r}, the '
                    f'train dataloader now has {key}={is_now!r}; resuming would skip or repeat samples. Resume '
                    'with the same dataset and sampler settings',
                )

    def _resume_in_epoch(self, state: State, loader: DataLoader) -> None:
        """Start every index sampler at the global sample offset, so Composer need not spin."""
        root = active_root(loader)
        offsettable = [node for node in iter_samplers(root) if supports_start_offset(node)]
        blocker = next(
            (node for node in iter_samplers(root) if not supports_start_offset(node) and not keeps_child_order(node)),
            None,
        )
        batch_in_epoch = int(state.timestamp.batch_in_epoch)
        if self._set_resumption:  # set by an earlier fit of this trainer: decide afresh
            state.dataset_resumption.pop('train', None)
            self._set_resumption = False
        for node in offsettable:  # no offset from an earlier fit (reset_time, a new duration) survives
            node.set_sample_in_epoch(0)
        if batch_in_epoch == 0:
            if int(state.timestamp.epoch) > 0 and blocker is None and 'train' not in state.dataset_resumption:
                state.dataset_resumption['train'] = True  # nothing to spin: every sampler is set by epoch
                self._set_resumption = True
            return
        if _is_subset(state, loader):
            log.info(
                'SamplerSync: train_subset_num_batches=%d is shorter than the train dataloader (%d batches), so '
                'Composer spins the dataloader to batch %d instead of starting the samplers at an offset',
                int(state.dataloader_len), len(loader), batch_in_epoch,
            )
            return
        if blocker is not None:
            _refuse_a_misplaced_spin(blocker, batch_in_epoch, self._global_batch, self._checkpoint_global_batch)
            log.warning(
                'SamplerSync: %s cannot start at a sample offset, so Composer will load and skip the %d batches '
                'already trained in this epoch. Use composer_sampling samplers (or give the class '
                'keeps_child_order = True if it only groups the indices below it) to resume without it',
                describe(blocker), batch_in_epoch,
            )
            return
        replication = self._checkpoint_replication or self.replication
        offset = int(state.timestamp.sample_in_epoch) // replication
        for node in offsettable:
            node.set_sample_in_epoch(offset)
        if 'train' not in state.dataset_resumption:
            state.dataset_resumption['train'] = True
            self._set_resumption = True


def _refuse_another_sync(callback: SamplerSync, state: State) -> None:
    syncs = [cb for cb in state.callbacks if isinstance(cb, SamplerSync)]
    if len(syncs) > 1:
        raise ValueError(
            f'the Trainer has {len(syncs)} SamplerSync callbacks ({", ".join(map(repr, syncs))}); they would '
            'overwrite each other\'s seed in silence. Keep exactly one',
        )


def _is_subset(state: State, loader: DataLoader) -> bool:
    """Whether ``train_subset_num_batches`` cuts the epoch short (Composer islices each fresh iterator)."""
    if state.dataloader_len is None:
        return False
    try:
        return int(state.dataloader_len) < len(loader)
    except TypeError:
        return False


def _global_batch(loader: DataLoader) -> int | None:
    size = device_batch(loader)
    return None if size is None else size * dist.get_world_size()


def _refuse_a_misplaced_spin(blocker: Any, batches: int, global_batch: int | None,
                             saved_global_batch: int | None) -> None:
    """Composer's spin skips ``batches`` batches of the *current* global batch: refuse if the checkpoint's differed."""
    if saved_global_batch is None or global_batch is None or global_batch == saved_global_batch:
        return
    raise ValueError(
        f'SamplerSync: {describe(blocker)} cannot start at a sample offset, so Composer would resume by skipping '
        f'{batches} batches of the new global batch {global_batch}, but the checkpoint trained its {batches} batches '
        f'with global batch {saved_global_batch}; the rest of the epoch would repeat or skip samples. Resume with '
        f'global batch {saved_global_batch} (device batch x world size), or build the graph on composer_sampling '
        'samplers (ResumableDistributedSampler), which resume at the exact sample with any batch size',
    )
