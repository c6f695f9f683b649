"""Seeds, epochs, resume position and RNG for every sampler (or streaming dataset) of the train dataloader."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
from composer.core import Callback, State
from composer.loggers import Logger
from composer.utils import dist
from torch.utils.data import DataLoader

from composer_sampling._checkpoint.envelope import VersionPolicy, read_state, write_state
from composer_sampling._graph.index_tap import IndexTap, install_tap
from composer_sampling._graph.seeding import (
    UNSEEDED_GENERATOR,
    default_seed,
    epoch_generator_seed,
    is_streaming_dataset,
)
from composer_sampling._graph.signatures import signature_difference
from composer_sampling._graph.snapshot import GraphSnapshot, take_snapshot
from composer_sampling._graph.walk import describe, is_map_style, sharding_problem
from composer_sampling._resume_plan import Layout, Position, ResumePlan, ResumeRefusedError, plan_resume
from composer_sampling._validate import valid_bool, valid_int
from composer_sampling.callbacks._checkpoint_rng import CheckpointRNG
from composer_sampling.callbacks._fit_graph import fit_graph, forget_fit_graph
from composer_sampling.callbacks._top_tap import end_top_tap, top_tap
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.protocols import is_epoch_aware, is_offsettable

__all__ = ['DataOrderError', 'SamplerSync']

log = logging.getLogger(__name__)



def _upgrade(version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """A version 1 or 2 payload in version 3's meaning: before 3, 'global_batch' counted every rank's samples."""
    if version < 3 and payload.get('global_batch') is not None:
        replication = valid_int('SamplerSync state replication', payload.get('replication', 1), minimum=1)
        payload['global_batch'] = valid_int('SamplerSync state global_batch', payload['global_batch'], minimum=1) \
            // replication
    return payload


# 3: 'global_batch' counts distinct samples a step (device batch x world size / replication); adds
# 'data_parallel_ranks', the RNG copy ('rng', 'rng_batch') and 'epoch_seeds'. 2 added 'replication' and
# 'global_batch'. Versions 1 and 2 load with defaults (version 1 states without 'version').
_STATE = VersionPolicy(current=3, missing_version=1, upgrade=_upgrade)


def _saved_layout(saved: Layout | None, position: Position) -> Layout | None:
    """The checkpoint's layout; a state before version 2 did not record its global batch, but the timestamp does.

    Mid-epoch every trained batch is whole, so the distinct samples trained over the
    batches trained is the global batch the checkpoint ran with.
    """
    if saved is None or saved.global_batch is not None or position.batches == 0 or position.samples % position.batches:
        return saved
    return Layout(position.samples // position.batches, saved.data_parallel_ranks)


class DataOrderError(ValueError):
    """A train dataloader or checkpoint ``SamplerSync`` refuses at fit start: the message says what would work."""


class SamplerSync(Callback):
    """Keeps the whole sampler graph of the train dataloader in step with the trainer, and resumes it exactly.

    Composer calls ``set_epoch`` only on a ``DistributedSampler`` sitting directly at
    ``dataloader.sampler`` or ``dataloader.batch_sampler``, seeds it with ``0`` unless
    told otherwise, and resumes mid-epoch by loading every trained batch again. This
    callback closes those gaps:

    * ``FIT_START``: the data seed is ``data_seed``, else the trainer's
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
    * Resume: the graph's order signature (dataset length, shuffle) must match the
      checkpoint's. A fit that starts inside an epoch continues it without loading
      a trained sample again: samplers of ours start at the sample offset, any other
      graph skips the trained batches' indices (see
      :func:`~composer_sampling._resume_plan.plan_resume`), Composer's spin is
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
    One ``SamplerSync`` per Trainer, placed before any ``CheckpointSaver`` in
    ``callbacks`` (the Trainer's own saver comes last).

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
            data_seed = valid_int('data_seed', data_seed, 0, MAX_DATA_SEED)
        self.data_seed = data_seed
        self.check_sharding = valid_bool('check_sharding', check_sharding)
        self.replication = valid_int('replication', replication, minimum=1)
        self.print_summary = valid_bool('print_summary', print_summary)
        self.seed_in_use: int | None = None
        self._checkpoint_seed: int | None = None
        self._checkpoint_signatures: list[dict[str, Any]] | None = None
        self._checkpoint_replication: int | None = None
        self._checkpoint_layout: Layout | None = None
        self._loaded = False
        self._fits = 0
        self._layout = Layout(None, None)
        self._graph_signatures: list[dict[str, Any]] | None = None
        self._graph: GraphSnapshot | None = None  # the train dataloader's graph at the last fit start
        self._epoch_set_at_fit_start: int | None = None
        self._set_resumption = False
        self._epoch_seeds: dict[str, Any] | None = None  # the epoch in flight keeps these seeds (adoption)
        self._generators: dict[int, torch.Generator] = {}  # the generators this callback gave, by sampler id
        self._rng = CheckpointRNG()
        self._warned: set[tuple[Any, ...]] = set()

    def __repr__(self) -> str:
        return (f'SamplerSync(data_seed={self.data_seed!r}, check_sharding={self.check_sharding!r}, '
                f'replication={self.replication!r}, print_summary={self.print_summary!r})')

    # events -------------------------------------------------------------------------------------------

    def fit_start(self, state: State, logger: Logger) -> None:
        _refuse_another_sync(self, state)
        self._fits += 1
        adopting = self._fits == 1 and not self._loaded and int(state.timestamp.batch) > 0
        self._rng.capture_enabled = dist.get_world_size() == 1 or _has_checkpoint_saver(state)
        self._warn_a_saver_before_this(state)
        loader = state.train_dataloader
        if not isinstance(loader, DataLoader):
            return
        graph = self._graph = fit_graph(state)
        map_style = graph.map_style
        seed = self._agreed_seed(state, graph)
        epoch = int(state.timestamp.epoch)
        self._epoch_set_at_fit_start = epoch
        if not map_style:
            self.seed_in_use = self._order_iterable(loader.dataset, seed, epoch, adopting)
            logger.log_hyperparameters({'data_seed': self.seed_in_use})
            self._rng.fit_start(state, spin_skipped='train' in state.dataset_resumption)
            self._print_summary(graph, self.seed_in_use, map_style=False)
            return
        self.seed_in_use = seed
        logger.log_hyperparameters({'data_seed': seed})
        if adopting and int(state.timestamp.batch_in_epoch) > 0:
            self._adopt_epoch_in_flight(graph, epoch, seed)
        self._seed_graph(graph, seed, epoch, in_flight=int(state.timestamp.batch_in_epoch) > 0)
        self._check_signatures(graph)
        self._layout = self._current_layout(graph)
        graph.set_epoch(epoch)
        spin_skipped = self._resume_in_epoch(state, graph)
        self._rng.fit_start(state, spin_skipped=spin_skipped)
        self._print_summary(graph, seed, map_style=True)

    def epoch_start(self, state: State, logger: Logger) -> None:
        self._rng.epoch_start()
        loader = state.train_dataloader
        epoch = int(state.timestamp.epoch)
        set_at_fit_start, self._epoch_set_at_fit_start = self._epoch_set_at_fit_start, None
        if not isinstance(loader, DataLoader):
            return
        if not is_map_style(loader):
            if set_at_fit_start != epoch and is_epoch_aware(loader.dataset) and \
                    not is_streaming_dataset(loader.dataset):
                loader.dataset.set_epoch(epoch)
            return
        seed = self.seed_in_use if self.seed_in_use is not None else 0
        graph = self._graph if self._graph is not None and self._graph.loader is loader else take_snapshot(loader)
        if self._epoch_seeds is not None and epoch > int(self._epoch_seeds['epoch']):
            self._epoch_seeds = None  # the epoch that kept its samplers' own seeds is over
            self._seed_graph(graph, seed, epoch, in_flight=False)
        else:
            self._seed_generators(graph, seed, epoch)  # Composer's spin may have drawn from them since fit start
        if set_at_fit_start != epoch:  # fit start has just set it otherwise: once per node per epoch
            graph.set_epoch(epoch)
            self._set_dataset_epochs(graph, epoch)

    def before_dataloader(self, state: State, logger: Logger) -> None:
        self._rng.before_dataloader()

    def batch_checkpoint(self, state: State, logger: Logger) -> None:
        self._rng.checkpoint_event(state)

    def epoch_checkpoint(self, state: State, logger: Logger) -> None:
        self._rng.checkpoint_event(state)

    def iteration_checkpoint(self, state: State, logger: Logger) -> None:
        self._rng.checkpoint_event(state)

    def fit_end(self, state: State, logger: Logger) -> None:
        end_top_tap(state)
        forget_fit_graph(state)

    # checkpoints --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return write_state(_STATE.current, {
            'data_seed': self.seed_in_use if self.seed_in_use is not None else self.data_seed,
            'order_signatures': self._graph_signatures,
            'replication': self.replication,
            'global_batch': self._layout.global_batch,
            'data_parallel_ranks': self._layout.data_parallel_ranks,
            'epoch_seeds': self._epoch_seeds,
            **self._rng.state(),
        })

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Loads a state of any version SamplerSync wrote (1 to 3); keys an older version lacks get defaults."""
        state = read_state(state, 'SamplerSync', _STATE, error=DataOrderError)
        seed = state.get('data_seed')
        if seed is not None:
            seed = valid_int('SamplerSync state data_seed', seed, 0, MAX_DATA_SEED)
        signatures = state.get('order_signatures')
        if signatures is not None and (
            not isinstance(signatures, list) or not all(isinstance(item, dict) for item in signatures)
        ):
            raise TypeError(
                f'SamplerSync state order_signatures must be a list of dicts or None, got {signatures!r:.200}',
            )
        replication = valid_int('SamplerSync state replication', state.get('replication', 1), minimum=1)
        global_batch = state.get('global_batch')
        if global_batch is not None:
            global_batch = valid_int('SamplerSync state global_batch', global_batch, minimum=1)
        ranks = state.get('data_parallel_ranks')
        if ranks is not None:
            ranks = valid_int('SamplerSync state data_parallel_ranks', ranks, minimum=1)
        epoch_seeds = state.get('epoch_seeds')
        if epoch_seeds is not None and not (isinstance(epoch_seeds, dict) and 'epoch' in epoch_seeds):
            raise TypeError(f'SamplerSync state epoch_seeds must be a dict with an epoch or None, got '
                            f'{epoch_seeds!r:.200}')
        self._rng.load(state)
        self._checkpoint_seed = seed
        self._checkpoint_signatures = signatures
        self._checkpoint_replication = replication
        self._checkpoint_layout = Layout(global_batch, ranks)
        self._epoch_seeds = epoch_seeds
        self._loaded = True

    # seeds --------------------------------------------------------------------------------------------

    def _seed_graph(self, graph: GraphSnapshot, seed: int, epoch: int, in_flight: bool) -> None:
        """Seed samplers, generators and per-sample RNGs; an adopted epoch in flight keeps its own seeds."""
        kept = self._epoch_seeds if self._epoch_seeds is not None and int(self._epoch_seeds['epoch']) == epoch \
            and in_flight else None
        samplers = graph.seeded()
        datasets = graph.per_sample_rngs()
        if kept is not None:
            for node, value in zip(samplers, kept.get('samplers', []), strict=False):
                node.seed = value
            for node, value in zip(datasets, kept.get('datasets', []), strict=False):
                node.seed = value
        else:
            self._epoch_seeds = None
            for node in samplers:
                self._reseed(node, 'seed', seed)
            for node in datasets:
                node.seed = seed
        self._seed_generators(graph, seed, epoch)
        self._set_dataset_epochs(graph, epoch)

    def _seed_generators(self, graph: GraphSnapshot, seed: int, epoch: int) -> None:
        """A fresh generator seeded from ``(seed, epoch)`` for every sampler that draws from one."""
        for node in graph.generator_nodes():
            current = node.generator
            if current is not None and current is not self._generators.get(id(node)):
                self._warn_users_generator(node, current, seed)
            generator = torch.Generator()
            generator.manual_seed(epoch_generator_seed(seed, epoch))
            node.generator = self._generators[id(node)] = generator

    def _set_dataset_epochs(self, graph: GraphSnapshot, epoch: int) -> None:
        for node in graph.per_sample_rngs():
            node.set_epoch(epoch)

    def _warn_users_generator(self, node: Any, generator: torch.Generator, seed: int) -> None:
        chosen = generator.initial_seed()
        key = (id(node), 'generator', chosen, seed)
        if chosen in (UNSEEDED_GENERATOR, seed) or key in self._warned:
            return
        self._warned.add(key)
        warnings.warn(
            f'SamplerSync: {describe(node)} had a generator seeded {chosen}; it now draws every epoch from a '
            f'generator seeded from the data seed {seed} and the epoch (the same on every rank). To keep {chosen}, '
            f'pass SamplerSync(data_seed={chosen}) (in a YAML: sampler_sync: {{data_seed: {chosen}}})',
            stacklevel=4,
        )

    def _reseed(self, node: Any, attribute: str, seed: int) -> None:
        """Set ``node.<attribute> = seed``, warning once when that overwrites a seed the user chose."""
        old = getattr(node, attribute)
        if old == seed:
            return
        default = default_seed(node, attribute)
        key = (id(node), old, seed)
        asked = self.data_seed  # a seed this run asked for, replaced by the checkpoint's: already said once
        if old != default and old != asked and key not in self._warned:
            self._warned.add(key)
            where = describe(node) if attribute == 'seed' else f'{type(node).__name__}.{attribute}'
            warnings.warn(
                f'SamplerSync: {where} had seed {old}; it now uses the data seed {seed} (the same on every rank). '
                f'To keep {old}, pass SamplerSync(data_seed={old}) (in a YAML: sampler_sync: {{data_seed: {old}}})',
                stacklevel=4,
            )
        setattr(node, attribute, seed)

    def _adopt_epoch_in_flight(self, graph: GraphSnapshot, epoch: int, seed: int) -> None:
        """A checkpoint written without SamplerSync: the epoch in flight keeps the seeds its samplers have."""
        samplers = [node.seed for node in graph.seeded()]
        datasets = [node.seed for node in graph.per_sample_rngs()]
        self._epoch_seeds = {'epoch': epoch, 'samplers': samplers, 'datasets': datasets}
        lost = [describe(node) for node in graph.generator_nodes()]
        warnings.warn(
            f'SamplerSync: the checkpoint was written without SamplerSync; the rest of epoch {epoch} keeps the '
            f'order its samplers had (seeds {sorted(set(samplers + datasets)) or "none"}) and the data seed {seed} '
            f'applies from epoch {epoch + 1}'
            + (f'. {", ".join(lost)} drew epoch {epoch} from a generator that no checkpoint holds: the rest of that '
               'epoch is drawn again and may repeat or skip samples' if lost else ''),
            stacklevel=3,
        )

    def _order_iterable(self, dataset: Any, seed: int, epoch: int, adopting: bool) -> int:
        """Seed a streaming dataset, give the epoch to one with ``set_epoch``, warn about any other; the seed used."""
        if is_streaming_dataset(dataset):
            if adopting:  # the stream resumed with the seed of a run without SamplerSync: it keeps it to the end
                warnings.warn(
                    f'SamplerSync: the checkpoint was written without SamplerSync; {type(dataset).__name__} keeps '
                    f'shuffle_seed {dataset.shuffle_seed} it resumed with for the rest of the run (not the data '
                    f'seed {seed})',
                    stacklevel=3,
                )
                return int(dataset.shuffle_seed)
            self._reseed(dataset, 'shuffle_seed', seed)
            log.info('SamplerSync: %s shuffles with seed %d', type(dataset).__name__, seed)
        elif is_epoch_aware(dataset):
            dataset.set_epoch(epoch)
        else:
            warnings.warn(
                f'SamplerSync cannot order {type(dataset).__name__}: an iterable dataset orders itself, and this one '
                'has neither set_epoch nor a shuffle_seed SamplerSync knows. Give it set_epoch(epoch) to be told '
                'the epoch, and seed it from the trainer seed yourself',
                stacklevel=3,
            )
        return seed

    def _agreed_seed(self, state: State, graph: GraphSnapshot) -> int:
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
        if self.check_sharding and graph.map_style:
            problem = sharding_problem(graph.root, dist.get_world_size(), dist.get_global_rank(), self.replication,
                                       nodes=graph.active)
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
            raise DataOrderError(f'SamplerSync (rank {rank}): {text}')
        return seed

    # resume -------------------------------------------------------------------------------------------

    def _check_signatures(self, graph: GraphSnapshot) -> None:
        current = graph.signatures()
        self._graph_signatures = current
        saved = self._checkpoint_signatures
        if not saved:
            return
        if len(saved) != len(current):
            raise DataOrderError(
                f'SamplerSync: the checkpoint was written with samplers {saved}, the train dataloader now has '
                f'{current}; resuming would skip or repeat samples. Resume with the same sampler graph',
            )
        for before, now in zip(saved, current, strict=True):
            if before.get('sampler') != now.get('sampler'):
                raise DataOrderError(
                    f'SamplerSync: the checkpoint was written with the sampler {before.get("sampler")}, the train '
                    f'dataloader now has {now.get("sampler")}; resuming would skip or repeat samples. Resume with '
                    f'{before.get("sampler")}',
                )
            difference = signature_difference(before, now)
            if difference:
                key, was, is_now = difference
                raise DataOrderError(
                    f'SamplerSync: the checkpoint was written with {before.get("sampler")} {key}={was!r}, the '
                    f'train dataloader now has {key}={is_now!r}; resuming would skip or repeat samples. Resume '
                    'with the same dataset and sampler settings',
                )

    def _current_layout(self, graph: GraphSnapshot) -> Layout:
        ranks = max(dist.get_world_size() // self.replication, 1)
        size = graph.device_batch()
        return Layout(None if size is None else size * ranks, ranks)

    def _resume_in_epoch(self, state: State, graph: GraphSnapshot) -> bool:
        """Continue the epoch at the next sample without Composer's spin; whether the spin is skipped."""
        if self._set_resumption:  # set by an earlier fit of this trainer: decide afresh
            state.dataset_resumption.pop('train', None)
            self._set_resumption = False
        loader, root = graph.loader, graph.root
        for node in graph.active:  # no offset or window of an earlier fit (reset_time, ...) survives
            if is_offsettable(node):
                node.set_sample_in_epoch(0)
            elif isinstance(node, IndexTap):
                node.set_window(0)
        replication = self._checkpoint_replication or self.replication
        position = Position(int(state.timestamp.batch_in_epoch), int(state.timestamp.sample_in_epoch) // replication,
                            int(state.dataloader_len) if _is_subset(state, loader) else None)
        saved = _saved_layout(self._checkpoint_layout, position)
        try:
            plan = plan_resume(loader, position, saved, self._layout, graph=graph)
        except ResumeRefusedError as error:
            raise DataOrderError(f'SamplerSync: {error}') from None
        if plan.kind in ('window', 'offset') and plan.edge is None and (plan.skip or plan.limit is not None):
            tap = top_tap(state)
            if tap is None:
                plan = ResumePlan('spin', reason=f'{describe(root)} is the top of a {type(loader).__name__}, which '
                                                 'SamplerSync cannot rebuild')
            else:
                tap.set_window(plan.skip * tap.group, None if plan.limit is None else plan.limit * tap.group)
        elif plan.edge is not None:
            parent, attribute = plan.edge
            install_tap(parent, attribute).set_window(plan.skip, plan.limit)
        if plan.kind == 'spin':
            return self._keep_spin(state, plan, position, saved)
        if plan.kind == 'offset':
            for node in graph.active:
                if is_offsettable(node):
                    node.set_sample_in_epoch(plan.offset)
        if (position.batches or int(state.timestamp.epoch)) and 'train' not in state.dataset_resumption:
            state.dataset_resumption['train'] = True  # nothing to spin: every sampler is placed
            self._set_resumption = True
        return 'train' in state.dataset_resumption

    def _keep_spin(self, state: State, plan: ResumePlan, position: Position, saved: Layout | None) -> bool:
        if position.batches == 0:
            return 'train' in state.dataset_resumption
        if saved is not None and saved.global_batch not in (None, self._layout.global_batch):
            raise DataOrderError(
                f'SamplerSync: Composer would resume by skipping {position.batches} batches of the new global batch '
                f'{self._layout.global_batch}, but the checkpoint trained them with {saved.global_batch} distinct '
                f'samples a step ({plan.reason}); the rest of the epoch would repeat or skip samples. Resume with '
                f'global batch {saved.global_batch} (device batch x world size / replication), or give that sampler '
                'set_epoch so that SamplerSync resumes it without the spin',
            )
        log.warning(
            'SamplerSync: %s, so Composer will load and skip the %d batches already trained in this epoch. Give it '
            'set_epoch(epoch) if its order depends only on the epoch, and SamplerSync resumes it without loading them',
            plan.reason, position.batches,
        )
        return 'train' in state.dataset_resumption

    # messages -----------------------------------------------------------------------------------------

    def _warn_a_saver_before_this(self, state: State) -> None:
        from composer.callbacks import CheckpointSaver

        position = next(i for i, callback in enumerate(state.callbacks) if callback is self)
        if any(isinstance(callback, CheckpointSaver) for callback in state.callbacks[:position]):
            self._warn_once(('saver',), 'SamplerSync comes after a CheckpointSaver in callbacks, so the RNG state '
                                        'it saves is one event old and a resume cannot restore it; put SamplerSync '
                                        'before the CheckpointSaver')

    def _warn_once(self, key: tuple[Any, ...], text: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            warnings.warn(text, stacklevel=4)

    def _print_summary(self, graph: GraphSnapshot, seed: int, map_style: bool) -> None:
        if not self.print_summary or dist.get_global_rank() != 0:
            return
        from composer_sampling._proofs.summary import summarize

        if self._loaded and self._checkpoint_seed is not None:
            source = 'the checkpoint\'s'
        else:
            source = 'SamplerSync data_seed' if self.data_seed is not None else 'the trainer seed'
        if map_style:
            print(summarize(graph.loader, data_seed=seed, seed_source=source, graph=graph), flush=True)
        else:
            dataset = graph.loader.dataset
            print(f'composer-sampling run summary\n  data seed  {seed} ({source})\n  dataset    '
                  f'{type(dataset).__name__}, an iterable dataset that orders itself'
                  + (f' with shuffle_seed {dataset.shuffle_seed}' if is_streaming_dataset(dataset) else ''),
                  flush=True)


def _has_checkpoint_saver(state: State) -> bool:
    from composer.callbacks import CheckpointSaver

    return any(isinstance(callback, CheckpointSaver) for callback in state.callbacks)


def _refuse_another_sync(callback: SamplerSync, state: State) -> None:
    syncs = [cb for cb in state.callbacks if isinstance(cb, SamplerSync)]
    if len(syncs) > 1:
        raise DataOrderError(
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
