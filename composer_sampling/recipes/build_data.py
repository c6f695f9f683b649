"""The datasets and DataLoaders of a resolved recipe, which ``plan`` and ``train`` both build, and their checks.

A dataset is never indexed, except ``dataset[0]`` where tokens are counted or an algorithm reads batches.

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

import inspect
import itertools
import multiprocessing
from collections.abc import Mapping, Sized
from dataclasses import dataclass
from typing import Any

from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, Sampler, Subset

from composer_sampling._validate import is_integer
from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.builders import bound_builder, builder_of, run_builder
from composer_sampling.recipes.composer_names import BATCH_READERS
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.distribute import rebuild_loader
from composer_sampling.samplers.nested import NestedBatchSampler

__all__ = ['Data', 'Placement', 'Split', 'batch_problem', 'build_data', 'build_eval_loader', 'build_train_loader',
           'counts_tokens', 'cut_held_out', 'is_batch_sampler', 'split_into_sources', 'worker_start']


@dataclass(frozen=True)
class Data:
    """The train and held-out splits; ``sources`` when the train split is the sources of a mixture."""

    train: Dataset
    held_out: Dataset
    sources: list[Dataset] | None = None


@dataclass(frozen=True)
class Placement:
    """Where a train loader runs: ``rank`` of ``num_replicas`` data-parallel ranks, drawing with ``data_seed``."""

    num_replicas: int
    rank: int
    data_seed: int


def _built(spec: RunSpec, field_name: str, extra: Mapping[str, Any] | None = None, bound: bool = False) -> Any:
    """What the builder at ``field_name`` returns, or the builder with its arguments bound; None when unset."""
    part = spec.parts.get(field_name)
    if part is None:
        return None
    return bound_builder(part) if bound else run_builder(part, extra)


def _one(field_name: str, built: Any) -> Dataset:
    if not isinstance(built, Sized) or isinstance(built, (str, bytes, Mapping)):
        raise RecipeError(f'{field_name}: the builder returned a {type(built).__name__}; a recipe trains on a '
                          'map-style dataset with a length (or a list of them, the sources of a mixture)')
    return built  # type: ignore[return-value]


def build_data(spec: RunSpec, batch_sizes: BatchSizes) -> Data:
    """The train and held-out datasets, checked; a train dataset of several sources is a ``ConcatDataset`` of them."""
    sampler = spec.sampler
    takes_sources = sampler.entry is not None and sampler.entry.takes_sources
    built = _built(spec, 'train_loader.dataset')
    listed = isinstance(built, (list, tuple))
    if listed and not built:
        raise RecipeError('train_loader.dataset: the builder returned an empty list; return a dataset or a list '
                          'of them')
    train = ([_one(f'train_loader.dataset[{k}]', source) for k, source in enumerate(built)] if listed else
             _one('train_loader.dataset', built))
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
        cuts = [(source, None) if fraction is None else cut_held_out(source, fraction, renumber=False)
                for source in train]
        kept = [source for source, _ in cuts]
        data = Data(ConcatDataset(kept), held_out or ConcatDataset([cut for _, cut in cuts if cut is not None]), kept)
    else:
        if held_out is None:
            assert fraction is not None
            train, held_out = cut_held_out(train, fraction)
        split = split_into_sources(train, list(spec.source_fractions)) if spec.source_fractions else None
        data = Data(ConcatDataset(split) if split else train, held_out, split)
    _check_splits(spec, batch_sizes, data.train, data.held_out)
    _check_token_units(spec, data.train)
    if data.sources is not None:
        _check_sources(spec, batch_sizes, data.sources)
    _check_batch_readers(spec, data.train)
    return data


class Split(Subset):
    """Part of a dataset, read through positions ``indices``; a dict sample's ``'index'`` is its position here.

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
    """The first ``1 - fraction`` of ``dataset`` to train on and the rest held out, as :class:`Split` s (O(1) memory).

    ``renumber=False`` cuts plain ``Subset`` s, whose samples keep the ``'index'`` they carry.

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
    """Cut ``dataset`` into consecutive ``Subset`` s of the given fractions (the last takes the rounding).

    Example:
        >>> [len(source) for source in split_into_sources(list(range(10)), [0.5, 0.3, 0.2])]
        [5, 3, 2]
    """
    total = len(dataset)  # type: ignore[arg-type]
    bounds = [round(total * sum(fractions[:k])) for k in range(len(fractions))] + [total]
    return [Subset(dataset, range(lo, hi)) for lo, hi in itertools.pairwise(bounds)]


def is_batch_sampler(sampler: Any) -> bool:
    """Whether ``sampler`` yields device batches: a batch sampler of ours or torch's, or one with a ``batch_size``."""
    if isinstance(sampler, (BatchSampler, DistributedBatchAdapter, NestedBatchSampler)):
        return True
    if isinstance(sampler, DistributedSampler):  # an index sampler, even with a batch_size (the mixture's)
        return False
    return is_integer(getattr(sampler, 'batch_size', None))


