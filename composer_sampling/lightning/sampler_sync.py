"""Seeds, epochs, resume position and RNG for every sampler of a Lightning train loader."""

from __future__ import annotations

import os
import warnings
from typing import Any

from torch.utils.data import DataLoader

from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import describe
from composer_sampling._resume import rng_state
from composer_sampling._resume.data_identity import agreed_fingerprint, check_data
from composer_sampling._resume.decide import Layout, Position, ResumeRefusedError, blockers
from composer_sampling._resume.place import current_layout, place_in_epoch, tap_at_top
from composer_sampling._resume.ranks import Ranks, torch_ranks
from composer_sampling._resume.redraw import BatchChain, head_check
from composer_sampling._resume.seeds import Seeder, agreed_seed, set_dataset_epochs
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.errors import DataOrderError
from composer_sampling.lightning._compat import CALLBACK_BASES
from composer_sampling.lightning._loop import Place, resume_place, saved_place
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
        self._fit: dict[str, Any] = {}  # seed, graph, layout, signatures, fingerprint, epoch_set, first, rng
        self._trainer: Any = None  # the trainer of the fit in progress, whose loops say where the fit stands
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

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._unwrap()  # Lightning calls no teardown after an exception in the fit

    def _unwrap(self) -> None:
        """Give the strategy its own ``process_dataloader`` back."""
        if self._wrapped is not None:
            strategy, own = self._wrapped
            strategy.process_dataloader = own
            self._wrapped = None

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        fit, epoch = self._fit, trainer.current_epoch
        first = fit.get('first')
        if first is not None and first.epoch != epoch:
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but Lightning starts epoch {epoch} '
                                 'before training a batch there; the samples would not be the ones Lightning expects')
        rng = fit.pop('rng_at_epoch', None)
        if rng is not None:
            rng_state.restore(rng)
        graph = fit.get('graph')
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
        if first is not None and (trainer.current_epoch, batch_idx) != (first.epoch, first.batches):
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but Lightning resumed at epoch '
                                 f'{trainer.current_epoch}, batch {batch_idx}; the samples would not be the ones '
                                 'Lightning expects')
        rng = fit.pop('rng', None)
        if rng is not None:
            rng_state.restore(rng)

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        first = self._fit.get('first')
        if first is not None and first.epoch == trainer.current_epoch:
            raise DataOrderError(f'SamplerSync placed the train loader at {first}, but Lightning ended epoch '
                                 f'{trainer.current_epoch} before training a batch there')

    # checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state a checkpoint keeps; every rank's RNG state is gathered (a collective on every rank, which
        Lightning's ``save_checkpoint`` runs on every rank).

        Where the fit stands is read from Lightning's loops, so the state is the same whichever callback saves the
        checkpoint, before or after this one's hooks.
        """
        fit, trainer = self._fit, self._trainer
        ranks = torch_ranks()
        rng = ranks.all_gather(rng_state.capture()) if 'seed' in fit else None
        digests = None
        if trainer is not None and 'seed' in fit:
            place, done = saved_place(trainer)
            where = Where(place.epoch, place.batches, done)
            _warn_between_steps(trainer, place, done)
            chain = fit.get('chain')
            if chain is not None:
                digests = ranks.all_gather(None if done else chain.after(place.batches))
        else:
            where = Where(0, 0, False)
        return lightning_state(fit.get('seed', self.data_seed), fit.get('signatures'),
                               fit.get('layout', Layout(None, None)), where, rng, fit.get('fingerprint'), digests)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        try:
            self._loaded = LoadedLightning.read(state_dict)
        except (TypeError, ValueError) as error:
            raise DataOrderError(str(error)) from None

    # placing the loader -------------------------------------------------------------------------------

    def _place(self, trainer: Any, loader: DataLoader) -> DataLoader:
        """Seed, give the epoch to and position the train loader Lightning is about to iterate; the loader it must
        iterate (a new one when a tap had to go on top of a batch sampler of yours)."""
        loaded, self._loaded = self._loaded, None
        ranks = torch_ranks()
        batches_in_epoch = _batches_in_epoch(loader, trainer)
        place, sampler_epoch = resume_place(trainer, batches_in_epoch)
        graph = take_snapshot(loader)
        trainer_seed = int(os.environ.get('PL_GLOBAL_SEED', '0'))
        try:
            seed = agreed_seed(trainer_seed, graph, self.data_seed, None if loaded is None else loaded.sync.data_seed,
                               self.check_sharding, 1, ranks)
        except ResumeRefusedError as error:
            raise DataOrderError(f'{error}{_LIGHTNING_SHARDING}') from None
        fingerprint = agreed_fingerprint(loader.dataset, ranks)
        fit = self._fit = {'seed': seed, 'graph': graph, 'epoch_set': place.epoch, 'fingerprint': fingerprint}
        try:
            if not graph.map_style:
                if loaded is not None:
                    check_data(loaded.sync.fingerprint, fingerprint, self.allow_data_change,
                               mid_epoch=0 < place.batches < batches_in_epoch,
                               required=loaded.sync.fingerprint_required,
                           older_rules=loaded.sync.fingerprint_rules_older)
                self._seeds.order_iterable(loader.dataset, seed, place.epoch, False, self.data_seed)
                return loader
            self._seeds.seed_graph(graph, seed, place.epoch, 0 < place.batches < batches_in_epoch, self.data_seed)
            fit['signatures'] = graph.signatures()
            if loaded is not None:
                loaded.sync.check_graph(fit['signatures'])  # names what changed in the order first
                check_data(loaded.sync.fingerprint, fingerprint, self.allow_data_change,
                           mid_epoch=0 < place.batches < batches_in_epoch, required=loaded.sync.fingerprint_required,
                           older_rules=loaded.sync.fingerprint_rules_older)
            fit['layout'] = now = current_layout(graph, 1, ranks.world_size)
            stateful = hasattr(loader, 'state_dict') and hasattr(loader, 'load_state_dict')
            saved = check_resume(trainer, place, batches_in_epoch, loaded, now, stateful)
            if 0 < place.batches < batches_in_epoch and sampler_epoch != place.epoch and not stateful:
                raise ResumeRefusedError(_epochs_disagree(place, sampler_epoch))
            graph.set_epoch(place.epoch)
            return self._resume(graph, loader, place, batches_in_epoch, loaded, saved, now, ranks, stateful)
        except ResumeRefusedError as error:
            raise DataOrderError(str(error)) from None

    def _resume(self, graph: GraphSnapshot, loader: DataLoader, place: Place, batches_in_epoch: float,
                loaded: LoadedLightning | None, saved: Layout, now: Layout, ranks: Ranks, stateful: bool) -> DataLoader:
        """Place the graph at ``place`` (a loader with its own state resumes itself); restore the RNG where the run
        that never stopped had it. The loader to iterate is returned."""
        ended = place.after_batches(batches_in_epoch)
        if place.batches and not stateful:
            self._fit['first'] = Place(place.epoch + 1, 0) if ended else place
        rebuilt: list[DataLoader] = []
        chain = self._fit['chain'] = BatchChain() if blockers(graph) and not stateful else None

        def top() -> Any:
            tap, new = tap_at_top(loader, graph, chain)
            if new is not None:
                rebuilt.append(new)
            return tap

        if place.batches == 0 or stateful:
            place_in_epoch(graph, Position(0, 0), None, now, top=lambda: None)  # clears an earlier fit's offset
            if chain is not None:
                top()  # the chain listens from the first batch
            self._pending_rng(loaded, place, ended, ranks)
            return rebuilt[0] if rebuilt else loader
        if ended:  # Lightning resumes at the epoch's end: the rest of this epoch is empty
            place_in_epoch(graph, Position(0, 0), None, now, top=lambda: None)
            tap = top()
            if tap is None:
                raise ResumeRefusedError(f'SamplerSync: Lightning resumes at the end of epoch {place.epoch} and may '
                                         f'draw one more batch from {type(loader).__name__}, whose top cannot be '
                                         'emptied; resume from the next epoch\'s first checkpoint')
            tap.set_window(0, 0)
        elif chain is not None:
            place_in_epoch(graph, Position(0, 0), None, now, top=lambda: None)  # clears an earlier fit's offset
            self._redraw(graph, place, loaded, saved, now, ranks, chain, top)
        else:
            samples = place.batches * (saved.global_batch or now.global_batch or 0)
            chosen = place_in_epoch(graph, Position(place.batches, samples), saved, now, top)
            if chosen.kind == 'spin':
                raise ResumeRefusedError(f'SamplerSync: {chosen.reason}, so the rest of epoch {place.epoch} cannot '
                                         f'continue after batch {place.batches} without drawing the trained batches '
                                         'again, and Lightning does not skip them; give it set_epoch(epoch), or use a '
                                         'sampler of ours')
        self._pending_rng(loaded, place, ended, ranks)
        return rebuilt[0] if rebuilt else loader

    @staticmethod
    def _redraw(graph: GraphSnapshot, place: Place, loaded: LoadedLightning | None, saved: Layout, now: Layout,
                ranks: Ranks, chain: BatchChain, top: Any) -> None:
        """Continue a graph that orders by nothing of ours: its trained batches are drawn again and dropped, once
        their digest matches the checkpoint's (see ``_resume/redraw.py``)."""
        found = blockers(graph)[0]
        digests = None if loaded is None else loaded.digests
        if digests is None or len(digests) != ranks.world_size or digests[ranks.rank] is None:
            why = ('holds no digest of the index lists trained before it (it was saved by an older release, on '
                   'another number of ranks, or long after its batches were drawn)')
            raise ResumeRefusedError(f'SamplerSync: {describe(found)} has neither set_epoch nor a generator, and the '
                                     f'checkpoint {why}, so the rest of epoch {place.epoch} cannot be checked to '
                                     f'continue after batch {place.batches}; give it set_epoch(epoch), or resume '
                                     'from a checkpoint saved at an epoch\'s end')
        if saved.global_batch not in (None, now.global_batch):
            raise ResumeRefusedError(f'SamplerSync: {describe(found)} decides the order of whole batches, so a resume '
                                     f'must continue at batch {place.batches} of the same batches: the checkpoint '
                                     f'trained {saved.global_batch} distinct samples a step, this run '
                                     f'{now.global_batch}. Resume with global batch {saved.global_batch}')
        tap = top()
        if tap is None:
            raise ResumeRefusedError(f'SamplerSync: {describe(found)} is the top of a loader SamplerSync cannot '
                                     'rebuild, so its trained batches cannot be drawn again')
        expected = digests[ranks.rank]
        assert expected is not None
        tap.set_window(place.batches * tap.group, None, head_check(expected, f'rank {ranks.rank}', chain))

    def _pending_rng(self, loaded: LoadedLightning | None, place: Place, ended: bool, ranks: Ranks) -> None:
        """This rank's RNG state of the checkpoint, restored where the run that never stopped had it: now, before
        Lightning creates the epoch's iterator, when the fit starts at an epoch's start; at the next epoch's start
        when it resumes at an epoch's end; else before the first batch, after the iterator Lightning creates here
        and the batch it draws ahead."""
        if loaded is None or loaded.rng is None:
            return
        if len(loaded.rng) != ranks.world_size:
            warnings.warn(f'SamplerSync: the checkpoint holds the RNG states of {len(loaded.rng)} ranks and this run '
                          f'has {ranks.world_size}, so the RNG state is not restored: dropout and random '
                          'augmentations continue from a new state, while the samples continue in their order',
                          stacklevel=3)
            return
        if place.batches == 0:
            rng_state.restore(loaded.rng[ranks.rank])
        elif ended:
            self._fit['rng_at_epoch'] = loaded.rng[ranks.rank]
        else:
            self._fit['rng'] = loaded.rng[ranks.rank]


