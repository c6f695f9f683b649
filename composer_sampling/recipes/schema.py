"""The YAML recipe schema (an omegaconf structured config) and its loading.

Field names follow llm-foundry. omegaconf rejects unknown keys and wrong types;
:func:`load_recipe` turns its exceptions into a :class:`RecipeError` that names
the field, and checks the ranges omegaconf cannot. Nothing here imports Composer:
durations are read by :func:`parse_duration`, which reads Composer's time strings
as ``composer.core.Time.from_timestring`` does.

Example:
    >>> recipe = load_recipe(None, ['global_train_batch_size=32', 'max_duration=1ep'])
    >>> recipe.global_train_batch_size, recipe.train_loader.sampler.name
    (32, 'resumable')
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

__all__ = [
    'DATASETS',
    'DURATION_UNITS',
    'MAX_SEED',
    'SAMPLERS',
    'SAMPLER_OPTIONS',
    'DatasetConfig',
    'ModelConfig',
    'OptimizerConfig',
    'Recipe',
    'RecipeError',
    'SamplerConfig',
    'TrainLoaderConfig',
    'check_recipe',
    'load_recipe',
    'parse_duration',
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
#: Composer seeds rank ``r`` with ``seed + r`` and refuses seeds of 2**32 and above.
MAX_SEED = 2**32 - 1
#: The units each duration field may use. Composer also reads ``iter`` and wall-clock
#: ``sec``; a recipe's run counts neither. ``tok`` needs batches Composer counts tokens
#: in (checked when the dataset is built); ``dur`` is a fraction of ``max_duration``,
#: which Composer accepts for intervals only.
DURATION_UNITS = {
    'max_duration': ('ep', 'ba', 'sp', 'tok'),
    'eval_interval': ('ep', 'ba', 'sp', 'tok', 'dur'),
    'save_interval': ('ep', 'ba', 'sp', 'tok', 'dur'),
}
_COMPOSER_UNITS = ('iter', 'ep', 'ba', 'sp', 'tok', 'dur', 'sec')
_DURATION = re.compile(r'^(.+)(' + '|'.join(_COMPOSER_UNITS) + r')$', flags=re.IGNORECASE)


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
    trust_checkpoint: bool = False
    checkpoint_safe_globals: list[str] = field(default_factory=list)


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (``None``: the defaults), apply ``key=value`` overrides, validate.

    A ``callbacks`` mapping in the file, or a ``callbacks=...`` override, replaces the
    default callbacks (``callbacks: {}`` means none); ``callbacks.NAME=...`` adds one.

    Raises:
        RecipeError: a missing file, a YAML error, an unknown field, a wrong type or
            a value out of range, naming the field.
    """
    where = 'the recipe'
    try:
        merged = OmegaConf.structured(Recipe)
        if path is not None:
            where = str(path)
            if not Path(path).is_file():
                raise RecipeError(f'recipe file {path} does not exist')
            loaded = OmegaConf.load(path)
            merged = _merge(merged, loaded, f'the recipe {where}', replaces_callbacks='callbacks' in loaded)
        for item in overrides:
            if '=' not in item:
                raise RecipeError(f'override {item!r} must look like field=value, e.g. max_duration=2ep')
            key = item.split('=', 1)[0].strip()
            merged = _merge(merged, OmegaConf.from_dotlist([item]), f'override {item!r}',
                            replaces_callbacks=key == 'callbacks')
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


def _merge(merged: DictConfig, layer: Any, what: str, replaces_callbacks: bool) -> DictConfig:
    """Merge one layer (the file, or one override) after checking its shape against the schema."""
    if not isinstance(layer, DictConfig):
        kind = 'list' if isinstance(layer, ListConfig) else type(layer).__name__
        raise RecipeError(f'{what} must be a mapping of fields at its top level (field: value), got a {kind}; '
                          f'valid fields: {", ".join(f.name for f in dataclasses.fields(Recipe))}')
    _check_shape(OmegaConf.to_container(layer), Recipe, '')  # type: ignore[arg-type]
    if replaces_callbacks:
        merged.callbacks = {}
    result = OmegaConf.merge(merged, layer)
    assert isinstance(result, DictConfig)
    return result


def _unwrap(hint: Any) -> Any:
    """``X`` from ``X | None``; any other type hint unchanged."""
    args = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    if typing.get_origin(hint) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return hint


def _shape(hint: Any) -> str:
    """What a schema type needs in the YAML: ``'mapping'``, ``'list'`` or ``'value'``."""
    hint = _unwrap(hint)
    if dataclasses.is_dataclass(hint) or typing.get_origin(hint) is dict:
        return 'mapping'
    return 'list' if typing.get_origin(hint) is list else 'value'


def _kind(value: Any) -> str:
    return {dict: 'mapping', list: 'list'}.get(type(value), 'value')


def _check_shape(node: dict[str, Any], schema: Any, prefix: str) -> None:
    """Every known field holds what its type needs (a mapping, a list or a single value), named if not.

    omegaconf reports a list where a section belongs as "Cannot merge incompatible
    container types", without the field; this runs on the plain YAML before the merge.
    """
    hints = typing.get_type_hints(schema)
    for key, value in node.items():
        name = f'{prefix}{key}'
        if key not in hints:
            continue  # an unknown field: omegaconf names it with the valid ones
        shape, hint = _shape(hints[key]), _unwrap(hints[key])
        if value is None and shape == 'mapping':
            raise RecipeError(f'{name} must be a mapping, got null; write {name}: {{}} for an empty one')
        if value is None or _kind(value) == shape:
            if dataclasses.is_dataclass(hint):
                _check_shape(value, hint, f'{name}.')
            elif name == 'callbacks':
                for callback, kwargs in value.items():
                    if kwargs is not None and not isinstance(kwargs, dict):
                        raise RecipeError(f'callbacks.{callback} must be a mapping of arguments (or empty), got '
                                          f'{kwargs!r}')
            continue
        if dataclasses.is_dataclass(hint):
            expected = f'a mapping of fields ({", ".join(f.name for f in dataclasses.fields(hint))})'
        else:
            expected = {'mapping': 'a mapping {name: arguments}', 'list': 'a list', 'value': 'a single value'}[shape]
        got = f'a {_kind(value)} {value!r}' if isinstance(value, (dict, list)) else repr(value)
        raise RecipeError(f'{name} must be {expected}, got {got}')


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


