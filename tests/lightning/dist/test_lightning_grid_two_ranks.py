"""The resume grid's two-rank rows (``support/grid.py``'s ``TWO_RANK_SUBSET``) under a real Lightning ``Trainer``
(``strategy='ddp'``, gloo), on both ranks of the launch of ``tests/lightning/test_launch.py``: every rank trains the
batches of the run that never stopped and ends with its weights, and the ranks together train every sample once an
epoch."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path

import pytest
import torch.distributed as torch_dist

from support.grid import TWO_RANK_SUBSET, Row, gather, holds
from support.grid_lightning import run_row
from support.two_ranks import gloo_group, shared_folder  # noqa: F401 (gloo_group: an autouse fixture)

pytestmark = [pytest.mark.world_size(2), pytest.mark.lightning]


@pytest.mark.parametrize('row', TWO_RANK_SUBSET, ids=str)
def test_a_resumed_lightning_run_on_two_ranks_ends_as_the_run_that_never_stopped(row: Row) -> None:
    folder = shared_folder('grid')
    holds(run_row(row, folder))
