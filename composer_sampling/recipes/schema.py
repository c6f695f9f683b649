"""The YAML recipe schema (an omegaconf structured config) and its loading, the first floor of the runner.

Field names follow llm-foundry. A *part* names a registered ``name`` with inline options, or an import ``target``
with ``kwargs``; :mod:`~composer_sampling.recipes.resolve` checks its keys.

Example:
    >>> recipe = load_recipe(None, ['global_train_batch_size=32', 'train_loader.sampler={name: random}'])
    >>> recipe.global_train_batch_size, recipe.train_loader.sampler
    (32, {'name': 'random'})
"""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError, OmegaConfBaseException

from composer_sampling._checkpoint.import_names import split_import_name
from composer_sampling.recipes.durations import DURATION_UNITS, valid_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.run_fields import check_run_fields

__all__ = ['MAPPED_SECTIONS', 'PART_SECTIONS', 'TRAINER_SEED_LIMIT', 'EvalLoaderConfig', 'Recipe', 'RecipeError',
           'TrainLoaderConfig', 'load_recipe']

#: Composer seeds rank ``r`` with ``seed + r`` and refuses seeds of 2**32 and above.
TRAINER_SEED_LIMIT = 2**32 - 1
#: The fields that hold one part each (or a mapping of parts), with their value when not given. A part in the file
#: or in an override replaces the whole field, so another sampler does not inherit the last one's options.
PART_SECTIONS: dict[str, dict[str, Any] | None] = {
    'train_loader.dataset': {}, 'train_loader.sampler': {}, 'train_loader.collate_fn': None,
    'eval_loader.dataset': None, 'eval_loader.collate_fn': None, 'model': {}, 'optimizer': {}, 'scheduler': None,
    'loggers': {}, 'algorithms': {}, 'callbacks': {}}
#: The fields that map a label to a part: ``{label: {arguments}}``, the label a registered name unless a target.
MAPPED_SECTIONS = ('loggers', 'algorithms', 'callbacks')
_MINIMUMS = {'global_train_batch_size': 1, 'device_train_microbatch_size': 1, 'gradient_accumulation_steps': 1,
             'device_eval_batch_size': 1, 'train_loader.num_workers': 0, 'dist_timeout': 1}


@dataclass
class TrainLoaderConfig:
    dataset: dict[str, Any] = field(default_factory=dict)
    sampler: dict[str, Any] = field(default_factory=dict)
    collate_fn: dict[str, Any] | None = None
    num_workers: int = 0
    per_sample_rng: bool = False  # read every sample with the RNGs seeded from (data seed, epoch, index)


@dataclass
class EvalLoaderConfig:
    """The held-out data: its own ``dataset``, or ``eval_fraction`` of the train dataset (0.2 unless set)."""

    dataset: dict[str, Any] | None = None
    collate_fn: dict[str, Any] | None = None
    eval_fraction: float | None = None


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
    model: dict[str, Any] = field(default_factory=dict)
    optimizer: dict[str, Any] = field(default_factory=dict)
    scheduler: dict[str, Any] | None = None  # the LR schedule, one part; or schedulers, a list of them (not both)
    schedulers: list[dict[str, Any]] = field(default_factory=list)
    scale_schedule_ratio: float = 1.0
    loggers: dict[str, Any] = field(default_factory=dict)
    progress_bar: bool | None = None  # null: Composer's progress bar when stdout and stderr are terminals
    log_to_console: bool | None = None  # null: Composer's default, off
    console_log_interval: str = '1ep'
    algorithms: dict[str, Any] = field(default_factory=dict)
    callbacks: dict[str, Any] = field(default_factory=lambda: {'sampler_sync': {}})
    save_folder: str | None = None
    save_interval: str = '1ep'
    save_overwrite: bool = False
    load_path: str | None = None
    dist_timeout: float = 120.0
    trust_checkpoint: bool = False
    checkpoint_safe_globals: list[str] = field(default_factory=list)
    device: str = 'auto'  # 'auto' (the GPU when torch sees one, else the CPU, as Composer decides), cpu, gpu, mps
    precision: str | None = None  # Composer's names; None: Composer's default for the device
    autoresume: bool = False  # resume from the save folder's latest checkpoint, when it holds one
    parallelism_config: dict[str, Any] | None = None  # Composer's: {fsdp: {...}, tp: {...}}; GPUs only


