"""scripts/check_gpu.py on the CPU: its command line, the logic of every part, and the carried wheels' lists.

The check itself needs a GPU (``make gpu-rehearsal`` runs all of it on the CPU). Here
each part's logic runs without its long trainings: the cost part's fits for real at a
tiny size, the reading of a sharded checkpoint written by ``torch.distributed.checkpoint``,
the verdicts of every part, and the JSON result.
"""

from __future__ import annotations

import doctest
import importlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / 'scripts'
sys.path.insert(0, str(SCRIPTS))  # check_gpu.py's parts import as the package ``gpu``, as when the script runs

from gpu import cost, lightning, resume, spin, table  # noqa: E402
from gpu.table import FAIL, OK, OVER_TARGET, REPORTED, Row  # noqa: E402


def test_help_names_the_options() -> None:
    result = subprocess.run([sys.executable, str(SCRIPTS / 'check_gpu.py'), '--help'], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ('--device', '--precision', '--parts', '--ranks', '--rounds', '--repeats', '--workdir', '--out'):
        assert option in result.stdout
    assert 'resume,fsdp2,cost,spin,lightning' in result.stdout.replace(' ', '').replace("'", '')


@pytest.mark.parametrize('module', [table, resume, cost, spin, lightning], ids=lambda module: module.__name__)
def test_the_examples_in_the_docstrings_hold(module: object) -> None:
    failures, tried = doctest.testmod(module)  # type: ignore[arg-type]
    assert tried and not failures


def test_overrides_and_ranks() -> None:
    assert resume.device_overrides('gpu', None) == ['device=gpu', 'precision=amp_bf16']
    assert resume.device_overrides('cpu', None) == ['device=cpu', 'precision=fp32']
    assert resume.device_overrides('gpu', 'amp_fp16') == ['device=gpu', 'precision=amp_fp16']
    assert resume.default_ranks('gpu', 2) == [1, 2] and resume.default_ranks('gpu', 1) == [1]
    overrides = resume.run_overrides(Path('/w/resumed'), 'resumed', ['device=gpu'])
    assert 'callbacks.sample_ledger={}' in overrides and overrides[-1] == 'device=gpu'
    assert resume.resume_overrides(Path('/w/r'), sharded=False) == ['load_path=/w/r/latest-rank{rank}.pt']


def test_the_fsdp2_case_selects_fsdp2_and_the_runner_takes_it_on_the_cpu(monkeypatch: pytest.MonkeyPatch,
                                                                         tmp_path: Path) -> None:
    """The FSDP2 case's runs get ``FSDP_VERSION=2`` (none of a launcher's rank variables), and with it the recipe
    runner takes the case's ``parallelism_config`` on the CPU, as the dry run needs."""
    from composer_sampling.recipes.run_fields import machine_device
    from composer_sampling.recipes.schema import load_recipe

    monkeypatch.setenv('RANK', '3')
    monkeypatch.delenv('FSDP_VERSION', raising=False)
    case = resume.Case('FSDP2, 1 rank', 1, tmp_path, [resume.FSDP2['override']], True, sharded=True)
    environment = case.environment()
    assert environment['FSDP_VERSION'] == '2' and 'RANK' not in environment
    assert 'FSDP_VERSION' not in resume.Case('plain', 1, tmp_path, [], True).environment()
    assert resume.resume_overrides(tmp_path, sharded=True) == [f'load_path={tmp_path}/latest-rank0.pt']
    monkeypatch.setenv('FSDP_VERSION', '2')
    recipe = load_recipe(str(resume.RECIPE), ['device=cpu', resume.FSDP2['override']])  # the schema's checks
    assert machine_device(recipe.device, recipe.precision, recipe.parallelism_config) == 'cpu'


def test_compare_states_finds_every_kind_of_difference() -> None:
    state = {'model': {'w': torch.ones(3)}, 'optimizers': {'Adam': {'state': {0: {'step': torch.tensor(4.0)}}}}}
    same = {'model': {'w': torch.ones(3)}, 'optimizers': {'Adam': {'state': {0: {'step': torch.tensor(4.0)}}}}}
    assert resume.compare_states(state, same) == ([], 0.0)
    nudged = {'model': {'w': torch.tensor([1.0, 1.0, 1.0 + 2**-20])}, 'optimizers': same['optimizers']}
    assert resume.compare_states(state, nudged) == (['/model/w'], 2**-20)
    assert resume.compare_states(state, {'model': state['model']})[1] == float('inf')


def test_sample_differences_names_the_batch() -> None:
    whole = {(0, 1): (0, (4, 2)), (1, 1): (0, (3, 1))}
    assert resume.sample_differences(whole, dict(whole)) == []
    swapped = {(0, 1): (0, (2, 4)), (1, 1): (0, (3, 1))}
    assert resume.sample_differences(whole, swapped) == ['rank 0 batch 1: epoch 0 [4, 2]... against epoch 0 [2, 4]...']


def _checkpoint(seed: int) -> dict[str, object]:
    generator = torch.Generator().manual_seed(seed)
    return {'state': {'model': {'layer.weight': torch.randn(4, 3, generator=generator)},
                      'optimizers': {'AdamW': {'state': {'layer.weight': {'exp_avg': torch.randn(4, 3,
                                                                                                 generator=generator),
                                                                          'step': torch.tensor(7.0)}},
                                               'param_groups': [{'lr': 0.003, 'params': ['layer.weight']}]}},
                      'run_name': 'whole'},
            'rng': [{'torch': torch.ones(2)}]}


def test_final_state_reads_a_sharded_checkpoint_as_a_single_file(tmp_path: Path) -> None:
    """A ``torch.distributed.checkpoint`` folder (what FSDP2 saves, ``latest-rank0.pt`` linking to it) reads as the
    same model and optimizer state as the single file of the same state; another state differs."""
    import torch.distributed.checkpoint as dist_cp

    for name, seed in (('sharded', 0), ('other', 1)):
        dist_cp.save(_checkpoint(seed), checkpoint_id=str(tmp_path / name / 'ep1-ba30'), no_dist=True)
        (tmp_path / name / 'latest-rank0.pt').symlink_to('ep1-ba30')
    torch.save(_checkpoint(0), tmp_path / 'single.pt')
    sharded = resume.final_state(tmp_path / 'sharded' / 'latest-rank0.pt')
    single = resume.final_state(tmp_path / 'single.pt')
    assert set(sharded) == {'model', 'optimizers'}
    assert resume.compare_states(sharded, single) == ([], 0.0)
    differ, largest = resume.compare_states(sharded, resume.final_state(tmp_path / 'other' / 'latest-rank0.pt'))
    assert '/model/layer.weight' in differ and 0 < largest < float('inf')


def test_the_cost_part_fits_every_variant_and_judges_the_share() -> None:
    """Every variant trains for real (a tiny MLP, 6 steps, one timed round): the steps are timed, each callback's
    own time is counted, and the rows judge the share of the step against the target."""
    size = cost.CostModel(features=8, width=16, depth=1, classes=3, batch=4, steps=6)
    results = cost.measure(size, 'cpu', 'fp32', rounds=1, warm_up=False)
    assert set(results) == set(cost.VARIANTS) and all(len(runs) == 1 for runs in results.values())
    for runs in results.values():
        assert runs[0]['batches'] == size.steps and runs[0]['wall'] > 0 and runs[0]['own'] > 0
    rows = cost.cost_rows(results, size, 'fp32')
    assert [row.check for row in rows] == ['step', 'SamplerSync per step', 'SampleLedger per step']
    assert rows[0].result == REPORTED and all(row.result in (OK, OVER_TARGET) for row in rows[1:])
    shares = [float(re.search(r'([+-][\d.]+)% of the step', row.detail).group(1)) for row in rows[1:]]  # type: ignore[union-attr]
    assert [row.result for row in rows[1:]] == [OK if share < 100 * cost.TARGET else OVER_TARGET for share in shares]


def test_calibration_doubles_the_batch_until_a_step_takes_long_enough() -> None:
    size = cost.CostModel(features=8, width=16, depth=1, classes=3, batch=4, steps=6)
    assert cost.calibrated(size, 'cpu', 'fp32', min_step=3600.0, max_batch=8).batch == 8  # capped by max_batch
    assert cost.calibrated(size, 'cpu', 'fp32', min_step=0.0) == size


def test_spin_rows_fail_a_resume_that_reads_trained_samples() -> None:
    rows = spin.spin_rows({'composer': (1.0, 8016), 'torch+sync': (0.1, 8), 'ours': (0.1, 16)}, batch=8)
    assert [row.result for row in rows] == [REPORTED, OK, FAIL]
    assert '10.0x faster than the spin' in rows[1].detail and '16 samples read' in rows[2].detail


def test_a_part_that_raises_is_one_failed_row_and_the_result_says_so(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    check_gpu = importlib.import_module('check_gpu')

    def broken(args: object) -> list[Row]:
        raise RuntimeError('no GPU memory left')

    monkeypatch.setitem(check_gpu.RUNNERS, 'spin', broken)
    rows = check_gpu.run_part('spin', object())
    assert rows == [Row('spin', 'part', FAIL, 'RuntimeError: no GPU memory left')]
    json_path, table_path = table.write_result(tmp_path, [Row('cost', 'step', REPORTED, '5 ms'), *rows],
                                               {'summary': 'device cpu', 'machine': {'gpus': []}})
    result = json.loads(json_path.read_text())
    assert result['passed'] is False and result['rows'][1]['result'] == FAIL
    assert table_path.read_text().startswith('no GPU; device cpu\n\n| part ')
    with pytest.raises(ValueError, match="Row result must be one of ok, FAIL, reported, over target, got 'fine'"):
        Row('cost', 'step', 'fine', '')


def _names(path: Path) -> dict[str, str]:
    """``name -> the whole requirement`` of a requirements file (comments and blank lines skipped)."""
    lines = [line.split('#')[0].strip() for line in path.read_text().splitlines()]
    return {re.split(r'[=<>~!]', line)[0].lower().replace('_', '-'): line for line in lines if line}


def test_the_carried_wheels_are_pinned_and_none_is_in_the_image() -> None:
    """Every carried wheel names one exact version (two versions of one package stop the install there); nothing
    the GPU machine's image holds is carried; Composer and the recipe runner's omegaconf are."""
    carried, image = _names(SCRIPTS / 'gpu' / 'wheels.txt'), _names(SCRIPTS / 'gpu' / 'image.txt')
    assert all(re.fullmatch(r'[A-Za-z0-9._-]+==[0-9][0-9a-z.]*', line) for line in carried.values()), carried
    assert not set(carried) & set(image)
    assert {'mosaicml', 'omegaconf', 'mosaicml-cli', 'coolname', 'torch-optimizer'} <= set(carried)
    assert image['torch'] == 'torch==2.11.0' and image['numpy'].startswith('numpy==2.5')


def test_the_lightning_part_resumes_bit_for_bit_and_fails_a_fit_without_the_callback(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Lightning part for real at a tiny size (12 batches per epoch, a checkpoint at step 16 of 24): every row ok;
    with a plain Lightning callback in SamplerSync's place, Lightning starts epoch 1 again and both rows fail."""
    import pytorch_lightning as pl

    import composer_sampling.lightning

    for name, value in {'SAMPLES': 384, 'BATCH': 32, 'WHOLE': 24, 'STOP': 18, 'SAVE_EVERY': 8}.items():
        monkeypatch.setattr(lightning, name, value)
    case = lightning.LightningCase('ours, 0 workers', 'ours', 0)
    rows = lightning.check(case, 'cpu', tmp_path / 'synced')
    assert [row.result for row in rows] == [OK, OK], rows
    monkeypatch.setattr(composer_sampling.lightning, 'SamplerSync', pl.Callback)
    rows = lightning.check(case, 'cpu', tmp_path / 'plain')
    assert [row.result for row in rows] == [FAIL, FAIL], rows
    assert 'not the batches of' in rows[0].detail and 'largest difference' in rows[1].detail
