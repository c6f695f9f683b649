"""The named parts a recipe can build, what each needs, and the one way a recipe imports code.

Each :class:`Registry` holds our built-ins as import targets, imported only when used, then the entry points of
its group; an entry point's builder may declare its :class:`Entry` fields in ``composer_sampling_entry``
(``docs/recipes.md``). An :class:`Entry` says what the runner must know about a part, so that no runner code
compares names. :func:`import_target` is the only place a recipe imports code, and
``COMPOSER_SAMPLING_ALLOWED_MODULES`` limits it.

Example:
    >>> SAMPLERS.entry('sub_epoch').options['sub_epochs_per_epoch'].check('sub_epochs_per_epoch', 0)
    Traceback (most recent call last):
    ...
    composer_sampling.recipes.registry.OptionError: sub_epochs_per_epoch must be an int in [1, inf), got 0
"""

from __future__ import annotations

import importlib.metadata
import inspect
import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from composer_sampling._checkpoint.import_names import (
    MissingAttributeError,
    OutsideAllowedError,
    import_name,
    in_packages,
    split_import_name,
)
from composer_sampling._validate import is_real
from composer_sampling.permutation import MAX_DATA_SEED
from composer_sampling.recipes import composer_names
from composer_sampling.recipes.composer_names import CHECKPOINT_ARGUMENTS, REFUSED_ALGORITHMS, TIMES_FROM_ZERO
from composer_sampling.recipes.durations import SCHEDULE_UNITS, parse_duration

__all__ = ['ALGORITHMS', 'ALLOWED_MODULES_VARIABLE', 'CALLBACKS', 'COLLATE_FNS', 'DATASETS', 'LOGGERS', 'MODELS',
           'OPTIMIZERS', 'PART_KINDS', 'REGISTRIES', 'SAMPLERS', 'SCHEDULERS', 'Entry', 'ImportTargetError',
           'NotAllowedError', 'Option', 'OptionError', 'Registry', 'RegistryError', 'allowed_modules', 'check_allowed',
           'check_arguments', 'import_target', 'walk_refused']

#: Set it to a comma-separated list of packages to refuse every ``target:`` and safe global outside them.
ALLOWED_MODULES_VARIABLE = 'COMPOSER_SAMPLING_ALLOWED_MODULES'


class RegistryError(ValueError):
    """A part that cannot be found or called as the recipe asks; the recipe runner names the field."""


class ImportTargetError(RegistryError):
    """A target whose module failed while being imported (its own exception is the ``__cause__``)."""


class NotAllowedError(RegistryError):
    """A module outside ``COMPOSER_SAMPLING_ALLOWED_MODULES``; the message names the field that named it."""


class OptionError(ValueError):
    """A value that breaks its option's rule; the message names where it was given and the rule."""


_KINDS: dict[str, tuple[type, ...]] = {'int': (int,), 'float': (int, float), 'bool': (bool,), 'str': (str,),
                                       'key': (str, int), 'fractions': (list, tuple), 'duration': (str,),
                                       'durations': (list, tuple)}
_RULES = {'bool': 'true or false', 'str': 'a string',
          'key': 'a mapping key (a string) or a position in a tuple batch (an int)',
          'fractions': 'a list of positive fractions summing to 1'}


