"""The datasets and DataLoaders of a resolved recipe: what ``plan`` and ``train`` both build.

Datasets are built, never indexed (but for ``dataset[0]`` when a duration counts
tokens): :func:`build_data` returns the train and held-out splits (and, for a
sampler whose entry ``takes_sources``, the sources), checked by
:func:`~composer_sampling.recipes.checks.check_data`. :func:`build_train_loader`
builds one rank's train loader from the sampler part; :func:`build_eval_loader` the
held-out loader.

Example:
    >>> from composer_sampling.recipes.checks import checked_spec
    >>> from composer_sampling.recipes.resolve import resolve
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> spec = resolve(load_recipe(None, ['train_loader.dataset={name: synthetic, size: 100}']))
    >>> data = build_data(spec, checked_spec(spec, world_size=1).batch_sizes)
    >>> len(data.train), len(data.held_out)
    (80, 20)
"""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass
from typing import Any

from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, Sampler, Subset

from composer_sampling._validate import is_integer
from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.builders import bound_builder, run_builder
from composer_sampling.recipes.checks import check_data
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.distribute import rebuild_loader
from composer_sampling.samplers.nested import NestedBatchSampler

__all__ = ['Data', 'Placement', 'Split', 'build_data', 'build_eval_loader', 'build_train_loader', 'cut_held_out',
           'is_batch_sampler', 'split_into_sources', 'worker_start']


@dataclass(frozen=True)
class Data:
    """The train and held-out splits; ``sources`` when the train split is the sources of a mixture."""

    train: Dataset
    held_out: Dataset
    sources: list[Dataset] | None = None


@dataclass(frozen=True)
class Placement:
    """Where a train loader runs: ``rank`` of ``num_replicas`` (data-parallel ranks), drawing with ``data_seed``."""

    num_replicas: int
    rank: int
    data_seed: int


def _built(spec: RunSpec, field_name: str, extra: Mapping[str, Any] | None = None) -> Any:
    """What the builder of the part at ``field_name`` returns, None without one: the one call of a builder here."""
    part = spec.parts.get(field_name)
    return None if part is None else run_builder(part, extra)


def _as_dataset(field_name: str, built: Any) -> Dataset | list[Dataset]:
    """What a dataset builder returned: one sized dataset, or a list of them (the sources of a mixture)."""
    if isinstance(built, (list, tuple)):
        if not built:
            raise RecipeError(f'{field_name}: the builder returned an empty list; return a dataset or a list of them')
        return [_one(f'{field_name}[{k}]', source) for k, source in enumerate(built)]
    return _one(field_name, built)


def _one(field_name: str, built: Any) -> Dataset:
    if not isinstance(built, Sized) or isinstance(built, (str, bytes, Mapping)):
        raise RecipeError(f'{field_name}: the builder returned a {type(built).__name__}; a recipe trains on a '
                          'map-style dataset with a length (or a list of them, the sources of a mixture)')
    return built  # type: ignore[return-value]


def build_data(spec: RunSpec, batch_sizes: BatchSizes) -> Data:
    """The train and held-out datasets: the builders' own, or the held-out split cut from the train dataset.

    A train dataset of several sources (a list from its builder, or one dataset cut
    by ``source_fractions``) is a ``ConcatDataset`` whose ``datasets`` are the
    sources; the held-out split then takes its fraction of each source.
    """
    sampler = spec.sampler
    takes_sources = sampler.entry is not None and sampler.entry.takes_sources
    train = _as_dataset('train_loader.dataset', _built(spec, 'train_loader.dataset'))
    if isinstance(train, list) and spec.source_fractions is not None:
        raise RecipeError(f'train_loader.sampler.source_fractions cuts one dataset into sources, but the '
                          f'train_loader.dataset builder returned {len(train)} of them; remove one or the other')
    if isinstance(train, list) and not takes_sources:
        raise RecipeError(f'train_loader.dataset: the builder returned {len(train)} datasets, the sources of a '
                          f'mixture, but train_loader.sampler ({sampler.label}) takes one dataset; use a sampler '
                          'that takes sources (name: mixture), or return one dataset')
    if takes_sources and not isinstance(train, list) and spec.source_fractions is None:
        raise RecipeError(f'train_loader.sampler.source_fractions is required for the {sampler.label} sampler when '
                          'the train_loader.dataset builder returns one dataset (or return a list of datasets, one a '
                          'source)')
    own = 'eval_loader.dataset' in spec.parts  # built after the train dataset's refusals
    held_out = _one('eval_loader.dataset', _built(spec, 'eval_loader.dataset')) if own else None
    fraction = spec.held_out_fraction
    if isinstance(train, list):  # each source keeps what its samples say: a position in one source is not drawn
        cuts: list[tuple[Dataset, Dataset | None]] = [
            (source, None) if fraction is None else cut_held_out(source, fraction, renumber=False) for source in train]
        kept = [source for source, _ in cuts]
        data = Data(ConcatDataset(kept), held_out or ConcatDataset([cut for _, cut in cuts if cut is not None]), kept)
    else:
        if held_out is None:
            assert fraction is not None
            train, held_out = cut_held_out(train, fraction)
        split = split_into_sources(train, list(spec.source_fractions)) if spec.source_fractions else None
        data = Data(ConcatDataset(split) if split else train, held_out, split)
    check_data(spec, batch_sizes, data.train, data.held_out, data.sources)
    return data