def check_resume(trainer: Any, place: Place, batches_in_epoch: float, loaded: LoadedLightning | None, now: Layout,
                 stateful: bool) -> Layout:
    """Refuse a resume whose place Lightning's loop and the checkpoint's state disagree on, or which would not train
    every sample of the resumed epoch once; the layout the checkpoint trained with (this fit's when unknown).

    Raises:
        ResumeRefusedError: naming both places, the accumulation or the change of global batch.
    """
    inside = 0 < place.batches < batches_in_epoch
    if loaded is None:
        if inside and not stateful:
            raise ResumeRefusedError(
                f'SamplerSync: the checkpoint holds no SamplerSync state (it was saved without this callback), and '
                f'Lightning resumes it inside an epoch, at {place}: the order its batches were drawn in is not '
                'known, so the rest of the epoch would repeat or skip samples. Resume from a checkpoint saved at an '
                'epoch\'s end, or from one saved with SamplerSync in the callbacks')
        return now
    saved = loaded.where
    ended = saved.epoch_done or saved.batches >= batches_in_epoch or \
        trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
    if (place.epoch, place.batches) != (saved.epoch, saved.batches) and not (ended and place == Place(saved.epoch + 1,
                                                                                                        0)):
        raise ResumeRefusedError(
            f'SamplerSync: its state in the checkpoint was saved at epoch {saved.epoch} after {saved.batches} '
            f'batches{" (the epoch had ended)" if saved.epoch_done else ""}, but Lightning\'s loop resumes at '
            f'{place}; the state was edited, or comes from another checkpoint. Resume from a checkpoint '
            'SamplerSync saved, unedited')
    accumulate = int(getattr(trainer, 'accumulate_grad_batches', 1) or 1)
    if inside and place.batches % accumulate:
        raise ResumeRefusedError(
            f'SamplerSync: the checkpoint was saved at {place}, between two optimizer steps '
            f'(accumulate_grad_batches={accumulate}); Lightning\'s checkpoint holds no accumulated gradients, so '
            f'the resumed run would step with the gradients of {accumulate - place.batches % accumulate} batches '
            f'instead of {accumulate} and end with other weights. Resume from a checkpoint saved at an optimizer step '
            '(ModelCheckpoint(every_n_train_steps=...) saves only there)')
    saved_layout = loaded.sync.layout
    if inside and saved_layout.global_batch is not None and now.global_batch is not None and \
            now.global_batch > saved_layout.global_batch:
        change = (f'{saved_layout.data_parallel_ranks} ranks to {now.data_parallel_ranks}'
                  if saved_layout.data_parallel_ranks not in (None, now.data_parallel_ranks) else
                  f'a global batch of {saved_layout.global_batch} samples to {now.global_batch}')
        raise ResumeRefusedError(
            f'SamplerSync: the checkpoint was saved at {place} on {change}: Lightning counts the rest of the epoch '
            f'from batch {place.batches} of this run\'s {batches_in_epoch} and would end it before every sample '
            f'was trained. Resume inside an epoch on {saved_layout.data_parallel_ranks} ranks or fewer, with the '
            'same device batch, or from a checkpoint saved at an epoch\'s end')
    return saved_layout


