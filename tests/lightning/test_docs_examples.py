"""The examples of docs/lightning.md and docs/data-order.md run as written, in the environment of the extra they name
(pytorch-lightning, without Composer), each in a new folder.

An example is a fenced Python block whose first line names its file and its command (``# train.py: torchrun
--nproc-per-node 2 train.py``); "run it again" in that line means the example resumes from what its first run saved,
and the test runs it twice.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.launcher import free_port

pytestmark = pytest.mark.lightning

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r'```python\n# (?P<name>[\w-]+\.py): (?P<command>[^\n]+)\n(?P<code>.*?)```', re.DOTALL)
#: Seconds one run of an example may take (each takes about 10 to 20 alone).
RUN_TIMEOUT = 300


def _examples() -> list[tuple[str, str, str, str]]:
    found = []
    for page in ('lightning.md', 'data-order.md'):
        for match in BLOCK.finditer((ROOT / 'docs' / page).read_text()):
            found.append((page, match['name'], match['command'], f'# {match["name"]}\n{match["code"]}'))
    return found


def _argv(command: str) -> list[str]:
    """The command of an example, run with this interpreter (``python`` and ``torchrun`` name this environment's)."""
    words = command.split(' (')[0].split()
    if words[0] == 'python':
        return [sys.executable, *words[1:]]
    if words[0] == 'torchrun':
        return [sys.executable, '-m', 'torch.distributed.run', '--master-addr', '127.0.0.1', '--master-port',
                str(free_port()), *words[1:]]
    raise ValueError(f'an example runs with python or torchrun, not {words[0]!r}')


def test_the_pages_hold_the_three_examples() -> None:
    assert [(page, name) for page, name, _, _ in _examples()] == [
        ('lightning.md', 'example.py'), ('data-order.md', 'train.py'), ('data-order.md', 'fabric_train.py')]


@pytest.mark.parametrize(('page', 'name', 'command', 'code'), _examples(), ids=lambda value: str(value)[:20])
def test_an_example_runs_as_written(page: str, name: str, command: str, code: str, tmp_path: Path) -> None:
    (tmp_path / name).write_text(code)
    env = {key: value for key, value in os.environ.items()
           if key not in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
    env['PYTHONWARNINGS'] = 'ignore'
    runs = 2 if 'run it again' in command else 1
    for run in range(runs):
        result = subprocess.run(_argv(command), cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=RUN_TIMEOUT)
        assert result.returncode == 0, f'{page}, {name}, run {run + 1}:\n{(result.stdout + result.stderr)[-6000:]}'
        if runs == 2 and run == 0:
            assert any(tmp_path.glob('*.pt')) or any(tmp_path.glob('*.ckpt')), 'the first run saved a checkpoint'
