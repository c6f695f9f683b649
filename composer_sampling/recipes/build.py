"""Builders: from a validated :class:`~composer_sampling.recipes.schema.Recipe` to a ready ``Trainer``.

Everything that can be wrong with a recipe raises :class:`RecipeError` here,
before the ``Trainer`` (and the process group) exists.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> recipe = load_recipe(None, ['global_train_batch_size=32'])
    >>> plan = batch_plan(recipe, world_size=1)
    >>> plan.device_batch
    32
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Callable, Mapping, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, Sampler, Subset

from composer_sampling.batching import BatchPlan, BatchPlanError, plan_batches
from composer_sampling.checkpoint_check import (
    CheckpointError,
    check_checkpoint,
    composer_load_path,
    resolve_safe_global,
    uri_scheme,
)
from composer_sampling.graph import active_root, sharding_problem
from composer_sampling.order import MAX_SEED
from composer_sampling.recipes.registry import (
    CALLBACKS,
    PART_KINDS,
    REGISTRIES,
    Registry,
    RegistryError,
    check_arguments,
    import_target,
)
from composer_sampling.recipes.schema import (
    DURATION_UNITS,
    PartConfig,
    Recipe,
    RecipeError,
    callback_parts,
    eval_fraction_of,
    parse_duration,
    part_name,
    part_sections,
)
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.validate import check_int

if TYPE_CHECKING:  # Composer is imported where a run is trained: plan and validation do without it
    from composer import Trainer
    from composer.core import Callback
    from composer.models import ComposerModel

__all__ = [
    'SAMPLER_KEYWORDS',
    'Checked',
    'Placement',
    'Run',
    'batch_plan',
    'build_callbacks',
    'build_datasets',
    'build_run',
    'build_train_loader',
    'check_builders',
    'check_load_path',
    'check_run',
]

#: The keywords the runner passes to every sampler builder, besides the sampler's own options.
SAMPLER_KEYWORDS = ('dataset', 'num_replicas', 'rank', 'seed', 'device_batch_size')
#: Where each part's builder is looked up.
_TABLES: dict[str, Registry] = {field_name: REGISTRIES[kind] for field_name, kind in PART_KINDS.items()}
#: What the runner adds to a part's own arguments when it calls the builder.
_RUNNER_KEYWORDS: dict[str, tuple[str, ...]] = {'train_loader.sampler': SAMPLER_KEYWORDS, 'optimizer': ('params',)}


@dataclass
class Run:
    """Everything a recipe builds, before training starts."""

    recipe: Recipe
    plan: BatchPlan
    train_dataset: Dataset
    eval_dataset: Dataset
    train_loader: DataLoader
    eval_loader: DataLoader
    callbacks: list[Callback]

    data_seed: int


def replication_of(recipe: Recipe) -> int:
    """``callbacks.sampler_sync.replication``: groups of that many ranks read the same data (1 without it)."""
    value = (recipe.callbacks.get('sampler_sync') or {}).get('replication', 1)
    try:
        return check_int('replication', value, minimum=1)  # SamplerSync's own rule; batch_plan checks it divides W
    except (TypeError, ValueError) as error:
        raise RecipeError(f'callbacks.sampler_sync.{error}') from None


def batch_plan(recipe: Recipe, world_size: int) -> BatchPlan:
    """The recipe's batch math for ``world_size`` processes, as a :class:`RecipeError` if it does not divide."""
    try:
        return plan_batches(
            recipe.global_train_batch_size,
            world_size,
            microbatch=recipe.device_train_microbatch_size,
            accumulation_steps=recipe.gradient_accumulation_steps,
            replication=replication_of(recipe),
        )
    except BatchPlanError as error:
        raise RecipeError(str(error)) from None


def resolve_part(field_name: str, part: PartConfig) -> tuple[Callable[..., Any], dict[str, Any]]:
    """The builder a part names and the arguments of its own it gets: its inline options, then its ``kwargs``.

    Raises :class:`RecipeError` naming ``field_name`` for a name that is not
    registered or a target that does not import.
    """
    try:
        if part.target is not None:
            return import_target(part.target), dict(part.kwargs or {})
        name = part_name(field_name, part)
        assert name is not None, 'check_parts gives every part a name or a target'
        table = _TABLES[field_name]
        options = {option: getattr(part, option) for option in table.entry(name).options
                   if getattr(part, option, None) is not None}  # defaults included: they are the recipe's values
        return table.get(name), {**options, **(part.kwargs or {})}
    except RegistryError as error:
        raise RecipeError(f'{field_name}: {error}') from None


