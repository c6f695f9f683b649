"""The datasets and DataLoaders of a resolved recipe: what ``plan`` and ``train`` both build.

Datasets are built, never indexed, except ``dataset[0]`` where tokens are counted or an algorithm reads batches.
``plan`` builds the train loader of every rank; ``train`` calls :func:`build_loaders`.

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
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass
from typing import Any

from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, Sampler, Subset

from composer_sampling._validate import is_integer
from composer_sampling.batching import BatchSizes
from composer_sampling.recipes.batch_checks import check_batch_readers
from composer_sampling.recipes.builders import bound_builder, run_builder
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.resolve import RunSpec
from composer_sampling.recipes.workers import worker_start
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.distribute import rebuild_loader
from composer_sampling.samplers.nested import NestedBatchSampler

__all__ = ['Data', 'Loaders', 'Placement', 'Split', 'build_data', 'build_eval_loader', 'build_loaders',
           'build_train_loader', 'check_data', 'counts_tokens', 'cut_held_out', 'is_batch_sampler',
           'split_into_sources']


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


@dataclass(frozen=True)
class Loaders:
    """What ``train`` reads: the splits (:class:`Data`) and this rank's train loader and held-out loader."""

    data: Data
    train: DataLoader
    held_out: DataLoader


def build_loaders(spec: RunSpec, batch_sizes: BatchSizes, where: Placement) -> Loaders:
    """The datasets (:func:`build_data`), this rank's train loader at ``where`` and the held-out loader, in one call.

    Example:
        >>> from composer_sampling.recipes.checks import checked_spec
        >>> from composer_sampling.recipes.resolve import resolve
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> spec = resolve(load_recipe(None, ['train_loader.dataset={name: synthetic, size: 100}']))
        >>> loaders = build_loaders(spec, checked_spec(spec, world_size=1).batch_sizes, Placement(1, 0, 17))
        >>> len(loaders.data.train), loaders.train.batch_size, loaders.held_out.batch_size
        (80, 64, 128)
    """
    data = build_data(spec, batch_sizes)
    held_out = build_eval_loader(spec, data.held_out)
    return Loaders(data, build_train_loader(spec, data.train, batch_sizes, where), held_out)


def _built(spec: RunSpec, field_name: str, extra: Mapping[str, Any] | None = None) -> Any:
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
    """The train and held-out datasets; a train dataset of several sources is a ``ConcatDataset`` of them."""
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
    check_batch_readers(spec, data.train, _collate(spec, 'train_loader.collate_fn'))
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
    """Cut ``dataset`` into consecutive ``Subset``s of the given fractions (the last takes the rounding).

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
    size = getattr(sampler, 'batch_size', None)
    return is_integer(size)


def _collate(spec: RunSpec, field_name: str) -> Callable[..., Any] | None:
    part = spec.parts.get(field_name)
    return None if part is None else bound_builder(part)


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
    collate = None if whole else _collate(spec, 'train_loader.collate_fn')
    samplers = {'batch_sampler': sampler} if not whole and is_batch_sampler(sampler) else \
        {'batch_size': batch_sizes.device_batch, 'sampler': sampler}
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
    common = worker_start(spec.recipe.train_loader.num_workers, batch_sizes.world_size, read_from)
    if collate is not None:
        common['collate_fn'] = collate
    return DataLoader(read_from, **samplers, **common)


def build_eval_loader(spec: RunSpec, dataset: Dataset) -> DataLoader:
    """The held-out loader: every rank evaluates its share, in order."""
    from composer.utils import dist

    collate = _collate(spec, 'eval_loader.collate_fn')
    extra: dict[str, Any] = {'collate_fn': collate} if collate is not None else {}
    return DataLoader(dataset, batch_size=spec.recipe.device_eval_batch_size,
                      sampler=dist.get_sampler(dataset, shuffle=False), **extra)


def check_data(spec: RunSpec, batch_sizes: BatchSizes, train: Any, held_out: Any, sources: list[Any] | None) -> None:
    """The splits hold samples, the train split a global batch, every source a step; ``tok`` only where counted."""
    _check_splits(spec, batch_sizes, train, held_out)
    _check_token_units(spec, train)
    if sources is not None:
        _check_sources(spec, batch_sizes, sources)


def _check_splits(spec: RunSpec, batch_sizes: BatchSizes, train: Any, held_out: Any) -> None:
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
    if train_len < batch_sizes.data_parallel:
        raise RecipeError(f'the train split of {train_len} samples (train_loader.dataset: {label}) is smaller '
                          f'than the {batch_sizes.data_parallel} data-parallel ranks: some rank would train nothing; '
                          'use a larger dataset or fewer ranks')
    if batch_sizes.global_batch > train_len:
        ranks = batch_sizes.data_parallel
        largest = train_len // ranks * ranks
        multiple = f' (a multiple of the {ranks} data-parallel ranks)' if ranks > 1 else ''
        raise RecipeError(f'global_train_batch_size={batch_sizes.global_batch} is larger than the train split of '
                          f'{train_len} samples (train_loader.dataset: {label}); use at most {largest}{multiple}')


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


def _scheduler_times_in_tokens(spec: RunSpec) -> list[tuple[str, str]]:
    """``(field, value)`` of every scheduler argument that is a Composer time in tokens."""
    found = []
    for part in spec.schedulers:
        for name, value in part.arguments.items():
            listed = isinstance(value, (list, tuple))
            for k, item in enumerate(value if listed else [value]):
                if isinstance(item, str) and _unit(item) == 'tok':
                    found.append((f'{part.arguments_field}.{name}' + (f'[{k}]' if listed else ''), item))
    return found


def _unit(text: str) -> str | None:
    try:
        return parse_duration(text)[1]
    except ValueError:
        return None


def _check_token_units(spec: RunSpec, train: Any) -> None:
    in_tokens = [(name, getattr(spec.recipe, name)) for name, (_, unit) in spec.durations.items() if unit == 'tok']
    in_tokens += _scheduler_times_in_tokens(spec)
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
    total, step = sum(sizes), batch_sizes.global_batch
    short = [k for k, size in enumerate(sizes) if size < step]
    if not short:
        return
    k = short[0]
    ranks = batch_sizes.data_parallel
    largest = min(sizes) // ranks * ranks
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
