"""The real ``composer`` launcher in a subprocess, run from the repository's root (tests marked ``launcher``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSER = str(Path(sys.executable).parent / 'composer')


def environment() -> dict[str, str]:
    """This process's environment without the rank variables, so the launcher sets its own."""
    env = {k: v for k, v in os.environ.items() if k not in ('WORLD_SIZE', 'RANK', 'LOCAL_RANK', 'LOCAL_WORLD_SIZE')}
    env['PYTHONWARNINGS'] = 'ignore'
    return env


def free_port() -> int:
    """A TCP port free on loopback now."""
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def launch(args: list[str], tmp_path: Path, timeout: int = 400,
           env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, str]:
    """Run the launcher (``env`` added to the environment); return its result and every rank's output."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    result = subprocess.run(
        [COMPOSER, '--stdout', str(tmp_path / 'rank{rank}.out'), *args],
        cwd=ROOT, capture_output=True, text=True, env={**environment(), **(env or {})}, timeout=timeout,
    )
    others = ''.join(path.read_text() for path in sorted(tmp_path.glob('rank*.out')))
    return result, result.stdout + result.stderr + others
