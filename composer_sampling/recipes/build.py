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

import inspect
import itertools
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from composer import Trainer
from composer.callbacks import LRMonitor, SpeedMonitor
from composer.core import Callback
from composer.utils import dist
from torch.utils.data import BatchSampler, ConcatDataset, DataLoader, Dataset, RandomSampler, SequentialSampler, Subset

from composer_sampling.batching import BatchPlan, BatchPlanError, plan_batches
from composer_sampling.callbacks.sample_ledger import SampleLedger
from composer_sampling.callbacks.sampler_sync import SamplerSync
from composer_sampling.checkpoint_check import (
    CheckpointError,
    check_checkpoint,
    composer_load_path,
    resolve_safe_global,
    uri_scheme,
)
from composer_sampling.distribute import distribute
from composer_sampling.graph import active_root, sharding_problem
from composer_sampling.recipes.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.recipes.demo.data import SyntheticDataset, digits_splits
from composer_sampling.recipes.demo.model import MLPClassifier
from composer_sampling.recipes.schema import DURATION_UNITS, Recipe, RecipeError, parse_duration
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler
from composer_sampling.validate import check_int

__all__ = [
    'CALLBACKS',
    'Checked',
    'Placement',
    'Run',
    'batch_plan',
    'build_callbacks',
    'build_datasets',
    'build_run',
    'build_train_loader',
    'check_load_path',
    'check_run',
]

#: Callback names a recipe may list under ``callbacks``.
CALLBACKS: dict[str, type[Callback]] = {
    'sampler_sync': SamplerSync,
    'lr_monitor': LRMonitor,
    'speed_monitor': SpeedMonitor,
    'sample_ledger': SampleLedger,
}


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


def build_datasets(recipe: Recipe) -> tuple[Dataset, Dataset]:
    """The train and held-out datasets the recipe names."""
    config = recipe.train_loader.dataset
    if config.name == 'digits':
        train, held_out = digits_splits(config.eval_fraction, config.read_delay_ms)
    else:
        assert config.size is not None, 'check_recipe requires a size for synthetic data'
        train = SyntheticDataset(config.size, seed=0, read_delay_ms=config.read_delay_ms)
        held_out = SyntheticDataset(max(1, round(config.size * config.eval_fraction)), seed=1)
    fractions = recipe.train_loader.sampler.source_fractions
    if fractions is not None:
        train = split_into_sources(train, fractions)
    return train, held_out


def split_into_sources(dataset: Dataset, fractions: list[float]) -> ConcatDataset:
    """Cut ``dataset`` into consecutive sources of the given fractions (the last takes the rounding).

    Example:
        >>> [len(source) for source in split_into_sources(list(range(10)), [0.5, 0.3, 0.2]).datasets]
        [5, 3, 2]
    """
    total = len(dataset)  # type: ignore[arg-type]
    bounds = [round(total * sum(fractions[:k])) for k in range(len(fractions))] + [total]
    return ConcatDataset([Subset(dataset, range(lo, hi)) for lo, hi in itertools.pairwise(bounds)])


@dataclass(frozen=True)
class Placement:
    """Where a train loader runs: ``rank`` of ``num_replicas`` (data-parallel ranks), drawing with ``data_seed``."""

    num_replicas: int
    rank: int
    data_seed: int


def build_train_loader(recipe: Recipe, dataset: Dataset, plan: BatchPlan, where: Placement) -> DataLoader:
    """The train DataLoader of one rank with the recipe's sampler; it yields device batches."""
    config = recipe.train_loader.sampler
    workers = recipe.train_loader.num_workers
    batch = plan.device_batch
    common = {'num_replicas': where.num_replicas, 'rank': where.rank, 'shuffle': config.shuffle,
              'seed': where.data_seed}
    if config.name == 'resumable':
        sampler = ResumableDistributedSampler(dataset, drop_last=config.drop_last, **common)
    elif config.name == 'distributed':
        sampler = dist.get_sampler(dataset, drop_last=config.drop_last, **common)
    elif config.name == 'random':
        sampler = RandomSampler(dataset, generator=torch.Generator().manual_seed(where.data_seed))
    elif config.name == 'sub_epoch':
        assert config.sub_epochs_per_epoch is not None, 'check_recipe requires it'
        try:
            sampler = SubEpochDistributedSampler(dataset, config.sub_epochs_per_epoch, drop_last=config.drop_last,
                                                 **common)
        except ValueError as error:
            raise RecipeError(f'train_loader.sampler: {error}') from None
    elif config.name == 'mixture':
        sizes = [len(source) for source in dataset.datasets]  # type: ignore[attr-defined]
        try:
            sampler = MixtureDistributedSampler(sizes, batch_size=batch, **common)
        except ValueError as error:
            raise RecipeError(f'train_loader.sampler.source_fractions: {error}') from None
    elif config.name == 'custom_batch':
        inner = dist.get_sampler(dataset, drop_last=config.drop_last, **common)
        custom = BatchShuffleSampler(BatchSampler(inner, batch, drop_last=False), seed=where.data_seed)
        return DataLoader(dataset, batch_sampler=DistributedBatchAdapter(custom), num_workers=workers)
    else:
        assert config.name == 'nested_batch', 'check_recipe admits only known sampler names'
        return _nested_batch_loader(recipe, dataset, plan, where)
    return DataLoader(dataset, batch_size=batch, sampler=sampler, num_workers=workers)


