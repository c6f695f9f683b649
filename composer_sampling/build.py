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
from dataclasses import dataclass
from typing import Any

import torch
from composer import Trainer
from composer.callbacks import LRMonitor, SpeedMonitor
from composer.core import Callback
from composer.utils import dist
from torch.utils.data import BatchSampler, DataLoader, Dataset

from composer_sampling.batching import BatchPlan, BatchPlanError, plan_batches
from composer_sampling.callback import SamplerSync
from composer_sampling.demo.batch_shuffle import BatchShuffleSampler
from composer_sampling.demo.data import SyntheticDataset, digits_splits
from composer_sampling.demo.model import MLPClassifier
from composer_sampling.recipe import Recipe, RecipeError
from composer_sampling.samplers.batch_adapter import DistributedBatchAdapter
from composer_sampling.samplers.resumable import ResumableDistributedSampler

__all__ = ['CALLBACKS', 'Run', 'batch_plan', 'build_callbacks', 'build_datasets', 'build_run', 'build_train_loader']

#: Callback names a recipe may list under ``callbacks``.
CALLBACKS: dict[str, type[Callback]] = {
    'sampler_sync': SamplerSync,
    'lr_monitor': LRMonitor,
    'speed_monitor': SpeedMonitor,
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


def batch_plan(recipe: Recipe, world_size: int) -> BatchPlan:
    """The recipe's batch math for ``world_size`` processes, as a :class:`RecipeError` if it does not divide."""
    try:
        return plan_batches(
            recipe.global_train_batch_size,
            world_size,
            microbatch=recipe.device_train_microbatch_size,
            accumulation_steps=recipe.gradient_accumulation_steps,
        )
    except BatchPlanError as error:
        raise RecipeError(str(error)) from None


def build_datasets(recipe: Recipe) -> tuple[Dataset, Dataset]:
    """The train and held-out datasets the recipe names."""
    config = recipe.train_loader.dataset
    if config.name == 'digits':
        return digits_splits(config.eval_fraction, config.read_delay_ms)
    assert config.size is not None, 'check_recipe requires a size for synthetic data'
    held_out = max(1, round(config.size * config.eval_fraction))
    return (
        SyntheticDataset(config.size, seed=0, read_delay_ms=config.read_delay_ms),
        SyntheticDataset(held_out, seed=1),
    )


def build_train_loader(recipe: Recipe, dataset: Dataset, plan: BatchPlan, data_seed: int) -> DataLoader:
    """The train DataLoader with the recipe's sampler, seeded with ``data_seed``; it yields device batches."""
    config = recipe.train_loader.sampler
    workers = recipe.train_loader.num_workers
    if config.name == 'resumable':
        sampler = ResumableDistributedSampler(
            dataset, shuffle=config.shuffle, seed=data_seed, drop_last=config.drop_last,
        )
        return DataLoader(dataset, batch_size=plan.device_batch, sampler=sampler, num_workers=workers)
    if config.name == 'distributed':
        sampler = dist.get_sampler(dataset, shuffle=config.shuffle, drop_last=config.drop_last, seed=data_seed)
        return DataLoader(dataset, batch_size=plan.device_batch, sampler=sampler, num_workers=workers)
    assert config.name == 'custom_batch', 'check_recipe admits only known sampler names'
    inner = dist.get_sampler(dataset, shuffle=config.shuffle, drop_last=config.drop_last, seed=data_seed)
    custom = BatchShuffleSampler(BatchSampler(inner, plan.device_batch, drop_last=False), seed=data_seed)
    return DataLoader(dataset, batch_sampler=DistributedBatchAdapter(custom), num_workers=workers)


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


def build_run(recipe: Recipe, world_size: int | None = None) -> Run:
    """Datasets, loaders and callbacks for this process; raises :class:`RecipeError` before any training."""
    plan = batch_plan(recipe, dist.get_world_size() if world_size is None else world_size)
    callbacks = build_callbacks(recipe)
    data_seed = data_seed_of(recipe, callbacks)
    train_dataset, eval_dataset = build_datasets(recipe)
    return Run(
        recipe=recipe,
        plan=plan,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        train_loader=build_train_loader(recipe, train_dataset, plan, data_seed),
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
