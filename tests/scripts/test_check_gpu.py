"""scripts/check_gpu.py without training: its command line and its pure helpers (the check itself needs a GPU)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / 'scripts' / 'check_gpu.py'


def _script() -> object:
    spec = importlib.util.spec_from_file_location('check_gpu', SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules['check_gpu'] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_help_names_the_options() -> None:
    result = subprocess.run([sys.executable, str(SCRIPT), '--help'], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    for option in ('--device', '--precision', '--ranks', '--workdir'):
        assert option in result.stdout


def test_overrides_and_ranks() -> None:
    check = _script()
    assert check.device_overrides('gpu', None) == ['device=gpu', 'precision=amp_bf16']
    assert check.device_overrides('cpu', None) == ['device=cpu', 'precision=fp32']
    assert check.device_overrides('gpu', 'amp_fp16') == ['device=gpu', 'precision=amp_fp16']
    assert check.default_ranks('gpu', 2) == [1, 2] and check.default_ranks('gpu', 1) == [1]
    overrides = check.run_overrides(Path('/w/resumed'), 'resumed', ['device=gpu'])
    assert 'callbacks.sample_ledger={}' in overrides and overrides[-1] == 'device=gpu'


def test_compare_states_finds_every_kind_of_difference() -> None:
    check = _script()
    state = {'model': {'w': torch.ones(3)}, 'optimizers': {'Adam': {'state': {0: {'step': torch.tensor(4.0)}}}}}
    same = {'model': {'w': torch.ones(3)}, 'optimizers': {'Adam': {'state': {0: {'step': torch.tensor(4.0)}}}}}
    assert check.compare_states(state, same) == ([], 0.0)
    nudged = {'model': {'w': torch.tensor([1.0, 1.0, 1.0 + 2**-20])}, 'optimizers': same['optimizers']}
    assert check.compare_states(state, nudged) == (['/model/w'], 2**-20)
    assert check.compare_states(state, {'model': state['model']})[1] == float('inf')


def test_sample_differences_names_the_batch() -> None:
    check = _script()
    whole = {(0, 1): (0, (4, 2)), (1, 1): (0, (3, 1))}
    assert check.sample_differences(whole, dict(whole)) == []
    swapped = {(0, 1): (0, (2, 4)), (1, 1): (0, (3, 1))}
    assert check.sample_differences(whole, swapped) == ['rank 0 batch 1: epoch 0 [4, 2]... against epoch 0 [2, 4]...']