def parse_duration(text: str) -> tuple[int | float, str]:
    """Read a Composer time string as ``composer.core.Time.from_timestring`` does, without importing Composer.

    A number (anything ``float`` reads: ``3``, ``1e3``, ``1_000``) followed by a unit,
    case-insensitive. Every unit but ``dur`` needs a whole number. Wall-clock
    ``XhYmZs`` strings, which Composer also reads, are not read here.

    Returns:
        ``(value, unit)``, the unit in lower case; ``value`` is a float for ``dur``.

    Raises:
        ValueError: not a number followed by one of Composer's units, or a fraction
            where the unit needs a whole number.

    Example:
        >>> parse_duration('3ep'), parse_duration('1e3BA'), parse_duration('0.5dur')
        ((3, 'ep'), (1000, 'ba'), (0.5, 'dur'))
    """
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(f'{text!r} is not a number followed by a unit ({", ".join(_COMPOSER_UNITS)})')
    number, unit = match.group(1), match.group(2).lower()
    try:
        value = float(number)
    except ValueError:
        raise ValueError(f'{number!r} in {text!r} is not a number') from None
    if unit == 'dur':
        return value, unit
    if not math.isfinite(value) or value != int(value):
        raise ValueError(f'{text!r}: the unit {unit} needs a whole number, got {number}')
    return int(value), unit


def _duration_rule(units: tuple[str, ...]) -> str:
    whole = ', '.join(unit for unit in units if unit != 'dur')
    rule = f'a whole number of at least 1 followed by {whole}'
    return rule + (', or a fraction in (0, 1] of max_duration followed by dur' if 'dur' in units else '')


def _check_duration(name: str, text: str) -> None:
    units = DURATION_UNITS[name]
    rule = _duration_rule(units)
    try:
        value, unit = parse_duration(text)
    except ValueError as error:
        raise RecipeError(f'{name}={text!r} is not a duration this run can count ({error}); use {rule}, '
                          "e.g. '3ep', '100ba' or '5000sp'") from None
    if unit not in units:
        why = {'iter': 'the run counts no iterations', 'sec': 'wall-clock time is not a data position',
               'dur': 'Composer allows dur for intervals only'}.get(unit, '')
        raise RecipeError(f'{name}={text!r}: the unit {unit} is not one this run can count ({why}); use {rule}')
    if unit == 'dur' and not 0 < value <= 1:
        raise RecipeError(f'{name}={text!r}: a fraction of max_duration must be in (0, 1], got {value}')
    if unit != 'dur' and value < 1:
        effect = {'max_duration': 'would train nothing', 'eval_interval': 'would never evaluate',
                  'save_interval': 'would never save'}[name]
        raise RecipeError(f'{name}={text!r} must be positive ({value} {effect}); use {rule}')


def _float_fields(obj: Any, prefix: str = '') -> Iterator[tuple[str, Any]]:
    """Every float in the recipe (dataclass fields, list items, callback arguments) with its dotted name."""
    items = ([(f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj)] if dataclasses.is_dataclass(obj)
             else list(obj.items()))
    for key, value in items:
        name = f'{prefix}{key}'
        if isinstance(value, float):
            yield name, value
        elif dataclasses.is_dataclass(value) or isinstance(value, dict):
            yield from _float_fields(value, f'{name}.')
        elif isinstance(value, list):
            yield from ((f'{name}[{k}]', item) for k, item in enumerate(value) if isinstance(item, float))


def _at_least(name: str, value: float | None, minimum: float) -> None:
    if value is not None and value < minimum:
        raise RecipeError(f'{name} must be at least {minimum}, got {value}')


def _one_of(name: str, value: str, choices: Any) -> None:
    if value not in choices:
        raise RecipeError(f'{name} {value!r} is unknown; choose one of: {", ".join(choices)}')


def check_recipe(recipe: Recipe) -> None:
    """Range checks that the schema's types cannot express (those that need the world size or data: in build)."""
    for name, value in _float_fields(recipe):
        if not math.isfinite(value):
            raise RecipeError(f'{name} must be a finite number, got {value}')
    if not 0 <= recipe.seed <= MAX_SEED:
        raise RecipeError(f'seed must be in the interval [0, 2**32 - world size] ([0, {MAX_SEED}] on one process), '
                          f'got {recipe.seed}')
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
    for name in DURATION_UNITS:
        _check_duration(name, getattr(recipe, name))
    for name, kwargs in recipe.callbacks.items():
        if kwargs is not None and not isinstance(kwargs, dict):
            raise RecipeError(f'callbacks.{name} must be a mapping of arguments (or empty), got {kwargs!r}')
    for k, spec in enumerate(recipe.checkpoint_safe_globals):
        if not re.match(r'^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$', spec):
            raise RecipeError(f"checkpoint_safe_globals[{k}] must look like 'module:Name', e.g. "
                              f"'my_package.callbacks:MyState', got {spec!r}")


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