class Split(Subset):
    """Part of a dataset, read through positions ``indices``; a dict sample's ``'index'`` is its position here.

    Used where its positions are the ones the sampler draws (the train split of one
    dataset, and its held-out split), so that a sample's ``'index'`` is the position
    the sampler drew. Read one sample at a time or a batch at once (as the
    DataLoader does), it renumbers alike.

    Example:
        >>> split = Split([{'index': i} for i in range(10)], range(6, 10))
        >>> len(split), split[0], split.__getitems__([1])
        (4, {'index': 0}, [{'index': 1}])
    """

    def __getitem__(self, index: Any) -> Any:
        return _renumbered(self.dataset[self.indices[index]], index)

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [_renumbered(item, index) for item, index in zip(super().__getitems__(indices), indices, strict=True)]


def _renumbered(item: Any, index: int) -> Any:
    return {**item, 'index': index} if isinstance(item, dict) and 'index' in item else item


def cut_held_out(dataset: Dataset, fraction: float, renumber: bool = True) -> tuple[Dataset, Dataset]:
    """The first ``1 - fraction`` of ``dataset`` to train on and the rest held out, as positions (O(1) memory).

    ``renumber=False`` cuts plain ``Subset``s, whose samples keep the ``'index'`` they carry.

    Example:
        >>> train, held_out = cut_held_out(list(range(10)), 0.2)
        >>> list(train), list(held_out)
        ([0, 1, 2, 3, 4, 5, 6, 7], [8, 9])
    """
    total = len(dataset)  # type: ignore[arg-type]
    held = round(total * fraction)
    part = Split if renumber else Subset
    return part(dataset, range(total - held)), part(dataset, range(total - held, total))


def split_into_sources(dataset: Dataset, fractions: list[float]) -> list[Dataset]:
    """Cut ``dataset`` into consecutive sources of the given fractions (the last takes the rounding).

    The sources are plain ``Subset``s: concatenated again they are ``dataset`` itself,
    so a sample's ``'index'`` (its position in ``dataset``) is the position drawn.

    Example:
        >>> [len(source) for source in split_into_sources(list(range(10)), [0.5, 0.3, 0.2])]
        [5, 3, 2]
    """
    total = len(dataset)  # type: ignore[arg-type]
    bounds = [round(total * sum(fractions[:k])) for k in range(len(fractions))] + [total]
    return [Subset(dataset, range(lo, hi)) for lo, hi in itertools.pairwise(bounds)]


def is_batch_sampler(sampler: Any) -> bool:
    """Whether a sampler builder returned a batch sampler (it yields device batches) rather than an index sampler.

    Torch's ``BatchSampler`` and its subclasses, our batch-level samplers, and any
    sampler with an integer ``batch_size`` that is not a ``DistributedSampler``.
    """
    if isinstance(sampler, (BatchSampler, DistributedBatchAdapter, NestedBatchSampler)):
        return True
    if isinstance(sampler, DistributedSampler):  # an index sampler, even with a batch_size (the mixture's)
        return False
    size = getattr(sampler, 'batch_size', None)
    return is_integer(size)


