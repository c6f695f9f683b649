"""The order state in a Hugging Face checkpoint folder: a file per rank, beside transformers' ``rng_state_{rank}.pth``.

transformers saves a callback's state (``ExportableState``) on rank 0 only, as JSON in
``trainer_state.json``; the order state belongs to every rank and holds tuples. So
every rank writes its own ``data_order_{rank}.pt`` with ``torch.save``, and a resume
reads its rank's file with ``torch.load(weights_only=True)``, or rank 0's where the
checkpoint was saved on fewer ranks.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> write_state(folder, 1, {'data_seed': 3})
    >>> read_state(folder, 1), read_state(folder, 2), read_state(tempfile.mkdtemp(), 0)
    ({'data_seed': 3}, None, None)
"""

from __future__ import annotations

import os
from typing import Any

import torch

from composer_sampling.errors import DataOrderError

__all__ = ['read_state', 'state_path', 'write_state']


def state_path(folder: str, rank: int) -> str:
    """The file of ``rank``'s order state in a checkpoint folder."""
    return os.path.join(folder, f'data_order_{rank}.pt')


def write_state(folder: str, rank: int, state: dict[str, Any]) -> None:
    """Write ``rank``'s order state into the checkpoint ``folder`` (created when missing), whole or not at all."""
    os.makedirs(folder, exist_ok=True)
    path = state_path(folder, rank)
    partial = f'{path}.partial'
    torch.save(state, partial)
    os.replace(partial, path)


def read_state(folder: str, rank: int) -> dict[str, Any] | None:
    """``rank``'s order state in ``folder``, else rank 0's (a checkpoint saved on fewer ranks), else None (saved
    without SamplerSync).

    Raises:
        DataOrderError: the file is not a checkpoint ``torch.load(weights_only=True)`` reads as a dict.
    """
    for path in (state_path(folder, rank), state_path(folder, 0)):
        if os.path.isfile(path):
            try:
                state = torch.load(path, weights_only=True, map_location='cpu')
            except Exception as error:  # a truncated or foreign file: named, with the way out
                raise DataOrderError(f'SamplerSync: {path} cannot be read with torch.load(weights_only=True) '
                                     f"({error!r:.200}); resume from a checkpoint SamplerSync saved") from None
            if not isinstance(state, dict):
                raise DataOrderError(f'SamplerSync: {path} holds a {type(state).__name__}, not the order state; '
                                     'resume from a checkpoint SamplerSync saved')
            return state
    return None
