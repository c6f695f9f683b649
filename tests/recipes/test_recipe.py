"""Recipes: schema, errors before training, and the train script."""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from composer_sampling import SamplerSync
from composer_sampling.recipes.build_training import build_run
from composer_sampling.recipes.checks import checked_spec, recipe_batch_sizes
from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.recipes.durations import parse_duration
from composer_sampling.recipes.resolve import resolve
from composer_sampling.recipes.schema import RecipeError, load_recipe
from composer_sampling.train import main, train

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / 'yamls').glob('*.yaml'))


@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.name)
def test_every_recipe_loads_and_builds(path: Path) -> None:
    recipe = load_recipe(path)
    run = build_run(resolve(recipe), world_size=1)
    assert len(run.train_loader) > 0


def test_on_two_ranks_the_train_loader_starts_its_workers_from_a_fork_server() -> None:
    """A rank runs gloo's threads when the Trainer forks the workers: they come from a fork server (issue 22, 9)."""
    data = ['train_loader.dataset={name: synthetic, size: 80}', 'train_loader.per_sample_rng=true']

    def built(world_size: int, *overrides: str) -> Any:
        return build_run(resolve(load_recipe(None, [*data, *overrides])), world_size=world_size, rank=1 % world_size)

    one_rank = built(1, 'train_loader.num_workers=2').train_loader
    two_ranks = built(2, 'train_loader.num_workers=2').train_loader
    in_process = built(2).train_loader
    assert one_rank.multiprocessing_context is None  # torch's default, fork
    assert two_ranks.multiprocessing_context.get_start_method() == 'forkserver'
    read = [(batch['index'].tolist(), batch['input']) for batch in two_ranks]  # the dataset reached the workers
    expected = [(batch['index'].tolist(), batch['input']) for batch in in_process]
    assert [indices for indices, _ in read] == [indices for indices, _ in expected]
    assert all(torch.equal(got, want) for (_, got), (_, want) in zip(read, expected, strict=True))


def test_grad_accum_recipe_has_the_documented_batches() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits-grad-accum.yaml')

    plan = recipe_batch_sizes(resolve(recipe), world_size=2)
    assert (plan.global_batch, plan.device_batch, plan.microbatch, plan.accumulation_steps) == (256, 128, 32, 4)


def test_global_batch_must_divide_by_the_world_size() -> None:

    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['global_train_batch_size=63'])
    with pytest.raises(RecipeError, match='global_train_batch_size=63 is not divisible by the world size 2'):
        recipe_batch_sizes(resolve(recipe), world_size=2)


def test_missing_recipe_file(capsys) -> None:
    assert main(['yamls/does-not-exist.yaml']) == 2
    assert 'recipe file yamls/does-not-exist.yaml does not exist' in capsys.readouterr().err


def test_train_digits_in_process() -> None:
    result = train(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['max_duration=3ep']))
    assert result.eval_accuracy > 0.85
    assert result.trainer.state.timestamp.epoch.value == 3


def test_the_clone_wrapper_and_the_module_run_and_refuse_bad_recipes(tmp_path: Path) -> None:
    env = {**os.environ, 'PYTHONWARNINGS': 'ignore'}
    good = subprocess.run(
        [sys.executable, 'scripts/train.py', 'yamls/custom-batch-sampler.yaml', 'max_duration=1ep'],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert good.returncode == 0, good.stderr
    assert 'accumulation steps  4 (device batch / microbatch)' in good.stdout
    assert 'held-out after 1 epochs: MulticlassAccuracy' in good.stdout
    bad = subprocess.run(
        [sys.executable, '-m', 'composer_sampling.train', 'yamls/digits.yaml', 'global_train_batch_size=-1'],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == 'error: global_train_batch_size must be at least 1, got -1'


# Recipes refuse what cannot work: exit 2, the field named, before the summary; plan refuses the same.

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
    fingerprint = [line for line in capsys.readouterr().out.splitlines() if 'data fingerprint' in line]
    assert len(fingerprint) == 1 and re.search(r'data fingerprint +[0-9a-f]{16}, from the ', fingerprint[0]), \
        fingerprint  # the recipe's dataset, as the run summary prints it
    checked_spec(resolve(load_recipe(digits, ['seed=4294967295'])), world_size=1)


def test_the_largest_global_batch_is_the_train_split(capsys) -> None:
    checked_spec(resolve(load_recipe(ROOT / 'yamls' / 'digits.yaml', ['global_train_batch_size=1438'])), world_size=1)
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
    assert recipe_batch_sizes(resolve(replicated), world_size=4).data_parallel == 2


def test_training_without_sampler_sync_warns_once() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['callbacks={}', 'max_duration=2ba'])
    with pytest.warns(UserWarning) as caught:
        result = train(recipe)
    assert not any(isinstance(callback, SamplerSync) for callback in result.trainer.state.callbacks)
    ours = [w for w in caught if 'training without callbacks.sampler_sync' in str(w.message)]
    assert len(ours) == 1
    assert 'add callbacks.sampler_sync={}' in str(ours[0].message)


def test_the_script_refuses_before_the_summary(tmp_path: Path) -> None:
    """Through ``python -m composer_sampling.train``, each case in its own process: exit 2, one line, no summary.

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
    command = [sys.executable, '-m', 'composer_sampling.train']
    processes = {args: subprocess.Popen([*command, *args], cwd=ROOT, env=env, text=True, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE) for args in cases}
    for args, process in processes.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 2, (args, err)
        assert err.startswith(cases[args]) and err.count('\n') == 1, (args, err)
        assert 'run summary' not in out