def _nested_batch_loader(recipe: Recipe, dataset: Dataset, plan: BatchPlan, where: Placement) -> DataLoader:
    """The Lightning-style batch of batches, written for one process, then made distributed."""
    config = recipe.train_loader.sampler
    assert config.num_batches is not None, 'check_recipe requires it'
    if plan.device_batch % config.num_batches:
        raise RecipeError(
            f'train_loader.sampler.num_batches={config.num_batches} does not divide the device batch '
            f'{plan.device_batch} (global_train_batch_size / world size); use a divisor of {plan.device_batch}',
        )
    base = RandomSampler(dataset) if config.shuffle else SequentialSampler(dataset)
    inner = BatchSampler(base, plan.device_batch // config.num_batches, drop_last=False)
    nested = NestedBatchSampler(inner, config.num_batches, drop_last=config.drop_last)
    one_process = DataLoader(dataset, batch_sampler=nested, num_workers=recipe.train_loader.num_workers)
    return distribute(one_process, num_replicas=where.num_replicas, rank=where.rank, seed=where.data_seed)


def build_eval_loader(recipe: Recipe, dataset: Dataset) -> DataLoader:
    sampler = dist.get_sampler(dataset, shuffle=False)
    return DataLoader(dataset, batch_size=recipe.device_eval_batch_size, sampler=sampler)


def build_callbacks(recipe: Recipe) -> list[Callback]:
    """Instantiate ``callbacks: {name: kwargs}``; unknown names and arguments are recipe errors."""
    built = []
    for name, kwargs in recipe.callbacks.items():
        if name not in CALLBACKS:
            raise RecipeError(f'callbacks.{name} is unknown; choose among: {", ".join(CALLBACKS)}')
        cls = CALLBACKS[name]
        arguments = dict(kwargs or {})
        if cls is SampleLedger and 'folder' not in arguments:
            if recipe.save_folder is None:
                raise RecipeError('callbacks.sample_ledger writes to {save_folder}/ledger: set save_folder, or give '
                                  'the callback a folder')
            arguments['folder'] = str(Path(recipe.save_folder) / 'ledger')
        try:
            inspect.signature(cls).bind(**arguments)
        except TypeError as error:
            valid = [p for p in inspect.signature(cls).parameters if p not in ('self', 'args', 'kwargs')]
            raise RecipeError(f'callbacks.{name}: {error}; its arguments are: {", ".join(valid)}') from None
        try:
            built.append(cls(**arguments))
        except (TypeError, ValueError) as error:
            raise RecipeError(f'callbacks.{name}: {error}') from None
    return built


@dataclass(frozen=True)
class Checked:
    """What :func:`check_run` builds while it checks a recipe: the parts ``plan`` and ``train`` both start from."""

    plan: BatchPlan
    callbacks: list[Callback]
    data_seed: int
    train_dataset: Dataset
    eval_dataset: Dataset


def check_run(recipe: Recipe, world_size: int) -> Checked:
    """Every check of ``recipe`` on ``world_size`` ranks that needs no process group, Trainer or training.

    The one validation behind ``composer-sampling plan`` and ``scripts/train.py``:
    both refuse the same recipes with the same message. On top of
    :func:`~composer_sampling.recipes.schema.check_recipe`: the batch math, the seed for
    this world size, the callbacks, the datasets (splits, global batch, token
    units, mixture sources) and the checkpoint at ``load_path``.

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
    callbacks = build_callbacks(recipe)
    data_seed = data_seed_of(recipe, callbacks)
    train_dataset, eval_dataset = build_datasets(recipe)
    check_splits(recipe, plan, train_dataset, eval_dataset)
    check_token_units(recipe, train_dataset)
    check_sources(recipe, plan, train_dataset)
    check_load_path(recipe)
    return Checked(plan, callbacks, data_seed, train_dataset, eval_dataset)


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
    config = recipe.train_loader.dataset
    train_len, held_out_len = len(train), len(held_out)  # type: ignore[arg-type]
    if held_out_len == 0 or train_len == 0:
        empty = 'held-out' if held_out_len == 0 else 'train'
        raise RecipeError(f'train_loader.dataset.eval_fraction={config.eval_fraction} leaves the {empty} split of '
                          f'the {config.name} dataset ({train_len + held_out_len} samples) empty; use a fraction that '
                          'leaves samples in both')
    if train_len < plan.data_parallel:
        raise RecipeError(f'the train split of {train_len} samples (train_loader.dataset: {config.name}) is smaller '
                          f'than the {plan.data_parallel} data-parallel ranks: some rank would train nothing; use a '
                          'larger dataset or fewer ranks')
    if plan.global_batch > train_len:
        ranks = plan.data_parallel
        largest = train_len // ranks * ranks
        multiple = f' (a multiple of the {ranks} data-parallel ranks)' if ranks > 1 else ''
        raise RecipeError(f'global_train_batch_size={plan.global_batch} is larger than the train split of '
                          f'{train_len} samples (train_loader.dataset: {config.name}); use at most {largest}{multiple}')


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
                          f'(the {recipe.train_loader.dataset.name} dataset yields no input_ids and has no '
                          f'max_seq_len), so the run would {effect}; use ep, ba or sp')


def check_sources(recipe: Recipe, plan: BatchPlan, train: Dataset) -> None:
    """Every mixture source holds at least one global step, or it would never be trained."""
    fractions = recipe.train_loader.sampler.source_fractions
    if fractions is None:
        return
    sizes = [len(source) for source in train.datasets]  # type: ignore[attr-defined]
    total, step = sum(sizes), plan.global_batch
    short = [k for k, size in enumerate(sizes) if size < step]
    if not short:
        return
    k = short[0]
    ranks = plan.data_parallel
    largest = min(sizes) // ranks * ranks
    smallest_fraction = -(-step * 1000 // total) / 1000
    batch = f', or a global_train_batch_size of at most {largest}' if largest >= ranks else ''
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
    world_size = dist.get_world_size() if world_size is None else world_size
    rank = dist.get_global_rank() if rank is None else rank
    checked = check_run(recipe, world_size)
    plan = checked.plan
    where = Placement(plan.data_parallel, rank // plan.replication, checked.data_seed)
    train_loader = build_train_loader(recipe, checked.train_dataset, plan, where)
    problem = sharding_problem(active_root(train_loader), world_size, rank, plan.replication)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler.name={recipe.train_loader.sampler.name!r}: {problem}')
    return Run(
        recipe=recipe,
        plan=plan,
        train_dataset=checked.train_dataset,
        eval_dataset=checked.eval_dataset,
        train_loader=train_loader,
        eval_loader=build_eval_loader(recipe, checked.eval_dataset),
        callbacks=checked.callbacks,
        data_seed=checked.data_seed,
    )


def data_seed_of(recipe: Recipe, callbacks: list[Callback]) -> int:
    """SamplerSync's ``data_seed`` if the recipe gives one, else the trainer seed (a checkpoint's wins on resume)."""
    sync = next((cb for cb in callbacks if isinstance(cb, SamplerSync)), None)
    if sync is not None and sync.data_seed is not None:
        return sync.data_seed
    return recipe.seed


def build_optimizer(recipe: Recipe, model: torch.nn.Module) -> torch.optim.Optimizer:
    config = recipe.optimizer
    if config.name == 'sgd':
        return torch.optim.SGD(model.parameters(), lr=config.lr, momentum=0.9, weight_decay=config.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)


def build_trainer(run: Run, **overrides: Any) -> Trainer:
    """A CPU ``Trainer`` for the run; ``overrides`` go straight to ``Trainer`` (tests add callbacks)."""
    recipe = run.recipe
    torch.manual_seed(recipe.seed)  # the model's initial weights follow the recipe's seed
    model = MLPClassifier(hidden_size=recipe.model.hidden_size)
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
