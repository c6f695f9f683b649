"""Resolve a recipe once into a frozen :class:`RunSpec`: every part with its builder, arguments and entry.

Resolution checks each part's ``name`` or ``target`` and options against the registry, importing no user code.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> spec = resolve(load_recipe(None, ['train_loader.sampler={name: sub_epoch, sub_epochs_per_epoch: 4}']))
    >>> dict(spec.parts['train_loader.sampler'].arguments)
    {'shuffle': True, 'drop_last': False, 'sub_epochs_per_epoch': 4}
    >>> spec.sync.data_seed, spec.sync.seed_source
    (17, 'the trainer seed')
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter
from types import MappingProxyType
from typing import Any

from composer_sampling._checkpoint.import_names import split_import_name
from composer_sampling._validate import is_real
from composer_sampling.recipes.durations import DURATION_UNITS, parse_duration
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.registry import PART_KINDS, REGISTRIES, Entry, OptionError, RegistryError
from composer_sampling.recipes.run_fields import composer_run_name
from composer_sampling.recipes.schema import MAPPED_SECTIONS, Recipe

__all__ = ['DEFAULT_NAMES', 'PartSpec', 'RunSpec', 'SyncSpec', 'resolve']

#: The registered name a part without ``name`` or ``target`` builds.
DEFAULT_NAMES = {'train_loader.dataset': 'digits', 'train_loader.sampler': 'resumable', 'model': 'mlp',
                 'optimizer': 'adamw'}
_PART_KEYS = ('name', 'target', 'kwargs')
_LEGACY_FRACTION = 'eval_fraction'  # train_loader.dataset.eval_fraction, before eval_loader.eval_fraction


@dataclass(frozen=True)
class PartSpec:
    """One part: its field, how messages name it, its builder's target, its registry entry and its arguments."""

    field: str
    label: str
    target: str
    entry: Entry | None  # None for the target form
    arguments: Mapping[str, Any]  # its options (defaults included), then its kwargs: what its builder receives
    trusted: bool  # ours or an installed package's (an entry point): the allow-list does not apply

    @property
    def arguments_field(self) -> str:
        """Where the recipe writes this part's arguments: inline for a registered part, else in ``kwargs``."""
        return self.field if self.entry is not None else f'{self.field}.kwargs'


@dataclass(frozen=True)
class SyncSpec:
    """The data order's seed and replication, as the callback that governs them will take them."""

    present: bool
    data_seed: int
    seed_source: str
    replication: int
    allow_data_change: bool = False


@dataclass(frozen=True)
class RunSpec:
    """A recipe resolved: every part, and what the run derives from them, frozen."""

    recipe: Recipe
    parts: Mapping[str, PartSpec]
    callbacks: tuple[PartSpec, ...]
    schedulers: tuple[PartSpec, ...]  # from scheduler or schedulers, in order, as Composer's Trainer takes them
    loggers: tuple[PartSpec, ...]
    algorithms: tuple[PartSpec, ...]
    held_out_field: str
    held_out_fraction: float | None  # None when eval_loader.dataset gives the held-out data
    source_fractions: tuple[float, ...] | None
    durations: Mapping[str, tuple[int | float, str]]
    sync: SyncSpec
    ledger_folder: str | None  # the ledger callback's folder, or {save_folder}/ledger as a template
    run_name: str | None = None  # as Composer's Trainer will take it, when known before it runs (composer_run_name)
    load_path_field: str = 'load_path'  # how messages name what gave load_path (autoresume's latest checkpoint)

    @property
    def sampler(self) -> PartSpec:
        return self.parts['train_loader.sampler']


def resolve(recipe: Recipe) -> RunSpec:
    """Resolve every part of ``recipe``, reading the declaration of each entry point it names."""
    sections = {name: attrgetter(name)(recipe) for name in PART_KINDS if name != 'scheduler'}
    dataset = sections['train_loader.dataset'] = dict(recipe.train_loader.dataset)
    legacy_fraction = dataset.pop(_LEGACY_FRACTION, None)
    if legacy_fraction is not None and 'target' in dataset:
        raise RecipeError(f'train_loader.dataset.{_LEGACY_FRACTION}: with target, the only other key is kwargs; set '
                          'the held-out fraction as eval_loader.eval_fraction')
    parts = {name: _part(name, PART_KINDS[name], section) for name, section in sections.items() if section is not None}
    callbacks = _mapped(recipe, 'callbacks')
    schedules = ([('scheduler', recipe.scheduler)] if recipe.scheduler is not None
                 else [(f'schedulers[{k}]', section) for k, section in enumerate(recipe.schedulers)])
    schedulers = tuple(_part(name, 'schedulers', section) for name, section in schedules)
    loggers, algorithms = _mapped(recipe, 'loggers'), _mapped(recipe, 'algorithms')
    sync, ledger_folder = _sync(recipe, callbacks), _ledger_folder(recipe, callbacks)
    held_out_field, fraction = _held_out(recipe, legacy_fraction)
    fractions = parts['train_loader.sampler'].arguments.get('source_fractions')
    return RunSpec(recipe=recipe, parts=MappingProxyType(parts), callbacks=callbacks, schedulers=schedulers,
                   loggers=loggers, algorithms=algorithms, held_out_field=held_out_field, held_out_fraction=fraction,
                   source_fractions=None if fractions is None else tuple(fractions),
                   durations=MappingProxyType({name: parse_duration(getattr(recipe, name)) for name in DURATION_UNITS}),
                   sync=sync, ledger_folder=ledger_folder, run_name=composer_run_name(recipe))


