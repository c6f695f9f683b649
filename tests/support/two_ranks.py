"""What a test that runs on each of two ranks of a torchrun launch needs, without a trainer's own helpers: torch's
gloo group, every rank's value of something, and a folder both ranks name alike.

A test module takes the group by importing :func:`gloo_group`, an autouse fixture
(``from support.two_ranks import gloo_group  # noqa: F401``).
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import torch.distributed as torch_dist


@pytest.fixture(autouse=True)
def gloo_group() -> None:
    """The gloo group torchrun's environment describes, started before the first fit (a trainer then takes it). A
    collective whose peer has failed raises after two minutes instead of gloo's default of thirty."""
    if not torch_dist.is_initialized():
        torch_dist.init_process_group('gloo', timeout=timedelta(minutes=2))


def gathered(value: Any) -> list[Any]:
    """``value`` of every rank, in rank order."""
    found: list[Any] = [None] * torch_dist.get_world_size()
    torch_dist.all_gather_object(found, value)
    return found


def shared_folder(name: str) -> Path:
    """A folder both ranks name alike: rank 0's new temporary folder, told to rank 1."""
    made = tempfile.mkdtemp(prefix=f'{name}-') if int(os.environ['RANK']) == 0 else None
    return Path(gathered(made)[0])
