"""What SamplerSync remembers of a trainer's fits: the seed, graph, layout and signatures of the last fit start."""

from __future__ import annotations

import dataclasses
from typing import Any

from composer_sampling._fingerprint import Fingerprint
from composer_sampling._graph.snapshot import GraphSnapshot
from composer_sampling._resume.decide import Layout

__all__ = ['FitRecord']


@dataclasses.dataclass
class FitRecord:
    """What SamplerSync knows of the trainer's fits: the one in progress, or the last one."""

    count: int = 0  # fits started
    seed: int | None = None  # the data seed in use
    graph: GraphSnapshot | None = None  # the train dataloader's graph at the last fit start
    layout: Layout = dataclasses.field(default_factory=lambda: Layout(None, None))
    signatures: list[dict[str, Any]] | None = None
    fingerprint: Fingerprint | None = None  # the train dataset's, agreed by every rank
    epoch_set: int | None = None  # the epoch fit start set on the graph, until EPOCH_START
    took_over_spin: bool = False  # this callback set dataset_resumption['train'] (a later fit decides afresh)
