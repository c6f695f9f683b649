"""Two ranks of Lightning through torchrun (``torch.distributed.run``, no Composer launcher): the tests of
``tests/lightning/dist`` on both, in one launch (each launch costs torch's and Lightning's import on every rank)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]
#: The tests of tests/lightning/dist, each run on both ranks.
TWO_RANK_TESTS = 9

pytestmark = [pytest.mark.lightning, pytest.mark.launcher]


def test_two_ranks_of_lightning(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items()
           if key not in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
    env['PYTHONWARNINGS'] = 'ignore'
    command = [sys.executable, '-m', 'torch.distributed.run', '--nproc-per-node', '2', '--master-addr', '127.0.0.1',
               '--master-port', str(free_port()),
               '--log-dir', str(tmp_path), '--redirects', '3',
               '-m', 'pytest', 'tests/lightning/dist', '-q', '-p', 'no:randomly', '-p', 'no:cacheprovider']
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    ranks = ''.join(path.read_text(errors='replace') for path in sorted(tmp_path.rglob('std*.log')))
    output = result.stdout + result.stderr + ranks
    assert result.returncode == 0, output[-6000:]
    assert re.findall(r'(\d+) passed', ranks) == [str(TWO_RANK_TESTS)] * 2, output[-6000:]
