"""Two ranks of the Hugging Face ``Trainer`` through torchrun (``torch.distributed.run``): the tests of
``tests/transformers/dist`` on both, in one launch (each launch costs torch's, transformers' and accelerate's import
on every rank)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
#: The tests of tests/transformers/dist, each run on both ranks.
TWO_RANK_TESTS = 9
#: Seconds one test may take on a rank (each takes a few seconds alone, up to about 30 on a loaded machine).
RANK_TEST_TIMEOUT = 150
#: Seconds the whole launch may take (about 40 alone, most of it the imports).
LAUNCH_TIMEOUT = 420

pytestmark = [pytest.mark.transformers, pytest.mark.launcher]


def test_two_ranks_of_the_hugging_face_trainer(tmp_path: Path) -> None:
    """Each rank stops at its first failure, and a test that hangs on a rank fails after RANK_TEST_TIMEOUT seconds with
    every thread's stack in that rank's log: a rank left waiting for its peer then fails too, and the launch ends."""
    env = {key: value for key, value in os.environ.items()
           if key not in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
    env['PYTHONWARNINGS'] = 'ignore'
    command = [sys.executable, '-m', 'torch.distributed.run', '--nproc-per-node', '2', '--master-addr', '127.0.0.1',
               '--master-port', str(free_port()),
               '--log-dir', str(tmp_path), '--redirects', '3',
               '-m', 'pytest', 'tests/transformers/dist', '-q', '-x', '-p', 'no:randomly', '-p', 'no:cacheprovider',
               '--timeout', str(RANK_TEST_TIMEOUT), '--timeout-method', 'thread']
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f'the launch ran past {LAUNCH_TIMEOUT} s; the ranks wrote:\n{_rank_logs(tmp_path)[-8000:]}\n'
                    f'{expired.stderr!s:.2000}')
    ranks = _rank_logs(tmp_path)
    output = result.stdout + result.stderr + ranks
    assert result.returncode == 0, output[-8000:]
    assert re.findall(r'(\d+) passed', ranks) == [str(TWO_RANK_TESTS)] * 2, output[-8000:]


def _rank_logs(folder: Path) -> str:
    """What every rank wrote to its stdout and stderr, in the order of their paths."""
    return ''.join(path.read_text(errors='replace') for path in sorted(folder.rglob('std*.log')))
