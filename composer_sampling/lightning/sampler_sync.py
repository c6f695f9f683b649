"""Seeds, epochs, resume position and RNG for every sampler of a Lightning train loader: Lightning's events mapped
onto :class:`~composer_sampling.DataOrder`."""

from __future__ import annotations

import os
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._resume.loaded import LoadedOrder
from composer_sampling._resume.ranks import torch_ranks
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.data_order import DataOrder, TrainerTerms
from composer_sampling.errors import DataOrderError
from composer_sampling.lightning._compat import CALLBACK_BASES
from composer_sampling.lightning._loop import (
    batches_in_epoch_of,
    epochs_disagree,
    resume_place,
    saved_place,
    warn_between_steps,
)
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['SamplerSync']

#: How Lightning names what a refusal speaks of.
_LIGHTNING_TERMS = TrainerTerms(loop="Lightning's loop", accumulation='accumulate_grad_batches',
                                saved_at_steps='ModelCheckpoint(every_n_train_steps=...)')
#: What a refusal of a graph that does not shard by rank adds for a Lightning user.
_LIGHTNING_SHARDING = (' (with Lightning: Trainer(use_distributed_sampler=False) and '
                       'distribute(loader, trainer.world_size, trainer.global_rank), or a sampler of ours)')


class SamplerSync(*CALLBACK_BASES):  # type: ignore[misc]
    """Keeps the whole sampler graph of a Lightning train loader in step with the trainer, and resumes it exactly.

    Lightning calls ``set_epoch`` only on ``loader.sampler`` and
    ``loader.batch_sampler.sampler``, seeds its own ``DistributedSampler`` from
    ``PL_GLOBAL_SEED`` and nothing else, keeps no RNG state in its checkpoints, and
    restarts a plain DataLoader's epoch from its first batch after a mid-epoch
    checkpoint. This callback closes those gaps, for every node of the graph at any
    depth (custom batch samplers, batches of batches, :func:`~composer_sampling.distribute`):

    * when Lightning has built the train loader and before it iterates it (Lightning
      hands every train loader to its strategy's ``process_dataloader``, which this
      callback wraps for the fit): every sampler is seeded from one data seed
      (``data_seed``, else the seed given to ``seed_everything``, else refused),
      checked identical on every rank; a graph that does not shard by rank on several
      ranks is refused; every node gets ``set_epoch``; after a mid-epoch checkpoint
      the graph is placed at the next sample (our samplers start at it, any other
      graph skips the trained indices through a tap), so no trained sample is loaded
      again, and a resume into another order is refused;
    * at every later epoch start: ``set_epoch`` and the epoch's generators;
    * this rank's RNG state of the checkpoint, so that dropout continues bit for bit:
      at the first batch of a resumed epoch, or, when the fit starts at an epoch's
      start, before Lightning creates the epoch's iterator;
    * in the checkpoint: the data seed, the order signatures, where the fit stood and
      every rank's RNG state, as plain values (Lightning loads with ``weights_only``).

    A ``StatefulDataLoader`` (torchdata) resumes its own position from Lightning's
    checkpoint; it is seeded and given its epoch, not placed.

    A resume onto a train dataset whose fingerprint differs from the checkpoint's (the
    same length, other content) is refused unless ``allow_data_change``.

    Where the fit continues is read from Lightning's own loop (its restored progress
    counters, see ``_loop.py``) and checked against this callback's state; each hook
    only hands Lightning's event to the callback's :class:`~composer_sampling.DataOrder`.

    Args:
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``.
            Default: ``None``, the seed given to ``seed_everything`` (``PL_GLOBAL_SEED``).
        check_sharding (bool): refuse graphs that do not shard by rank. Default: ``True``.
        allow_data_change (bool): resume onto changed data with a warning instead of refusing it.
            Default: ``False``.
        replication (int): groups of ``replication`` consecutive ranks read the same data (tensor or sequence
            parallelism): samplers use ``num_replicas = world_size / replication``. Default: ``1``.
        print_summary (bool): print the run summary (data seed, sampler graph) on rank 0 when the loader is first
            placed. Default: ``False``.

    Example:
        >>> import lightning.pytorch as pl  # doctest: +SKIP
        >>> pl.seed_everything(17)  # doctest: +SKIP
        >>> trainer = pl.Trainer(max_epochs=2, callbacks=[SamplerSync()])  # doctest: +SKIP
    """

    def __init__(self, data_seed: int | None = None, check_sharding: bool = True,
                 allow_data_change: bool = False, *, replication: int = 1, print_summary: bool = False) -> None:
        super().__init__()
        self.data_seed = None if data_seed is None else valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.allow_data_change = valid_bool('allow_data_change', allow_data_change)
        self.replication = valid_int('replication', replication, minimum=1)
        self.print_summary = valid_bool('print_summary', print_summary)
        self._order: DataOrder | None = None  # created with the first train loader
        self._loaded: LoadedOrder | None = None  # the checkpoint's state, until the order takes it
        self._trainer: Any = None  # the trainer of the fit in progress, whose loops say where the fit stands
        self._wrapped: tuple[Any, Any] | None = None  # (strategy, its own process_dataloader) while fitting

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'allow_data_change={self.allow_data_change!r}, replication={self.replication!r}, '
                f'print_summary={self.print_summary!r})')

    @property
    def seed_in_use(self) -> int | None:
        """The data seed of the current (or last) fit, once its loader is placed."""
        return None if self._order is None else self._order.seed

    @property
    def data_order(self) -> DataOrder | None:
        """The :class:`~composer_sampling.DataOrder` of the train loader, once Lightning has built the loader."""
        return self._order

    # hooks ----------------------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != 'fit':
            return
        if self.data_seed is None and os.environ.get('PL_GLOBAL_SEED') is None:
            raise DataOrderError('SamplerSync has no data seed: call seed_everything(seed) before fitting (Lightning '
                                 'keeps it in PL_GLOBAL_SEED), or pass SamplerSync(data_seed=...)')
        self._unwrap()  # an earlier fit that raised before its teardown left its wrapper
        self._trainer = trainer
        strategy = trainer.strategy
        own = strategy.process_dataloader

        def process_dataloader(dataloader: Any) -> Any:
            dataloader = own(dataloader)
            if trainer.training and isinstance(dataloader, DataLoader):
                dataloader = self._place(trainer, dataloader)
            return dataloader

        strategy.process_dataloader = process_dataloader
        self._wrapped = (strategy, own)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self._unwrap()

    def on_after_setup(self, fabric: Any, module: Any) -> None:
        """Lightning Fabric calls this hook of its callbacks in ``fabric.setup``; a Trainer never does."""
        raise DataOrderError('SamplerSync is a callback of the Lightning Trainer; Lightning Fabric calls none of the '
                             'hooks it needs, so it would leave the data order alone. In a Fabric loop, use '
                             'composer_sampling.DataOrder(loader, data_seed=...) instead (docs/lightning.md, '
                             '"Lightning Fabric")')

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._unwrap()  # Lightning calls no teardown after an exception in the fit

    def _unwrap(self) -> None:
        """Give the strategy its own ``process_dataloader`` back."""
        if self._wrapped is not None:
            strategy, own = self._wrapped
            strategy.process_dataloader = own
            self._wrapped = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if self._order is not None:
            self._order.epoch_started(trainer.current_epoch)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._order is not None:
            self._order.before_batch(trainer.current_epoch, batch_idx)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        if self._order is not None:
            self._order.epoch_ended(trainer.current_epoch)

    # checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps; every rank's RNG state is gathered (a collective on every rank, which
        Lightning's ``save_checkpoint`` runs on every rank).

        Where the fit stands is read from Lightning's loops, so the state is the same whichever callback saves the
        checkpoint, before or after this one's hooks.
        """
        order, trainer = self._order, self._trainer
        if order is None or order.seed is None or trainer is None:
            return DataOrder.unstarted_state('lightning', self.data_seed, self.replication)
        place, done = saved_place(trainer)
        warn_between_steps(trainer, place, done)
        return order.state_dict(trainer='lightning', place=(place.epoch, place.batches, done))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        try:
            self._loaded = LoadedOrder.read(state_dict, reader='Lightning SamplerSync')
        except DataOrderError:
            raise
        except (TypeError, ValueError) as error:
            raise DataOrderError(str(error)) from None

    # placing the loader -------------------------------------------------------------------------------

    def _place(self, trainer: Any, loader: DataLoader) -> DataLoader:
        """Seed, give the epoch to and position the train loader Lightning is about to iterate; the loader it must
        iterate (a new one when a tap had to go on top of a batch sampler of yours)."""
        first = self._order is None
        order = self._order = self._order or DataOrder(loader, self.data_seed, self.check_sharding,
                                                       self.allow_data_change, replication=self.replication)
        if self._loaded is not None:
            order.resume_from(self._loaded)
            self._loaded = None
        batches_in_epoch = batches_in_epoch_of(loader, trainer)
        place, sampler_epoch = resume_place(trainer, batches_in_epoch)
        inside = 0 < place.batches < batches_in_epoch
        order.start(place.epoch, loader=loader, ranks=torch_ranks(),
                    trainer_seed=int(os.environ.get('PL_GLOBAL_SEED', '0')), in_flight=inside, mid_epoch=inside,
                    sharding_hint=_LIGHTNING_SHARDING)
        stateful = hasattr(loader, 'state_dict') and hasattr(loader, 'load_state_dict')
        if inside and sampler_epoch != place.epoch and not stateful:
            raise DataOrderError(epochs_disagree(place, sampler_epoch))
        placed = order.place(place, batches_in_epoch, accumulate=int(trainer.accumulate_grad_batches or 1),
                             last_batch_saved=trainer.fit_loop.epoch_loop.batch_progress.is_last_batch,
                             stateful=stateful, terms=_LIGHTNING_TERMS)
        if first and self.print_summary and torch_ranks().rank == 0:
            print(order.summary('SamplerSync data_seed' if self.data_seed is not None else 'seed_everything'),
                  flush=True)
        return placed