def part_label(field_name: str, part: PartConfig) -> str:
    """How messages name a part: its registered name, or its target."""
    return part.target or part_name(field_name, part) or '?'


#: The parts that decide the data order: all that ``plan`` builds or checks.
DATA_PARTS = ('train_loader.dataset', 'eval_loader.dataset', 'train_loader.sampler', 'train_loader.collate_fn',
              'eval_loader.collate_fn')


def check_builders(recipe: Recipe, training: bool = True) -> None:
    """Every part's builder imports and takes its arguments (plus the runner's keywords): checked, nothing built.

    ``training=False`` (``plan``) checks the data parts only: the model, the
    optimizer and the callbacks decide nothing about the order, and importing a
    model (Composer, for ours) would cost a plan more than the plan itself.

    Example:
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> check_builders(load_recipe(None, ['model.kwargs={depth: 3}']))
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.schema.RecipeError: model: the model MLPClassifier: unexpected keyword 'depth'; ...
    """
    for field_name, part in part_sections(recipe):
        if not training and field_name not in DATA_PARTS:
            continue
        builder, arguments = resolve_part(field_name, part)
        runner = {name: None for name in _RUNNER_KEYWORDS.get(field_name, ())}
        positional = 1 if field_name.endswith('collate_fn') else 0  # called with the list of samples
        _check_call(field_name, builder, {**arguments, **runner}, positional)
    if training:
        for label, builder, arguments in _callback_builders(recipe):
            _check_call(f'callbacks.{label}', builder, arguments)


def _check_call(field_name: str, builder: Callable[..., Any], arguments: dict[str, Any], positional: int = 0) -> None:
    kind = field_name.rsplit('.', 1)[-1].replace('_', ' ')
    try:
        check_arguments(builder, arguments, f'the {kind}', positional)
    except RegistryError as error:
        raise RecipeError(f'{field_name}: {error}') from None


def _callback_builders(recipe: Recipe) -> list[tuple[str, Callable[..., Any], dict[str, Any]]]:
    built = []
    for label, name, target, arguments in callback_parts(recipe):
        try:
            builder = import_target(target) if target is not None else CALLBACKS.get(name or label)
        except RegistryError as error:
            raise RecipeError(f'callbacks.{label}: {error}') from None
        if name == 'sample_ledger' and 'folder' not in arguments:
            arguments = {**arguments, 'folder': None}  # filled from save_folder when built
        built.append((label, builder, arguments))
    return built


