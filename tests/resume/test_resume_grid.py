"""Every sampler graph a Composer user has resumes as if the run never stopped: the grid on one rank, under Composer.

The rows are ``support/grid.py``'s, which the Lightning and loop runners train too
(``tests/lightning/test_lightning_grid.py``, ``tests/loop/test_loop_grid.py``): they cover every pair
of factors (sampler graph x workers x randomness x duration x stop), not their full
product, and the stops of each sampler graph include a mid-epoch one, the last batch
of an epoch, Composer's checkpoint at the end of an epoch (batch interval) and its
checkpoint at the epoch boundary (epoch interval). Rows with random augmentations
drawn from the global RNG inside DataLoader workers are not bit-exact (a worker's RNG
depends on the batches it served; docs/resume.md): they compare samples and reads
only. Composer's own paths (its per-epoch cut, evaluation, persistent workers) are
rows of this module only. ``tests/dist/test_resume_grid.py`` runs the grid on two ranks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.grid import GRID, PAIRWISE, SHAPES, Row, missing_pairs
from support.resume_harness import run_row

pytestmark = pytest.mark.composer


def test_the_grid_covers_every_pair_of_factors() -> None:
    assert missing_pairs(GRID, PAIRWISE) == []
    assert all(row.composer_only is None for row in [*GRID, *SHAPES]), 'every trainer runs the grid'


@pytest.mark.parametrize('row', GRID, ids=str)
def test_a_resumed_run_ends_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    assert run_row(row, tmp_path) == []


#: Composer's own paths through a resume: its per-epoch cut, persistent workers, evaluation during training.
PATHS = [
    Row('resumable', subset=6, stops=('end_of_epoch', 'last_batch', 'mid')),
    Row('torch_distributed', workers=2, randomness='per_sample', subset=6, stops=('boundary', 'last_batch', 'mid')),
    Row('user_batch', randomness='global', subset=6, stops=('end_of_epoch', 'mid')),
    Row('torch_random', workers=2, randomness='per_sample', persistent=True, evaluate=True,
        stops=('end_of_epoch', 'mid')),
    Row('nested', randomness='global', evaluate=True, stops=('boundary', 'last_batch')),
]


@pytest.mark.parametrize('row', PATHS, ids=str)
def test_composers_paths_resume_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    assert row.composer_only
    assert run_row(row, tmp_path) == []


@pytest.mark.parametrize('row', SHAPES, ids=str)
def test_the_batch_samplers_users_write_resume_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    assert run_row(row, tmp_path) == []
