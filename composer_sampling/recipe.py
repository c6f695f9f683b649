"""The YAML recipe schema (an omegaconf structured config) and its loading.

Field names follow llm-foundry. omegaconf rejects unknown keys and wrong types;
:func:`load_recipe` turns its exceptions into a :class:`RecipeError` that names
the field, and checks the ranges omegaconf cannot.

Example:
    >>> recipe = load_recipe(None, ['global_train_batch_size=32', 'max_duration=1ep'])
    >>> recipe.global_train_batch_size, recipe.train_loader.sampler.name
    (32, 'resumable')
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from composer.core import Time
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    'DATASETS',
    'SAMPLERS',
    'SAMPLER_OPTIONS',
    'DatasetConfig',
    'ModelConfig',
    'OptimizerConfig',
    'Recipe',
    'RecipeError',
    'SamplerConfig',
    'TrainLoaderConfig',
    'load_recipe',
]

#: Sampler names a recipe may ask for, with what each builds.
SAMPLERS = {
    'resumable': 'ResumableDistributedSampler (O(1) memory, exact mid-epoch resume)',
    'distributed': "torch's DistributedSampler, as composer.utils.dist.get_sampler builds it",
    'random': "torch's RandomSampler: one process only, refused on several ranks (it does not shard)",
    'custom_batch': 'a batch-shuffling custom batch sampler over BatchSampler(DistributedSampler)',
    'sub_epoch': 'SubEpochDistributedSampler: a trainer epoch is 1/sub_epochs_per_epoch of the data',
    'mixture': 'MixtureDistributedSampler over the train split cut into sources by source_fractions',
    'nested_batch': 'NestedBatchSampler of num_batches inner batches, made distributed by distribute()',
}
#: Sampler options that only one sampler takes.
SAMPLER_OPTIONS = {'sub_epochs_per_epoch': 'sub_epoch', 'source_fractions': 'mixture', 'num_batches': 'nested_batch'}
DATASETS = {
    'digits': "scikit-learn's 8x8 digits, 1,797 images, split into train and held-out",
    'synthetic': '`size` samples of ten Gaussian clusters',
}
OPTIMIZERS = ('adamw', 'sgd')


class RecipeError(ValueError):
    """A recipe that cannot run: the message names the field and what would be valid."""


@dataclass
class DatasetConfig:
    name: str = 'digits'
    size: int | None = None
    eval_fraction: float = 0.2
    read_delay_ms: float = 0.0


@dataclass
class SamplerConfig:
    name: str = 'resumable'
    shuffle: bool = True
    drop_last: bool = False
    sub_epochs_per_epoch: int | None = None
    source_fractions: list[float] | None = None
    num_batches: int | None = None


@dataclass
class TrainLoaderConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    num_workers: int = 0


@dataclass
class OptimizerConfig:
    name: str = 'adamw'
    lr: float = 0.003
    weight_decay: float = 0.0


@dataclass
class ModelConfig:
    hidden_size: int = 64


@dataclass
class Recipe:
    """One training run: data, sampler, batch sizes, duration, checkpoints, callbacks."""

    run_name: str | None = None
    seed: int = 17
    max_duration: str = '3ep'
    global_train_batch_size: int = 64
    device_train_microbatch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    train_loader: TrainLoaderConfig = field(default_factory=TrainLoaderConfig)
    device_eval_batch_size: int = 128
    eval_interval: str = '1ep'
    model: ModelConfig = field(default_factory=ModelConfig)
    optimizer: OptimizerConfig = field(default_factory=OptimizerConfig)
    callbacks: dict[str, Any] = field(default_factory=lambda: {'sampler_sync': {}})
    save_folder: str | None = None
    save_interval: str = '1ep'
    save_overwrite: bool = False
    load_path: str | None = None
    dist_timeout: float = 120.0


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (``None``: the defaults), apply ``key=value`` overrides, validate.

    Raises:
        RecipeError: a missing file, a YAML error, an unknown field, a wrong type or
            a value out of range, naming the field.
    """
    schema = OmegaConf.structured(Recipe)
    layers = [schema]
    where = 'the recipe'
    try:
        if path is not None:
            where = str(path)
            if not Path(path).is_file():
                raise RecipeError(f'recipe file {path} does not exist')
            layers.append(OmegaConf.load(path))
        for item in overrides:
            if '=' not in item:
                raise RecipeError(f'override {item!r} must look like field=value, e.g. max_duration=2ep')
        layers.append(OmegaConf.from_dotlist(list(overrides)))
        merged = OmegaConf.merge(*layers)
        recipe = OmegaConf.to_object(merged)
    except OmegaConfBaseException as error:
        raise RecipeError(_describe_omegaconf_error(error, where)) from None
    except RecipeError:
        raise
    except Exception as error:  # YAML syntax errors and the like
        raise RecipeError(f'cannot read {where}: {error}') from None
    assert isinstance(recipe, Recipe)
    check_recipe(recipe)
    return recipe


