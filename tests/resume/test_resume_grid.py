"""Every sampler graph a Composer user has resumes as if the run never stopped: the grid on one rank.

The rows cover every pair of factors (sampler graph x workers x randomness x stop),
not their full product: each sampler meets both worker settings and all three kinds
of randomness, and the stops of each row include a mid-epoch one, the last batch of
an epoch, and either Composer's checkpoint at the end of an epoch (batch interval)
or its checkpoint at the epoch boundary (epoch interval). Rows with random
augmentations drawn from the global RNG inside DataLoader workers are not bit-exact
(a worker's RNG depends on the batches it served; docs/resume.md): they compare
samples and reads only. ``tests/dist/test_resume_grid.py`` runs the grid on two ranks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.resume_harness import BATCH_SHAPES, LOADERS, Row, run_row

pytestmark = pytest.mark.composer

_END, _BOUNDARY = ('end_of_epoch', 'last_batch', 'mid'), ('boundary', 'mid')
_PAIRWISE = [name for name in LOADERS if name not in BATCH_SHAPES]


def _grid() -> list[Row]:
    rows = []
    for number, sampler in enumerate(_PAIRWISE):
        workers = (0, 2, 0) if number % 2 == 0 else (2, 0, 2)
        stops = (_END, _BOUNDARY, _END) if number % 2 == 0 else (_BOUNDARY, _END, _END)
        rows += [Row(sampler, w, randomness, s)
                 for w, randomness, s in zip(workers, ('none', 'global', 'per_sample'), stops, strict=True)]
    return rows


GRID = _grid()


def test_the_grid_covers_every_pair_of_factors() -> None:
    pairs = {(row.sampler, row.workers) for row in GRID} | {(row.sampler, row.randomness) for row in GRID}
    assert {(s, w) for s in _PAIRWISE for w in (0, 2)} <= pairs
    assert {(s, r) for s in _PAIRWISE for r in ('none', 'global', 'per_sample')} <= pairs
    assert {(row.workers, row.randomness) for row in GRID} == {(w, r) for w in (0, 2)
                                                             for r in ('none', 'global', 'per_sample')}
    for sampler in _PAIRWISE:
        assert {stop for row in GRID if row.sampler == sampler for stop in row.stops} == {
            'boundary', 'end_of_epoch', 'last_batch', 'mid'}


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
    assert run_row(row, tmp_path) == []


#: The batch samplers users write, at 0 workers (their workers see what any batch sampler's see): a
#: DistributedSampler subclass yielding whole batches (what Composer's DataSpec accepts on several ranks; SamplerSync
#: crashed at its first resume), its batches as numpy arrays or tuples, and a BatchSampler subclass that keeps torch's
#: batching (resumed by Composer's spin, loading the trained batches again, until SamplerSync knew it groups).
SHAPES = [
    Row('sharded_batches', randomness='global', stops=('mid',)),
    Row('sharded_arrays', stops=('mid',)),
    Row('sharded_tuples', randomness='per_sample', stops=('mid',)),
    Row('batch_subclass', randomness='global', stops=('mid',)),
]


@pytest.mark.parametrize('row', SHAPES, ids=str)
def test_the_batch_samplers_users_write_resume_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    assert run_row(row, tmp_path) == []
