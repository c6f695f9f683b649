"""Seeds, epochs, resume position and RNG for every sampler of a Lightning train loader."""

from __future__ import annotations

import os
import warnings
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._resume import rng_state
from composer_sampling._resume.data_identity import agreed_fingerprint, check_data
from composer_sampling._resume.decide import Layout, Position, ResumeRefusedError
from composer_sampling._resume.place import current_layout, place_in_epoch, tap_at_top
from composer_sampling._resume.ranks import Ranks, torch_ranks
from composer_sampling._resume.seeds import Seeder, agreed_seed, set_dataset_epochs
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.lightning._compat import CALLBACK_BASES
from composer_sampling.lightning._state import LoadedLightning, Where, lightning_state
from composer_sampling.permutation import MAX_DATA_SEED

__all__ = ['SamplerSync']

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

    Args:
        data_seed (int, optional): seed of the data order, in ``[0, 2**64 - 1]``.
            Default: ``None``, the seed given to ``seed_everything`` (``PL_GLOBAL_SEED``).
        check_sharding (bool): refuse graphs that do not shard by rank. Default: ``True``.
        allow_data_change (bool): resume onto changed data with a warning instead of refusing it.
            Default: ``False``.

    Example:
        >>> import lightning.pytorch as pl  # doctest: +SKIP
        >>> pl.seed_everything(17)  # doctest: +SKIP
        >>> trainer = pl.Trainer(max_epochs=2, callbacks=[SamplerSync()])  # doctest: +SKIP
    """

    def __init__(self, data_seed: int | None = None, check_sharding: bool = True,
                 allow_data_change: bool = False) -> None:
        super().__init__()
        self.data_seed = None if data_seed is None else valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.allow_data_change = valid_bool('allow_data_change', allow_data_change)
        self._loaded: LoadedLightning | None = None  # the checkpoint's state, until the loader is placed
        self._seeds = Seeder()
        self._fit: dict[str, Any] = {}  # seed, graph, layout, signatures, where, first (batch expected), rng
        self._wrapped: tuple[Any, Any] | None = None  # (strategy, its own process_dataloader) while fitting

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'allow_data_change={self.allow_data_change!r})')

    @property
    def seed_in_use(self) -> int | None:
        """The data seed of the current (or last) fit, once its loader is placed."""
        return self._fit.get('seed')

    # hooks ----------------------------------------------------------------------------------------------

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != 'fit':
            return
        if self.data_seed is None and os.environ.get('PL_GLOBAL_SEED') is None:
            raise ValueError('SamplerSync has no data seed: call seed_everything(seed) before fitting (Lightning keeps '
                             'it in PL_GLOBAL_SEED), or pass SamplerSync(data_seed=...)')
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
        if self._wrapped is not None:
            strategy, own = self._wrapped
            strategy.process_dataloader = own
            self._wrapped = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        fit, epoch = self._fit, trainer.current_epoch
        graph = fit.get('graph')
        fit['where'] = Where(epoch, 0, False)
        if graph is None or fit.get('epoch_set') == epoch:
            return  # placed at this epoch already (the first of the fit)
        fit['epoch_set'] = epoch
        if graph.map_style:
            self._seeds.seed_generators(graph, fit['seed'], epoch)
            graph.set_epoch(epoch)
            set_dataset_epochs(graph, epoch)
        else:
            self._seeds.order_iterable(graph.loader.dataset, fit['seed'], epoch, False, self.data_seed)

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        fit = self._fit
        first = fit.pop('first', None)
        if first is not None and batch_idx != first:
            raise RuntimeError(f'SamplerSync placed the train loader at batch {first} of epoch '
                               f'{trainer.current_epoch}, but Lightning resumed at batch {batch_idx}: a checkpoint '
                               'saved where this callback did not count the batches (its state was taken before '
                               'on_train_batch_end?); the samples would not be the ones Lightning expects')
        rng = fit.pop('rng', None)
        if rng is not None:
            rng_state.restore(rng)

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        where = self._fit.get('where')
        if where is not None:
            self._fit['where'] = Where(where.epoch, where.batches + 1, False)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        where = self._fit.get('where')
        if where is not None:
            self._fit['where'] = Where(where.epoch, where.batches, True)

    # checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps; every rank's RNG state is gathered (a collective on every rank, which
        Lightning's ``save_checkpoint`` runs on every rank)."""
        fit = self._fit
        rng = torch_ranks().all_gather(rng_state.capture()) if 'seed' in fit else None
        return lightning_state(fit.get('seed', self.data_seed), fit.get('signatures'),
                               fit.get('layout', Layout(None, None)), fit.get('where', Where(0, 0, False)), rng,
                               fit.get('fingerprint'))

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = LoadedLightning.read(state_dict)

    # placing the loader -------------------------------------------------------------------------------

    def _place(self, trainer: Any, loader: DataLoader) -> DataLoader:
        """Seed, give the epoch to and position the train loader Lightning is about to iterate; the loader it must
        iterate (a new one when a tap had to go on top of a batch sampler of yours)."""
        loaded, self._loaded = self._loaded, None
        ranks = torch_ranks()
        where = self._start(trainer, loaded)
        graph = take_snapshot(loader)
        if where.batches and where.batches >= _batches_in_epoch(loader):  # saved at the epoch's last batch
            where = Where(where.epoch + 1, 0, False)
        trainer_seed = int(os.environ.get('PL_GLOBAL_SEED', '0'))
        try:
            seed = agreed_seed(trainer_seed, graph, self.data_seed, None if loaded is None else loaded.sync.data_seed,
                               self.check_sharding, 1, ranks)
        except ResumeRefusedError as error:
            raise ResumeRefusedError(f'{error}{_LIGHTNING_SHARDING}') from None
        fingerprint = agreed_fingerprint(loader.dataset, ranks)
        fit = self._fit = {'seed': seed, 'graph': graph, 'where': where, 'epoch_set': where.epoch,
                           'fingerprint': fingerprint}
        if not graph.map_style:
            if loaded is not None:
                check_data(loaded.sync.fingerprint, fingerprint, self.allow_data_change, mid_epoch=where.batches > 0)
            self._seeds.order_iterable(loader.dataset, seed, where.epoch, False, self.data_seed)
            return loader
        self._seeds.seed_graph(graph, seed, where.epoch, where.batches > 0, self.data_seed)
        fit['signatures'] = graph.signatures()
        if loaded is not None:
            loaded.sync.check_graph(fit['signatures'])  # names what changed in the order first
            check_data(loaded.sync.fingerprint, fingerprint, self.allow_data_change, mid_epoch=where.batches > 0)
        fit['layout'] = now = current_layout(graph, 1, ranks.world_size)
        graph.set_epoch(where.epoch)
        placed = self._resume(graph, loader, where, loaded, now, ranks)
        if where.batches:
            fit['first'] = where.batches
        return placed

    @staticmethod
    def _start(trainer: Any, loaded: LoadedLightning | None) -> Where:
        """Where this fit starts: after the checkpoint's last trained batch (its next epoch when it had ended)."""
        if loaded is None:
            return Where(trainer.current_epoch, 0, False)
        saved = loaded.where
        return Where(saved.epoch + 1, 0, False) if saved.epoch_done else Where(saved.epoch, saved.batches, False)

    def _resume(self, graph: GraphSnapshot, loader: DataLoader, where: Where, loaded: LoadedLightning | None,
                now: Layout, ranks: Ranks) -> DataLoader:
        """Place the graph at ``where`` (a loader with its own state resumes itself); restore the RNG at the first
        batch. The loader to iterate is returned."""
        stateful = hasattr(loader, 'state_dict') and hasattr(loader, 'load_state_dict')
        if where.batches == 0 or loaded is None or stateful:
            place_in_epoch(graph, Position(0, 0), None, now, top=lambda: None)  # clears an earlier fit's offset
            self._pending_rng(loaded, where, ranks)
            return loader
        rebuilt: list[DataLoader] = []

        def top() -> Any:
            tap, new = tap_at_top(loader, graph)
            if new is not None:
                rebuilt.append(new)
            return tap

        samples = where.batches * (now.global_batch or 0)
        chosen = place_in_epoch(graph, Position(where.batches, samples), loaded.sync.layout, now, top)
        if chosen.kind == 'spin':
            raise ResumeRefusedError(f'SamplerSync: {chosen.reason}, so the rest of epoch {where.epoch} cannot '
                                     f'continue after batch {where.batches} without drawing the trained batches '
                                     'again, and Lightning does not skip them; give it set_epoch(epoch), or use a '
                                     'sampler of ours')
        self._pending_rng(loaded, where, ranks)
        return rebuilt[0] if rebuilt else loader

    def _pending_rng(self, loaded: LoadedLightning | None, where: Where, ranks: Ranks) -> None:
        """This rank's RNG state of the checkpoint: restored now, before Lightning creates the epoch's iterator,
        when the fit starts at an epoch's start (the run that never stopped created it after the checkpoint); else
        before the first batch, after the iterator Lightning creates here and the batch it draws ahead."""
        if loaded is None or loaded.rng is None:
            return
        if len(loaded.rng) != ranks.world_size:
            warnings.warn(f'SamplerSync: the checkpoint holds the RNG states of {len(loaded.rng)} ranks and this run '
                          f'has {ranks.world_size}, so the RNG state is not restored: dropout and random '
                          'augmentations continue from a new state (the samples are the same)', stacklevel=3)
            return
        if where.batches == 0:
            rng_state.restore(loaded.rng[ranks.rank])
        else:
            self._fit['rng'] = loaded.rng[ranks.rank]


def _batches_in_epoch(loader: DataLoader) -> float:
    """The batches of an epoch of ``loader`` (infinite when it has no length)."""
    try:
        return len(loader)
    except TypeError:
        return float('inf')
