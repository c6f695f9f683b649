"""composer-sampling plan: batch math, graph and guarantees for any world size, without training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from composer_sampling._proofs.coverage import EpochAccounting
from composer_sampling._proofs.coverage import epoch_coverage as _coverage
from composer_sampling.recipes.build_training import plan_recipe
from composer_sampling.recipes.cli import main
from composer_sampling.recipes.schema import load_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPES = sorted((ROOT / 'yamls').glob('*.yaml'))


@pytest.mark.parametrize('world_size', [1, 2, 4])
@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.name)
def test_every_recipe_keeps_every_guarantee(path: Path, world_size: int, capsys) -> None:
    assert main(['plan', str(path), '--world-size', str(world_size), '--epochs', '8']) == 0
    out = capsys.readouterr().out
    assert 'every guarantee holds' in out
    assert f'world size          {world_size}' in out


def test_a_thousand_ranks_on_a_million_samples() -> None:
    recipe = load_recipe(ROOT / 'yamls' / 'digits.yaml', ['train_loader.dataset.name=synthetic',
                                                          'train_loader.dataset.size=1250000',  # 1e6 train, 0.2 out
                                                          'global_train_batch_size=4096'])
    report = plan_recipe(recipe, world_size=1024, epochs=2)
    assert report.ok, report.problems
    assert [e.repeated for e in report.epochs] == [report.accounting.padded] * 2 == [448, 448]


def test_sub_epochs_are_checked_per_pass_over_the_data() -> None:
    report = plan_recipe(load_recipe(ROOT / 'yamls' / 'sub-epoch.yaml'), world_size=2, epochs=6)
    assert report.sub_epochs == 4
    assert [(e.complete, e.missing) for e in report.epochs] == [(True, 0), (False, 1438 - 2 * 360)]


def test_a_sampler_that_does_not_shard_is_refused_by_plan_as_train_refuses_it(capsys) -> None:
    """The sharding check train runs on its rank, run by plan on rank 0 before the proofs: exit 2, its message."""
    code = main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '2', 'train_loader.sampler.name=random'])
    assert code == 2
    assert capsys.readouterr().err.startswith('error: train_loader.sampler (random): world size is 2 but no sampler '
                                              'of the train dataloader shards by rank')


@pytest.mark.parametrize(
    ('args', 'message'),
    [
        (['--world-size', '3'], 'error: global_train_batch_size=64 is not divisible by the world size 3'),
        (['--world-size', '0'], 'error: --world-size and --epochs must be at least 1, got 0 and 2'),
        (['global_batch=3'], "error: unknown field 'global_batch'"),
        (['--world-size', '8', 'train_loader.sampler.name=nested_batch', 'train_loader.sampler.num_batches=3'],
         'error: train_loader.sampler: num_batches=3 does not divide the device batch 8'),  # our builder's own words
    ],
)
def test_invalid_fields_exit_2_naming_them(args: list[str], message: str, capsys) -> None:
    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), *args]) == 2
    assert message in capsys.readouterr().err


def test_missing_recipe(capsys) -> None:
    assert main(['plan', 'nowhere.yaml']) == 2
    assert 'recipe file nowhere.yaml does not exist' in capsys.readouterr().err


def test_coverage_names_each_broken_guarantee() -> None:
    accounting = EpochAccounting(dataset_len=6, trained=6, padded=0, dropped=0, steps=1)
    fine = _coverage(0, [np.array([0, 2, 4]), np.array([1, 3, 5])], accounting, complete=True)
    assert fine.problem is None and fine.exactly_once == 6
    repeated = _coverage(1, [np.array([0, 1, 2]), np.array([0, 1, 2])], accounting, complete=True)
    assert repeated.problem == 'exactly once per epoch: 3 samples trained again in epoch 1, padding allows 0'
    missing = _coverage(2, [np.array([0, 1]), np.array([2, 3])], accounting, complete=True)
    assert missing.problem == 'exactly once per epoch: 2 samples never trained in epoch 2, the sampler drops 0'
    assert _coverage(3, [np.array([0, 1]), np.array([2, 3])], accounting, complete=False).problem is None


def test_console_script_and_llm_foundry_entry_points() -> None:
    import importlib.metadata
    import subprocess
    import sys

    from composer_sampling import SampleLedger, SamplerSync

    script = Path(sys.executable).parent / 'composer-sampling'
    result = subprocess.run([str(script), 'plan', 'yamls/digits.yaml', '--world-size', '2', '--epochs', '1'],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0 and 'every guarantee holds' in result.stdout, result.stderr
    entries = {entry.name: entry for entry in importlib.metadata.entry_points(group='llmfoundry_callbacks')}
    assert entries['sampler_sync'].load() is SamplerSync
    assert entries['sample_ledger'].load() is SampleLedger


@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.name)
def test_replication_plans_one_order_per_data_parallel_group(path: Path, capsys) -> None:
    assert main(['plan', str(path), '--world-size', '4', '--epochs', '2', 'callbacks.sampler_sync.replication=2']) == 0
    out = capsys.readouterr().out
    assert 'replication         2 (2 data-parallel ranks; each group of 2 reads the same data)' in out
    assert 'on 4 ranks (2 data-parallel groups of 2)' in out
    assert 'every guarantee holds' in out
    assert 'num_replicas=2, rank=0' in out  # rank 0's sampler shards over the 2 groups


def test_replication_that_does_not_divide_the_world_size_exits_2(capsys) -> None:
    recipe = str(ROOT / 'yamls' / 'digits.yaml')
    assert main(['plan', recipe, '--world-size', '4', 'callbacks.sampler_sync.replication=3']) == 2
    assert 'callbacks.sampler_sync.replication=3 does not divide the world size 4; valid: 1, 2, 4' in (
        capsys.readouterr().err)


@pytest.mark.parametrize('drop_last', [False, True])
def test_a_rank_that_would_train_nothing_fails_the_plan(drop_last: bool) -> None:
    from torch.utils.data import DataLoader

    from composer_sampling import ResumableDistributedSampler
    from composer_sampling._proofs.coverage import epoch_accounting

    samplers = [ResumableDistributedSampler(3, 8, rank, drop_last=drop_last) for rank in range(8)]
    accounting = epoch_accounting(DataLoader(range(3), batch_size=1, sampler=samplers[0]), 8)
    coverage = _coverage(0, [np.fromiter(sampler, np.int64) for sampler in samplers], accounting, complete=True)
    fix = 'use at least 8 samples or at most 3 data-parallel ranks'
    if drop_last:
        assert coverage.problem == ('every rank trains: 8 of the 8 data-parallel ranks would train nothing in epoch 0 '
                                    f'(the dataset has 3 samples, the sampler drops 3); {fix}')
    else:
        assert (coverage.exactly_once, coverage.repeated, coverage.overlap) == (0, 5, 3)
        assert coverage.problem == ('every rank trains: the dataset has 3 samples for 8 data-parallel ranks, so 5 '
                                    'ranks would train only padding (repeats of samples other ranks train) in epoch '
                                    f'0; {fix}')


@pytest.mark.parametrize('drop_last', ['false', 'true'])
def test_eight_ranks_on_three_samples_never_hold_every_guarantee(drop_last: str, capsys) -> None:
    code = main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), '--world-size', '8', 'global_train_batch_size=8',
                 'train_loader.dataset.name=synthetic', 'train_loader.dataset.size=4',  # 3 to train
                 f'train_loader.sampler.drop_last={drop_last}'])
    out, err = capsys.readouterr()
    assert code == 2 and 'every guarantee holds' not in out
    # The recipe validation refuses it (exit 2) before the plan's own 'every rank trains' guarantee is reached.
    expected = ('the train split of 3 samples (train_loader.dataset: synthetic) is smaller than the 8 data-parallel '
                'ranks: some rank would train nothing')
    assert expected in err, err


@pytest.mark.parametrize(
    ('args', 'expected'),
    [
        (['--world-size', '2'], 'every guarantee holds: every sample exactly once per epoch, no overlap between ranks, '
                                'identical seeds'),
        (['--world-size', '4'], 'every guarantee holds: 1436 of 1438 samples exactly once per epoch, 2 twice (padding '
                                'repeats 2 so that the 4 ranks train equal shares), no overlap between ranks except '
                                'the 2 padded samples, identical seeds'),
        (['--world-size', '4', 'train_loader.sampler.drop_last=true'],
         'every guarantee holds: 1436 of 1438 samples exactly once per epoch, 2 not at all (the sampler drops 2: '
         'drop_last, or a mixture trimmed to whole global steps), no overlap between ranks, identical seeds'),
    ],
    ids=['exact', 'padded', 'dropped'],
)
def test_the_verdict_says_what_padding_repeats_and_what_is_dropped(args: list[str], expected: str, capsys) -> None:
    import re

    assert main(['plan', str(ROOT / 'yamls' / 'digits.yaml'), *args]) == 0
    out = capsys.readouterr().out
    assert out.rstrip().splitlines()[-1] == expected
    exactly_once = re.findall(r'^\|\s+\d\s+\|\s+\d+\s+\|\s+(\d+)\s+\|', out, re.M)
    assert exactly_once == [expected.split()[3] if 'of 1438' in expected else '1438'] * 2  # the table's numbers


def test_an_index_outside_the_dataset_is_a_failed_guarantee_not_a_wrong_count() -> None:
    accounting = EpochAccounting(dataset_len=4, trained=4, padded=0, dropped=0, steps=1)
    coverage = _coverage(0, [np.array([0, 1]), np.array([2, 4])], accounting, complete=True)
    assert coverage.problem == 'indices within the dataset: rank 1 yields index 4 in epoch 0, outside [0, 4)'
