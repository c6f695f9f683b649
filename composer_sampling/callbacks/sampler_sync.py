"""Seeds, epochs, resume position and RNG for every sampler (or streaming dataset) of the train dataloader: Composer's
events mapped onto :class:`~composer_sampling.DataOrder`."""

from __future__ import annotations

import weakref
from typing import Any

from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._resume.loaded import LoadedOrder
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.callbacks._composer_resume import composer_ranks, resume_in_epoch
from composer_sampling.callbacks._composer_rng import CheckpointRNG
from composer_sampling.callbacks._fit_graph import FitGraph, fit_graph, forget_fit_graph
from composer_sampling.callbacks._interrupted_save import refuse_at_init, set_aside_at_fit_start
from composer_sampling.callbacks._one_per_trainer import SecondCallbackError, refuse_a_second
from composer_sampling.callbacks._remote_saves import shared_start_problem
from composer_sampling.callbacks._top_tap import end_top_tap
from composer_sampling.data_order import DataOrder
from composer_sampling.errors import DataOrderError
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['DataOrderError', 'SamplerSync', 'SecondCallbackError']


class SamplerSync(Callback):
    """Keeps the whole sampler graph of the train dataloader in step with the trainer, and resumes it exactly.

    Composer calls ``set_epoch`` only on a ``DistributedSampler`` sitting directly at
    ``dataloader.sampler`` or ``dataloader.batch_sampler``, seeds it with ``0`` unless
    told otherwise, and resumes mid-epoch by loading every trained batch again. This
    callback closes those gaps:

    * ``FIT_START``: a fit that would train again what its save folder in an object
      store already holds is refused (a stale local copy autoresume took before the
      bucket's latest, or checkpoints without the latest pointer; see
      :mod:`~composer_sampling.callbacks._remote_saves`). The data seed is ``data_seed``, else the trainer's
      ``rank_zero_seed`` (never ``state.seed``, which differs per rank); it is
      checked to be identical on every rank and set as ``seed`` on every sampler of
      the graph that has one, as the seed of a fresh ``generator`` per epoch on a
      sampler that draws from one (torch's ``RandomSampler``), on every
      :class:`~composer_sampling.PerSampleRNG` of the dataset, and as
      ``shuffle_seed`` of a mosaicml-streaming ``StreamingDataset``. A seed (or
      generator) that differs from its class's default is replaced with a warning
      that says how to keep it. Every sampler gets ``set_epoch`` for the current
      epoch, once. With ``check_sharding``, a multi-rank run whose graph does not
      shard by rank as ``replication`` says is refused.
    * Resume: the train dataset's fingerprint must match the checkpoint's (a dataset
      of the same length with other content is refused unless ``allow_data_change``;
      see docs/resume.md, "The data a resume continues on"), and the graph's order
      signature (dataset length, shuffle) must match the checkpoint's. A fit that
      starts inside an epoch continues it without loading a trained sample again:
      samplers of ours start at the sample offset, any other graph skips the
      trained batches' indices (see
      :func:`~composer_sampling._resume.decide.continuation`), Composer's spin is
      switched off, and the checkpoint's RNG state is restored before the first
      batch, where the spin would have restored it. A resume that cannot continue
      exactly (another batch size or world size for a graph whose order depends on
      them) is refused before training, saying what would work.
    * ``EPOCH_START``: ``set_epoch(epoch)`` on every node that has it, at any depth,
      a new generator for the epoch, and the epoch of every ``PerSampleRNG``.

    Iterable datasets order themselves: a ``StreamingDataset`` gets the data seed,
    another iterable dataset with ``set_epoch`` gets the epoch, any other one a
    warning that it cannot be ordered. On resume the checkpointed data seed wins
    over the constructor's (a new seed in the middle of an epoch would repeat and
    skip samples), with a warning; a checkpoint written without this callback keeps
    the order of the epoch in flight and takes the data seed from the next epoch.
    One ``SamplerSync`` per Trainer, anywhere in ``callbacks``: its RNG copy is
    taken when a checkpoint is saved, at no batch that saves none.

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
        allow_data_change (bool): resume onto a train dataset whose fingerprint differs
            from the checkpoint's, with a warning, instead of refusing it. Default: ``False``.

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
                 print_summary: bool = False, allow_data_change: bool = False) -> None:
        if data_seed is not None:
            data_seed = valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.data_seed = data_seed
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.replication = valid_int('replication', replication, minimum=1)
        self.print_summary = valid_bool('print_summary', print_summary)
        self.allow_data_change = valid_bool('allow_data_change', allow_data_change)
        self._loaded: LoadedOrder | None = None  # the checkpoint's state, once loaded
        self._order: DataOrder | None = None  # created at the first fit start with a DataLoader
        self._fits = 0  # fits started
        self._took_over_spin = False  # this callback set dataset_resumption['train'] (a later fit decides afresh)
        self._state: weakref.ref[State] | None = None  # the trainer's state since the first fit start
        self._fit_graph = FitGraph()  # the fit start's snapshot, shared with the trainer's SampleLedger
        self._rng = CheckpointRNG()

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'replication={self.replication!r}, print_summary={self.print_summary!r}, '
                f'allow_data_change={self.allow_data_change!r})')

    @property
    def seed_in_use(self) -> int | None:
        """The data seed of the last fit start (None before the first)."""
        return None if self._order is None else self._order.seed

    # events -------------------------------------------------------------------------------------------

    def init(self, state: State, logger: Logger) -> None:
        refuse_a_second(SamplerSync, state, lambda count, syncs: (
            f'the Trainer has {count} SamplerSync callbacks ({", ".join(syncs)}); they would overwrite each '
            'other\'s seed in silence. Keep exactly one'))
        refuse_at_init(state, self)  # a save cut short that Composer's saver would refuse before fit_start
        self._rng.watch(None)

    def fit_start(self, state: State, logger: Logger) -> None:
        set_aside_at_fit_start(state, self)  # what a save cut short left, before Composer's saver checks the folder
        problem = shared_start_problem(state)
        if problem is not None:
            raise DataOrderError(f'SamplerSync: {problem}')
        self._fits += 1
        loaded = self._loaded
        adopting = self._fits == 1 and loaded is None and int(state.timestamp.batch) > 0
        self._rng.watch(state)
        self._state = weakref.ref(state)
        loader = state.train_dataloader
        if not isinstance(loader, DataLoader):
            return
        graph = fit_graph(state)
        order = self._order_for(loader)
        timestamp = state.timestamp
        epoch, in_flight = int(timestamp.epoch), int(timestamp.batch_in_epoch) > 0
        mid_epoch = in_flight and (state.dataloader_len is None or timestamp.batch_in_epoch < state.dataloader_len)
        seed = order.start(epoch, loader=loader, graph=graph, ranks=composer_ranks(), trainer_seed=state.rank_zero_seed,
                           in_flight=in_flight, mid_epoch=mid_epoch, adopting=adopting)
        logger.log_hyperparameters({'data_seed': seed})
        if graph.map_style:
            undo, self._took_over_spin = self._took_over_spin, False
            saved, replication = (None, self.replication) if loaded is None else (loaded.layout, loaded.replication)
            self._took_over_spin = resume_in_epoch(state, graph, saved, order.layout, replication, undo)
        self._rng.fit_start(state, spin_skipped='train' in state.dataset_resumption)
        self._summarize(order)

    def epoch_start(self, state: State, logger: Logger) -> None:
        self._rng.epoch_start()
        if self._order is not None and isinstance(state.train_dataloader, DataLoader):
            self._order.next_epoch(int(state.timestamp.epoch))

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._rng.before_dataloader()

    def fit_end(self, state: State, logger: Logger) -> None:
        end_top_tap(state)
        forget_fit_graph(state)

    # checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        rng = self._rng.state()
        order, state = self._order, None if self._state is None else self._state()
        if order is None or order.seed is None or state is None:
            return DataOrder.unstarted_state('composer', self.data_seed, self.replication,
                                             None if self._loaded is None else self._loaded.epoch_seeds)
        timestamp = state.timestamp
        return order.state_dict(trainer='composer', place=(int(timestamp.epoch), int(timestamp.batch_in_epoch), False),
                                rng=rng['rng'], rng_batch=rng['rng_batch'])

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads a state of any version SamplerSync wrote (1 to 6); keys an older version lacks get defaults."""
        loaded = self._loaded = LoadedOrder.read(state, reader='Composer SamplerSync')
        self._rng.load(state)
        if self._order is not None:
            self._order.resume_from(loaded)

    def _order_for(self, loader: DataLoader) -> DataOrder:
        """The callback's order, created with the first train dataloader (and the loaded checkpoint's state)."""
        if self._order is None:
            self._order = DataOrder(loader, self.data_seed, self.check_sharding, self.allow_data_change,
                                    replication=self.replication)
            if self._loaded is not None:
                self._order.resume_from(self._loaded)
        return self._order

    def _summarize(self, order: DataOrder) -> None:
        """The run summary, printed on rank 0 with ``print_summary``."""
        if not self.print_summary or dist.get_global_rank() != 0:
            return
        if self._loaded is not None and self._loaded.data_seed is not None:
            source = 'the checkpoint\'s'
        else:
            source = 'SamplerSync data_seed' if self.data_seed is not None else 'the trainer seed'
        print(order.summary(source), flush=True)