def build_train_loader(spec: RunSpec, dataset: Dataset, batch_sizes: BatchSizes, where: Placement) -> DataLoader:
    """One rank's train DataLoader from the sampler builder's index sampler, batch sampler or DataLoader."""
    part = spec.sampler
    keywords = {'dataset': dataset, 'num_replicas': where.num_replicas, 'rank': where.rank, 'seed': where.data_seed,
                'device_batch_size': batch_sizes.device_batch}
    sampler = _built(spec, part.field, keywords)
    whole = isinstance(sampler, DataLoader)
    if not whole and not isinstance(sampler, Sampler) and not callable(getattr(type(sampler), '__iter__', None)):
        raise RecipeError(f'{part.field}: the builder returned a {type(sampler).__name__}; return a sampler, a '
                          'batch sampler or a DataLoader')
    collate = None if whole else _built(spec, 'train_loader.collate_fn', bound=True)
    read_from = dataset
    if spec.recipe.train_loader.per_sample_rng:  # the samplers see the dataset as it is (a mixture its sources)
        from composer_sampling.per_sample_rng import PerSampleRNG

        read_from = PerSampleRNG(dataset, seed=where.data_seed)
    if isinstance(sampler, DataLoader):
        if read_from is dataset:
            return sampler
        own = ({'batch_sampler': sampler.batch_sampler} if sampler.batch_size is None else
               {'batch_size': sampler.batch_size, 'sampler': sampler.sampler, 'drop_last': sampler.drop_last})
        return rebuild_loader(sampler, dataset=read_from, **own)
    samplers = ({'batch_sampler': sampler} if is_batch_sampler(sampler) else
                {'batch_size': batch_sizes.device_batch, 'sampler': sampler})
    collated = {} if collate is None else {'collate_fn': collate}
    return DataLoader(read_from, **samplers, **worker_start(spec.recipe.train_loader.num_workers,
                                                            batch_sizes.world_size, read_from), **collated)