@dataclass(frozen=True)
class Option:
    """An inline option of a registered part: its kind, default, range, and whether a recipe must give it.

    Example:
        >>> Option('duration', minimum=0, exclusive=True).check('scheduler.t_max', '0ba')
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.registry.OptionError: scheduler.t_max must be a Composer time: a whole number > 0 ...
    """

    kind: str
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive: bool = False  # the minimum itself is out of range
    required: bool = False

    def rule(self) -> str:
        """The option's rule in words: ``an int in [1, inf)``."""
        if self.kind in _RULES:
            return _RULES[self.kind]
        if self.kind in ('duration', 'durations'):
            at_least = f'{">" if self.exclusive else "≥"} {self.minimum or 0:g}'
            whole = f'{", ".join(SCHEDULE_UNITS[:-2])} or {SCHEDULE_UNITS[-2]}'
            time = (f'a Composer time: a whole number {at_least} followed by {whole}, or a '
                    f'number {at_least} followed by dur (a fraction of max_duration), e.g. 100ba or 0.1dur')
            return time if self.kind == 'duration' else f'a list of times, each {time}'
        low = '(-inf' if self.minimum is None else ('(' if self.exclusive else '[') + f'{self.minimum:g}'
        high = 'inf)' if self.maximum is None else f'{self.maximum:g}]'
        return f'{"an int" if self.kind == "int" else "a number"} in {low}, {high}'

    def check(self, where: str, value: Any) -> Any:
        """``value`` if it keeps this option's rule; :class:`OptionError` naming ``where`` and the rule if not."""
        if value is None and not self.required:
            return value
        if self.kind == 'durations' and isinstance(value, (list, tuple)):
            each = Option('duration', minimum=self.minimum, exclusive=self.exclusive)
            return [each.check(f'{where}[{k}]', item) for k, item in enumerate(value)]
        if not self._keeps(value):
            raise OptionError(f'{where} must be {self.rule()}, got {value!r}')
        return value

    def _keeps(self, value: Any) -> bool:
        fits = isinstance(value, _KINDS[self.kind]) and not (isinstance(value, bool) and self.kind != 'bool')
        if not fits:  # a variable, so that type checkers keep value as Any
            return False
        if self.kind in ('int', 'float'):
            return ((self.kind == 'int' or math.isfinite(value)) and self._above(value, self.minimum)
                    and (self.maximum is None or value <= self.maximum))
        if self.kind == 'fractions':
            return bool(value) and all(is_real(f) and f > 0 for f in value) and abs(sum(value) - 1) <= 1e-6
        if self.kind == 'duration':
            try:
                amount, unit = parse_duration(value)
            except ValueError:
                return False
            return unit in SCHEDULE_UNITS and math.isfinite(amount) and self._above(amount, self.minimum or 0)
        return True

    def _above(self, value: float, minimum: float | None) -> bool:
        return minimum is None or (value > minimum if self.exclusive else value >= minimum)


@dataclass(frozen=True)
class Entry:
    """One registered part: where its builder lives, a line on what it is, and what the runner must know of it."""

    target: str
    description: str = ''
    options: Mapping[str, Option] = field(default_factory=dict)
    takes_sources: bool = False  # a sampler that receives the sources of a mixture (a ConcatDataset of them)
    ledger_folder: bool = False  # a callback whose folder defaults to {save_folder}/ledger
    data_order: bool = False  # a callback whose data_seed and replication govern the run's data order
    open_options: bool = False  # other inline keys go to its builder, checked against its signature when imported
    from_entry_point: bool = False
    checkpoint_argument: str | None = None  # the argument naming a checkpoint it unpickles: checked as load_path is
    refused: str | None = None  # why a recipe refuses this part (it would break the data order's promises)

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(name for name, option in self.options.items() if option.required)


def allowed_modules() -> list[str] | None:
    """The packages ``COMPOSER_SAMPLING_ALLOWED_MODULES`` allows, or None when it is not set (everything is allowed).

    Example:
        >>> os.environ.get(ALLOWED_MODULES_VARIABLE) is None and allowed_modules() is None
        True
    """
    listed = os.environ.get(ALLOWED_MODULES_VARIABLE)
    return None if listed is None else [name.strip() for name in listed.split(',') if name.strip()]


def check_allowed(module_name: str, where: str) -> None:
    """Refuse ``module_name`` outside ``COMPOSER_SAMPLING_ALLOWED_MODULES`` when it is set; nothing is imported.

    Example:
        >>> check_allowed('os', 'train_loader.dataset.target')  # the variable is not set: everything is allowed
    """
    allowed = allowed_modules()
    if allowed is not None and not in_packages(module_name, allowed):
        raise NotAllowedError(f'{where} names the module {module_name!r}, which is not in {ALLOWED_MODULES_VARIABLE} '
                              f'({", ".join(allowed) or "empty"}); nothing of it was imported. Add its package to '
                              f'{ALLOWED_MODULES_VARIABLE} if you trust it')


