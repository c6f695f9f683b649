"""Recipes: schema, errors before training, and the train script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from composer_sampling.build import build_run
from composer_sampling.recipe import RecipeError, load_recipe
from composer_sampling.train import main, train

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / 'yamls').glob('*.yaml'))


@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.name)
def test_every_recipe_loads_and_builds(path: Path) -> None:
    recipe = load_recipe(path)
    run = build_run(recipe, world_size=1)
    assert len(run.train_loader) > 0


def test_grad_accum_recipe_has_the_documented_batches() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits-grad-accum.yaml')
    from composer_sampling.build import batch_plan

    plan = batch_plan(recipe, world_size=2)
    assert (plan.global_batch, plan.device_batch, plan.microbatch, plan.accumulation_steps) == (256, 128, 32, 4)


@pytest.mark.parametrize(
    ('overrides', 'message'),
    [
        (['global_batch=3'], "unknown field 'global_batch' in .*digits.yaml; valid fields here: run_name, seed"),
        (['train_loader.sampler.shufle=false'], "unknown field 'train_loader.sampler.shufle'.*: name, shuffle"),
        (['global_train_batch_size=many'], "invalid value for field 'global_train_batch_size'.*'many'"),
        (['train_loader.sampler.drop_last=perhaps'], "field 'train_loader.sampler.drop_last'.*not a valid bool"),
        (['global_train_batch_size=0'], 'global_train_batch_size must be at least 1, got 0'),
        (['device_train_microbatch_size=-4'], 'device_train_microbatch_size must be at least 1, got -4'),
        (['gradient_accumulation_steps=0'], 'gradient_accumulation_steps must be at least 1, got 0'),
        (['train_loader.num_workers=-1'], 'train_loader.num_workers must be at least 0, got -1'),
        (['train_loader.sampler.name=fancy'], "train_loader.sampler.name 'fancy' is unknown; choose one of: "
                                              'resumable, distributed'),
        (['train_loader.dataset.name=imagenet'], "train_loader.dataset.name 'imagenet' is unknown"),
        (['train_loader.dataset.name=synthetic'], 'train_loader.dataset.size is required'),
        (['max_duration=forever'], "max_duration 'forever' is not a Composer duration"),
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
        (['callbacks.fancy_logger={}'], 'callbacks.fancy_logger is unknown; choose among: sampler_sync'),
        (['callbacks.sampler_sync.seed=3'], "callbacks.sampler_sync: got an unexpected keyword argument 'seed'; its "
                                            'arguments are: data_seed, check_sharding'),
        (['callbacks.sampler_sync.data_seed=-3'], 'callbacks.sampler_sync: data_seed must be in the interval'),
    ],
)
def test_main_exits_2_with_the_message_before_training(overrides, message, capsys) -> None:
    assert main([str(ROOT / 'yamls' / 'digits.yaml'), *overrides]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert 'run summary' not in captured.out  # nothing was built or trained


def test_global_batch_must_divide_by_the_world_size() -> None:
    from composer_sampling.build import batch_plan

    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['global_train_batch_size=63'])
    with pytest.raises(RecipeError, match='global_train_batch_size=63 is not divisible by the world size 2'):
        batch_plan(recipe, world_size=2)


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
    assert 'held-out accuracy after 1 epochs' in good.stdout
    bad = subprocess.run(
        [sys.executable, 'scripts/train.py', 'yamls/digits.yaml', 'global_train_batch_size=-1'],
        cwd=ROOT, capture_output=True, text=True, env=env, timeout=300,
    )
    assert bad.returncode == 2
    assert bad.stderr.strip() == 'error: global_train_batch_size must be at least 1, got -1'
