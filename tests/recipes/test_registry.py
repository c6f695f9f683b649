"""Recipes name their parts by registered name or import target: every way that can go wrong is a named error."""

from __future__ import annotations

import builtins
import os
import shutil
import subprocess
import types
from pathlib import Path
from typing import Any

import composer.callbacks
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import ConcatDataset

from composer_sampling.recipes import registry
from composer_sampling.recipes.build_composer_parts import IndexedClassifier, build_model, build_optimizer
from composer_sampling.recipes.build_data import build_data
from composer_sampling.recipes.build_training import build_run, plan_recipe
from composer_sampling.recipes.checks import checked_spec
from composer_sampling.recipes.registry import CALLBACKS, NotAllowedError, Registry, RegistryError, import_target
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.runner import main as train_main
from composer_sampling.recipes.schema import RecipeError, load_recipe

from support.helpers import DOCS_ALLOW_LIST, write_escapes_package

NUMBERS = 'train_loader.dataset={target: "support.user_parts:numbers", kwargs: {size: 200}}'


def _spec(path, overrides):
    return resolve(load_recipe(path, overrides))


def _datasets(recipe):
    spec = resolve(recipe)
    data = build_data(spec, checked_spec(spec, 1).batch_sizes)
    return data.train, data.held_out


def _check(*overrides: str, world_size: int = 1) -> None:
    checked_spec(resolve(load_recipe(None, list(overrides))), world_size)


def test_a_list_of_datasets_becomes_the_sources_of_a_mixture() -> None:
    recipe = load_recipe(None, ['train_loader.dataset.target=support.user_parts:three_sources',
                                'train_loader.sampler.name=mixture'])
    train, held_out = _datasets(recipe)
    assert isinstance(train, ConcatDataset)
    assert [len(source) for source in train.datasets] == [480, 320, 240]  # 0.2 of each source held out
    assert len(held_out) == 120 + 80 + 60
    report = plan_recipe(recipe, world_size=4, epochs=1)
    assert report.ok, report.problems
    assert [row['size'] for row in report.sources] == [480, 320, 240]


def test_eval_loader_dataset_replaces_the_held_out_split() -> None:
    held_out_dataset = 'eval_loader.dataset={target: "support.user_parts:numbers", kwargs: {size: 30}}'
    recipe = load_recipe(None, [NUMBERS, held_out_dataset])
    train, held_out = _datasets(recipe)
    assert (len(train), len(held_out)) == (200, 30)
    with pytest.raises(RecipeError, match=r'eval_loader\.eval_fraction cuts the held-out split from the train dataset, '
                                          r'but eval_loader\.dataset gives one of its own'):
        _spec(None, [NUMBERS, held_out_dataset, 'eval_loader.eval_fraction=0.1'])


def test_the_held_out_split_renumbers_dict_indices_to_positions_in_the_split() -> None:
    train, held_out = _datasets(load_recipe(None, [NUMBERS]))
    assert (len(train), len(held_out)) == (160, 40)
    assert held_out[0]['index'] == 0 and held_out[0]['input'][0] == 160 % 2  # sample 160 of the dataset


def test_a_plain_module_is_wrapped_and_needs_num_classes() -> None:
    model = build_model(_spec(None, ['model={target: "support.user_parts:linear", kwargs: {classes: 3}}']))
    assert isinstance(model, IndexedClassifier) and model.num_classes == 3
    with pytest.raises(RecipeError, match='without an integer num_classes attribute'):
        build_model(_spec(None, ['model={target: "support.user_parts:linear", kwargs: {with_num_classes: false}}']))
    with pytest.raises(RecipeError, match=r'model: support.user_parts:numbers returned a Numbers; return a '
                                          r'composer\.models\.ComposerModel'):
        build_model(_spec(None, ['model={target: "support.user_parts:numbers", kwargs: {size: 3}}']))


def test_the_optimizer_builder_gets_the_parameters_and_must_return_an_optimizer() -> None:
    model = build_model(_spec(None, []))
    sgd = build_optimizer(_spec(None, ['optimizer.name=sgd', 'optimizer.lr=0.5']), model)
    assert sgd.defaults['lr'] == 0.5 and sgd.defaults['momentum'] == 0.9
    with pytest.raises(RecipeError, match=r'optimizer: the builder returned a str, not a torch\.optim\.Optimizer'):
        build_optimizer(_spec(None, ['optimizer.target=support.user_parts:not_an_optimizer']), model)


def test_a_sampler_builder_must_return_a_sampler() -> None:
    with pytest.raises(RecipeError, match=r'train_loader\.sampler: the builder returned a int; return a sampler, a '
                                          r'batch sampler or a DataLoader'):
        build_run(_spec(None, [NUMBERS, 'train_loader.sampler.target=support.user_parts:junk_sampler']), 1, 0)


def test_a_bad_part_exits_2_before_training(capsys: pytest.CaptureFixture[str]) -> None:
    assert train_main(['yamls/digits.yaml', 'model.target=no_such_package:build']) == 2
    assert "error: model: target 'no_such_package:build': cannot import no_such_package" in capsys.readouterr().err


