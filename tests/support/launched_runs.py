"""Launched runs that several tests read, launched once per test process (tests marked ``launcher``).

A launch pays for importing Composer in the launcher and in every rank; a run that
tests in several files read is launched by the first of them and reused by the
others. Under pytest-xdist each worker is its own process: the tests that share a
run are one group of ``SHARED_RESOURCES`` in ``tests/conftest.py``, which keeps them on one worker.
"""

from __future__ import annotations

import dataclasses
import subprocess
from pathlib import Path

import pytest

from support.launcher import launch

#: The digits recipe on 400 synthetic samples (320 trained, at global batch 64: 5 batches per epoch), one epoch,
#: checkpoints at batches 3 and 5 (the end), the sample ledger beside them.
SYNTHETIC_RECIPE = ['yamls/digits.yaml', 'train_loader.dataset={name: synthetic, size: 400}', 'max_duration=1ep',
                    'save_interval=3ba', 'run_name=synthetic', 'callbacks.sample_ledger={}']

@dataclasses.dataclass(frozen=True)
class LaunchedRun:
    """A finished launch: the launcher's result, every rank's output, and the run's local save folder."""

    result: subprocess.CompletedProcess
    output: str
    save_folder: Path


_LAUNCHED: dict[str, LaunchedRun] = {}


def two_rank_synthetic(tmp_path_factory: pytest.TempPathFactory) -> LaunchedRun:
    """``composer -n 2 -m composer_sampling.train`` on :data:`SYNTHETIC_RECIPE`, never stopped, into a local folder.

    Launched when first asked for in this process; later callers get the same run. Read it, never write into it.
    """
    if 'two_rank_synthetic' not in _LAUNCHED:
        folder = tmp_path_factory.mktemp('two-rank-synthetic')
        result, output = launch(['-n', '2', '-m', 'composer_sampling.train', *SYNTHETIC_RECIPE,
                                 f'save_folder={folder / "run"}'], folder / 'logs')
        _LAUNCHED['two_rank_synthetic'] = LaunchedRun(result, output, folder / 'run')
    return _LAUNCHED['two_rank_synthetic']
