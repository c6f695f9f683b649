"""The save and ledger folders as Composer fills them, what an earlier run left there, and what a crash left.

:func:`check_save_folders` is the refusal ``train`` makes before its summary;
:func:`interrupted_saves` finds the checkpoints a save cut short left after the one
a resume loads, which the runner moves aside (``set_aside_interrupted_saves``).
Composer is imported only to fill a folder's placeholders with its own function.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> interrupted_saves(load_recipe(None, ['save_folder=runs/a'])) is None  # nothing to resume
    True
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from composer_sampling._checkpoint.safe_load import CheckpointError, composer_load_path, download_scheme
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.run_fields import composer_run_name
from composer_sampling.recipes.schema import Recipe

__all__ = ['CHECKPOINT_NAME', 'LATEST_NAME', 'LaterCheckpoints', 'check_save_folders', 'checkpoint_pattern',
           'interrupted_saves', 'rank_zero_folder']

#: The names Composer's Trainer gives checkpoints and the link to the latest (the runner keeps its defaults).
CHECKPOINT_NAME = 'ep{epoch}-ba{batch}-rank{rank}.pt'
LATEST_NAME = 'latest-rank{rank}.pt'
#: The placeholders Composer fills in ``save_folder`` (``format_name_with_dist``).
SAVE_FOLDER_FIELDS = ('run_name', 'rank', 'local_rank', 'node_rank', 'world_size', 'local_world_size')


def rank_zero_folder(field: str, template: str, run_name: str | None) -> str:
    """``template`` filled as Composer fills a save folder on rank 0 (a ``{run_name}`` not known yet is left in).

    Example:
        >>> rank_zero_folder('save_folder', 'runs/{run_name}/rank{rank}', 'digits')
        'runs/digits/rank0'
    """
    from composer.utils import dist, partial_format

    values: dict[str, Any] = {'rank': 0, 'local_rank': 0, 'node_rank': 0, 'world_size': dist.get_world_size(),
                              'local_world_size': dist.get_local_world_size()}
    if run_name is not None:
        values['run_name'] = run_name
    try:
        return partial_format(template, **values)
    except (ValueError, AttributeError, TypeError, IndexError) as error:
        fields = ', '.join('{' + name + '}' for name in SAVE_FOLDER_FIELDS)
        raise RecipeError(f'{field} {template!r} cannot be filled as Composer fills it ({error}); its placeholders '
                          f'may be {fields}') from None


def check_save_folders(recipe: Recipe, ledger_folder: str | None) -> None:
    """The save and ledger folders can be written, and the run would not write over an earlier run's checkpoints.

    Each folder is checked as Composer fills its placeholders for this run's rank 0
    (the part before an unknown ``{run_name}`` only). A fresh run refuses a save folder
    that holds checkpoints; a resume refuses one that holds checkpoints later than
    the one it loads, unless that one is the folder's latest (then they are what a run
    that stopped while saving left: :func:`interrupted_saves`). Nothing is left behind:
    a folder is made in the nearest existing folder and removed, to see that one can be.
    """
    run_name = composer_run_name(recipe)
    for field, template in (('save_folder', recipe.save_folder), ('the ledger folder', ledger_folder)):
        if template is None or download_scheme(template) is not None:
            continue
        folder = rank_zero_folder(field, template, run_name)
        shown = _shown(template, folder)
        known, unknown, _ = folder.partition('{run_name}')  # the run is named when Composer starts
        path = Path(known) if not unknown or known.endswith('/') else Path(known).parent
        if not unknown and path.exists() and not path.is_dir():
            raise RecipeError(f'{field} {shown} is a file, not a folder; choose another {field.split()[-1]}')
        existing = next(parent for parent in (path, *path.parents) if parent.exists())
        if not existing.is_dir() or not _writable(existing):
            raise RecipeError(f'{field} {shown} cannot be created: {existing} is not a folder this process may '
                              'write to')
    save = recipe.save_folder
    if save is None or recipe.save_overwrite or download_scheme(save) is not None:
        return
    folder = rank_zero_folder('save_folder', save, run_name)
    shown = _shown(save, folder)
    if '{run_name}' in folder or not Path(folder).is_dir():
        return
    if recipe.load_path is None:
        earlier = sorted(path.name for path in Path(folder).glob('*.pt'))
        if earlier:
            raise RecipeError(f'save_folder {shown} holds the checkpoints of an earlier run ({_names(earlier)}); '
                              'Composer would refuse to write over them. Choose another save_folder, set '
                              'save_overwrite: true to replace them, or load_path to resume')
        return
    later = _later_checkpoints(recipe, Path(folder))
    if later is not None and not later.latest and later.files:
        ways = ['choose another save_folder for this run', 'set save_overwrite: true to replace them']
        if later.link.is_symlink():
            ways.insert(0, f"resume from the folder's latest (load_path={later.link})")
        raise RecipeError(f'save_folder {shown} holds {_names([path.name for path in later.files])}, checkpoints '
                          f'later than the one load_path resumes ({later.resumed.name}), which this run would write '
                          f'again; Composer refuses to write over them. {ways[0][0].upper()}{ways[0][1:]}, '
                          f'{", ".join(ways[1:-1]) + ", " if len(ways) > 2 else ""}or {ways[-1]}')


@dataclass(frozen=True)
class LaterCheckpoints:
    """The checkpoints of the save folder later than the one a resume loads (Composer refuses to start over them)."""

    resumed: Path  # the file load_path names, links followed
    link: Path  # the save folder's link to its latest checkpoint (rank 0's)
    latest: bool  # whether the resumed checkpoint is the one that link points to
    files: list[Path]


def interrupted_saves(recipe: Recipe) -> LaterCheckpoints | None:
    """What a run that stopped while saving left in the save folder of the run that resumes it, or ``None``.

    When ``load_path`` is the save folder's latest checkpoint, a checkpoint file later
    than it can only be one whose writing was cut short (a crash, a full disk: the
    link to the latest is updated after the file is written), or, if the crash came
    between the two, one whose link was never made. The runner moves them aside.
    """
    if recipe.save_folder is None or recipe.load_path is None or recipe.save_overwrite or \
            download_scheme(recipe.save_folder) is not None:
        return None
    folder = rank_zero_folder('save_folder', recipe.save_folder, composer_run_name(recipe))
    if '{run_name}' in folder or not Path(folder).is_dir():
        return None
    later = _later_checkpoints(recipe, Path(folder))
    return later if later is not None and later.latest and later.files else None


def _later_checkpoints(recipe: Recipe, folder: Path) -> LaterCheckpoints | None:
    """The checkpoints in ``folder`` Composer's ``CheckpointSaver`` would refuse at fit start after loading
    ``load_path`` (rank 0's files: the only ones a single-file checkpoint writes); ``None`` if it cannot be told."""
    load_path = recipe.load_path
    try:
        resumed = Path(composer_load_path(load_path, composer_run_name(recipe))) if load_path else None
    except CheckpointError:  # refused with the checkpoint's check
        return None
    if resumed is None:
        return None
    if download_scheme(str(resumed)) is not None or not resumed.exists():
        return None  # refused with the checkpoint's check, or downloaded by Composer: its name is all there is
    pattern = checkpoint_pattern()
    found = pattern.match(resumed.resolve().name)
    if found is None:  # not named as Composer names its checkpoints: its timestamp is not known here
        return None
    epoch, batch = int(found['epoch']), int(found['batch'])
    later = []
    for path in folder.iterdir():
        match = pattern.match(path.name)
        if match is not None and (int(match['epoch']) > epoch or int(match['batch']) > batch):
            later.append((int(match['epoch']), int(match['batch']), path))
    link = folder / LATEST_NAME.format(rank=0)
    latest = link.is_symlink() and link.resolve() == resumed.resolve()
    return LaterCheckpoints(resumed.resolve(), link, latest, [path for *_, path in sorted(later)])


def checkpoint_pattern() -> re.Pattern[str]:
    """Composer's pattern for rank 0's checkpoint names (``ensure_folder_has_no_conflicting_files``)."""
    pattern = f'^{CHECKPOINT_NAME}$'.replace('{epoch}', '(?P<epoch>\\d+)').replace('{batch}', '(?P<batch>\\d+)')
    return re.compile(pattern.replace('{rank}', '0'))


def _shown(template: str, folder: str) -> str:
    """A folder in a message: the template as written, and what it is for this run if that differs."""
    if '{' not in template:
        return folder
    return f'{template!r}' + (f' ({folder} for this run)' if folder != template else '')


def _names(names: list[str]) -> str:
    return ', '.join(names[:3]) + (', ...' if len(names) > 3 else '')


def _writable(folder: Path) -> bool:
    """Whether a folder can be made in ``folder`` (tried, and removed at once: the permission bits do not say it)."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix='.composer-sampling-', dir=folder))
    except OSError:
        return False
    return True
