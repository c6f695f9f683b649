"""The recipe runner's command (``python -m composer_sampling.train``'s ``main``) on each of two ranks.

These run inside the launch of tests/neighbours/test_launcher.py (``composer -n 2 -m
pytest tests/dist``): every rank calls the command's ``main`` as the launched module
would, so no launch of its own is paid for each. Rank 0 prints, as under the launcher;
what it printed is gathered and read on every rank.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from composer.utils import dist

from composer_sampling.recipes.cli import main as cli_main
from composer_sampling.train import main as train_main

pytestmark = pytest.mark.world_size(2)

ROOT = Path(__file__).resolve().parents[2]
DIGITS = str(ROOT / 'yamls' / 'digits.yaml')
EXAMPLE = ROOT / 'examples' / 'text-classification'


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, list[str]]:
    """``main(argv)`` on this rank: its exit code and what every rank printed (rank 0's first)."""
    dist.initialize_dist('cpu', timeout=60)  # a no-op once a Trainer has done it
    code = train_main(list(argv))
    captured = capsys.readouterr()
    return code, dist.all_gather_object(captured.out + captured.err)


def test_grad_accum_recipe_on_two_ranks(capsys: pytest.CaptureFixture[str]) -> None:
    code, printed = _run(capsys, str(ROOT / 'yamls' / 'digits-grad-accum.yaml'))
    assert dist.all_gather_object(code) == [0, 0], printed
    for line in ('world size          2', 'global batch        256', 'device batch        128',
                 'microbatch          32', 'accumulation steps  4'):
        assert line in printed[0]
    accuracy = float(re.search(r'held-out after 12 epochs: MulticlassAccuracy ([0-9.]+)', printed[0]).group(1))
    assert accuracy > 0.9, printed


def test_recipe_error_on_two_ranks_stops_before_training(capsys: pytest.CaptureFixture[str]) -> None:
    code, printed = _run(capsys, DIGITS, 'global_train_batch_size=63')
    assert dist.all_gather_object(code) == [2, 2], printed  # every rank stops, none waits for the other
    assert 'global_train_batch_size=63 is not divisible by the world size 2; use a multiple of 2' in printed[0]
    assert not any('run summary' in text for text in printed)


class _WritesMarker:
    """Unpickling this calls ``exec``, which writes ``marker``: a crafted checkpoint's payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f'open({str(self.marker)!r}, "w").write("ran")',)


def test_a_crafted_checkpoint_on_two_ranks_runs_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    dist.initialize_dist('cpu', timeout=60)
    folder = Path(dist.all_gather_object(str(tmp_path))[0])  # one file for both ranks, as one load_path names
    marker, evil = folder / 'MARKER', folder / 'evil.pt'
    if dist.get_global_rank() == 0:
        torch.save({'state': {'model': _WritesMarker(marker)}, 'rng': []}, evil)
    dist.barrier()
    code, printed = _run(capsys, DIGITS, f'load_path={evil}')
    assert dist.all_gather_object(code) == [2, 2], printed
    assert f'error: load_path: {evil} needs builtins.exec, outside the types a Composer checkpoint needs' in printed[0]
    assert not any('run summary' in text for text in printed)
    assert not marker.exists()
    dist.barrier()  # rank 0's folder stays until both ranks have looked


def test_the_example_project_trains_on_two_ranks_and_its_ledger_audits(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The example user package (examples/text-classification), on the path as its recipe says, trained by the
    command on two ranks; its ledger audits."""
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.setenv('PYTHONPATH', str(EXAMPLE))  # as the user runs it: for every process the run starts too
    dist.initialize_dist('cpu', timeout=60)
    folder = Path(dist.all_gather_object(str(tmp_path))[0]) / 'run'  # rank 0's: one save folder for both ranks
    code, printed = _run(capsys, str(EXAMPLE / 'recipe.yaml'), 'max_duration=2ep', f'save_folder={folder}')
    assert dist.all_gather_object(code) == [0, 0], printed
    metrics = re.search(r'held-out after 2 epochs: CrossEntropy ([0-9.]+), MulticlassAccuracy ([0-9.]+)', printed[0])
    assert metrics is not None, printed
    assert float(metrics.group(2)) > 0.8, printed  # three topics: chance is 1/3
    if dist.get_global_rank() == 0:
        assert cli_main(['audit', str(folder)]) == 0, capsys.readouterr()
    dist.barrier()  # rank 0's folder stays until both ranks are done
