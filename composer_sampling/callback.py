"""Seeds, epochs and resume position for every sampler of the train dataloader."""

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
    is_map_style,
    iter_samplers,
    keeps_child_order,
    order_signature,
    set_epoch_everywhere,
    sharding_problem,
    supports_start_offset,
)
from composer_sampling.order import MAX_SEED
from composer_sampling.validate import check_bool, check_int

__all__ = ['SamplerSync']

log = logging.getLogger(__name__)

_STATE_VERSION = 1


class SamplerSync(Callback):
    """Keeps the whole sampler graph of the train dataloader in step with the trainer.

    Composer calls ``set_epoch`` only on a ``DistributedSampler`` sitting directly at
    ``dataloader.sampler`` or ``dataloader.batch_sampler``, seeds it with ``0`` unless
    told otherwise, and resumes mid-epoch by loading every trained batch again. This
    callback closes those gaps:

    * ``FIT_START``: the data seed is ``data_seed``, else the trainer's
      ``rank_zero_seed`` (never ``state.seed``, which differs per rank); it is
      checked to be identical on every rank and set as ``seed`` on every sampler of
      the graph that has one. Every sampler gets ``set_epoch`` for the current
      epoch. With ``check_sharding``, a multi-rank run whose graph does not shard by
      rank, or shards with the wrong ``num_replicas``/``rank``, is refused. After a
      checkpoint load, the graph's order signature (dataset length, shuffle) must
      match the checkpoint's; if every index sampler can start at an offset, they
      start at ``timestamp.sample_in_epoch`` and Composer's dataloader spin is
      switched off, otherwise the spin stays and a warning names the sampler.
    * ``EPOCH_START``: ``set_epoch(epoch)`` on every node that has it, at any depth.

    On resume the checkpointed data seed wins over the constructor's (a new seed in
    the middle of an epoch would repeat and skip samples), with a warning.

    Args:
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``.
            Default: ``None``, the trainer's seed.
        check_sharding (bool): refuse graphs that do not shard by rank correctly.
            Default: ``True``.

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

    def __init__(self, data_seed: int | None = None, check_sharding: bool = True) -> None:
        if data_seed is not None:
            check_int('data_seed', data_seed, 0, MAX_SEED)
        self.data_seed = data_seed
        self.check_sharding = check_bool('check_sharding', check_sharding)
        self.seed_in_use: int | None = None
        self._checkpoint_seed: int | None = None
        self._checkpoint_signatures: list[dict[str, Any]] | None = None
        self._graph_signatures: list[dict[str, Any]] | None = None

    def fit_start(self, state: State, logger: Logger) -> None:
        loader = state.train_dataloader
        if not isinstance(loader, DataLoader) or not is_map_style(loader):
            return
        seed = self._agreed_seed(state, loader)
        self.seed_in_use = seed
        for node in iter_samplers(loader):
            if hasattr(node, 'seed'):
                node.seed = seed
        logger.log_hyperparameters({'data_seed': seed})
        self._check_signatures(loader)
        set_epoch_everywhere(loader, int(state.timestamp.epoch))
        self._resume_in_epoch(state, loader)

    def epoch_start(self, state: State, logger: Logger) -> None:
        loader = state.train_dataloader
        if isinstance(loader, DataLoader):
            set_epoch_everywhere(loader, int(state.timestamp.epoch))

    def state_dict(self) -> dict[str, Any]:
        return {
            'version': _STATE_VERSION,
            'data_seed': self.seed_in_use if self.seed_in_use is not None else self.data_seed,
            'order_signatures': self._graph_signatures,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._checkpoint_seed = state.get('data_seed')
        self._checkpoint_signatures = state.get('order_signatures')

    def _agreed_seed(self, state: State, loader: DataLoader) -> int:
        """The data seed, checked identical on every rank, together with the sharding check."""
        seed = self.data_seed if self.data_seed is not None else state.rank_zero_seed
        if self._checkpoint_seed is not None and self._checkpoint_seed != seed:
            warnings.warn(
                f'SamplerSync: the checkpoint was trained with data seed {self._checkpoint_seed}, this run asks '
                f'for {seed}; keeping {self._checkpoint_seed} so that the current epoch neither repeats nor '
                'skips samples',
                stacklevel=2,
            )
            seed = self._checkpoint_seed
        problem = None
        if self.check_sharding:
            problem = sharding_problem(active_root(loader), dist.get_world_size(), dist.get_global_rank())
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
            for key in sorted(set(before) | set(now)):
                if before.get(key) != now.get(key):
                    raise ValueError(
                        f'SamplerSync: the checkpoint was written with {before.get("sampler")} {key}='
                        f'{before.get(key)!r}, the train dataloader now has {key}={now.get(key)!r}; resuming '
                        'would skip or repeat samples. Resume with the same dataset and sampler settings',
                    )

    @staticmethod
    def _resume_in_epoch(state: State, loader: DataLoader) -> None:
        """Start every index sampler at the global sample offset, so Composer need not spin."""
        if int(state.timestamp.epoch) == 0 and int(state.timestamp.batch_in_epoch) == 0:
            return
        blocker = next(
            (
                node for node in iter_samplers(active_root(loader))
                if not supports_start_offset(node) and not keeps_child_order(node)
            ),
            None,
        )
        if blocker is not None:
            if int(state.timestamp.batch_in_epoch) > 0:
                log.warning(
                    'SamplerSync: %s cannot start at a sample offset, so Composer will load and skip the %d '
                    'batches already trained in this epoch. Use composer_sampling samplers (or give the class '
                    'keeps_child_order = True if it only groups the indices below it) to resume without it',
                    describe(blocker),
                    int(state.timestamp.batch_in_epoch),
                )
            return
        for node in iter_samplers(active_root(loader)):
            if supports_start_offset(node):
                node.set_sample_in_epoch(int(state.timestamp.sample_in_epoch))
        state.dataset_resumption['train'] = True
