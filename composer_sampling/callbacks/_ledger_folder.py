"""Where :class:`~composer_sampling.SampleLedger` writes: its folder, or the ledger folder of the Trainer's saver."""

from __future__ import annotations

from typing import Any

from composer.core import State
from composer.utils import dist

__all__ = ['ledger_folder', 'saver_of']


def saver_of(state: State) -> Any:
    """The Trainer's ``CheckpointSaver`` (the first one, as the Trainer takes it), or ``None``."""
    from composer.callbacks import CheckpointSaver

    return next((callback for callback in state.callbacks if isinstance(callback, CheckpointSaver)), None)


def ledger_folder(folder: str | None, state: State, saver: Any) -> str:
    """The ledger folder, with its placeholders filled for rank 0: a local path or a URI.

    ``folder`` is the folder given to the callback; when it is ``None``, the folder is
    ``ledger/`` in the save folder of ``saver``, or in its remote folder when it uploads.
    """
    if folder is None:
        if saver is None:
            raise ValueError('SampleLedger has no folder: give the Trainer a save_folder (the ledger goes to '
                             '{save_folder}/ledger) or pass SampleLedger(folder=...)')
        uploader = getattr(saver, 'remote_uploader', None)  # a remote save folder: saver.folder is its staging
        base = str(saver.folder) if uploader is None else str(uploader.remote_folder)
        folder = f'{base.rstrip("/")}/ledger'
    from composer.utils import partial_format

    return partial_format(folder, run_name=state.run_name, rank=0, local_rank=0, node_rank=0,
                          world_size=dist.get_world_size(), local_world_size=dist.get_local_world_size())
