"""Two ranks through torchrun (``torch.distributed.run``, no Composer launcher) in the environment without Composer:
the tests of ``tests/lightning/dist``, ``tests/loop/dist`` and, where its tested transformers is installed,
``tests/transformers/dist`` on both ranks, in one launch (each launch costs torch's, Lightning's and transformers'
imports on every rank)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launcher import free_port
from support.lightning_parts import fit, loader, nested_loader

ROOT = Path(__file__).resolve().parents[2]
#: Whether the Hugging Face tests are collected here (the root conftest.py collects them where the transformers they
#: are tested on is installed).
TRANSFORMERS = importlib.util.find_spec('transformers') is not None and importlib.metadata.version(
    'transformers').startswith('5.25.')
#: The tests of tests/lightning/dist and tests/loop/dist (a loop written by hand), each run on both ranks.
TWO_RANK_TESTS = 25
#: The tests of tests/transformers/dist (the Hugging Face Trainer), each run on both ranks where they are collected.
TRANSFORMERS_TESTS = 12
#: Seconds one test may take on a rank (each takes a few seconds alone, up to about 30 on a loaded machine).
RANK_TEST_TIMEOUT = 150
#: Seconds the whole launch may take (about 20 alone).
LAUNCH_TIMEOUT = 420

pytestmark = [pytest.mark.lightning, pytest.mark.launcher]


def test_two_ranks_of_lightning(tmp_path: Path) -> None:
    """Each rank stops at its first failure, and a test that hangs on a rank fails after RANK_TEST_TIMEOUT seconds with
    every thread's stack in that rank's log: a rank left waiting for its peer then fails too, and the launch ends.

    Around the launch, one process changes the world size of a resume: a one-rank checkpoint for the ranks to refuse,
    and the ranks' checkpoint resumed here on one rank, every sample of the resumed epoch trained once."""
    fit(loader('ours'), tmp_path / 'one', max_steps=3, save_every=2)
    env = {key: value for key, value in os.environ.items()
           if key not in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
    env['PYTHONWARNINGS'] = 'ignore'
    env['LIGHTNING_SHARED'] = str(tmp_path)
    folders = ['tests/lightning/dist', 'tests/loop/dist', *(['tests/transformers/dist'] if TRANSFORMERS else [])]
    command = [sys.executable, '-m', 'torch.distributed.run', '--nproc-per-node', '2', '--master-addr', '127.0.0.1',
               '--master-port', str(free_port()),
               '--log-dir', str(tmp_path), '--redirects', '3',
               '-m', 'pytest', *folders, '-q', '-x', '-p', 'no:randomly', '-p', 'no:cacheprovider',
               '--timeout', str(RANK_TEST_TIMEOUT), '--timeout-method', 'thread']
    try:
        result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f'the launch ran past {LAUNCH_TIMEOUT} s; the ranks wrote:\n{_rank_logs(tmp_path)[-8000:]}\n'
                    f'{expired.stderr!s:.2000}')
    ranks = _rank_logs(tmp_path)
    output = result.stdout + result.stderr + ranks
    assert result.returncode == 0, output[-8000:]
    expected = TWO_RANK_TESTS + (TRANSFORMERS_TESTS if TRANSFORMERS else 0)
    assert re.findall(r'(\d+) passed', ranks) == [str(expected)] * 2, output[-8000:]
    two = tmp_path / 'two'
    before = [indices for rank in json.loads((two / 'trained.json').read_text()) for _, _, indices in rank[:1]]
    with pytest.warns(UserWarning, match='holds the RNG states of 2 ranks and this run has 1'):
        resumed = fit(nested_loader(), tmp_path / 'resumed', max_epochs=1, ckpt_path=str(two / 'step=1.ckpt'),
                      save_every=1)
    assert [batch for _, batch, _ in resumed.trained] == [1, 2, 3, 4]
    after = [indices for _, _, indices in resumed.trained]
    assert sorted(index for indices in [*before, *after] for index in indices) == list(range(90)), \
        'every sample of the resumed epoch once'
    again = fit(nested_loader(), tmp_path / 'again', max_epochs=1, ckpt_path=str(tmp_path / 'resumed' / 'step=3.ckpt'))
    assert again.trained == resumed.trained[2:], 'its checkpoint counts the samples of batches of two sizes'


def _rank_logs(folder: Path) -> str:
    """What every rank wrote to its stdout and stderr, in the order of their paths."""
    return ''.join(path.read_text(errors='replace') for path in sorted(folder.rglob('std*.log')))
