"""The seeds SamplerSync gives a graph: the agreed data seed, every sampler's seed and generator, an adopted epoch."""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch

from composer_sampling._graph.seeding import (
    UNSEEDED_GENERATOR,
    default_seed,
    epoch_generator_seed,
    is_streaming_dataset,
)
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._graph.walk import describe, sharding_problem
from composer_sampling._resume.ranks import Ranks
from composer_sampling.errors import DataOrderError
from composer_sampling.protocols import EpochAware, supports

__all__ = ['Seeder', 'agreed_seed']

log = logging.getLogger('composer_sampling.callbacks.sampler_sync')


def agreed_seed(trainer_seed: int, graph: GraphSnapshot, asked: int | None, checkpoint_seed: int | None,
                check_sharding: bool, replication: int, ranks: Ranks) -> int:
    """The data seed, checked identical on every rank, together with the sharding check (a collective of ``ranks``).

    ``asked`` is SamplerSync's ``data_seed`` (None: ``trainer_seed``, rank 0's seed of the trainer); the
    checkpoint's seed wins over both.
    """
    seed = asked if asked is not None else trainer_seed
    if checkpoint_seed is not None and checkpoint_seed != seed:
        warnings.warn(
            f'SamplerSync: the checkpoint was trained with data seed {checkpoint_seed}, this run asks '
            f'for {seed}; keeping {checkpoint_seed} so that the current epoch neither repeats nor '
            'skips samples',
            stacklevel=3,
        )
        seed = checkpoint_seed
    problem = None
    if check_sharding and graph.map_style:
        problem = sharding_problem(graph.root, ranks.world_size, ranks.rank, replication, nodes=graph.active)
    gathered = ranks.all_gather((seed, problem))
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


class Seeder:
    """Seeds a graph from the data seed each epoch; warns once when that replaces a seed the user chose.

    ``asked`` is SamplerSync's ``data_seed``: replacing it by the checkpoint's has been said once already.
    """

    def __init__(self) -> None:
        self.epoch_seeds: dict[str, Any] | None = None  # the epoch in flight keeps these seeds (adoption)
        self._generators: dict[int, torch.Generator] = {}  # the generators given, by sampler id
        self._warned: set[tuple[Any, ...]] = set()

    def seed_graph(self, graph: GraphSnapshot, seed: int, epoch: int, in_flight: bool, asked: int | None) -> None:
        """Seed samplers, generators and per-sample RNGs; an adopted epoch in flight keeps its own seeds."""
        kept = self.epoch_seeds if self.epoch_seeds is not None and int(self.epoch_seeds['epoch']) == epoch \
            and in_flight else None
        samplers = graph.seeded()
        datasets = graph.per_sample_rngs()
        if kept is not None:
            for node, value in zip(samplers, kept.get('samplers', []), strict=False):
                node.seed = value
            for node, value in zip(datasets, kept.get('datasets', []), strict=False):
                node.seed = value
        else:
            self.epoch_seeds = None
            for node in samplers:
                self._reseed(node, 'seed', seed, asked)
            for node in datasets:
                node.seed = seed
        self.seed_generators(graph, seed, epoch)
        set_dataset_epochs(graph, epoch)

    def seed_generators(self, graph: GraphSnapshot, seed: int, epoch: int) -> None:
        """A fresh generator seeded from ``(seed, epoch)`` for every sampler that draws from one."""
        for node in graph.generator_nodes():
            current = node.generator
            if current is not None and current is not self._generators.get(id(node)):
                self._warn_users_generator(node, current, seed)
            generator = torch.Generator()
            generator.manual_seed(epoch_generator_seed(seed, epoch))
            node.generator = self._generators[id(node)] = generator

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

    def _reseed(self, node: Any, attribute: str, seed: int, asked: int | None) -> None:
        """Set ``node.<attribute> = seed``, warning once when that overwrites a seed the user chose."""
        old = getattr(node, attribute)
        if old == seed:
            return
        default = default_seed(node, attribute)
        key = (id(node), old, seed)
        if old != default and old != asked and key not in self._warned:
            self._warned.add(key)
            where = describe(node) if attribute == 'seed' else f'{type(node).__name__}.{attribute}'
            warnings.warn(
                f'SamplerSync: {where} had seed {old}; it now uses the data seed {seed} (the same on every rank). '
                f'To keep {old}, pass SamplerSync(data_seed={old}) (in a YAML: sampler_sync: {{data_seed: {old}}})',
                stacklevel=4,
            )
        setattr(node, attribute, seed)

    def adopt_epoch_in_flight(self, graph: GraphSnapshot, epoch: int, seed: int) -> None:
        """A checkpoint written without SamplerSync: the epoch in flight keeps the seeds its samplers have."""
        samplers = [node.seed for node in graph.seeded()]
        datasets = [node.seed for node in graph.per_sample_rngs()]
        self.epoch_seeds = {'epoch': epoch, 'samplers': samplers, 'datasets': datasets}
        lost = [describe(node) for node in graph.generator_nodes()]
        warnings.warn(
            f'SamplerSync: the checkpoint was written without SamplerSync; the rest of epoch {epoch} keeps the '
            f'order its samplers had (seeds {sorted(set(samplers + datasets)) or "none"}) and the data seed {seed} '
            f'applies from epoch {epoch + 1}'
            + (f'. {", ".join(lost)} drew epoch {epoch} from a generator that no checkpoint holds: the rest of that '
               'epoch is drawn again and may repeat or skip samples' if lost else ''),
            stacklevel=3,
        )

    def order_iterable(self, dataset: Any, seed: int, epoch: int, adopting: bool, asked: int | None) -> int:
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
            self._reseed(dataset, 'shuffle_seed', seed, asked)
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
        return seed


def set_dataset_epochs(graph: GraphSnapshot, epoch: int) -> None:
    """The epoch of every :class:`~composer_sampling.PerSampleRNG` of the dataset."""
    for node in graph.per_sample_rngs():
        node.set_epoch(epoch)