def test_every_composer_callback_is_registered_by_name() -> None:
    targets = {entry_point.split(':')[1] for entry_point in (CALLBACKS.entry(name).target for name in CALLBACKS.names())
               if entry_point.startswith('composer.callbacks:')}
    assert targets == set(composer.callbacks.__all__)
    for name in CALLBACKS.names():
        CALLBACKS.get(name)  # each imports


def _install_entry_points(folder: Path, group: str, lines: list[str]) -> None:
    info = folder / 'user_parts_pkg-1.0.dist-info'
    info.mkdir(parents=True)
    (info / 'METADATA').write_text('Metadata-Version: 2.1\nName: user-parts-pkg\nVersion: 1.0\n')
    (info / 'entry_points.txt').write_text(f'[{group}]\n' + '\n'.join(lines) + '\n')


def test_entry_points_register_parts_by_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _install_entry_points(tmp_path, 'composer_sampling.datasets', ['numbers = support.user_parts:numbers'])
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = Registry('datasets', 'composer_sampling.datasets', dict(registry.DATASETS._entries))
    monkeypatch.setattr(registry, 'DATASETS', fresh)
    monkeypatch.setitem(registry.REGISTRIES, 'datasets', fresh)
    assert 'numbers' in fresh.names()
    recipe = load_recipe(None, ['train_loader.dataset={name: numbers, kwargs: {size: 120}}'])
    train, _ = _datasets(recipe)
    assert len(train) == 96
    with pytest.raises(RegistryError, match="'nothing' is not a registered dataset; choose one of: digits, "
                                            'synthetic, numbers'):
        fresh.entry('nothing')


def test_a_registered_part_gets_the_recipes_values_of_its_options_defaults_included() -> None:
    model = build_model(_spec(None, []))
    adamw = build_optimizer(_spec(None, []), model)
    assert (adamw.defaults['lr'], adamw.defaults['weight_decay']) == (0.003, 0.0)  # not AdamW's own 0.001 and 0.01
    tuned = build_optimizer(_spec(None, ['optimizer.lr=0.02', 'optimizer.kwargs={betas: [0.8, 0.9]}']), model)
    assert tuned.defaults['lr'] == 0.02 and tuple(tuned.defaults['betas']) == (0.8, 0.9)