def _collate(spec: RunSpec, field_name: str) -> Callable[..., Any] | None:
    """A loader's collate function: the target (or registered one) with its arguments bound; None for torch's."""
    part = spec.parts.get(field_name)
    if part is None:
        return None
    return bound_builder(part)


def build_train_loader(spec: RunSpec, dataset: Dataset, batch_sizes: BatchSizes, where: Placement) -> DataLoader:
    """The train DataLoader of one rank with the recipe's sampler; it yields device batches.

    The sampler builder gets the dataset, this rank's place, the data seed and the
    device batch; it returns an index sampler, a batch sampler or a whole DataLoader.
    """
    part = spec.sampler
    keywords = {'dataset': dataset, 'num_replicas': where.num_replicas, 'rank': where.rank, 'seed': where.data_seed,
                'device_batch_size': batch_sizes.device_batch}
    sampler = _built(spec, part.field, keywords)
    read_from = dataset
    if spec.recipe.train_loader.per_sample_rng:  # the samplers see the dataset as it is (a mixture its sources)
        from composer_sampling.per_sample_rng import PerSampleRNG

        read_from = PerSampleRNG(dataset, seed=where.data_seed)
    if isinstance(sampler, DataLoader):
        if read_from is dataset:
            return sampler
        samplers = ({'batch_sampler': sampler.batch_sampler} if sampler.batch_size is None else
                    {'batch_size': sampler.batch_size, 'sampler': sampler.sampler, 'drop_last': sampler.drop_last})
        return rebuild_loader(sampler, dataset=read_from, **samplers)
    if not isinstance(sampler, Sampler) and not callable(getattr(type(sampler), '__iter__', None)):
        raise RecipeError(f'{part.field}: the builder returned a {type(sampler).__name__}; return a sampler, a '
                          'batch sampler or a DataLoader')
    common = worker_start(spec.recipe.train_loader.num_workers, batch_sizes.world_size, read_from)
    collate = _collate(spec, 'train_loader.collate_fn')
    if collate is not None:
        common['collate_fn'] = collate
    if is_batch_sampler(sampler):
        return DataLoader(read_from, batch_sampler=sampler, **common)
    return DataLoader(read_from, batch_size=batch_sizes.device_batch, sampler=sampler, **common)


def worker_start(num_workers: int, world_size: int, dataset: Any) -> dict[str, Any]:
    """The DataLoader keywords that start ``num_workers`` workers: on several ranks, from a fork server.

    On several ranks the Trainer iterates the loader in a process that runs gloo's
    threads (and torch's thread pools). Forking a worker copies that process with only
    the forking thread: a lock another thread held at that instant stays held in the
    worker, and a worker that needs it never delivers its batch. There the workers
    are forked by a fork server instead, a process of one thread started once, with
    the main script, ``torch`` and the dataset's modules imported; the dataset (and a
    collate function) must then be picklable by name, and a script guard its top level
    with ``if __name__ == '__main__':``. On one rank, torch's default (``fork``) is kept.

    Example:
        >>> worker_start(2, 1, range(4))
        {'num_workers': 2}
        >>> worker_start(2, 2, range(4))['multiprocessing_context'].get_start_method()
        'forkserver'
    """
    if num_workers == 0 or world_size == 1 or 'forkserver' not in multiprocessing.get_all_start_methods():
        return {'num_workers': num_workers}
    from composer_sampling.per_sample_rng import iter_datasets

    context = multiprocessing.get_context('forkserver')
    modules = ['__main__', 'torch', *dict.fromkeys(type(node).__module__ for node in iter_datasets(dataset))]
    context.set_forkserver_preload(modules)  # read once, when this process starts its fork server
    return {'num_workers': num_workers, 'multiprocessing_context': context}


def build_eval_loader(spec: RunSpec, dataset: Dataset) -> DataLoader:
    """The held-out loader: every rank evaluates its share, in order."""
    from composer.utils import dist

    collate = _collate(spec, 'eval_loader.collate_fn')
    extra: dict[str, Any] = {'collate_fn': collate} if collate is not None else {}
    return DataLoader(dataset, batch_size=spec.recipe.device_eval_batch_size,
                      sampler=dist.get_sampler(dataset, shuffle=False), **extra)
