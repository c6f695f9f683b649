"""Several processes through the real ``composer`` launcher (gloo on CPU)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launcher import COMPOSER, ROOT, environment, free_port, launch

TWO_RANK_TESTS = 27

pytestmark = pytest.mark.launcher


def test_two_rank_suite(tmp_path: Path) -> None:
    result, output = launch(['-n', '2', '-m', 'pytest', 'tests/dist', '-q', '-p', 'no:cacheprovider'], tmp_path)
    assert result.returncode == 0, output
    passed = re.findall(r'(\d+) passed', output)
    assert passed == [str(TWO_RANK_TESTS)] * 2, output  # both ranks ran every test: none skipped
    assert 'skipped' not in output


def test_grad_accum_recipe_on_two_ranks(tmp_path: Path) -> None:
    result, output = launch(['-n', '2', '-m', 'composer_sampling.train', 'yamls/digits-grad-accum.yaml'], tmp_path)
    assert result.returncode == 0, output
    for line in ('world size          2', 'global batch        256', 'device batch        128',
                 'microbatch          32', 'accumulation steps  4'):
        assert line in result.stdout
    accuracy = float(re.search(r'held-out after 12 epochs: MulticlassAccuracy ([0-9.]+)', result.stdout).group(1))
    assert accuracy > 0.9, output


def test_recipe_error_on_two_ranks_stops_before_training(tmp_path: Path) -> None:
    result, output = launch(
        ['-n', '2', '-m', 'composer_sampling.train', 'yamls/digits.yaml', 'global_train_batch_size=63'], tmp_path)
    assert result.returncode != 0
    assert 'global_train_batch_size=63 is not divisible by the world size 2; use a multiple of 2' in output
    assert 'run summary' not in output


def test_two_nodes_of_one_process_each_on_loopback(tmp_path: Path) -> None:
    port = str(free_port())
    processes = []
    for node in (0, 1):
        folder = tmp_path / f'node{node}'
        folder.mkdir()
        processes.append(subprocess.Popen(
            [COMPOSER, '--world_size', '2', '--nproc', '1', '--node_rank', str(node), '--master_addr', '127.0.0.1',
             '--master_port', port, '-m', 'pytest', 'tests/dist', '-q', '-p', 'no:cacheprovider', '-k',
             'test_resumable_sampler_partitions'],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environment(),
        ))
    outputs = [process.communicate(timeout=400)[0] for process in processes]
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output
        assert '1 passed' in output, output


class _WritesMarker:
    """Unpickling this calls ``exec``, which writes ``marker``: a crafted checkpoint's payload."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return exec, (f'open({str(self.marker)!r}, "w").write("ran")',)


def test_a_crafted_checkpoint_on_two_ranks_runs_nothing(tmp_path: Path) -> None:
    import torch

    marker, evil = tmp_path / 'MARKER', tmp_path / 'evil.pt'
    torch.save({'state': {'model': _WritesMarker(marker)}, 'rng': []}, evil)
    result, output = launch(['-n', '2', '-m', 'composer_sampling.train', 'yamls/digits.yaml', f'load_path={evil}'],
                            tmp_path / 'out')
    assert result.returncode != 0
    assert f'error: load_path: {evil} needs builtins.exec, outside the types a Composer checkpoint needs' in output
    assert 'run summary' not in output
    assert not marker.exists()


def test_the_train_module_runs_under_the_launcher_and_from_the_command(tmp_path: Path) -> None:
    result, output = launch(['-n', '2', '-m', 'composer_sampling.train', 'yamls/digits.yaml', 'max_duration=1ep'],
                            tmp_path / 'module')
    assert result.returncode == 0, output
    assert 'world size          2' in result.stdout and 'held-out after 1 epochs: MulticlassAccuracy' in result.stdout
    command = subprocess.run([str(Path(sys.executable).parent / 'composer-sampling'), 'train', 'yamls/digits.yaml',
                              'seed=-1'], cwd=ROOT, capture_output=True, text=True, env=environment(), timeout=120)
    assert command.returncode == 2 and 'error: seed must be in the interval' in command.stderr