@pytest.mark.parametrize('overrides', [
    ['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.5,0.3,0.2]'],  # digits, cut
    [NUMBERS],
])
def test_batches_carry_the_positions_the_sampler_draws(overrides: list[str]) -> None:
    from torch.utils.data import DataLoader

    train, _ = _datasets(load_recipe(None, overrides))
    drawn = [0, 1, len(train) // 2, len(train) - 2, len(train) - 1]  # across every source of a mixture
    batch = next(iter(DataLoader(train, batch_size=len(drawn), sampler=drawn)))  # the DataLoader's batched reads
    assert batch['index'].tolist() == drawn  # what SampleLedger(index_key='index') records


def test_a_concat_dataset_from_a_builder_is_one_dataset() -> None:
    train, held_out = _datasets(load_recipe(None, ['train_loader.dataset.target=support.user_parts:concatenated']))
    assert (len(train), len(held_out)) == (160, 40)
    assert plan_recipe(load_recipe(None, ['train_loader.dataset.target=support.user_parts:concatenated']), 2, 1).ok


def test_a_third_party_mixture_sampler_from_an_entry_point_trains(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from composer_sampling.recipes.runner import train

    _install_entry_points(tmp_path, 'composer_sampling.samplers',
                          ['round_robin = support.user_parts:round_robin_mixture'])
    monkeypatch.syspath_prepend(str(tmp_path))
    fresh = Registry('samplers', 'composer_sampling.samplers', dict(registry.SAMPLERS._entries))
    monkeypatch.setitem(registry.REGISTRIES, 'samplers', fresh)
    overrides = ['train_loader.dataset={target: "support.user_parts:three_sources"}',
                 'model.target=support.user_parts:dict_model',
                 'train_loader.sampler={name: round_robin, temperature: 0.5}', 'max_duration=1ep',
                 'global_train_batch_size=100', 'eval_interval=1ep']
    with pytest.raises(RecipeError, match=r'train_loader\.sampler\.temperature must be a number in \(0, inf\), got 0'):
        train(load_recipe(None, [*overrides, 'train_loader.sampler.temperature=0']))
    from composer_sampling import SampleLedger
    from composer_sampling.ledger_format import read_ledger

    train(load_recipe(None, overrides), callbacks=[SampleLedger(str(tmp_path / 'ledger'))])
    (path,) = (tmp_path / 'ledger').glob('*.bin')
    batches = [record.indices.tolist() for record in read_ledger(path).trained]
    sources = [range(0, 480), range(480, 800), range(800, 1040)]
    steps = [next(k for k, source in enumerate(sources) if all(i in source for i in batch)) for batch in batches]
    assert sorted(steps) == [0, 0, 0, 0, 1, 1, 1, 2, 2], 'one source a step, each trimmed to whole steps of 100'
    everything = [i for batch in batches for i in batch]
    assert len(set(everything)) == len(everything) == 900


_DANGEROUS = (os.system, subprocess.Popen, builtins.exec, builtins.eval, builtins.open, shutil.rmtree, os.remove)


@pytest.fixture()
def my_pkg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``my_pkg`` installed on the path, under the docs' example allow-list."""
    monkeypatch.syspath_prepend(str(write_escapes_package(tmp_path)))
    monkeypatch.setenv('COMPOSER_SAMPLING_ALLOWED_MODULES', DOCS_ALLOW_LIST)
    return tmp_path


def _walk(module: str, steps: list[str]) -> tuple[list[Any], bool]:
    """Every object a plain ``getattr`` walk reaches, and whether it reached the last step (the attributes exist)."""
    import importlib

    objects: list[Any] = [importlib.import_module(module)]
    for step in steps:
        if not hasattr(objects[-1], step):
            return objects[1:], False
        objects.append(getattr(objects[-1], step))
    return objects[1:], True


def _leaves(obj: Any) -> bool:
    """Whether a step leaves the allowed packages: a module, an object of no module or of a module outside them."""
    owner = getattr(obj, '__module__', None)
    return isinstance(obj, types.ModuleType) or not isinstance(owner, str) or not any(
        owner == name or owner.startswith(f'{name}.') for name in DOCS_ALLOW_LIST.split(','))


_MODULES = st.sampled_from(['my_pkg', 'my_pkg.sub', 'torch.optim', 'torch.optim.swa_utils', 'torch.optim.adamw'])
_STEPS = st.lists(st.sampled_from(['os', 'system', 'subprocess', 'Popen', 'run', 'Runner', 'runner', 'go', 'shell',
                                   'func', 'Path', 'write_text', 'partial', 'sub', 'optim', 'swa_utils', 'torch',
                                   'AdamW', 'SGD', 'lr_scheduler', 'StepLR', 'deepcopy', 'build', 'path', 'join',
                                   '__class__', '__init__', '__globals__', '__builtins__', '__call__', 'mro', 'step']),
                  min_size=1, max_size=5)


@settings(max_examples=200, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(module=_MODULES, steps=_STEPS)
def test_the_allow_list_holds_for_every_step_of_a_dotted_name(my_pkg: Path, module: str, steps: list[str]) -> None:
    """Generated escapes: a target is refused exactly when a step of its walk leaves the packages; none is dangerous."""
    target = f'{module}:{".".join(steps)}'
    reached, complete = _walk(module, steps)
    if any(_leaves(obj) for obj in reached):
        with pytest.raises(NotAllowedError, match=r"model\.target .* is refused: .*nothing it reached was called"):
            import_target(target, 'model.target')
        return
    if not complete:
        with pytest.raises(RegistryError, match='has no attribute'):
            import_target(target, 'model.target')
        return
    assert not any(obj is danger for obj in reached for danger in _DANGEROUS)
    try:
        obj = import_target(target, 'model.target')
    except RegistryError as error:
        assert 'not a callable' in str(error)
        return
    assert obj is reached[-1]


@pytest.mark.parametrize('target', ['my_pkg:os.system', 'my_pkg:system', 'my_pkg.sub:system', 'my_pkg:Runner.run',
                                    'my_pkg:shell', 'my_pkg:subprocess.Popen', 'torch.optim:swa_utils.torch.os.system',
                                    'my_pkg:sub.optim.swa_utils.deepcopy', 'torch.optim:AdamW.__init__.__globals__',
                                    'my_pkg:Path.write_text', 'my_pkg:build.__builtins__'])
def test_the_escapes_of_the_issue_are_refused(my_pkg: Path, target: str) -> None:
    with pytest.raises(NotAllowedError, match='is refused: '):
        import_target(target, 'train_loader.dataset.target')


def test_legitimate_targets_keep_working_under_the_allow_list(my_pkg: Path) -> None:
    import torch.optim

    assert import_target('torch.optim:AdamW') is torch.optim.AdamW  # its __module__ is torch.optim.adamw
    assert import_target('torch.optim.lr_scheduler:StepLR') is torch.optim.lr_scheduler.StepLR
    assert import_target('my_pkg:build')(2) == [0, 1]
    assert import_target('my_pkg:runner.go')() is None  # a bound method of an allowed class
    with pytest.raises(NotAllowedError, match=r"torch\.optim:lr_scheduler is the module torch\.optim\.lr_scheduler; a "
                                              r'dotted attribute may not pass through a module: name it before the '
                                              r'colon \(torch\.optim\.lr_scheduler:\.\.\.\)'):
        import_target('torch.optim:lr_scheduler.StepLR', 'optimizer.target')
    _check('optimizer.target=torch.optim:AdamW')
