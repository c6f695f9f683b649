"""The public API is the top level's ``__all__`` and a fixed set of modules; everything else hides behind an underscore.

The import paths the docs show keep working; a new module is public only when it
is added to ``PUBLIC_MODULES`` on purpose, or is a sampler's module in ``samplers/`` (one
sampler a file), whose class ``composer_sampling.samplers.__all__`` lists.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import composer_sampling
import composer_sampling.samplers

DIGITS = Path(__file__).resolve().parent.parent / 'yamls' / 'digits.yaml'

#: Every module a user may import (the recipe runner's modules are public too: entry points use its registry).
PUBLIC_MODULES = {
    'composer_sampling',
    'composer_sampling.audit',
    'composer_sampling.batching',
    'composer_sampling.callbacks',
    'composer_sampling.callbacks.sample_ledger',
    'composer_sampling.callbacks.sampler_sync',
    'composer_sampling.data_order',
    'composer_sampling.errors',
    'composer_sampling.ledger_format',
    'composer_sampling.lightning',
    'composer_sampling.lightning.sample_ledger',
    'composer_sampling.lightning.sampler_sync',
    'composer_sampling.transformers',
    'composer_sampling.transformers.sample_ledger',
    'composer_sampling.transformers.sampler_sync',
    'composer_sampling.per_sample_rng',
    'composer_sampling.permutation',
    'composer_sampling.positions',
    'composer_sampling.protocols',
    'composer_sampling.samplers',
    'composer_sampling.samplers.distribute',
    'composer_sampling.train',
}
#: The samplers' own modules, public by being there: each defines samplers that ``samplers.__all__`` lists.
SAMPLER_MODULES = {info.name for info in pkgutil.iter_modules(composer_sampling.samplers.__path__,
                                                              'composer_sampling.samplers.')
                   if not info.name.rsplit('.', 1)[1].startswith('_')} - {'composer_sampling.samplers.distribute'}
PUBLIC_MODULES |= SAMPLER_MODULES  # distribute (a function beside the samplers) is listed above by hand

#: The names of the design and the types users catch or pass, beside every sampler (``samplers.__all__``).
TOP_LEVEL = {'CheckpointError', 'DataOrder', 'DataOrderError', 'PerSampleRNG', 'SampleLedger', 'SamplerSync',
             '__version__', 'check_checkpoint', 'check_plan', 'distribute', 'iter_samplers', 'summarize'} | \
    set(composer_sampling.samplers.__all__)
#: Names the docs, README and earlier releases show at the top level that must stay there, whatever the rule gives.
DOCUMENTED_TOP_LEVEL = {'DistributedBatchAdapter', 'MixtureDistributedSampler', 'NestedBatchSampler',
                        'ResumableDistributedSampler', 'SubEpochDistributedSampler'}

#: Import paths the docs, README and earlier releases show: ``module``, ``name``, the top-level object it must be.
DOCUMENTED_PATHS = [
    ('composer_sampling.samplers', 'DistributedBatchAdapter', 'DistributedBatchAdapter'),
    ('composer_sampling.samplers', 'ResumableDistributedSampler', 'ResumableDistributedSampler'),
    ('composer_sampling.samplers', 'SubEpochDistributedSampler', 'SubEpochDistributedSampler'),
    ('composer_sampling.samplers', 'MixtureDistributedSampler', 'MixtureDistributedSampler'),
    ('composer_sampling.samplers', 'NestedBatchSampler', 'NestedBatchSampler'),
    *[('composer_sampling.samplers', name, name) for name in composer_sampling.samplers.__all__],  # every one, new too
    ('composer_sampling.samplers.batch_adapter', 'DistributedBatchAdapter', 'DistributedBatchAdapter'),
    ('composer_sampling.callbacks', 'SamplerSync', 'SamplerSync'),
    ('composer_sampling.callbacks', 'SampleLedger', 'SampleLedger'),
    ('composer_sampling.callbacks.sampler_sync', 'SamplerSync', 'SamplerSync'),
    ('composer_sampling.callbacks.sample_ledger', 'SampleLedger', 'SampleLedger'),
    ('composer_sampling.callbacks.sampler_sync', 'DataOrderError', 'DataOrderError'),
    ('composer_sampling.errors', 'DataOrderError', 'DataOrderError'),
    ('composer_sampling.data_order', 'DataOrder', 'DataOrder'),
    ('composer_sampling.lightning', 'SamplerSync', None),
    ('composer_sampling.lightning.sampler_sync', 'SamplerSync', None),
    ('composer_sampling.lightning', 'SampleLedger', None),
    ('composer_sampling.lightning.sample_ledger', 'SampleLedger', None),
    ('composer_sampling.transformers', 'SamplerSync', None),
    ('composer_sampling.transformers.sampler_sync', 'SamplerSync', None),
    ('composer_sampling.transformers', 'SampleLedger', None),
    ('composer_sampling.transformers.sample_ledger', 'SampleLedger', None),
    ('composer_sampling.audit', 'audit_folder', None),
    ('composer_sampling.ledger_format', 'read_ledger', None),
    ('composer_sampling.ledger_format', 'scan_ledger', None),
    ('composer_sampling.ledger_format', 'read_records', None),
    ('composer_sampling.permutation', 'Permutation', None),
    ('composer_sampling.per_sample_rng', 'PerSampleRNG', 'PerSampleRNG'),
    ('composer_sampling.samplers.distribute', 'distribute', 'distribute'),
]


def _package_modules() -> set[str]:
    found = {'composer_sampling'}
    for info in pkgutil.walk_packages(composer_sampling.__path__, 'composer_sampling.'):
        if not info.name.startswith('composer_sampling.recipes'):
            found.add(info.name)
    return found


def test_the_top_level_all_is_the_public_api() -> None:
    assert set(composer_sampling.__all__) == TOP_LEVEL
    assert DOCUMENTED_TOP_LEVEL <= TOP_LEVEL
    for name in composer_sampling.__all__:
        assert getattr(composer_sampling, name) is not None, name


def test_every_module_outside_the_public_set_is_private() -> None:
    leaked = sorted(name for name in _package_modules() - PUBLIC_MODULES  # a module in a private package is private
                    if not any(part.startswith('_') for part in name.split('.')[1:]))
    assert not leaked, f'modules neither public nor behind an underscore: {leaked}'
    missing = sorted(PUBLIC_MODULES - _package_modules())
    assert not missing, f'public modules that no longer exist: {missing}'


def test_every_sampler_module_is_listed_by_the_samplers_package() -> None:
    listed = {getattr(composer_sampling.samplers, name).__module__ for name in composer_sampling.samplers.__all__}
    assert listed == SAMPLER_MODULES
    assert composer_sampling.samplers.__all__ == list(composer_sampling.samplers.SAMPLERS)  # one table, spelt twice


def test_a_sampler_listed_by_the_samplers_package_is_public_with_no_other_edit() -> None:
    """The wiring docs/samplers.md promises: one line in ``samplers.SAMPLERS`` exports a new sampler everywhere, and
    the sampler gets a recipe name only from an entry of the runner's registry, which holds its builder, its
    description and its checked options."""
    probe = '''
import sys, types
module = types.ModuleType('composer_sampling.samplers.probe')
class ProbeSampler:
    pass
def probe_build(dataset, num_replicas, rank, seed, device_batch_size, width, shuffle=True):
    return ProbeSampler()
ProbeSampler.__module__ = probe_build.__module__ = module.__name__
module.ProbeSampler, module.probe_build = ProbeSampler, probe_build
sys.modules[module.__name__] = module
import composer_sampling.samplers as samplers
samplers.SAMPLERS['ProbeSampler'] = 'probe'
del sys.modules['composer_sampling']
import composer_sampling
print('ProbeSampler' in composer_sampling.__all__, composer_sampling.ProbeSampler is ProbeSampler,
      samplers.ProbeSampler is ProbeSampler)
from composer_sampling.recipes.registry import SAMPLERS, Entry, Option, OptionError, RegistryError
try:
    SAMPLERS.entry('probe')
except RegistryError:
    print(True)
SAMPLERS._entries['probe'] = Entry('composer_sampling.samplers.probe:probe_build', 'the probe',
                                   {'shuffle': Option('bool', default=True),
                                    'width': Option('int', minimum=1, required=True)})
entry = SAMPLERS.entry('probe')
print(SAMPLERS.names()[-1] == 'probe', SAMPLERS.get('probe') is probe_build, entry.description == 'the probe',
      entry.required == ('width',))
try:
    entry.options['width'].check('train_loader.sampler.width', 0)
except OptionError as error:
    print(str(error) == 'train_loader.sampler.width must be an int in [1, inf), got 0')
'''
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ['True'] * 9


def test_a_recipe_sampler_takes_the_options_of_its_registry_entry_and_no_other(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The recipe names, options and builders live in the recipe runner, not in the samplers' modules: a recipe's
    sampler accepts exactly the options its registry entry declares."""
    from composer_sampling.recipes.cli import main
    from composer_sampling.recipes.registry import SAMPLERS

    for name in SAMPLERS.names():
        code = main(['plan', str(DIGITS), f'train_loader.sampler={{name: {name}, unknown_option: 1}}'])
        valid = ', '.join(['name', 'target', 'kwargs', *SAMPLERS.entry(name).options])
        assert (code, capsys.readouterr().err) == (
            2, f'error: unknown field train_loader.sampler.unknown_option (valid: {valid})\n'), name


@pytest.mark.parametrize(('module', 'name', 'top'), DOCUMENTED_PATHS, ids=lambda value: str(value))
def test_the_documented_import_paths_work(module: str, name: str, top: str | None) -> None:
    value = getattr(importlib.import_module(module), name)
    assert callable(value) or inspect.isclass(value)
    if top is not None:
        assert value is getattr(composer_sampling, top)


def test_distribute_is_the_function_after_any_import_order() -> None:
    probe = ('import composer_sampling.samplers.distribute, composer_sampling as package; '
             'print(callable(package.distribute), type(package.distribute).__name__)')
    out = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, check=True).stdout.split()
    assert out == ['True', 'function']