def load_recipe(path: str | Path | None, overrides: list[str] | tuple[str, ...] = ()) -> Recipe:
    """Read a YAML recipe (``None``: the defaults), apply ``field=value`` overrides, check the run's fields.

    A part given in the file or by an override replaces that part whole, and so does an override of its ``name`` or
    ``target``. ``callbacks: {}`` means no callbacks, and ``callbacks.NAME=...`` adds one. A
    :class:`RecipeError` names the field and the file or override it came from.
    """
    merged = OmegaConf.structured(Recipe)
    if path is not None:
        layer = _read_file(Path(path))
        merged = _merge(merged, layer, f'the recipe {path}', list(_sections_in(layer)))
    for item in overrides:
        key = item.partition('=')[0].strip()
        if '=' not in item or not key:
            raise RecipeError(f'override {item!r} must look like field=value, e.g. max_duration=2ep')
        try:
            layer = OmegaConf.from_dotlist([item])
        except Exception as error:
            raise RecipeError(f'override {item!r} cannot be read: {yaml_problem(error, marks=False)}') from None
        part = key.rpartition('.')[0] if key.endswith(('.name', '.target')) else key
        merged = _merge(merged, layer, f'override {item!r}', [part] if part in PART_SECTIONS else [])
    where = (f'the recipe {path}' if path is not None else 'the recipe') + (' or its overrides' if overrides else '')
    try:
        recipe = OmegaConf.to_object(merged)
    except InterpolationResolutionError as error:
        key = getattr(error, 'full_key', None) or '?'
        raise RecipeError(f'{key}: {_first_line(error)} (in {where}); set the variable or write the value') from None
    except OmegaConfBaseException as error:
        raise RecipeError(_config_error_text(error, where)) from None
    assert isinstance(recipe, Recipe)
    check_recipe(recipe)
    return recipe


def _read_file(path: Path) -> DictConfig | ListConfig:
    if path.is_dir():
        inside = sorted(child.name for child in path.glob('*.yaml'))
        holds = f' (it holds {", ".join(inside[:3])}{", ..." if len(inside) > 3 else ""})' if inside else ''
        raise RecipeError(f'the recipe {path} is a folder, not a YAML file{holds}; give the path of a recipe file')
    if not path.is_file():
        raise RecipeError(f'recipe file {path} does not exist')
    try:
        loaded = OmegaConf.load(path)
    except Exception as error:  # YAML syntax errors and the like
        raise RecipeError(f'cannot read the recipe {path}: {yaml_problem(error)}') from None
    if isinstance(loaded, DictConfig) and not loaded:
        raise RecipeError(f'the recipe {path} is empty; a recipe sets at least what it trains (copy one with '
                          'composer-sampling recipes NAME)')
    return loaded


def _sections_in(layer: Any) -> Iterator[str]:
    """The part sections a file gives, to be replaced whole rather than merged into the defaults."""
    if not isinstance(layer, DictConfig):
        return
    for name in PART_SECTIONS:
        head, _, tail = name.partition('.')
        if head in layer and (not tail or (isinstance(layer.get(head), DictConfig) and tail in layer.get(head))):
            yield name


def _merge(merged: DictConfig, layer: Any, what: str, replaced: list[str]) -> DictConfig:
    """Merge one layer (the file, or one override) after checking its shape against the schema."""
    if not isinstance(layer, DictConfig):
        kind = 'list' if isinstance(layer, ListConfig) else type(layer).__name__
        raise RecipeError(f'{what} must be a mapping of fields at its top level (field: value), got a {kind}; '
                          f'valid fields: {", ".join(f.name for f in dataclasses.fields(Recipe))}')
    try:
        _check_shape(OmegaConf.to_container(layer), Recipe, '', what)  # type: ignore[arg-type]
        for name in replaced:
            OmegaConf.update(merged, name, PART_SECTIONS[name], merge=False)
        result = OmegaConf.merge(merged, layer)
    except OmegaConfBaseException as error:
        raise RecipeError(_config_error_text(error, what)) from None
    assert isinstance(result, DictConfig)
    return result


def _first_line(error: BaseException) -> str:
    return str(getattr(error, 'msg', error)).strip().splitlines()[0]


def yaml_problem(error: BaseException, marks: bool = True) -> str:
    """The parser's reason for refusing a YAML text, with its line and column when ``marks``; a duplicate key is named.

    Example:
        >>> from omegaconf import OmegaConf
        >>> try:
        ...     OmegaConf.create('seed: 3\\nseed: 4\\n')
        ... except Exception as error:
        ...     print(yaml_problem(error))
        line 2, column 1: duplicate key 'seed' in the mapping at line 1, column 1; write each key once
    """
    problem, where = getattr(error, 'problem', None), getattr(error, 'problem_mark', None)
    if not isinstance(problem, str):  # not PyYAML's MarkedYAMLError (or one without a reason)
        return _first_line(error)
    context, context_where = getattr(error, 'context', None), getattr(error, 'context_mark', None)
    duplicate = re.fullmatch(r'found duplicate key (.*)', problem)
    at = (lambda mark: f' at line {mark.line + 1}, column {mark.column + 1}') if marks else (lambda mark: '')
    if duplicate and context_where is not None:
        reason = f'duplicate key {duplicate.group(1)!r} in the mapping{at(context_where)}; write each key once'
    elif context and context_where is not None:
        reason = f'{problem} ({context}{at(context_where)})'
    else:
        reason = problem
    return f'line {where.line + 1}, column {where.column + 1}: {reason}' if marks and where is not None else reason


