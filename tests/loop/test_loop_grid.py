"""The resume grid (``support/grid.py``) under a loop written by hand on ``DataOrder``, on one process.

Every row of the grid that a loop can have, the same rows Composer's grid trains
(``tests/resume/test_resume_grid.py``): each resumed run trains the batches of the run
that never stopped, ends with its weights and optimizer state with dropout, and loads
no sample trained before its checkpoint. Two ranks are ``tests/loop/dist``'s.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.grid import GRID, SHAPES, Row, holds
from support.grid_loop import run_row


@pytest.mark.parametrize('row', [*GRID, *SHAPES], ids=str)
def test_a_resumed_loop_ends_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    holds(run_row(row, tmp_path))