def _mapped(recipe: Recipe, section_name: str) -> tuple[PartSpec, ...]:
    """The parts of a ``{label: part}`` field (callbacks, loggers, algorithms), each named by its label."""
    return tuple(_part(f'{section_name}.{label}', section_name, section or {}, default=label)
                 for label, section in getattr(recipe, section_name).items())


def _part(field_name: str, kind: str, section: Mapping[str, Any], default: str | None = None) -> PartSpec:
    section = dict(section)
    kwargs = section.pop('kwargs', None) or {}
    if not isinstance(kwargs, Mapping):
        raise RecipeError(f'{field_name}.kwargs must be a mapping of arguments, got {kwargs!r}')
    name, target = section.pop('name', None), section.pop('target', None)
    if target is not None:
        if name is not None:
            raise RecipeError(f'{field_name} gives both name={name!r} and target={target!r}; give one')
        if split_import_name(target) is None:
            raise RecipeError(f"{field_name}.target must look like 'package.module:callable', e.g. "
                              f"'my_pkg.models:build_model', got {target!r}")
        if section:
            raise RecipeError(f'{field_name}.{next(iter(section))}: with target, the only other key is kwargs; pass '
                              f'every argument in {field_name}.kwargs')
        return PartSpec(field_name, target, target, None, MappingProxyType(dict(kwargs)), trusted=False)
    name = name or DEFAULT_NAMES.get(field_name, default)
    table = REGISTRIES[kind]
    if not isinstance(name, str):
        raise RecipeError(f'{field_name} needs a name (one of: {", ".join(table.names())}) or a target')
    try:
        entry = table.entry(name)
    except RegistryError as error:
        raise RecipeError(f'{field_name}.name: {error}') from None
    if entry.refused:
        raise RecipeError(f'{field_name}: {entry.description or name} is refused: {entry.refused}')
    arguments = _options(field_name, entry, section, kwargs)
    return PartSpec(field_name, name, entry.target, entry, MappingProxyType(arguments), trusted=True)


def _options(field_name: str, entry: Entry, inline: dict[str, Any], kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The part's arguments: each option by its one rule, inline or in kwargs (not both), then the other kwargs."""
    for key in inline:
        if key in kwargs:
            raise RecipeError(f'{field_name}.{key} and {field_name}.kwargs.{key} both set {key}; give it once')
        if key not in entry.options and not entry.open_options:
            keys = entry.options if field_name.split('.')[0] in MAPPED_SECTIONS else (*_PART_KEYS, *entry.options)
            raise RecipeError(f'unknown field {field_name}.{key} (valid: {", ".join(keys) or "none"})')
    arguments: dict[str, Any] = {}
    for option_name, option in entry.options.items():
        where = f'{field_name}.kwargs.{option_name}' if option_name in kwargs else f'{field_name}.{option_name}'
        value = kwargs.get(option_name, inline.get(option_name, option.default))
        if option.required and value is None:
            raise RecipeError(f'{field_name}.{option_name} is required for {entry.target.rsplit(":", 1)[-1]} '
                              f'({option.rule()})')
        try:
            value = option.check(where, value)
        except OptionError as error:
            raise RecipeError(str(error)) from None
        if value is not None:
            arguments[option_name] = value
    others = {key: value for key, value in {**inline, **kwargs}.items() if key not in entry.options}
    return {**arguments, **others}


def _held_out(recipe: Recipe, legacy: float | None) -> tuple[str, float | None]:
    """The field that sets the held-out fraction and its value; None when eval_loader.dataset gives the data."""
    current = recipe.eval_loader.eval_fraction
    if legacy is not None and current is not None:
        raise RecipeError('eval_loader.eval_fraction and train_loader.dataset.eval_fraction both set the held-out '
                          'fraction; keep eval_loader.eval_fraction')
    field_name = 'train_loader.dataset.eval_fraction' if legacy is not None else 'eval_loader.eval_fraction'
    given = legacy if legacy is not None else current
    if recipe.eval_loader.dataset is not None:
        if given is not None:
            raise RecipeError(f'{field_name} cuts the held-out split from the train dataset, but eval_loader.dataset '
                              'gives one of its own; remove one of them')
        return field_name, None
    fraction = 0.2 if given is None else given
    if not is_real(fraction) or not 0 < fraction < 1:
        raise RecipeError(f'{field_name} must be in (0, 1), got {fraction!r}')
    return field_name, float(fraction)


def _sync(recipe: Recipe, callbacks: tuple[PartSpec, ...]) -> SyncSpec:
    governing = next((part for part in callbacks if part.entry is not None and part.entry.data_order), None)
    if governing is None:
        return SyncSpec(False, recipe.seed, 'the trainer seed', 1)
    seed = governing.arguments.get('data_seed')
    source = f'{governing.field}.data_seed' if seed is not None else 'the trainer seed'
    return SyncSpec(True, recipe.seed if seed is None else seed, source, governing.arguments.get('replication', 1),
                    bool(governing.arguments.get('allow_data_change', False)))


def _ledger_folder(recipe: Recipe, callbacks: tuple[PartSpec, ...]) -> str | None:
    """The ledger folder: the callback's ``folder``, else ``{save_folder}/ledger`` for a callback that wants it."""
    wanting = next((part for part in callbacks if part.entry is not None and part.entry.ledger_folder), None)
    if wanting is None or wanting.arguments.get('folder') is not None:
        return None if wanting is None else wanting.arguments['folder']
    if recipe.save_folder is None:
        raise RecipeError(f'{wanting.field} writes to {{save_folder}}/ledger: set save_folder, or give the callback '
                          'a folder')
    return f'{recipe.save_folder.rstrip("/")}/ledger'