def _describe_omegaconf_error(error: OmegaConfBaseException, where: str) -> str:
    key = getattr(error, 'full_key', None) or getattr(error, 'key', None)
    message = str(getattr(error, 'msg', error)).splitlines()[0]
    if 'not in' in message or ('Key' in message and 'not' in message):
        parent = _parent_fields(str(key))
        return f'unknown field {key!r} in {where}; valid fields here: {", ".join(parent)}'
    return f'invalid value for field {key!r} in {where}: {message}'


def _parent_fields(full_key: str) -> list[str]:
    """The valid field names next to ``full_key`` (``train_loader.sampler.nme`` -> sampler's fields)."""
    node: Any = Recipe
    for part in full_key.split('.')[:-1]:
        node = typing.get_type_hints(node).get(part)
        if not dataclasses.is_dataclass(node):
            return []
    return [f.name for f in dataclasses.fields(node)]


def _at_least(name: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise RecipeError(f'{name} must be at least {minimum}, got {value}')


def _one_of(name: str, value: str, choices: Any) -> None:
    if value not in choices:
        raise RecipeError(f'{name} {value!r} is unknown; choose one of: {", ".join(choices)}')


def _duration(name: str, value: str) -> None:
    try:
        Time.from_timestring(value)
    except (ValueError, TypeError):
        raise RecipeError(f"{name} {value!r} is not a Composer duration such as '3ep', '100ba' or '5000sp'") from None


def check_recipe(recipe: Recipe) -> None:
    """Range checks that the schema's types cannot express."""
    _at_least('seed', recipe.seed, 0)
    _at_least('global_train_batch_size', recipe.global_train_batch_size, 1)
    _at_least('device_train_microbatch_size', recipe.device_train_microbatch_size, 1)
    _at_least('gradient_accumulation_steps', recipe.gradient_accumulation_steps, 1)
    _at_least('device_eval_batch_size', recipe.device_eval_batch_size, 1)
    _at_least('train_loader.num_workers', recipe.train_loader.num_workers, 0)
    _at_least('train_loader.dataset.read_delay_ms', recipe.train_loader.dataset.read_delay_ms, 0)
    _at_least('model.hidden_size', recipe.model.hidden_size, 1)
    _at_least('dist_timeout', recipe.dist_timeout, 1)
    if recipe.optimizer.lr <= 0:
        raise RecipeError(f'optimizer.lr must be positive, got {recipe.optimizer.lr}')
    _at_least('optimizer.weight_decay', recipe.optimizer.weight_decay, 0)
    _one_of('optimizer.name', recipe.optimizer.name, OPTIMIZERS)
    _one_of('train_loader.sampler.name', recipe.train_loader.sampler.name, SAMPLERS)
    _check_sampler_options(recipe.train_loader.sampler)
    dataset = recipe.train_loader.dataset
    _one_of('train_loader.dataset.name', dataset.name, DATASETS)
    if not 0 < dataset.eval_fraction < 1:
        raise RecipeError(f'train_loader.dataset.eval_fraction must be in (0, 1), got {dataset.eval_fraction}')
    if dataset.name == 'synthetic':
        if dataset.size is None:
            raise RecipeError('train_loader.dataset.size is required for the synthetic dataset')
        _at_least('train_loader.dataset.size', dataset.size, 1)
    elif dataset.size is not None:
        raise RecipeError(f'train_loader.dataset.size applies to the synthetic dataset only, not {dataset.name!r}')
    for name in ('max_duration', 'eval_interval', 'save_interval'):
        _duration(name, getattr(recipe, name))
    for name, kwargs in recipe.callbacks.items():
        if kwargs is not None and not isinstance(kwargs, dict):
            raise RecipeError(f'callbacks.{name} must be a mapping of arguments (or empty), got {kwargs!r}')


def _check_sampler_options(sampler: SamplerConfig) -> None:
    for option, owner in SAMPLER_OPTIONS.items():
        value = getattr(sampler, option)
        if owner == sampler.name and value is None:
            raise RecipeError(f'train_loader.sampler.{option} is required for the {owner} sampler')
        if owner != sampler.name and value is not None:
            raise RecipeError(
                f'train_loader.sampler.{option} applies to the {owner} sampler only, not {sampler.name!r}',
            )
    _at_least('train_loader.sampler.sub_epochs_per_epoch', sampler.sub_epochs_per_epoch, 1)
    _at_least('train_loader.sampler.num_batches', sampler.num_batches, 1)
    if sampler.source_fractions is not None:
        fractions = sampler.source_fractions
        if not fractions or any(f <= 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6:
            raise RecipeError(
                f'train_loader.sampler.source_fractions must be positive fractions summing to 1, got {fractions}',
            )
