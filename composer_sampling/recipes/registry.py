"""The named parts a recipe can build: one table a kind, ours and those other packages register.

A recipe names a part by ``name`` (looked up here) or by import ``target``
(``'package.module:callable'``). Each :class:`Registry` holds our built-ins as
import targets, so nothing is imported until a part is used, and reads the entry
points of its group when a name is not among them. A package registers parts on
install with, in its ``pyproject.toml``::

    [project.entry-points."composer_sampling.datasets"]
    my_corpus = "my_pkg.data:build_corpus"

Groups: ``composer_sampling.datasets``, ``.models``, ``.samplers``,
``.collate_fns``, ``.optimizers``, ``.callbacks``.

Example:
    >>> SAMPLERS.describe('resumable')
    'ResumableDistributedSampler: O(1) memory, exact mid-epoch resume'
    >>> 'lr_monitor' in CALLBACKS.names()
    True
"""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    'CALLBACKS',
    'COLLATE_FNS',
    'DATASETS',
    'MODELS',
    'OPTIMIZERS',
    'PART_KINDS',
    'REGISTRIES',
    'SAMPLERS',
    'Entry',
    'Registry',
    'RegistryError',
    'check_arguments',
    'import_target',
]

TARGET_FORM = re.compile(r'^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$')


class RegistryError(ValueError):
    """A part that cannot be found or called as the recipe asks; the recipe runner names the field."""


@dataclass(frozen=True)
class Entry:
    """One registered part: where it lives, a line on what it is, the inline options of its name form
    and those of them a recipe must set."""

    target: str
    description: str = ''
    options: tuple[str, ...] = ()
    required: tuple[str, ...] = ()


def import_target(target: str) -> Any:
    """The object at ``'module:attribute'`` (the attribute may be dotted).

    Example:
        >>> import_target('collections:OrderedDict').__name__
        'OrderedDict'
    """
    if not isinstance(target, str) or not TARGET_FORM.match(target):
        raise RegistryError(f"target {target!r} must look like 'package.module:callable', e.g. "
                            "'my_pkg.models:build_model'")
    module_name, _, attribute = target.partition(':')
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as error:
        raise RegistryError(f'target {target!r}: cannot import {module_name} ({error})') from None
    for part in attribute.split('.'):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise RegistryError(f'target {target!r}: {module_name} has no attribute {attribute}') from None
    if not callable(obj):
        raise RegistryError(f'target {target!r} is a {type(obj).__name__}, not a callable')
    return obj


