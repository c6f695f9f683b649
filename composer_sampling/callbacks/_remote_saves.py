"""Where a fit starts, against the checkpoints its save folder in an object store already holds.

Composer uploads checkpoints into a remote save folder without looking at what is
there, and its autoresume decides where to start before any callback runs:

* it takes ``latest-rank0.pt`` under the save folder read as a local path (for
  ``s3://bucket/run``, the file ``./s3:/bucket/run/latest-rank0.pt``, the copy it
  downloaded the last time the run resumed) before the bucket's latest, so a third
  start resumes from the second start's checkpoint;
* it finds nothing when the bucket holds checkpoints but not the
  ``latest-rank0.pt.symlink`` pointer (a run killed before Composer uploaded it), and
  starts from batch 0.

Either way the run trains batches the bucket already holds, then fails at its first
upload with ``FileExistsError``, its ledger beside the earlier one's. On any entry
point (Composer's ``Trainer``, llm-foundry's ``train_from_yaml``, the recipe runner),
:func:`remote_start_problem` compares, on rank 0 at fit start, the batch the fit
starts at with the rank-0 checkpoints the save folder holds, and names the stale
local copy or the missing pointer, and the fix. ``save_overwrite`` turns it off, as it
lets Composer upload over them.

Example:
    >>> later_checkpoints(['ep0-ba2-rank0.pt', 'ep1-ba6-rank0.pt', 'ep1-ba6-rank1.pt', 'x.pt'], batch=3)
    ['ep1-ba6-rank0.pt']
"""

from __future__ import annotations

import os
import re
from typing import Any

__all__ = ['later_checkpoints', 'remote_start_problem', 'shared_start_problem']

#: Rank 0's checkpoint names as Composer's default ``save_filename`` writes them.
_CHECKPOINT = re.compile(r'^ep(?P<epoch>\d+)-ba(?P<batch>\d+)-rank0\.pt$')


def later_checkpoints(names: list[str], batch: int) -> list[str]:
    """The rank-0 checkpoints of ``names`` written after global batch ``batch``, in training order."""
    found = [(int(match['batch']), name) for name in names if (match := _CHECKPOINT.match(name))]
    return [name for number, name in sorted(found) if number > batch]


def _saver(state: Any) -> Any:
    """Composer's ``CheckpointSaver`` of the Trainer (the first), or ``None``."""
    from composer.callbacks import CheckpointSaver

    return next((callback for callback in state.callbacks if isinstance(callback, CheckpointSaver)), None)


def remote_start_problem(state: Any) -> str | None:
    """On rank 0: why this fit must not start, given what its remote save folder holds, else ``None``.

    Only a saver that uploads into an object store without ``save_overwrite`` is looked
    at; a store that cannot be listed is left to Composer.
    """
    from composer.utils import format_name_with_dist

    from composer_sampling._stores.remote import RemoteError, object_store_of, resolve_pointers, split_uri

    saver = _saver(state)
    uploader = getattr(saver, 'remote_uploader', None)
    if saver is None or uploader is None or saver.overwrite:
        return None
    folder = format_name_with_dist(str(uploader.remote_folder), state.run_name).rstrip('/')
    try:
        store = object_store_of(folder)
        key = split_uri(folder)[2].strip('/')
        prefix = f'{key}/' if key else ''
        names = [name[len(prefix):] for name in store.list_objects(prefix) if name.startswith(prefix)]
    except (RemoteError, NotImplementedError):
        return None
    except Exception:  # a store that fails to list: Composer's upload will say why
        return None
    batch = int(state.timestamp.batch)
    later = later_checkpoints([name for name in names if '/' not in name], batch)
    if not later:
        return None
    shown = ', '.join(later[:3]) + (', ...' if len(later) > 3 else '')
    pointer = 'latest-rank0.pt.symlink'
    if batch == 0 and pointer not in names:
        return (f'the save folder {folder} holds checkpoints ({shown}) but no {pointer} pointer to the latest (a run '
                'killed before Composer uploaded it), so autoresume found nothing and this fit starts from batch 0; '
                'Composer would train those batches again and refuse to upload over them. Resume with '
                f'load_path={folder}/{later[-1]}, choose another save_folder, or set save_overwrite: true to replace '
                'them')
    local = os.path.abspath(os.path.join(folder, 'latest-rank0.pt'))
    try:
        latest = resolve_pointers(store, f'{prefix}{pointer}', f'{folder}/{pointer}').rsplit('/', 1)[-1]
    except RemoteError:
        latest = later[-1]
    if batch > 0 and os.path.exists(local):
        return (f'this fit resumes at batch {batch}, from {local}, a copy Composer downloaded when the run last '
                f'resumed (its autoresume takes a local copy before the bucket\'s), but the save folder {folder} holds '
                f'later checkpoints ({shown}; its latest is {latest}); Composer would train those batches again and '
                f'refuse to upload over them. Delete {os.path.dirname(local)} (the stale copy) and start again, or '
                f'resume with load_path={folder}/{latest}')
    return (f'this fit starts at batch {batch}, but the save folder {folder} holds later checkpoints ({shown}; its '
            f'latest is {latest}); Composer would train those batches again and refuse to upload over them. Resume '
            f'with load_path={folder}/{latest}, choose another save_folder, or set save_overwrite: true to replace '
            'them')


def shared_start_problem(state: Any) -> str | None:
    """:func:`remote_start_problem` of rank 0, handed to every rank (a broadcast, made only when the Trainer saves
    into an object store without ``save_overwrite``: every rank knows that alike)."""
    from composer.utils import dist

    saver = _saver(state)
    if saver is None or getattr(saver, 'remote_uploader', None) is None or saver.overwrite:
        return None
    problem = remote_start_problem(state) if dist.get_global_rank() == 0 else None
    if dist.get_world_size() > 1:
        shared: list[Any] = [problem]
        dist.broadcast_object_list(shared, src=0)
        problem = shared[0]
    return problem
