"""A loop written by hand on two ranks with DataOrder (torchrun, gloo, DistributedDataParallel): each test runs on both
ranks, launched with the Lightning tests by tests/lightning/test_launch.py, and gathers what every rank trained."""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as torch_dist

from support.loop_parts import KINDS, loader, run, same_weights
from support.two_ranks import gloo_group, gathered, shared_folder  # noqa: F401 (gloo_group: an autouse fixture)

pytestmark = pytest.mark.world_size(2)


@pytest.mark.parametrize('workers', [0, 2])
@pytest.mark.parametrize('kind', KINDS)
def test_a_two_rank_loop_resumes_bit_for_bit(kind: str, workers: int) -> None:
    """64 samples, 8 a rank a batch: 4 batches an epoch. Stopped right after step 6 (epoch 1, batch 2) and resumed:
    every rank trains the batches of the run that never stopped and ends with its weights and momentum, dropout on;
    every sample once an epoch across the ranks."""
    checkpoint = shared_folder('loop') / 'step6.pt'
    whole = run(loader(kind, workers), 10)
    run(loader(kind, workers), 10, save_at=6, checkpoint=checkpoint)
    resumed = run(loader(kind, workers), 10, resume=checkpoint)
    assert resumed.trained == whole.trained[6:]
    assert gathered(same_weights(whole, resumed)) == [True, True]
    epochs: dict[int, list[int]] = {}
    for rank in gathered(whole.trained):
        for epoch, indices in rank:
            epochs.setdefault(epoch, []).extend(indices)
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(64))