def _epochs_disagree(place: Place, sampler_epoch: int) -> str:
    return (f'SamplerSync: the checkpoint was saved when max_steps stopped the fit inside epoch {place.epoch}, after '
            f'{place.batches} batches; Lightning resumes the rest of epoch {place.epoch} but gives the samplers epoch '
            f'{sampler_epoch}, so the rest of the epoch would be drawn in another order. Resume from the checkpoint '
            'ModelCheckpoint(every_n_train_steps=...) saved at that step, or from one saved at an epoch\'s end')


def _warn_between_steps(trainer: Any, place: Place, done: bool) -> None:
    """Warn when a checkpoint is saved between two optimizer steps: its resume will be refused."""
    accumulate = int(getattr(trainer, 'accumulate_grad_batches', 1) or 1)
    batches = getattr(trainer, 'num_training_batches', float('inf'))
    if not done and 0 < place.batches < batches and place.batches % accumulate:
        warnings.warn(f'SamplerSync: a checkpoint is saved at {place}, between two optimizer steps '
                      f'(accumulate_grad_batches={accumulate}); it holds no accumulated gradients, so SamplerSync '
                      'will refuse to resume from it. Save at optimizer steps '
                      '(ModelCheckpoint(every_n_train_steps=...))',
                      stacklevel=3)


def _batches_in_epoch(loader: DataLoader, trainer: Any) -> float:
    """The batches of an epoch of ``loader`` as Lightning counts them (``limit_train_batches`` applied; infinite when
    the loader has no length)."""
    try:
        length: float = len(loader)
    except TypeError:
        return float('inf')
    limit = getattr(trainer, 'limit_train_batches', None)
    if isinstance(limit, int) and not isinstance(limit, bool):
        return min(length, limit)
    if isinstance(limit, float) and limit < 1.0:
        return int(length * limit)
    return length
