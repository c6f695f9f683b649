"""The states of every rank in a Hugging Face checkpoint folder: a file per rank and owner, beside transformers'
``rng_state_{rank}.pth``.

transformers saves a callback's state (``ExportableState``) on rank 0 only, as JSON in
``trainer_state.json``; the states of the order and of the ledger belong to every rank, and
the order state holds tuples. So every rank writes its own files with ``torch.save``:
``data_order_{rank}.pt`` for ``SamplerSync`` and ``sample_ledger_{rank}.pt`` for
``SampleLedger``. A resume reads its rank's file with ``torch.load(weights_only=True)``,
or rank 0's where the checkpoint was saved on fewer ranks.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> write_state(folder, 1, {'data_seed': 3})
    >>> read_state(folder, 1), read_state(folder, 2), read_state(tempfile.mkdtemp(), 0)
    ({'data_seed': 3}, None, None)
    >>> write_state(folder, 0, {'lineage': 'l'}, LEDGER)
    >>> read_state(folder, 0, LEDGER)
    {'lineage': 'l'}
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import torch

from composer_sampling.errors import DataOrderError

__all__ = ['LEDGER', 'ORDER', 'StateFile', 'read_state', 'state_path', 'write_state']


class StateFile(NamedTuple):
    """The files of one owner's state: ``{stem}_{rank}.pt``, written by the callback ``owner``."""

    stem: str
    owner: str


#: The order state of ``SamplerSync``.
ORDER = StateFile('data_order', 'SamplerSync')
#: The lineage, attempt and last batch of ``SampleLedger``.
LEDGER = StateFile('sample_ledger', 'SampleLedger')


def state_path(folder: str, rank: int, kind: StateFile = ORDER) -> str:
    """The file of ``rank``'s state of ``kind`` in a checkpoint folder."""
    return os.path.join(folder, f'{kind.stem}_{rank}.pt')


def write_state(folder: str, rank: int, state: dict[str, Any], kind: StateFile = ORDER) -> None:
    """Write ``rank``'s state of ``kind`` into the checkpoint ``folder`` (created when missing), whole or not at all."""
    os.makedirs(folder, exist_ok=True)
    path = state_path(folder, rank, kind)
    partial = f'{path}.partial'
    torch.save(state, partial)
    os.replace(partial, path)


def read_state(folder: str, rank: int, kind: StateFile = ORDER) -> dict[str, Any] | None:
    """``rank``'s state of ``kind`` in ``folder``, else rank 0's (a checkpoint saved on fewer ranks), else None (saved
    without that callback).

    Raises:
        DataOrderError: the file is not a checkpoint ``torch.load(weights_only=True)`` reads as a dict.
    """
    for path in (state_path(folder, rank, kind), state_path(folder, 0, kind)):
        if os.path.isfile(path):
            try:
                state = torch.load(path, weights_only=True, map_location='cpu')
            except Exception as error:  # a truncated or foreign file: named, with the way out
                raise DataOrderError(f'{kind.owner}: {path} cannot be read with torch.load(weights_only=True) '
                                     f'({error!r:.200}); resume from a checkpoint {kind.owner} saved') from None
            if not isinstance(state, dict):
                raise DataOrderError(f'{kind.owner}: {path} holds a {type(state).__name__}, not the {kind.owner} '
                                     f'state; resume from a checkpoint {kind.owner} saved')
            return state
    return None
