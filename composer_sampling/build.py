"""Builders: from a validated :class:`~composer_sampling.recipe.Recipe` to a ready ``Trainer``.

Everything that can be wrong with a recipe raises :class:`RecipeError` here,
before the ``Trainer`` (and the process group) exists.

Example:
    >>> from composer_sampling.recipe import load_recipe
    >>> recipe = load_recipe(None, ['global_train_batch_size=32'])
    >>> plan = batch_plan(recipe, world_size=1)
    >>> plan.device_batch
    32
"""

from __future__ import annotations

import inspect
import itertools
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
from composer_sampling.callback import SamplerSync
from composer_sampling.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.demo.data import SyntheticDataset, digits_splits
from composer_sampling.demo.model import MLPClassifier
from composer_sampling.distribute import distribute
from composer_sampling.graph import active_root, sharding_problem
from composer_sampling.recipe import Recipe, RecipeError
from composer_sampling.sample_ledger import SampleLedger
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.mixture import MixtureDistributedSampler
from composer_sampling.samplers.nested import NestedBatchSampler
from composer_sampling.samplers.resumable import ResumableDistributedSampler
from composer_sampling.samplers.sub_epoch import SubEpochDistributedSampler

__all__ = [
    'CALLBACKS',
    'Placement',
    'Run',
    'batch_plan',
    'build_callbacks',
    'build_datasets',
    'build_run',
    'build_train_loader',
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
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RecipeError(f'callbacks.sampler_sync.replication must be an int in [1, world size], got {value!r}')
    return value


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


def build_run(recipe: Recipe, world_size: int | None = None, rank: int | None = None) -> Run:
    """Datasets, loaders and callbacks for this process; raises :class:`RecipeError` before any training.

    ``world_size`` and ``rank`` default to this process's (``composer.utils.dist``).
    """
    world_size = dist.get_world_size() if world_size is None else world_size
    rank = dist.get_global_rank() if rank is None else rank
    plan = batch_plan(recipe, world_size)
    callbacks = build_callbacks(recipe)
    data_seed = data_seed_of(recipe, callbacks)
    train_dataset, eval_dataset = build_datasets(recipe)
    where = Placement(plan.data_parallel, rank // plan.replication, data_seed)
    train_loader = build_train_loader(recipe, train_dataset, plan, where)
    problem = sharding_problem(active_root(train_loader), world_size, rank, plan.replication)
    if problem is not None:
        raise RecipeError(f'train_loader.sampler.name={recipe.train_loader.sampler.name!r}: {problem}')
    return Run(
        recipe=recipe,
        plan=plan,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        train_loader=train_loader,
        eval_loader=build_eval_loader(recipe, eval_dataset),
        callbacks=callbacks,
        data_seed=data_seed,
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
