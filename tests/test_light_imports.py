"""The library stays light: Composer is imported only to train (each check in a fresh interpreter)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _modules_after(code: str) -> set[str]:
    probe = f'{code}\nimport sys\nprint(" ".join(sorted(name.split(".")[0] for name in sys.modules)))'
    result = subprocess.run([sys.executable, '-c', probe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.split())


@pytest.mark.parametrize('code', [
    'import composer_sampling',
    'from composer_sampling import ResumableDistributedSampler, distribute, check_plan, summarize, iter_samplers',
    'from composer_sampling.recipes.cli import main\ntry:\n    main(["--help"])\nexcept SystemExit:\n    pass',
    'from composer_sampling.recipes.cli import main; main(["plan", "yamls/digits.yaml", "--world-size", "4"])',
    'from composer_sampling.recipes.cli import main; main(["recipes"])',
])
def test_no_composer_without_training(code: str) -> None:
    assert 'composer' not in _modules_after(code)


def test_the_callback_brings_composer() -> None:
    assert 'composer' in _modules_after('from composer_sampling import SamplerSync')