def check_arguments(builder: Callable[..., Any], arguments: dict[str, Any], what: str, positional: int = 0) -> None:
    """Refuse keyword ``arguments`` that ``builder``'s signature cannot take, or required ones missing.

    ``positional`` arguments come first (a collate function's list of samples).

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


class Registry:
    """Parts of one kind by name: built-ins given as import targets, then the entry points of ``group``.

    Example:
        >>> table = Registry('things', 'example.things', {'od': Entry('collections:OrderedDict', 'ordered dict')})
        >>> table.get('od').__name__, table.names()
        ('OrderedDict', ['od'])
    """

    def __init__(self, kind: str, group: str, builtins: dict[str, Entry]) -> None:
        self.kind = kind
        self.group = group
        self._entries = dict(builtins)
        self._entry_points_read = False

    def _read_entry_points(self) -> None:
        if self._entry_points_read:
            return
        self._entry_points_read = True
        for point in importlib.metadata.entry_points(group=self.group):
            self._entries.setdefault(point.name, Entry(point.value.replace(' ', ''), f'from {point.value}'))

    def register(self, name: str, target: str, description: str = '', options: tuple[str, ...] = ()) -> None:
        """Add (or replace) ``name``; ``target`` is ``'module:callable'``."""
        self._entries[name] = Entry(target, description, options)

    def names(self) -> list[str]:
        """Every name: the built-ins first, then those from entry points."""
        self._read_entry_points()
        return list(self._entries)

    def entry(self, name: str) -> Entry:
        """The entry of ``name``; :class:`RegistryError` listing the valid names if there is none."""
        if name not in self._entries:
            self._read_entry_points()
        if name not in self._entries:
            raise RegistryError(f'{name!r} is not a registered {self.kind[:-1]}; choose one of: '
                                f'{", ".join(self.names())}, or give target: \'module:callable\'')
        return self._entries[name]

    def describe(self, name: str) -> str:
        return self.entry(name).description

    def get(self, name: str) -> Callable[..., Any]:
        """The callable registered as ``name`` (imported now)."""
        return import_target(self.entry(name).target)


_DEMO = 'composer_sampling.recipes.demo'
_SAMPLER_BUILDERS = 'composer_sampling.recipes.samplers'

DATASETS = Registry('datasets', 'composer_sampling.datasets', {
    'digits': Entry(f'{_DEMO}.data:digits', "scikit-learn's 8x8 digits, 1,797 images", ('read_delay_ms',)),
    'synthetic': Entry(f'{_DEMO}.data:synthetic', '`size` samples of ten Gaussian clusters',
                       ('size', 'read_delay_ms'), required=('size',)),
})
MODELS = Registry('models', 'composer_sampling.models', {
    'mlp': Entry(f'{_DEMO}.model:MLPClassifier', 'a two-layer perceptron for the demo datasets', ('hidden_size',)),
})
SAMPLERS = Registry('samplers', 'composer_sampling.samplers', {
    'resumable': Entry(f'{_SAMPLER_BUILDERS}:resumable', 'ResumableDistributedSampler: O(1) memory, exact '
                       'mid-epoch resume', ('shuffle', 'drop_last')),
    'distributed': Entry(f'{_SAMPLER_BUILDERS}:distributed', "torch's DistributedSampler, as "
                         'composer.utils.dist.get_sampler builds it', ('shuffle', 'drop_last')),
    'random': Entry(f'{_SAMPLER_BUILDERS}:random', "torch's RandomSampler: one process only, refused on several "
                    'ranks (it does not shard)', ()),
    'custom_batch': Entry(f'{_SAMPLER_BUILDERS}:custom_batch', 'a batch-shuffling custom batch sampler over '
                          'BatchSampler(DistributedSampler)', ('shuffle', 'drop_last')),
    'sub_epoch': Entry(f'{_SAMPLER_BUILDERS}:sub_epoch', 'SubEpochDistributedSampler: a trainer epoch is '
                       '1/sub_epochs_per_epoch of the data', ('shuffle', 'drop_last', 'sub_epochs_per_epoch'),
                       required=('sub_epochs_per_epoch',)),
    'mixture': Entry(f'{_SAMPLER_BUILDERS}:mixture', 'MixtureDistributedSampler over the sources (a dataset '
                     'builder returning a list, or the train split cut by source_fractions)',
                     ('shuffle', 'source_fractions')),
    'nested_batch': Entry(f'{_SAMPLER_BUILDERS}:nested_batch', 'NestedBatchSampler of num_batches inner batches, '
                          'made distributed by distribute()', ('shuffle', 'drop_last', 'num_batches'),
                          required=('num_batches',)),
})
COLLATE_FNS = Registry('collate_fns', 'composer_sampling.collate_fns', {
    'default': Entry('torch.utils.data:default_collate', "torch's default_collate"),
})
OPTIMIZERS = Registry('optimizers', 'composer_sampling.optimizers', {
    'adamw': Entry('torch.optim:AdamW', 'torch.optim.AdamW', ('lr', 'weight_decay')),
    'sgd': Entry(f'{_SAMPLER_BUILDERS}:sgd', 'torch.optim.SGD with momentum 0.9', ('lr', 'weight_decay')),
})
_COMPOSER_CALLBACKS = {
    'activation_monitor': 'ActivationMonitor',
    'checkpoint_saver': 'CheckpointSaver', 'early_stopper': 'EarlyStopper',
    'export_for_inference': 'ExportForInferenceCallback',
    'free_outputs': 'FreeOutputs', 'generate': 'Generate', 'image_visualizer': 'ImageVisualizer',
    'lr_monitor': 'LRMonitor', 'load_checkpoint': 'LoadCheckpoint', 'memory_monitor': 'MemoryMonitor',
    'memory_snapshot': 'MemorySnapshot', 'mlperf': 'MLPerfCallback', 'nan_monitor': 'NaNMonitor',
    'oom_observer': 'OOMObserver', 'optimizer_monitor': 'OptimizerMonitor', 'runtime_estimator': 'RuntimeEstimator',
    'speed_monitor': 'SpeedMonitor', 'system_metrics_monitor': 'SystemMetricsMonitor',
    'threshold_stopper': 'ThresholdStopper',
}
CALLBACKS = Registry('callbacks', 'composer_sampling.callbacks', {
    'sampler_sync': Entry('composer_sampling.callbacks.sampler_sync:SamplerSync', 'seeds, epochs and the resume '
                          'position of every sampler'),
    'sample_ledger': Entry('composer_sampling.callbacks.sample_ledger:SampleLedger', 'records which samples every '
                           'rank trained, for composer-sampling audit'),
    **{name: Entry(f'composer.callbacks:{cls}', f"Composer's {cls}") for name, cls in _COMPOSER_CALLBACKS.items()},
})

#: Every registry by the kind of part it holds.
REGISTRIES = {'datasets': DATASETS, 'models': MODELS, 'samplers': SAMPLERS, 'collate_fns': COLLATE_FNS,
              'optimizers': OPTIMIZERS, 'callbacks': CALLBACKS}
#: The kind of part each recipe field names (callbacks are a mapping of their own).
PART_KINDS = {'train_loader.dataset': 'datasets', 'eval_loader.dataset': 'datasets', 'train_loader.sampler': 'samplers',
              'train_loader.collate_fn': 'collate_fns', 'eval_loader.collate_fn': 'collate_fns', 'model': 'models',
              'optimizer': 'optimizers'}