def walk_refused(where: str, name: str, error: OutsideAllowedError) -> NotAllowedError:
    """The refusal of ``name`` (given at ``where``) whose walk left the allowed packages, as ``error`` says."""
    allowed = allowed_modules() or []
    return NotAllowedError(f'{where} {name!r} is refused: {error} ({ALLOWED_MODULES_VARIABLE}={",".join(allowed)!r}); '
                           'nothing it reached was called. Name the object in the module that defines it, and add '
                           f'that package to {ALLOWED_MODULES_VARIABLE} if you trust it')


def import_target(target: str, where: str = 'target', trusted: bool = False) -> Any:
    """The callable at ``'module:attribute'`` (the attribute may be dotted); ``trusted`` skips the allow-list.

    Example:
        >>> import_target('collections:OrderedDict').__name__
        'OrderedDict'
    """
    parts = split_import_name(target)
    if parts is None:
        raise RegistryError(f"target {target!r} must look like 'package.module:callable', e.g. "
                            "'my_pkg.models:build_model'")
    module_name, attribute = parts
    if not trusted:
        check_allowed(module_name, where)
    try:
        obj = import_name(module_name, attribute, None if trusted else allowed_modules())
    except OutsideAllowedError as error:
        raise walk_refused(where, target, error) from None
    except MissingAttributeError:
        raise RegistryError(f'target {target!r}: {module_name} has no attribute {attribute}') from None
    except ModuleNotFoundError as error:
        raise RegistryError(f'target {target!r}: cannot import {module_name} ({error})') from None
    except Exception as error:
        raise ImportTargetError(f'target {target!r}: importing {module_name} failed with {type(error).__name__}: '
                                f'{error}') from error
    if not callable(obj):
        raise RegistryError(f'target {target!r} is a {type(obj).__name__}, not a callable')
    return obj


