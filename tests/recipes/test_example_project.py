"""The example user package (examples/text-classification): planned at 1024 ranks.

Its training on two ranks through the launcher is in tests/dist/test_train_command.py, inside the one launch of
tests/dist.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from composer_sampling.recipes.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / 'examples' / 'text-classification'
RECIPE = EXAMPLE / 'recipe.yaml'


@pytest.fixture
def example_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))


def test_plan_checks_the_example_at_1024_ranks_without_training(example_on_path: None, tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(['plan', str(RECIPE), '--world-size', '1024', 'global_train_batch_size=1024',
                     f'save_folder={tmp_path}'])
    out = capsys.readouterr().out
    assert code == 0, out
    assert 'world size          1024' in out
    assert out.rstrip().splitlines()[-1].startswith('every guarantee holds: 1728 of 2400 samples exactly once')
    assert not any(tmp_path.iterdir())  # plan built no callback: the ledger folder was never made


def test_plan_refuses_what_train_refuses_without_building_callbacks(example_on_path: None,
                                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # sample_ledger needs save_folder to train: plan says so too, from the registry's entry, importing nothing
    assert cli_main(['plan', str(RECIPE), '--world-size', '2', 'save_folder=null']) == 2
    assert 'error: callbacks.sample_ledger writes to {save_folder}/ledger: set save_folder' in capsys.readouterr().err
    assert cli_main(['plan', str(RECIPE), '--world-size', '2']) == 0, capsys.readouterr()


def test_the_example_imports_only_from_its_own_package() -> None:
    sources = '\n'.join(path.read_text() for path in (EXAMPLE / 'textclf').glob('*.py'))
    assert 'composer_sampling' not in sources  # a user package needs nothing of ours to be trained by a recipe
    assert sys.modules.get('textclf') is None or 'examples' in sys.modules['textclf'].__file__
