"""The resume grid on two ranks (tests/neighbours/test_launcher.py): every rank checks its own weights and batches.

The rows are ``support/grid.py``'s ``TWO_RANK_GRID``; the Lightning and loop runners
train a subset of them on two ranks (``tests/lightning/dist``, ``tests/loop/dist``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from support.grid import TWO_RANK_GRID, Row
from support.resume_harness import run_row

pytestmark = pytest.mark.world_size(2)


@pytest.mark.parametrize('row', TWO_RANK_GRID, ids=str)
def test_a_resumed_run_on_two_ranks_ends_as_the_run_that_never_stopped(row: Row, tmp_path: Path) -> None:
    assert run_row(row, tmp_path) == []


def test_a_replicated_checkpoint_resumes_without_replication_on_the_same_samples(tmp_path: Path) -> None:
    """llm-foundry's replication 2 on two ranks, resumed with replication 1: twice the distinct samples a step."""
    from composer.utils import dist

    from support.resume_harness import fit_whole, resume_elsewhere, shared_folder

    replicated = Row('torch_distributed', stops=('mid',), replication=2)
    folder = shared_folder(tmp_path)
    whole, stops = fit_whole(replicated, folder)
    (stop,) = stops.values()
    one_group = dist.all_gather_object(whole.batches)[:1]
    assert resume_elsewhere(Row('torch_distributed', stops=('mid',)), folder, one_group, stop) == []