def check_arguments(builder: Callable[..., Any], arguments: Mapping[str, Any], what: str, positional: int = 0) -> None:
    """Refuse keyword ``arguments`` that ``builder`` cannot take after ``positional`` ones, or required ones missing.

    Example:
        >>> check_arguments(lambda size, seed=0: None, {'sise': 3}, 'the dataset')
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.registry.RegistryError: the dataset <lambda>: unexpected keyword 'sise'; ...
    """
    try:
        signature = inspect.signature(builder)
    except (TypeError, ValueError):
        return  # a builtin without a readable signature: its own error will do
    parameters = list(signature.parameters.values())
    keywords = [p.name for p in parameters[positional:]
                if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
    label = f'{what} {getattr(builder, "__qualname__", builder)}'
    valid = ', '.join(keywords) or 'none'
    try:
        bound = signature.bind_partial(*([None] * positional), **arguments)
    except TypeError as error:
        unknown = sorted(set(arguments) - set(keywords))
        if unknown and not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
            raise RegistryError(f'{label}: unexpected keyword {unknown[0]!r}; it takes: {valid}') from None
        raise RegistryError(f'{label}: {error}; it takes: {valid}') from None
    missing = [p.name for p in parameters if p.default is inspect.Parameter.empty and p.name not in bound.arguments
               and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if missing:
        raise RegistryError(f'{label}: missing required keyword {missing[0]!r}; it takes: {valid}')


def _declared(entry: Entry, where: str) -> Entry:
    """An entry point's entry with the fields its builder declares in ``composer_sampling_entry`` (imported now)."""
    declaration = getattr(import_target(entry.target, where, trusted=True), 'composer_sampling_entry', None) or {}
    what = f'{entry.target}.composer_sampling_entry'
    if not isinstance(declaration, Mapping):
        raise RegistryError(f'{what} must be a mapping, got {declaration!r}')
    fields = {key: value for key, value in declaration.items() if key != 'options'}
    try:
        options = {name: Option(**rule) for name, rule in (declaration.get('options') or {}).items()}
        return Entry(entry.target, entry.description, options, from_entry_point=True,
                     **{'open_options': not options, **fields})
    except TypeError as error:
        raise RegistryError(f'{what}: {error}') from None


class Registry:
    """Parts of one kind by name: built-ins given as import targets, then the entry points of ``group``.

    Example:
        >>> table = Registry('things', 'example.things', {'od': Entry('collections:OrderedDict', 'ordered dict')})
        >>> table.get('od').__name__, table.names()
        ('OrderedDict', ['od'])
    """

    def __init__(self, kind: str, group: str, builtins: Mapping[str, Entry]) -> None:
        self.kind = kind
        self.group = group
        self._entries = dict(builtins)
        self._entry_points_read = False
        self._declarations_read: set[str] = set()

    def names(self) -> list[str]:
        """Every name: the built-ins first, then those from entry points."""
        if not self._entry_points_read:
            self._entry_points_read = True
            for point in importlib.metadata.entry_points(group=self.group):
                self._entries.setdefault(point.name, Entry(point.value.replace(' ', ''), f'from {point.value}',
                                                           open_options=True, from_entry_point=True))
        return list(self._entries)

    def entry(self, name: str, declared: bool = True) -> Entry:
        """The entry of ``name``; an entry point's declaration is read when ``declared`` (which imports it)."""
        if name not in self._entries and name not in self.names():
            raise RegistryError(f'{name!r} is not a registered {self.kind[:-1]}; choose one of: '
                                f'{", ".join(self.names())}, or give target: \'module:callable\'')
        entry = self._entries[name]
        if entry.from_entry_point and declared and name not in self._declarations_read:
            entry = self._entries[name] = _declared(entry, f'the {self.kind[:-1]} {name!r}')
            self._declarations_read.add(name)
        return entry

    def get(self, name: str) -> Callable[..., Any]:
        """The callable registered as ``name`` (imported now; entry points and ours are trusted)."""
        return import_target(self.entry(name, declared=False).target, f'the {self.kind[:-1]} {name!r}', trusted=True)


_DEMO = 'composer_sampling.recipes.demo'
_BUILTIN = 'composer_sampling.recipes.builtin_parts'
_SHUFFLE = {'shuffle': Option('bool', default=True), 'drop_last': Option('bool', default=False)}
_DELAY = {'read_delay_ms': Option('float', default=0.0, minimum=0)}
_RATES = {'lr': Option('float', default=0.003, minimum=0, exclusive=True),
          'weight_decay': Option('float', default=0.0, minimum=0)}

DATASETS = Registry('datasets', 'composer_sampling.datasets', {
    'digits': Entry(f'{_DEMO}.data:digits', "scikit-learn's 8x8 digits, 1,797 images", _DELAY),
    'synthetic': Entry(f'{_DEMO}.data:synthetic', '`size` samples of ten Gaussian clusters',
                       {'size': Option('int', minimum=1, required=True), **_DELAY}),
})
MODELS = Registry('models', 'composer_sampling.models', {
    'mlp': Entry(f'{_DEMO}.model:MLPClassifier', 'a two-layer perceptron for the demo datasets',
                 {'hidden_size': Option('int', default=64, minimum=1)}),
})
SAMPLERS = Registry('samplers', 'composer_sampling.samplers', {
    'resumable': Entry(f'{_BUILTIN}:resumable', 'ResumableDistributedSampler: O(1) memory, exact mid-epoch resume',
                       _SHUFFLE),
    'distributed': Entry(f'{_BUILTIN}:distributed', "torch's DistributedSampler, as composer.utils.dist.get_sampler "
                         'builds it', _SHUFFLE),
    'random': Entry(f'{_BUILTIN}:random', "torch's RandomSampler: one process only, refused on several ranks (it "
                    'does not shard)'),
    'custom_batch': Entry(f'{_BUILTIN}:custom_batch', 'a batch-shuffling custom batch sampler over '
                          'BatchSampler(DistributedSampler)', _SHUFFLE),
    'sub_epoch': Entry(f'{_BUILTIN}:sub_epoch', 'SubEpochDistributedSampler: a trainer epoch is 1/sub_epochs_per_epoch '
                       'of the data', {**_SHUFFLE, 'sub_epochs_per_epoch': Option('int', minimum=1, required=True)}),
    'mixture': Entry(f'{_BUILTIN}:mixture', 'MixtureDistributedSampler over the sources (a dataset builder returning a '
                     'list, or the train split cut by source_fractions)',
                     {'shuffle': _SHUFFLE['shuffle'], 'source_fractions': Option('fractions')}, takes_sources=True),
    'nested_batch': Entry(f'{_BUILTIN}:nested_batch', 'NestedBatchSampler of num_batches inner batches, made '
                          'distributed by distribute()',
                          {**_SHUFFLE, 'num_batches': Option('int', minimum=1, required=True)}),
})
COLLATE_FNS = Registry('collate_fns', 'composer_sampling.collate_fns', {
    'default': Entry('torch.utils.data:default_collate', "torch's default_collate"),
})
OPTIMIZERS = Registry('optimizers', 'composer_sampling.optimizers', {
    'adamw': Entry('torch.optim:AdamW', 'torch.optim.AdamW', _RATES),
    'sgd': Entry(f'{_BUILTIN}:sgd', 'torch.optim.SGD with momentum 0.9', _RATES),
})
CALLBACKS = Registry('callbacks', 'composer_sampling.callbacks', {
    'sampler_sync': Entry('composer_sampling.callbacks.sampler_sync:SamplerSync', 'seeds, epochs and the resume '
                          'position of every sampler',
                          # The kinds and ranges checked before training; the defaults are SamplerSync's own.
                          {'data_seed': Option('int', minimum=0, maximum=MAX_DATA_SEED),
                           'check_sharding': Option('bool'), 'replication': Option('int', minimum=1),
                           'print_summary': Option('bool'), 'allow_data_change': Option('bool')}, data_order=True),
    'sample_ledger': Entry('composer_sampling.callbacks.sample_ledger:SampleLedger', 'records which samples every '
                           'rank trained, for composer-sampling audit',
                           {'folder': Option('str'), 'index_key': Option('key')}, ledger_folder=True),
    **{name: Entry(f'composer.callbacks:{cls}', f"Composer's {cls}", open_options=True,
                   checkpoint_argument=CHECKPOINT_ARGUMENTS.get(cls))
       for name, cls in composer_names.CALLBACKS.items()},
})


def _times(required: tuple[str, ...], optional: tuple[str, ...]) -> dict[str, Option]:
    """A scheduler's time arguments as options: ``plan`` checks them as Composer time strings."""
    return {name: Option('durations' if name in composer_names.TIME_LISTS else 'duration', minimum=0,
                         exclusive=name not in TIMES_FROM_ZERO, required=name in required)
            for name in (*required, *optional)}


SCHEDULERS = Registry('schedulers', 'composer_sampling.schedulers', {
    name: Entry(f'composer.optim:{cls}', f"Composer's {cls}", _times(required, optional), open_options=True)
    for name, (cls, required, optional) in composer_names.SCHEDULERS.items()})
LOGGERS = Registry('loggers', 'composer_sampling.loggers', {
    name: Entry(f'composer.loggers:{cls}', f"Composer's {cls}", open_options=True)
    for name, cls in composer_names.LOGGERS.items()})
ALGORITHMS = Registry('algorithms', 'composer_sampling.algorithms', {
    name: Entry(f'composer.algorithms:{cls}', f"Composer's {cls}", open_options=True,
                refused=REFUSED_ALGORITHMS.get(name))
    for name, cls in composer_names.ALGORITHMS.items()})

#: Every registry by the kind of part it holds.
REGISTRIES = {'datasets': DATASETS, 'models': MODELS, 'samplers': SAMPLERS, 'collate_fns': COLLATE_FNS,
              'optimizers': OPTIMIZERS, 'callbacks': CALLBACKS, 'schedulers': SCHEDULERS, 'loggers': LOGGERS,
              'algorithms': ALGORITHMS}
#: The kind of part each recipe field names (callbacks, loggers and algorithms are mappings of their own,
#: schedulers a list).
PART_KINDS = {'train_loader.dataset': 'datasets', 'train_loader.sampler': 'samplers',
              'train_loader.collate_fn': 'collate_fns', 'eval_loader.dataset': 'datasets',
              'eval_loader.collate_fn': 'collate_fns', 'model': 'models', 'optimizer': 'optimizers',
              'scheduler': 'schedulers'}