def _shape(hint: Any) -> str:
    """What a schema type needs in the YAML: ``'mapping'``, ``'list'`` or ``'value'``."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):  # X | None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    if dataclasses.is_dataclass(hint) or typing.get_origin(hint) is dict:
        return 'mapping'
    return 'list' if typing.get_origin(hint) is list else 'value'


def _kind(value: Any) -> str:
    kinds: dict[type, str] = {dict: 'mapping', list: 'list'}
    return kinds.get(type(value), 'value')


def _check_shape(node: dict[str, Any], schema: Any, prefix: str, what: str) -> None:
    """Every known field holds what its type needs (a mapping, a list or a value), checked before omegaconf merges."""
    hints = typing.get_type_hints(schema)
    for key, value in node.items():
        name = f'{prefix}{key}'
        if key not in hints:
            valid = ', '.join(f.name for f in dataclasses.fields(schema))
            raise RecipeError(f'unknown field {name!r} in {what}; valid fields here: {valid}')
        hint, shape = hints[key], _shape(hints[key])
        if value is None and shape == 'mapping' and type(None) not in typing.get_args(hint):
            raise RecipeError(f'{name} must be a mapping, got null (in {what}); write {name}: {{}} for an empty one')
        if value is None:
            continue
        if _kind(value) != shape:
            expected = (f'a mapping of fields ({", ".join(f.name for f in dataclasses.fields(hint))})'
                        if dataclasses.is_dataclass(hint) else {'value': 'a single value'}.get(shape, f'a {shape}'))
            got = f'a {_kind(value)} {value!r}' if isinstance(value, (dict, list)) else repr(value)
            raise RecipeError(f'{name} must be {expected}, got {got} (in {what})')
        if dataclasses.is_dataclass(hint):
            _check_shape(value, hint, f'{name}.', what)
        elif name in MAPPED_SECTIONS:
            for label, arguments in value.items():
                if arguments is not None and not isinstance(arguments, dict):
                    raise RecipeError(f'{name}.{label} must be a mapping of arguments (or empty), got '
                                      f'{arguments!r} (in {what})')
        elif name == 'schedulers':
            for k, part in enumerate(value):
                if not isinstance(part, dict):
                    raise RecipeError(f'schedulers[{k}] must be a mapping (a scheduler part), got {part!r} (in {what})')


def _config_error_text(error: OmegaConfBaseException, what: str) -> str:
    key = getattr(error, 'full_key', None) or getattr(error, 'key', None) or '?'
    return f'invalid value for field {key!r} in {what}: {_first_line(error)}'


def _floats(value: Any, name: str = '') -> Iterator[tuple[str, float]]:
    """Every float in ``value`` (the recipe as a dict, its parts, their lists) with its dotted name."""
    if isinstance(value, float):
        yield name, value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _floats(item, f'{name}.{key}' if name else key)
    elif isinstance(value, list):
        for k, item in enumerate(value):
            yield from _floats(item, f'{name}[{k}]')


def check_recipe(recipe: Recipe) -> None:
    """The ranges of the run's own fields (a part's options are checked when it is resolved)."""
    for name, value in _floats(dataclasses.asdict(recipe)):
        if not math.isfinite(value):
            raise RecipeError(f'{name} must be a finite number, got {value}')
    if not 0 <= recipe.seed <= TRAINER_SEED_LIMIT:
        raise RecipeError(f'seed must be in the interval [0, 2**32 - world size] ([0, {TRAINER_SEED_LIMIT}] on one '
                          f'process), got {recipe.seed}')
    for name, minimum in _MINIMUMS.items():
        value = attrgetter(name)(recipe)
        if value is not None and value < minimum:
            raise RecipeError(f'{name} must be at least {minimum}, got {value}')
    for name in DURATION_UNITS:
        valid_duration(name, getattr(recipe, name))
    if recipe.scheduler is not None and recipe.schedulers:
        raise RecipeError('scheduler and schedulers both set the LR schedule; give one: scheduler (one part) or '
                          'schedulers (a list of parts)')
    if not recipe.scale_schedule_ratio > 0:
        raise RecipeError(f'scale_schedule_ratio must be a number in (0, inf), got {recipe.scale_schedule_ratio:g}')
    if recipe.scale_schedule_ratio != 1 and recipe.scheduler is None and not recipe.schedulers:
        raise RecipeError(f'scale_schedule_ratio={recipe.scale_schedule_ratio:g} scales the LR schedule and '
                          'max_duration, but the recipe sets no scheduler (Composer refuses a ratio with nothing to '
                          'scale); set scheduler, or leave scale_schedule_ratio at 1.0')
    check_run_fields(recipe)
    for k, spec in enumerate(recipe.checkpoint_safe_globals):
        if split_import_name(spec) is None:
            raise RecipeError(f"checkpoint_safe_globals[{k}] must look like 'module:Name', e.g. "
                              f"'my_package.callbacks:MyState', got {spec!r}")
