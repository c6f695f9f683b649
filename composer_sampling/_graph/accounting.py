"""How one pass over the data uses the dataset across all ranks: plain numbers, no torch (``audit`` reads them).

Example:
    >>> EpochAccounting(dataset_len=10, trained=12, padded=2, dropped=0, steps=3).padded
    2
"""

from __future__ import annotations

import dataclasses

__all__ = ['EpochAccounting']


@dataclasses.dataclass(frozen=True)
class EpochAccounting:
    """How one pass over the data uses the dataset across all ranks (a data epoch, for sub-epochs)."""

    dataset_len: int
    trained: int
    padded: int
    dropped: int
    steps: int
