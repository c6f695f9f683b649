"""Recipes: schema, errors before training, and the train script."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from composer_sampling import SamplerSync
from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.checks import batch_plan, check_spec
from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main, train

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / 'yamls').glob('*.yaml'))


@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.name)
def test_every_recipe_loads_and_builds(path: Path) -> None:
    recipe = load_recipe(path)
    run = build_run(resolve(recipe), world_size=1)
    assert len(run.train_loader) > 0


def test_grad_accum_recipe_has_the_documented_batches() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits-grad-accum.yaml')

    plan = batch_plan(resolve(recipe), world_size=2)
    assert (plan.global_batch, plan.device_batch, plan.microbatch, plan.accumulation_steps) == (256, 128, 32, 4)


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['global_batch=3'], "unknown field 'global_batch' in .*digits.yaml; valid fields here: run_name, seed"),
        (['train_loader.sampler.shufle=false'],
         "unknown field 'train_loader.sampler.shufle'.*: name, target, kwargs, shuffle"),
        (['global_train_batch_size=many'], "invalid value for field 'global_train_batch_size'.*'many'"),
        (['train_loader.sampler.drop_last=perhaps'], "field 'train_loader.sampler.drop_last'.*not a valid bool"),
        (['global_train_batch_size=0'], 'global_train_batch_size must be at least 1, got 0'),
        (['device_train_microbatch_size=-4'], 'device_train_microbatch_size must be at least 1, got -4'),
        (['gradient_accumulation_steps=0'], 'gradient_accumulation_steps must be at least 1, got 0'),
        (['train_loader.num_workers=-1'], 'train_loader.num_workers must be at least 0, got -1'),
        (['train_loader.sampler.name=fancy'], "train_loader.sampler.name: 'fancy' is not a registered sampler; "
                                                  'choose one of: resumable, distributed'),
        (['train_loader.dataset.name=imagenet'], "train_loader.dataset.name: 'imagenet' is not a registered dataset"),
        (['train_loader.dataset.name=synthetic'], 'train_loader.dataset.size is required'),
        (['max_duration=forever'], "max_duration='forever' is not a duration this run can count"),
        (['optimizer.lr=0'], 'optimizer.lr must be positive, got 0'),
        (['seed'], "override 'seed' must look like field=value"),
    ],
)
def test_bad_fields_are_named(overrides: list[str], message: str) -> None:
    with pytest.raises(RecipeError, match=message):
        load_recipe(ROOT / 'yamls' / 'digits.yaml', overrides)


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['global_train_batch_size=60', 'device_train_microbatch_size=25'],
         'device_train_microbatch_size=25 does not divide the device batch 60'),
        (['global_train_batch_size=64', 'device_train_microbatch_size=16', 'gradient_accumulation_steps=2'],
         'gradient_accumulation_steps=2 disagrees with device_train_microbatch_size=16'),
        (['callbacks.fancy_logger={}'], "callbacks.fancy_logger: 'fancy_logger' is not a registered callback; "
                                        'choose one of: sampler_sync, sample_ledger'),
        (['callbacks.sampler_sync.seed=3'], "callbacks.sampler_sync: the sampler sync SamplerSync: unexpected "
                                            "keyword 'seed'; it takes: data_seed, check_sharding"),
        (['callbacks.sampler_sync.data_seed=-3'], 'callbacks.sampler_sync.data_seed must be in the interval'),
    ],
)
def test_main_exits_2_with_the_message_before_training(overrides, message, capsys) -> None:
    assert main([str(ROOT / 'yamls' / 'digits.yaml'), *overrides]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert 'run summary' not in captured.out  # nothing was built or trained


def test_global_batch_must_divide_by_the_world_size() -> None:

    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['global_train_batch_size=63'])
    with pytest.raises(RecipeError, match='global_train_batch_size=63 is not divisible by the world size 2'):
        batch_plan(resolve(recipe), world_size=2)


def test_missing_recipe_file(capsys) -> None:
    assert main(['yamls/does-not-exist.yaml']) == 2
    assert 'recipe file yamls/does-not-exist.yaml does not exist' in capsys.readouterr().err


def test_train_digits_in_process() -> None:
    result = train(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['max_duration=3ep']))
    assert result.eval_accuracy > 0.85
    assert result.trainer.state.timestamp.epoch.value == 3


def test_the_script_runs_and_refuses_bad_recipes(tmp_path: Path) -> None:
    env = {**os.environ, 'PYTHONWARNINGS': 'ignore'}
    good = subprocess.run(
        [sys.executable, 'scripts/train.py', 'yamls/custom-batch-sampler.yaml', 'max_duration=1ep'],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert good.returncode == 0, good.stderr
    assert 'accumulation steps  4 (device batch / microbatch)' in good.stdout
    assert 'held-out after 1 epochs: MulticlassAccuracy' in good.stdout
    bad = subprocess.run(
        [sys.executable, 'scripts/train.py', 'yamls/digits.yaml', 'global_train_batch_size=-1'],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == 'error: global_train_batch_size must be at least 1, got -1'


# Recipes refuse what cannot work: exit 2, the field named, before the summary; plan refuses the same.

REFUSED = [
    (['max_duration=100tok'], "max_duration='100tok' counts tokens, but Composer counts none in this run (the digits "
                              'dataset yields no input_ids and has no max_seq_len), so the run would train forever'),
    (['eval_interval=50tok'], "eval_interval='50tok' counts tokens, but Composer counts none"),
    (['save_interval=0ba'], "save_interval='0ba' must be positive (0 would never save)"),
    (['eval_interval=0ep'], "eval_interval='0ep' must be positive (0 would never evaluate)"),
    (['max_duration=0ep'], "max_duration='0ep' must be positive (0 would train nothing)"),
    (['max_duration=-2ba'], "max_duration='-2ba' must be positive"),
    (['max_duration=0.5dur'], "max_duration='0.5dur': the unit dur is not one this run can count (Composer allows "
                              'dur for intervals only)'),
    (['eval_interval=0dur'], "eval_interval='0dur': a fraction of max_duration must be in (0, 1], got 0.0"),
    (['save_interval=1.5dur'], "save_interval='1.5dur': a fraction of max_duration must be in (0, 1], got 1.5"),
    (['max_duration=3iter'], "max_duration='3iter': the unit iter is not one this run can count"),
    (['max_duration=10sec'], "max_duration='10sec': the unit sec is not one this run can count"),
    (['max_duration=2.5ep'], "max_duration='2.5ep' is not a duration this run can count ('2.5ep': the unit ep needs "
                             'a whole number'),
    (['optimizer.lr=.nan'], 'optimizer.lr must be a finite number, got nan'),
    (['optimizer.lr=.inf'], 'optimizer.lr must be a finite number, got inf'),
    (['optimizer.weight_decay=-.inf'], 'optimizer.weight_decay must be a finite number, got -inf'),
    (['train_loader.dataset.eval_fraction=.nan'], 'train_loader.dataset.eval_fraction must be a finite number'),
    (['train_loader.dataset.read_delay_ms=.inf'], 'train_loader.dataset.read_delay_ms must be a finite number'),
    (['dist_timeout=.nan'], 'dist_timeout must be a finite number, got nan'),
    (['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.5,.nan]'],
     'train_loader.sampler.source_fractions[1] must be a finite number, got nan'),
    (['seed=4294967296'], 'seed must be in the interval [0, 2**32 - world size] ([0, 4294967295] on one process)'),
    (['global_train_batch_size=2000'], 'global_train_batch_size=2000 is larger than the train split of 1438 samples '
                                       '(train_loader.dataset: digits); use at most 1438'),
    (['train_loader.dataset.eval_fraction=0.0001'], 'train_loader.dataset.eval_fraction=0.0001 leaves the held-out '
                                                    'split of the digits dataset (1797 samples) empty'),
    (['train_loader.sampler.name=mixture', 'train_loader.sampler.source_fractions=[0.99,0.01]'],
     'train_loader.sampler.source_fractions=[0.99, 0.01]: source 1 (fraction 0.01) holds 14 of the 1438 train '
     'samples, fewer than one global step of 64, so it would never be trained; give every source a fraction of at '
     'least 0.045 (64 / 1438), or a global_train_batch_size of at most 14'),
    (['train_loader=[1,2]'], 'train_loader must be a mapping of fields (dataset, sampler, collate_fn, num_workers, '
                             'per_sample_rng), got a list [1, 2]'),
    (['train_loader.sampler=fast'],
     'train_loader.sampler must be a mapping of fields (name, target, kwargs, shuffle, drop_last'),
    (['train_loader=null'], 'train_loader must be a mapping, got null'),
    (['callbacks=[sampler_sync]'], "callbacks must be a mapping {name: arguments}, got a list ['sampler_sync']"),
    (['callbacks.sampler_sync=[1]'], 'callbacks.sampler_sync must be a mapping of arguments (or empty), got [1]'),
    (['seed=[1]'], 'seed must be a single value, got a list [1]'),
]


@pytest.mark.parametrize(('overrides', 'message'), REFUSED, ids=lambda v: ' '.join(v) if isinstance(v, list) else '')
def test_train_and_plan_refuse_with_the_same_message(overrides: list[str], message: str, capsys) -> None:
    assert main([str(ROOT / 'yamls' / 'digits.yaml'), *overrides]) == 2
    trained = capsys.readouterr()
    assert cli_main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), *overrides]) == 2
    planned = capsys.readouterr()
    assert trained.err.startswith(f'error: {message}'), trained.err
    assert trained.err == planned.err
    assert 'run summary' not in trained.out
    assert planned.out == ''


def test_a_recipe_whose_top_level_is_a_list(tmp_path: Path, capsys) -> None:
    path = tmp_path / 'list.yaml'
    path.write_text('- max_duration: 1ep\n- seed: 3\n')
    assert main([str(path)]) == 2
    trained = capsys.readouterr().err
    assert cli_main(['plan', str(path)]) == 2
    assert capsys.readouterr().err == trained
    assert trained.startswith(f'error: the recipe {path} must be a mapping of fields at its top level (field: value), '
                              'got a list; valid fields: run_name, seed')


def test_section_given_a_list_in_the_file(tmp_path: Path) -> None:
    path = tmp_path / 'bad.yaml'
    path.write_text('train_loader: [1, 2]\n')
    with pytest.raises(RecipeError, match=r'^train_loader must be a mapping of fields \(dataset, sampler'):
        load_recipe(path)


def test_the_seed_limit_follows_the_world_size(capsys) -> None:
    digits = str(ROOT / 'yamls' / 'digits.yaml')
    assert cli_main(['plan', digits, '--world-size', '4', 'seed=4294967293', '--epochs', '1']) == 2
    assert capsys.readouterr().err == ('error: seed=4294967293 is too large for 4 ranks: Composer seeds rank r with '
                                       'seed + r, which must stay below 2**32; use a seed in [0, 4294967292]\n')
    assert cli_main(['plan', digits, '--world-size', '4', 'seed=4294967292', '--epochs', '1']) == 0
    check_spec(resolve(load_recipe(digits, ['seed=4294967295'])), world_size=1)


def test_the_largest_global_batch_is_the_train_split(capsys) -> None:
    check_spec(resolve(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['global_train_batch_size=1438'])), world_size=1)
    assert cli_main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '4',
                     'global_train_batch_size=1440']) == 2
    assert 'use at most 1436 (a multiple of the 4 data-parallel ranks)' in capsys.readouterr().err


@pytest.mark.parametrize(
    'text',
    ['3ep', '3EP', '1e3ba', '1_000sp', '+2ep', '2.0ep', ' 2ep', '3 ep', '100tok', '0.5dur', '.5dur', '1dur', '1e-3dur',
     '5iter', '10sec', '0ba', '-1ba', '2.5ep', 'ep', '3', 'infep', 'nanep', '1e400ba', '0x10ba', '3epep', '2ep ',
     'forever', '12345678901234567891ba', 'nandur', 'infdur', '1h30m', '5s'],
)
def test_durations_read_as_composer_reads_them(text: str) -> None:
    from composer.core import Time

    try:
        expected = Time.from_timestring(text)
    except (ValueError, TypeError, OverflowError):
        expected = None
    if expected is None or (expected.unit.value == 'sec' and not text.endswith('sec')):
        with pytest.raises(ValueError):  # refused, or a wall-clock 'XhYmZs' (Composer reads '3' as 30 seconds)
            parse_duration(text)
        return
    value, unit = parse_duration(text)
    assert unit == expected.unit.value
    assert value == expected.value or (math.isnan(value) and math.isnan(expected.value))
    assert type(value) is type(expected.value)


def test_callbacks_in_a_recipe_replace_the_default(tmp_path: Path) -> None:
    digits = ROOT / 'yamls' / 'digits.yaml'
    assert load_recipe(None).callbacks == {'sampler_sync': {}}
    assert load_recipe(digits, ['callbacks={}']).callbacks == {}
    assert load_recipe(digits, ['callbacks.lr_monitor={}']).callbacks == {'sampler_sync': {}, 'lr_monitor': {}}
    path = tmp_path / 'none.yaml'
    path.write_text('max_duration: 1ep\ncallbacks: {}\n')
    assert load_recipe(path).callbacks == {}
    assert load_recipe(path, ['callbacks.lr_monitor={}']).callbacks == {'lr_monitor': {}}
    replicated = load_recipe(digits, ['callbacks.sampler_sync.replication=2'])
    assert batch_plan(resolve(replicated), world_size=4).data_parallel == 2


def test_training_without_sampler_sync_warns_once() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['callbacks={}', 'max_duration=2ba'])
    with pytest.warns(UserWarning) as caught:
        result = train(recipe)
    assert not any(isinstance(callback, SamplerSync) for callback in result.trainer.state.callbacks)
    ours = [w for w in caught if 'training without callbacks.sampler_sync' in str(w.message)]
    assert len(ours) == 1
    assert 'add callbacks.sampler_sync={}' in str(ours[0].message)


def test_the_script_refuses_before_the_summary(tmp_path: Path) -> None:
    """Through ``scripts/train.py``, each case in its own process (side by side): exit 2, one line, no summary.

    The other cases share this path in process (``test_train_and_plan_refuse_with_the_same_message``).
    """
    listed = tmp_path / 'list.yaml'
    listed.write_text('- 1\n- 2\n')
    digits = 'yamls/digits.yaml'
    cases = {
        (digits, 'max_duration=100tok'): "error: max_duration='100tok' counts tokens",  # it trained forever
        (digits, 'save_interval=0ba'): "error: save_interval='0ba' must be positive (0 would never save)",
        (digits, 'optimizer.lr=.nan'): 'error: optimizer.lr must be a finite number, got nan',
        (str(listed),): f'error: the recipe {listed} must be a mapping of fields at its top level',
    }
    env = {**os.environ, 'PYTHONWARNINGS': 'ignore'}
    processes = {args: subprocess.Popen([sys.executable, 'scripts/train.py', *args], cwd=ROOT, env=env, text=True,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE) for args in cases}
    for args, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 2, (args, err)
        assert err.startswith(cases[args]) and err.count('\n') == 1, (args, err)
        assert 'run summary' not in out