def worker_start(num_workers: int, world_size: int, dataset: Any) -> dict[str, Any]:
    """The DataLoader keywords that start ``num_workers`` workers: on several ranks, from a fork server.

    Forking a process that runs gloo's threads can copy a lock held by another thread, and the worker then hangs:
    on Python 3.11.7 and older, the interpreter's own lock of its thread list (CPython issue gh-112275). A fork
    server of one thread avoids that. The dataset must then be picklable by name. One rank keeps ``fork``.

    Example:
        >>> worker_start(0, 2, range(4)), worker_start(2, 1, range(4))
        ({'num_workers': 0}, {'num_workers': 2})
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

    collate = _built(spec, 'eval_loader.collate_fn', bound=True)
    extra: dict[str, Any] = {'collate_fn': collate} if collate is not None else {}
    return DataLoader(dataset, batch_size=spec.recipe.device_eval_batch_size,
                      sampler=dist.get_sampler(dataset, shuffle=False), **extra)


def _check_splits(spec: RunSpec, batch_sizes: BatchSizes, train: Any, held_out: Any) -> None:
    """Both splits hold samples, and the train split holds a sample for every rank and one global batch."""
    label = spec.parts['train_loader.dataset'].label
    train_len, held_out_len = len(train), len(held_out)
    own = spec.parts.get('eval_loader.dataset')
    if held_out_len == 0 and own is not None:
        raise RecipeError(f'eval_loader.dataset ({own.label}) is empty; give it samples to evaluate on')
    if held_out_len == 0 or train_len == 0:
        empty = 'held-out' if held_out_len == 0 else 'train'
        raise RecipeError(f'{spec.held_out_field}={spec.held_out_fraction} leaves the {empty} split of the {label} '
                          f'dataset ({train_len + held_out_len} samples) empty; use a fraction that leaves samples '
                          'in both')
    ranks = batch_sizes.data_parallel
    if train_len < ranks:
        raise RecipeError(f'the train split of {train_len} samples (train_loader.dataset: {label}) is smaller '
                          f'than the {ranks} data-parallel ranks: some rank would train nothing; '
                          'use a larger dataset or fewer ranks')
    if batch_sizes.global_batch > train_len:
        multiple = f' (a multiple of the {ranks} data-parallel ranks)' if ranks > 1 else ''
        raise RecipeError(f'global_train_batch_size={batch_sizes.global_batch} is larger than the train split of '
                          f'{train_len} samples (train_loader.dataset: {label}); use at most '
                          f'{train_len // ranks * ranks}{multiple}')


def counts_tokens(dataset: Any) -> bool:
    """Whether Composer counts tokens in batches of ``dataset``: samples with ``input_ids``, or a ``max_seq_len``.

    Example:
        >>> counts_tokens([{'input_ids': [1, 2]}]), counts_tokens([{'input': 0.5}])
        (True, False)
    """
    if hasattr(dataset, 'max_seq_len'):
        return True
    if len(dataset) == 0:
        return False
    sample = dataset[0]
    return isinstance(sample, Mapping) and 'input_ids' in sample


def _in_tokens(text: Any) -> bool:
    try:
        return isinstance(text, str) and parse_duration(text)[1] == 'tok'
    except ValueError:
        return False


def _check_token_units(spec: RunSpec, train: Any) -> None:
    """A duration or a scheduler time in tokens needs a dataset whose tokens Composer counts."""
    in_tokens = [(name, getattr(spec.recipe, name)) for name, (_, unit) in spec.durations.items() if unit == 'tok']
    for part in spec.schedulers:
        for name, value in part.arguments.items():
            listed = isinstance(value, (list, tuple))
            in_tokens += [(f'{part.arguments_field}.{name}' + (f'[{k}]' if listed else ''), item)
                          for k, item in enumerate(value if listed else [value]) if _in_tokens(item)]
    if in_tokens and not counts_tokens(train):
        name, value = in_tokens[0]
        effect = ('train forever' if name == 'max_duration' else
                  'never reach it' if name in spec.durations else 'never reach it: the LR schedule would not move')
        raise RecipeError(f'{name}={value!r} counts tokens, but Composer counts none in this run '
                          f'(the {spec.parts["train_loader.dataset"].label} dataset yields no input_ids and has no '
                          f'max_seq_len), so the run would {effect}; use ep, ba or sp')


def _check_sources(spec: RunSpec, batch_sizes: BatchSizes, sources: list[Any]) -> None:
    """Every mixture source holds at least one global step, or it would never be trained."""
    fractions = spec.source_fractions
    sizes = [len(source) for source in sources]
    total, step, ranks = sum(sizes), batch_sizes.global_batch, batch_sizes.data_parallel
    short = [k for k, size in enumerate(sizes) if size < step]
    if not short:
        return
    k, largest = short[0], min(sizes) // ranks * ranks
    smallest_fraction = -(-step * 1000 // total) / 1000
    batch = f', or a global_train_batch_size of at most {largest}' if largest >= ranks else ''
    if fractions is None:
        raise RecipeError(f'train_loader.dataset: source {k} holds {sizes[k]} of the {total} train samples, fewer '
                          f'than one global step of {step}, so it would never be trained; give it at least {step} '
                          f'samples{batch}')
    raise RecipeError(
        f'train_loader.sampler.source_fractions={list(fractions)}: source {k} (fraction {fractions[k]}) holds '
        f'{sizes[k]} of the {total} train samples, fewer than one global step of {step}, so it would never be '
        f'trained; give every source a fraction of at least {smallest_fraction} ({step} / {total}){batch}',
    )


def batch_problem(batch: Any, name: str, key: Any) -> str | None:
    """What is wrong with reading ``batch`` at ``key`` (the algorithm's argument ``name``) as Composer reads it.

    Example:
        >>> batch_problem((1, 2), 'target_key', 1) is None
        True
        >>> batch_problem({'input': 1, 'target': 2}, 'input_key', 0)
        "input_key=0: the batch is a dict with the keys 'input', 'target' (KeyError)"
    """
    from composer.utils import batch_get

    try:
        batch_get(batch, key)
    except (KeyError, IndexError, TypeError, AttributeError) as error:
        if isinstance(batch, Mapping):
            shape = f'a dict with the keys {", ".join(repr(k) for k in batch)}'
        elif isinstance(batch, (list, tuple)):
            shape = f'a {type(batch).__name__} of {len(batch)} items'
        else:
            shape = f'a {type(batch).__name__}'
        return f'{name}={key!r}: the batch is {shape} ({type(error).__name__})'
    return None


def _check_batch_readers(spec: RunSpec, train: Any) -> None:
    """Refuse an algorithm that reads a key the collated train batches lack, or images they do not hold, before
    Composer would find it at the first batch."""
    collate = _built(spec, 'train_loader.collate_fn', bound=True)
    readers = []
    for part in spec.algorithms:  # a ColOut with batch: false changes the dataset instead
        reads = BATCH_READERS.get(part.target.rpartition(':')[2])
        if reads is not None and part.arguments.get('batch', True) is not False:
            readers.append((part, *reads))
    if not readers or len(train) == 0:
        return
    import torch
    from composer.utils import batch_get
    from torch.utils.data import default_collate

    batch = (collate or default_collate)([train[0]])
    dataset = spec.parts['train_loader.dataset'].label
    for part, keys, dimensions in readers:
        defaults = {name: value.default for name, value in inspect.signature(builder_of(part)).parameters.items()}
        for name in keys:
            problem = batch_problem(batch, name, part.arguments.get(name, defaults.get(name)))
            if problem is not None:
                raise RecipeError(f'{part.arguments_field}.{problem}, as the train loader collates the {dataset} '
                                  f'dataset; {part.label} reads it there at every batch. Set {name} to where the batch '
                                  f'holds it, or remove {part.field}')
        if not dimensions:
            continue
        key = part.arguments.get('input_key', defaults.get('input_key'))
        found = batch_get(batch, key)
        if not isinstance(found, torch.Tensor) or found.ndim < dimensions:
            shown = f'of shape {list(found.shape)}' if isinstance(found, torch.Tensor) else f'a {type(found).__name__}'
            raise RecipeError(f'{part.field}: {part.label} takes image batches of at least {dimensions} dimensions '
                              f'(N, C, H, W), but the input at input_key={key!r} is {shown} (the {dataset} dataset, '
                              f'collated); remove {part.field}, or train on images')
