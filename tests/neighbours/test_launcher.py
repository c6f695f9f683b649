"""Several processes through the real ``composer`` launcher (gloo on CPU).

Each launch pays for importing Composer in the launcher and in every rank, so checks
that need two ranks but no launch of their own run inside the one launch of
``tests/dist`` (the recipe command's checks: tests/dist/test_train_command.py).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launched_runs import two_rank_synthetic
from support.launcher import COMPOSER, ROOT, environment, free_port, launch

TWO_RANK_TESTS = 33

pytestmark = pytest.mark.launcher


def test_two_rank_suite(tmp_path: Path) -> None:
    result, output = launch(['-n', '2', '-m', 'pytest', 'tests/dist', '-q', '-p', 'no:cacheprovider'], tmp_path,
                            timeout=900)  # a guard against a hang: the suite's ~30 tests take minutes on a busy host
    assert result.returncode == 0, output
    passed = re.findall(r'(\d+) passed', output)
    assert passed == [str(TWO_RANK_TESTS)] * 2, output  # both ranks ran every test: none skipped
    assert 'skipped' not in output


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


def test_the_train_module_runs_under_the_launcher_and_from_the_command(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    launched = two_rank_synthetic(tmp_path_factory)  # the never-stopped run tests/ledger/test_ledger_upload.py reads
    result, output = launched.result, launched.output
    assert result.returncode == 0, output
    assert 'world size          2' in result.stdout and 'held-out after 1 epochs: MulticlassAccuracy' in result.stdout
    command = subprocess.run([str(Path(sys.executable).parent / 'composer-sampling'), 'train', 'yamls/digits.yaml',
                              'seed=-1'], cwd=ROOT, capture_output=True, text=True, env=environment(), timeout=120)
    assert command.returncode == 2 and 'error: seed must be in the interval' in command.stderr
