"""The YAML recipe schema (an omegaconf structured config) and its loading.

Field names follow llm-foundry. omegaconf rejects unknown keys and wrong types;
:func:`load_recipe` turns its exceptions into a :class:`RecipeError` that names
the field, and checks the ranges omegaconf cannot. Nothing here imports Composer:
durations are read by :func:`parse_duration`, which reads Composer's time strings
as ``composer.core.Time.from_timestring`` does.

Example:
    >>> recipe = load_recipe(None, ['global_train_batch_size=32', 'max_duration=1ep'])
    >>> recipe.global_train_batch_size, part_name('train_loader.sampler', recipe.train_loader.sampler)
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

from composer_sampling.recipes.registry import PART_KINDS, REGISTRIES, TARGET_FORM, RegistryError

__all__ = [
    'DEFAULT_NAMES',
    'DURATION_UNITS',
    'MAX_SEED',
    'DatasetConfig',
    'EvalLoaderConfig',
    'ModelConfig',
    'OptimizerConfig',
    'PartConfig',
    'Recipe',
    'RecipeError',
    'SamplerConfig',
    'TrainLoaderConfig',
    'check_recipe',
    'load_recipe',
    'parse_duration',
]

#: The registered name a part without ``name`` or ``target`` builds.
DEFAULT_NAMES = {'train_loader.dataset': 'digits', 'train_loader.sampler': 'resumable', 'model': 'mlp',
                 'optimizer': 'adamw'}
#: The fields every part has; the others of its section are the inline options of registered names.
PART_FIELDS = ('name', 'target', 'kwargs')
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
class PartConfig:
    """A part the recipe builds: a registered ``name``, or an import ``target`` with its ``kwargs``."""

    name: str | None = None
    target: str | None = None
    kwargs: dict[str, Any] | None = None


@dataclass
class DatasetConfig(PartConfig):
    size: int | None = None
    eval_fraction: float | None = None
    read_delay_ms: float | None = None


@dataclass
class SamplerConfig(PartConfig):
    shuffle: bool = True
    drop_last: bool = False
    sub_epochs_per_epoch: int | None = None
    source_fractions: list[float] | None = None
    num_batches: int | None = None


@dataclass
class TrainLoaderConfig:
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    sampler: SamplerConfig = field(default_factory=SamplerConfig)
    collate_fn: PartConfig | None = None
    num_workers: int = 0
    per_sample_rng: bool = False  # read every sample with the RNGs seeded from (data seed, epoch, index)


@dataclass
class EvalLoaderConfig:
    """The held-out data: its own ``dataset``, or ``eval_fraction`` of the train dataset (0.2 unless set)."""

    dataset: DatasetConfig | None = None
    collate_fn: PartConfig | None = None
    eval_fraction: float | None = None


@dataclass
class OptimizerConfig(PartConfig):
    lr: float = 0.003
    weight_decay: float = 0.0


@dataclass
class ModelConfig(PartConfig):
    hidden_size: int | None = None


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
    eval_loader: EvalLoaderConfig = field(default_factory=EvalLoaderConfig)
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
    check_parts(recipe)
    _at_least('train_loader.sampler.sub_epochs_per_epoch', recipe.train_loader.sampler.sub_epochs_per_epoch, 1)
    _at_least('train_loader.sampler.num_batches', recipe.train_loader.sampler.num_batches, 1)
    fractions = recipe.train_loader.sampler.source_fractions
    if fractions is not None and (not fractions or any(f <= 0 for f in fractions) or abs(sum(fractions) - 1) > 1e-6):
        raise RecipeError(
            f'train_loader.sampler.source_fractions must be positive fractions summing to 1, got {fractions}',
        )
    _at_least('train_loader.dataset.size', recipe.train_loader.dataset.size, 1)
    fraction_field, fraction = eval_fraction_of(recipe)
    if not 0 < fraction < 1:
        raise RecipeError(f'{fraction_field} must be in (0, 1), got {fraction}')
    for name in DURATION_UNITS:
        _check_duration(name, getattr(recipe, name))
    for name, kwargs in recipe.callbacks.items():
        if kwargs is not None and not isinstance(kwargs, dict):
            raise RecipeError(f'callbacks.{name} must be a mapping of arguments (or empty), got {kwargs!r}')
    for k, spec in enumerate(recipe.checkpoint_safe_globals):
        if not re.match(r'^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$', spec):
            raise RecipeError(f"checkpoint_safe_globals[{k}] must look like 'module:Name', e.g. "
                              f"'my_package.callbacks:MyState', got {spec!r}")


def part_sections(recipe: Recipe) -> list[tuple[str, PartConfig]]:
    """Every part the recipe builds, with its field: loaders' datasets and collate functions, model, optimizer.

    Callbacks are parts too, but a mapping ``{label: arguments}``: see :func:`callback_parts`.
    """
    sections: list[tuple[str, PartConfig | None]] = [
        ('train_loader.dataset', recipe.train_loader.dataset),
        ('train_loader.sampler', recipe.train_loader.sampler),
        ('train_loader.collate_fn', recipe.train_loader.collate_fn),
        ('eval_loader.dataset', recipe.eval_loader.dataset),
        ('eval_loader.collate_fn', recipe.eval_loader.collate_fn),
        ('model', recipe.model),
        ('optimizer', recipe.optimizer),
    ]
    return [(name, part) for name, part in sections if part is not None]


def callback_parts(recipe: Recipe) -> list[tuple[str, str | None, str | None, dict[str, Any]]]:
    """``(label, registered name or None, target or None, arguments)`` for every entry of ``callbacks``.

    ``callbacks: {lr_monitor: {}}`` is the name form (the label is the name, the
    mapping its arguments); ``callbacks: {mine: {target: 'pkg:Cls', kwargs: {...}}}``
    the import form.

    Example:
        >>> recipe = load_recipe(None, ['callbacks={mine: {target: "pkg:Cb", kwargs: {x: 1}}, lr_monitor: {}}'])
        >>> callback_parts(recipe)
        [('mine', None, 'pkg:Cb', {'x': 1}), ('lr_monitor', 'lr_monitor', None, {})]
    """
    parts = []
    for label, arguments in recipe.callbacks.items():
        arguments = dict(arguments or {})
        if 'target' in arguments:
            parts.append((label, None, arguments['target'], dict(arguments.get('kwargs') or {})))
        else:
            parts.append((label, label, None, arguments))
    return parts


def inline_options(part: PartConfig) -> dict[str, Any]:
    """The options of a part's section besides ``name``/``target``/``kwargs`` that differ from their defaults.

    Example:
        >>> inline_options(SamplerConfig(name='sub_epoch', sub_epochs_per_epoch=4))
        {'sub_epochs_per_epoch': 4}
    """
    default = type(part)()
    return {f.name: getattr(part, f.name) for f in dataclasses.fields(part)
            if f.name not in (*PART_FIELDS, 'eval_fraction') and getattr(part, f.name) != getattr(default, f.name)}


def part_name(field_name: str, part: PartConfig) -> str | None:
    """The registered name a part builds (its default when it names none); ``None`` for the import form."""
    if part.target is not None:
        return None
    return part.name or DEFAULT_NAMES.get(field_name)


def check_parts(recipe: Recipe) -> None:
    """Each part names a registered ``name`` or a ``target`` (not both), with only the options it takes.

    Only the registries' tables and entry points are read: nothing is imported.
    That the target imports and takes its ``kwargs`` is checked when the run is
    built (:func:`composer_sampling.recipes.build.check_builders`).
    """
    for field_name, part in part_sections(recipe):
        options = inline_options(part)
        if part.target is not None:
            if part.name is not None:
                raise RecipeError(f'{field_name} gives both name={part.name!r} and target={part.target!r}; give one')
            if not TARGET_FORM.match(part.target):
                raise RecipeError(f"{field_name}.target must look like 'package.module:callable', e.g. "
                                  f"'my_pkg.models:build_model', got {part.target!r}")
            if isinstance(part, DatasetConfig) and part.eval_fraction is not None:
                raise RecipeError(f'{field_name}.eval_fraction: with target, the only other key is kwargs; set the '
                                  'held-out fraction as eval_loader.eval_fraction')
            if options:
                option = next(iter(options))
                raise RecipeError(f'{field_name}.{option} applies to the name form only; with target, pass every '
                                  f'argument in {field_name}.kwargs')
            continue
        name = part_name(field_name, part)
        if name is None:
            raise RecipeError(f'{field_name} needs a name (one of: '
                              f'{", ".join(REGISTRIES[PART_KINDS[field_name]].names())}) or a target')
        try:
            entry = REGISTRIES[PART_KINDS[field_name]].entry(name)
        except RegistryError as error:
            raise RecipeError(f'{field_name}.name: {error}') from None
        for option in options:
            if option not in entry.options:
                takes = f'it takes: {", ".join(entry.options)}' if entry.options else 'it takes none'
                raise RecipeError(f'{field_name}.{option} does not apply to the {name} {PART_KINDS[field_name][:-1]} '
                                  f'({takes}); for a registered part, pass other arguments in {field_name}.kwargs')
        for option in entry.required:
            if getattr(part, option, None) is None and option not in (part.kwargs or {}):
                raise RecipeError(f'{field_name}.{option} is required for the {name} {PART_KINDS[field_name][:-1]}')
    for label, name, target, _ in callback_parts(recipe):
        extra = set(recipe.callbacks[label] or {}) - {'target', 'kwargs'}
        if target is not None and extra:
            raise RecipeError(f'callbacks.{label} has target, so its only other key is kwargs; got '
                              f'{", ".join(sorted(extra))}')
        if target is not None and not (isinstance(target, str) and TARGET_FORM.match(target)):
            raise RecipeError(f"callbacks.{label}.target must look like 'package.module:Callback', got {target!r}")
        if name is not None:
            try:
                REGISTRIES['callbacks'].entry(name)
            except RegistryError as error:
                raise RecipeError(f'callbacks.{label}: {error}') from None


def eval_fraction_of(recipe: Recipe) -> tuple[str, float]:
    """The held-out fraction of the train dataset and the field that sets it (0.2 when none does)."""
    legacy, current = recipe.train_loader.dataset.eval_fraction, recipe.eval_loader.eval_fraction
    if legacy is not None and current is not None:
        raise RecipeError('eval_loader.eval_fraction and train_loader.dataset.eval_fraction both set the held-out '
                          'fraction; keep eval_loader.eval_fraction')
    if recipe.eval_loader.dataset is not None and (legacy is not None or current is not None):
        field_name = 'eval_loader.eval_fraction' if current is not None else 'train_loader.dataset.eval_fraction'
        raise RecipeError(f'{field_name} cuts the held-out split from the train dataset, but eval_loader.dataset '
                          'gives one of its own; remove one of them')
    if current is not None:
        return 'eval_loader.eval_fraction', current
    if legacy is not None:
        return 'train_loader.dataset.eval_fraction', legacy
    return 'eval_loader.eval_fraction', 0.2
