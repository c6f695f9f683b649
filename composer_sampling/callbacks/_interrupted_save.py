"""A checkpoint that a run killed while saving left in its local save folder, set aside on every entry point.

Composer's ``CheckpointSaver`` checks its folder in its own ``fit_start``
(``ensure_folder_has_no_conflicting_files``): a checkpoint later than the fit's
timestamp stops the run with ``FileExistsError: ... may conflict with a future
checkpoint``. A run killed while it saved leaves one such file, cut short, after the
checkpoint that ``latest-rank0.pt`` links to. ``Trainer(..., autoresume=True)``, which
llm-foundry's ``train_from_yaml`` builds too, resumes from that latest checkpoint and then
stops there at every start until someone deletes the file.

``Trainer.__init__`` fires ``Event.INIT``, then finds autoresume's checkpoint and loads
it; ``fit()`` then fires ``Event.FIT_START`` to the callbacks in the order of
``state.callbacks``, where the Trainer appends the saver that it builds from
``save_folder`` after the callbacks it was given. So the first of ``SamplerSync`` and
``SampleLedger`` in ``state.callbacks`` acts for both:

* :func:`set_aside_at_fit_start`, at its ``fit_start`` when the saver comes after it:
  rank 0 makes the recipe runner's decision
  (:mod:`composer_sampling._checkpoint.save_folder`) and moves that one file into a new
  ``interrupted-N`` folder; anything else is left to Composer's own check.
* :func:`refuse_at_init`, at its ``init`` when the saver comes before it (a
  ``CheckpointSaver`` given in ``callbacks`` ahead of it): Composer would check before any
  ``fit_start`` of ours, so every rank refuses such a folder, naming the file and the move
  that fixes it, and moves nothing.

Only Composer's default file names (``ep{epoch}-ba{batch}-rank{rank}.pt`` and
``latest-rank{rank}.pt``) are looked at, and nothing with ``save_overwrite``.

Example:
    >>> from composer_sampling.callbacks.sampler_sync import SamplerSync
    >>> _ours(SamplerSync()), _ours(object())
    (True, False)
"""

from __future__ import annotations

import contextlib
import itertools
from pathlib import Path
from typing import Any

from composer.core import State
from composer.utils import dist, format_name_with_dist, parse_uri

from composer_sampling._checkpoint.save_folder import (
    LATEST_NAME,
    checkpoint_time,
    describe_file,
    later_checkpoints,
    set_aside_interrupted,
)
from composer_sampling.errors import DataOrderError

__all__ = ['refuse_at_init', 'set_aside_at_fit_start']

#: The modules of the callbacks that check the save folder: the first of them in the Trainer's callbacks acts.
_OURS = ('composer_sampling.callbacks.sampler_sync', 'composer_sampling.callbacks.sample_ledger')
#: Composer's default names of a checkpoint and of the link to the latest, the only ones looked at.
_NAMES = ('ep{epoch}-ba{batch}-rank{rank}.pt', 'latest-rank{rank}.pt')


def _ours(callback: Any) -> bool:
    """Whether ``callback`` is a ``SamplerSync`` or a ``SampleLedger`` (or a subclass of either)."""
    return any(klass.__module__ in _OURS for klass in type(callback).__mro__)


def _saver_order(state: State, callback: Any) -> tuple[Any, bool] | None:
    """The saver whose folder to look at, and whether it checks its folder before ``callback`` acts; ``None`` when
    ``callback`` is not the first of ours, or there is no saver with Composer's default names and no
    ``save_overwrite``. Every rank finds the same."""
    from composer.callbacks import CheckpointSaver

    callbacks = list(state.callbacks)
    saver = next((each for each in callbacks if isinstance(each, CheckpointSaver)), None)
    first = next((each for each in callbacks if _ours(each)), None)
    if saver is None or saver.overwrite or first is not callback or saver.latest_filename is None or \
            (saver.filename.filename, saver.latest_filename.filename) != _NAMES:
        return None
    index = {id(each): k for k, each in enumerate(callbacks)}
    return saver, index[id(saver)] < index[id(callback)]


def _folder(state: State, saver: Any) -> Path | None:
    """Rank 0's local save folder, when it exists."""
    folder = Path(format_name_with_dist(saver.folder, state.run_name))
    return folder if folder.is_dir() else None


def _loaded_file(state: State) -> Path | None:
    """The local file the Trainer loaded (``load_path``, or the checkpoint autoresume found), or ``None``."""
    path = state.load_path
    if path is None or parse_uri(path)[0]:
        return None
    candidates = [path]
    with contextlib.suppress(ValueError, KeyError, IndexError, AttributeError):  # as Composer formats it to load
        candidates.append(format_name_with_dist(path, state.run_name))
    return next((Path(each) for each in candidates if Path(each).is_file()), None)


def set_aside_at_fit_start(state: State, callback: Any) -> None:
    """At ``callback``'s ``fit_start``, before the saver's check: on rank 0, move the one checkpoint that a save cut
    short left after the latest checkpoint, which this fit resumes, into ``interrupted-N``, as the recipe runner does.

    Nothing else is moved; what Composer refuses otherwise, it refuses with its own message.
    """
    found = _saver_order(state, callback)
    if found is None or found[1] or dist.get_global_rank() != 0:
        return
    folder = _folder(state, found[0])
    if folder is None:
        return
    start = (int(state.timestamp.epoch), int(state.timestamp.batch))
    set_aside_interrupted(later_checkpoints(folder, start, _loaded_file(state)))


def refuse_at_init(state: State, callback: Any) -> None:
    """At ``callback``'s ``init``, where the saver checks its folder before ``callback``'s ``fit_start``: refuse, on
    every rank, a save folder that holds a checkpoint cut short after its latest one, naming the file and the move.

    Raises:
        DataOrderError: the folder holds what a run killed while saving left, and ``callback`` comes too late to
            set it aside.
    """
    found = _saver_order(state, callback)
    if found is None or not found[1]:
        return
    problem = _cut_short_problem(state, found[0], type(callback).__name__) if dist.get_global_rank() == 0 else None
    if dist.get_world_size() > 1:
        shared: list[Any] = [problem]
        dist.broadcast_object_list(shared, src=0)
        problem = shared[0]
    if problem is not None:
        raise DataOrderError(problem)


def _cut_short_problem(state: State, saver: Any, name: str) -> str | None:
    """Rank 0's refusal of a save folder that holds a checkpoint cut short after the latest one, else ``None``."""
    folder = _folder(state, saver)
    link = None if folder is None else folder / LATEST_NAME
    if folder is None or link is None or not link.is_symlink() or not link.exists():
        return None
    start = checkpoint_time(link.resolve().name)
    later = None if start is None else later_checkpoints(folder, start, link)
    if later is None or not later.interrupted:
        return None
    (path,) = later.files
    aside = next(folder / f'interrupted-{k}' for k in itertools.count(1) if not (folder / f'interrupted-{k}').exists()
                 and not (folder / f'interrupted-{k}').is_symlink())
    return (f'{name}: save_folder {folder} holds {describe_file(path)} after {link.resolve().name}, the latest '
            'checkpoint, as a run killed while saving leaves it. The CheckpointSaver comes before '
            f"{name} in the Trainer's callbacks, so Composer checks the folder before {name} can set that file "
            'aside, and would refuse to start (FileExistsError). Move the file out of the folder, then start again: '
            f'mkdir {aside} && mv {path} {aside}/ (with {name} listed before the CheckpointSaver, it moves such a '
            'file itself)')