def _call(field_name: str, builder: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """Call a builder; a ``TypeError``/``ValueError`` it raises becomes a :class:`RecipeError` naming the field."""
    try:
        return builder(**arguments)
    except (TypeError, ValueError) as error:
        raise RecipeError(f'{field_name}: {error}') from None


def _as_dataset(field_name: str, built: Any) -> Dataset:
    """One dataset from what a dataset builder returned; a list of them becomes their concatenation (the sources)."""
    if isinstance(built, (list, tuple)):
        if not built:
            raise RecipeError(f'{field_name}: the builder returned an empty list; return a dataset or a list of them')
        return _Sources([_as_dataset(f'{field_name}[{k}]', source) for k, source in enumerate(built)])
    if not isinstance(built, Sized) or isinstance(built, (str, bytes, Mapping)):
        raise RecipeError(f'{field_name}: the builder returned a {type(built).__name__}; a recipe trains on a '
                          'map-style dataset with a length (or a list of them, the sources of a mixture)')
    return built  # type: ignore[return-value]


def build_dataset(recipe: Recipe, field_name: str) -> Dataset:
    """Call the dataset builder of ``field_name`` (``train_loader.dataset`` or ``eval_loader.dataset``)."""
    part = recipe.train_loader.dataset if field_name == 'train_loader.dataset' else recipe.eval_loader.dataset
    assert part is not None
    builder, arguments = resolve_part(field_name, part)
    return _as_dataset(field_name, _call(field_name, builder, arguments))


def build_datasets(recipe: Recipe) -> tuple[Dataset, Dataset]:
    """The train and held-out datasets: the builders' own, or the held-out split cut from the train dataset.

    A train dataset of several sources (a list from its builder, or one dataset cut
    by ``source_fractions``) is a ``ConcatDataset`` whose ``datasets`` are the
    sources; the held-out split then takes ``eval_fraction`` of each source.
    """
    train = build_dataset(recipe, 'train_loader.dataset')
    sampler = recipe.train_loader.sampler
    fractions = sampler.source_fractions
    name = part_name('train_loader.sampler', sampler)
    several = isinstance(train, _Sources)  # the builder returned a list; a ConcatDataset of its own is one dataset
    if several and fractions is not None:
        raise RecipeError(f'train_loader.sampler.source_fractions cuts one dataset into sources, but the '
                          f'train_loader.dataset builder returned {len(train.datasets)} of them; remove one or the '
                          'other')
    if several and name not in ('mixture', None):
        raise RecipeError(f'train_loader.dataset: the builder returned {len(train.datasets)} datasets, the sources '
                          f"of a mixture, but train_loader.sampler is {part_label('train_loader.sampler', sampler)!r}; "
                          'use train_loader.sampler.name: mixture, or return one dataset')
    if name == 'mixture' and not several and fractions is None:
        raise RecipeError('train_loader.sampler.source_fractions is required for the mixture sampler when the '
                          'train_loader.dataset builder returns one dataset (or return a list of datasets, one a '
                          'source)')
    own_held_out = recipe.eval_loader.dataset is not None
    held_out = build_dataset(recipe, 'eval_loader.dataset') if own_held_out else None
    fraction = eval_fraction_of(recipe)[1]
    if several:  # each source keeps what its samples say: a position within one source is not what is drawn
        cuts = [(source, None) if own_held_out else cut_held_out(source, fraction, renumber=False)
                for source in train.datasets]
        if held_out is None:
            held_out = ConcatDataset([cut for _, cut in cuts])
        return _Sources([kept for kept, _ in cuts]), held_out
    if held_out is None:
        train, held_out = cut_held_out(train, fraction)
    if fractions:
        return _Sources(split_into_sources(train, fractions)), held_out
    return train, held_out


class _Sources(ConcatDataset):
    """The sources of a mixture, concatenated (their ``datasets``): a builder's list, or one dataset cut."""


class Split(Subset):
    """Part of a dataset, read through positions ``indices``; a dict sample's ``'index'`` is its position here.

    Used where its positions are the ones the sampler draws (the train split of one
    dataset, and its held-out split), so that :class:`~composer_sampling.SampleLedger`
    (``index_key='index'``) records positions of the dataset it trains on. Read one
    sample at a time or a batch at once (as the DataLoader does), it renumbers alike.

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


@dataclass(frozen=True)
class Placement:
    """Where a train loader runs: ``rank`` of ``num_replicas`` (data-parallel ranks), drawing with ``data_seed``."""

    num_replicas: int
    rank: int
    data_seed: int


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
    return isinstance(size, int) and not isinstance(size, bool)


def build_collate(recipe: Recipe, field_name: str) -> Callable[..., Any] | None:
    """The loader's collate function: the target (or registered one) with its ``kwargs`` bound; None for torch's."""
    part = recipe.train_loader.collate_fn if field_name.startswith('train') else recipe.eval_loader.collate_fn
    if part is None:
        return None
    function, arguments = resolve_part(field_name, part)
    return functools.partial(function, **arguments) if arguments else function


def build_train_loader(recipe: Recipe, dataset: Dataset, plan: BatchPlan, where: Placement) -> DataLoader:
    """The train DataLoader of one rank with the recipe's sampler; it yields device batches.

    The sampler builder gets the dataset, this rank's place, the data seed and the
    device batch; it returns an index sampler, a batch sampler or a whole DataLoader.
    """
    field_name = 'train_loader.sampler'
    builder, arguments = resolve_part(field_name, recipe.train_loader.sampler)
    keywords = {'dataset': dataset, 'num_replicas': where.num_replicas, 'rank': where.rank, 'seed': where.data_seed,
                'device_batch_size': plan.device_batch}
    sampler = _call(field_name, builder, {**arguments, **keywords})
    read_from = dataset
    if recipe.train_loader.per_sample_rng:  # the samplers see the dataset as it is (a mixture its sources)
        from composer_sampling.per_sample_rng import PerSampleRNG

        read_from = PerSampleRNG(dataset, seed=where.data_seed)
    if isinstance(sampler, DataLoader):
        if read_from is dataset:
            return sampler
        from composer_sampling.distribute import rebuild_loader

        samplers = ({'batch_sampler': sampler.batch_sampler} if sampler.batch_size is None else
                    {'batch_size': sampler.batch_size, 'sampler': sampler.sampler, 'drop_last': sampler.drop_last})
        return rebuild_loader(sampler, dataset=read_from, **samplers)
    if not isinstance(sampler, Sampler) and not callable(getattr(type(sampler), '__iter__', None)):
        raise RecipeError(f'{field_name}: the builder returned a {type(sampler).__name__}; return a sampler, a '
                          'batch sampler or a DataLoader')
    common = {'num_workers': recipe.train_loader.num_workers}
    collate = build_collate(recipe, 'train_loader.collate_fn')
    if collate is not None:
        common['collate_fn'] = collate
    if is_batch_sampler(sampler):
        return DataLoader(read_from, batch_sampler=sampler, **common)
    return DataLoader(read_from, batch_size=plan.device_batch, sampler=sampler, **common)


def build_eval_loader(recipe: Recipe, dataset: Dataset) -> DataLoader:
    """The held-out loader: every rank evaluates its share, in order."""
    from composer.utils import dist

    sampler = dist.get_sampler(dataset, shuffle=False)
    collate = build_collate(recipe, 'eval_loader.collate_fn')
    extra = {'collate_fn': collate} if collate is not None else {}
    return DataLoader(dataset, batch_size=recipe.device_eval_batch_size, sampler=sampler, **extra)


def build_callbacks(recipe: Recipe) -> list[Callback]:
    """Instantiate ``callbacks``: registered names with their arguments, or targets with ``kwargs``."""
    from composer.core import Callback

    built = []
    for label, builder, arguments in _callback_builders(recipe):
        if 'folder' in arguments and arguments['folder'] is None:
            if recipe.save_folder is None:
                raise RecipeError('callbacks.sample_ledger writes to {save_folder}/ledger: set save_folder, or give '
                                  'the callback a folder')
            arguments['folder'] = str(Path(recipe.save_folder) / 'ledger')
        _check_call(f'callbacks.{label}', builder, arguments)
        callback = _call(f'callbacks.{label}', builder, arguments)
        if not isinstance(callback, Callback):
            raise RecipeError(f'callbacks.{label}: the builder returned a {type(callback).__name__}, not a '
                              'composer.core.Callback')
        built.append(callback)
    return built


@dataclass(frozen=True)
class Checked:
    """What :func:`check_run` builds while it checks a recipe: the parts ``plan`` and ``train`` both start from."""

    plan: BatchPlan
    data_seed: int
    train_dataset: Dataset
    eval_dataset: Dataset


def check_run(recipe: Recipe, world_size: int, training: bool = True) -> Checked:
    """Every check of ``recipe`` on ``world_size`` ranks that needs no Trainer or training.

    The one validation behind ``composer-sampling plan`` and ``train``: both
    refuse the same recipes with the same message. On top of
    :func:`~composer_sampling.recipes.schema.check_recipe`: the batch math, the
    seed for this world size, the builders' targets and arguments, the checkpoint
    at ``load_path``, then (the datasets built, never indexed) the splits, the
    global batch, the mixture sources and token units. ``training=False`` (plan)
    checks the builders of the data parts only (:func:`check_builders`).

    Raises:
        RecipeError: naming the field and what would be valid.

    Example:
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> check_run(load_recipe(None, ['seed=4294967295']), world_size=2)
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.schema.RecipeError: seed=4294967295 is too large for 2 ranks: ...
    """
    plan = batch_plan(recipe, world_size)
    check_seed(recipe.seed, world_size)
    data_seed = data_seed_of(recipe)
    check_builders(recipe, training=training)
    check_load_path(recipe)
    train_dataset, eval_dataset = build_datasets(recipe)
    check_splits(recipe, plan, train_dataset, eval_dataset)
    check_token_units(recipe, train_dataset)
    check_sources(recipe, plan, train_dataset)
    return Checked(plan, data_seed, train_dataset, eval_dataset)


def check_seed(seed: int, world_size: int) -> None:
    """Composer seeds rank ``r`` with ``seed + r`` and refuses 2**32 and above: ``seed <= 2**32 - world_size``.

    Example:
        >>> check_seed(2**32 - 8, world_size=8)
    """
    limit = 2**32 - world_size
    if seed > limit:
        raise RecipeError(f'seed={seed} is too large for {world_size} ranks: Composer seeds rank r with seed + r, '
                          f'which must stay below 2**32; use a seed in [0, {limit}]')


def check_splits(recipe: Recipe, plan: BatchPlan, train: Dataset, held_out: Dataset) -> None:
    """Both splits hold samples and the train split holds at least one global batch."""
    label = part_label('train_loader.dataset', recipe.train_loader.dataset)
    train_len, held_out_len = len(train), len(held_out)  # type: ignore[arg-type]
    if held_out_len == 0 and recipe.eval_loader.dataset is not None:
        raise RecipeError(f'eval_loader.dataset ({part_label("eval_loader.dataset", recipe.eval_loader.dataset)}) '
                          'is empty; give it samples to evaluate on')
    if held_out_len == 0 or train_len == 0:
        empty = 'held-out' if held_out_len == 0 else 'train'
        field_name, fraction = eval_fraction_of(recipe)
        raise RecipeError(f'{field_name}={fraction} leaves the {empty} split of the {label} dataset '
                          f'({train_len + held_out_len} samples) empty; use a fraction that leaves samples in both')
    if train_len < plan.data_parallel:
        raise RecipeError(f'the train split of {train_len} samples (train_loader.dataset: {label}) is smaller '
                          f'than the {plan.data_parallel} data-parallel ranks: some rank would train nothing; use a '
                          'larger dataset or fewer ranks')
    if plan.global_batch > train_len:
        ranks = plan.data_parallel
        largest = train_len // ranks * ranks
        multiple = f' (a multiple of the {ranks} data-parallel ranks)' if ranks > 1 else ''
        raise RecipeError(f'global_train_batch_size={plan.global_batch} is larger than the train split of '
                          f'{train_len} samples (train_loader.dataset: {label}); use at most {largest}{multiple}')


def counts_tokens(dataset: Dataset) -> bool:
    """Whether Composer counts tokens in batches of ``dataset``: samples with ``input_ids``, or a ``max_seq_len``.

    Example:
        >>> counts_tokens([{'input_ids': [1, 2]}]), counts_tokens([{'input': 0.5}])
        (True, False)
    """
    if hasattr(dataset, 'max_seq_len'):
        return True
    if len(dataset) == 0:  # type: ignore[arg-type]
        return False
    sample = dataset[0]
    return isinstance(sample, Mapping) and 'input_ids' in sample


def check_token_units(recipe: Recipe, train: Dataset) -> None:
    """A duration in ``tok`` only where Composer counts tokens: otherwise the run never reaches it."""
    in_tokens = [name for name in DURATION_UNITS if parse_duration(getattr(recipe, name))[1] == 'tok']
    if in_tokens and not counts_tokens(train):
        name = in_tokens[0]
        effect = 'train forever' if name == 'max_duration' else 'never reach it'
        raise RecipeError(f'{name}={getattr(recipe, name)!r} counts tokens, but Composer counts none in this run '
                          f'(the {part_label("train_loader.dataset", recipe.train_loader.dataset)} dataset yields '
                          'no input_ids and has no '
                          f'max_seq_len), so the run would {effect}; use ep, ba or sp')


def check_sources(recipe: Recipe, plan: BatchPlan, train: Dataset) -> None:
    """Every mixture source holds at least one global step, or it would never be trained."""
    if not isinstance(train, _Sources):
        return
    fractions = recipe.train_loader.sampler.source_fractions
    sizes = [len(source) for source in train.datasets]
    total, step = sum(sizes), plan.global_batch
    short = [k for k, size in enumerate(sizes) if size < step]
    if not short:
        return
    k = short[0]
    ranks = plan.data_parallel
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


def check_load_path(recipe: Recipe) -> None:
    """The checkpoint at ``load_path`` loads without running code (:func:`check_checkpoint`), unless trusted.

    Checked as Composer reads it: ``{run_name}`` filled (the recipe's, else
    ``COMPOSER_RUN_NAME`` or ``RUN_NAME``), the rank placeholders as rank 0's.
    """
    if recipe.load_path is None:
        return
    run_name = recipe.run_name or os.environ.get('COMPOSER_RUN_NAME') or os.environ.get('RUN_NAME')
    try:
        path = composer_load_path(recipe.load_path, run_name)
    except CheckpointError as error:
        raise RecipeError(f'load_path: {error}') from None
    field = 'load_path' if path == recipe.load_path else f'load_path {recipe.load_path!r}'
    if recipe.trust_checkpoint:
        if uri_scheme(path) is None and not os.path.exists(path) and not os.path.exists(path + '.symlink'):
            raise RecipeError(f'{field}: {path} does not exist')
        return
    extra = []
    for k, spec in enumerate(recipe.checkpoint_safe_globals):
        try:
            extra.extend(resolve_safe_global(spec))
        except CheckpointError as error:
            raise RecipeError(f'checkpoint_safe_globals[{k}]: {error}') from None
    try:
        check_checkpoint(path, extra)
    except CheckpointError as error:
        hint = {
            'unsafe': "; if you trust this file, add what it needs to checkpoint_safe_globals ('module:Name') or "
                      'set trust_checkpoint: true',
            'unchecked': '; set trust_checkpoint: true to load it unchecked if you trust it',
        }.get(error.reason, '')
        raise RecipeError(f'{field}: {error}{hint}') from None


def build_run(recipe: Recipe, world_size: int | None = None, rank: int | None = None) -> Run:
    """Datasets, loaders and callbacks for this process; raises :class:`RecipeError` before any training.

    ``world_size`` and ``rank`` default to this process's (``composer.utils.dist``).
    """
    from composer.utils import dist

    world_size = dist.get_world_size() if world_size is None else world_size
    rank = dist.get_global_rank() if rank is None else rank
    checked = check_run(recipe, world_size)
    callbacks = build_callbacks(recipe)
    plan = checked.plan
    where = Placement(plan.data_parallel, rank // plan.replication, checked.data_seed)
    train_loader = build_train_loader(recipe, checked.train_dataset, plan, where)
    problem = sharding_problem(active_root(train_loader), world_size, rank, plan.replication)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler ({part_label("train_loader.sampler", recipe.train_loader.sampler)}): '
                          f'{problem}')
    return Run(
        recipe=recipe,
        plan=plan,
        train_dataset=checked.train_dataset,
        eval_dataset=checked.eval_dataset,
        train_loader=train_loader,
        eval_loader=build_eval_loader(recipe, checked.eval_dataset),
        callbacks=callbacks,
        data_seed=checked.data_seed,
    )


def data_seed_of(recipe: Recipe) -> int:
    """``callbacks.sampler_sync.data_seed`` if the recipe gives one, else the trainer seed (no callback is built).

    Example:
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> data_seed_of(load_recipe(None, ['callbacks.sampler_sync.data_seed=9']))
        9
    """
    value = (recipe.callbacks.get('sampler_sync') or {}).get('data_seed')
    if value is None:
        return recipe.seed
    try:
        return check_int('data_seed', value, 0, MAX_SEED)  # SamplerSync's own rule
    except (TypeError, ValueError) as error:
        raise RecipeError(f'callbacks.sampler_sync.{error}') from None


def build_model(recipe: Recipe) -> ComposerModel:
    """The model the recipe names, as a ``ComposerModel`` (a plain module is wrapped: :func:`as_composer_model`)."""
    from composer_sampling.recipes.models import as_composer_model

    builder, arguments = resolve_part('model', recipe.model)
    return as_composer_model(_call('model', builder, arguments), part_label('model', recipe.model))


def build_optimizer(recipe: Recipe, model: torch.nn.Module) -> torch.optim.Optimizer:
    """The optimizer builder gets ``params`` (the model's parameters) and its own arguments."""
    builder, arguments = resolve_part('optimizer', recipe.optimizer)
    optimizer = _call('optimizer', builder, {**arguments, 'params': model.parameters()})
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise RecipeError(f'optimizer: the builder returned a {type(optimizer).__name__}, not a torch.optim.Optimizer')
    return optimizer


def build_trainer(run: Run, **overrides: Any) -> Trainer:
    """A CPU ``Trainer`` for the run; ``overrides`` go straight to ``Trainer`` (tests add callbacks)."""
    from composer import Trainer

    recipe = run.recipe
    torch.manual_seed(recipe.seed)  # the model's initial weights follow the recipe's seed
    model = build_model(recipe)
    extra_callbacks = list(overrides.pop('callbacks', []))
    arguments: dict[str, Any] = {
        'model': model,
        'train_dataloader': run.train_loader,
        'eval_dataloader': run.eval_loader,
        'eval_interval': recipe.eval_interval,
        'max_duration': recipe.max_duration,
        'optimizers': build_optimizer(recipe, model),
        'device': 'cpu',
        'device_train_microbatch_size': run.plan.microbatch,
        'seed': recipe.seed,
        'callbacks': [*run.callbacks, *extra_callbacks],
        'save_folder': recipe.save_folder,
        'save_interval': recipe.save_interval,
        'save_overwrite': recipe.save_overwrite,
        'save_num_checkpoints_to_keep': -1,
        'load_path': recipe.load_path,
        'run_name': recipe.run_name,
        'dist_timeout': recipe.dist_timeout,
        'progress_bar': False,
        'log_to_console': False,
        'load_progress_bar': False,
    }
    arguments.update(overrides)
    return Trainer(**arguments)
