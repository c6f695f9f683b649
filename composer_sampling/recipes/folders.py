"""The save and ledger folders as Composer fills them, and what an earlier run or a crash left in them.

:func:`check_save_folders` refuses checkpoints that a resume would write over, except the one that a save cut
short left after the latest, which the runner moves aside (the decision of
:mod:`composer_sampling._checkpoint.save_folder`, which the callbacks make too).

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> recipe = load_recipe(None, ['save_folder=/nonexistent/runs/a'])
    >>> saved_after(recipe, run_folders(recipe, None, None), None) is None  # nothing to resume
    True
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from composer_sampling._checkpoint.safe_load import download_scheme
from composer_sampling._checkpoint.save_folder import (
    LATEST_NAME,
    LaterCheckpoints,
    checkpoint_time,
    describe_latest,
    first_names,
    later_checkpoints,
    later_problem,
)
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.schema import Recipe

__all__ = ['RunFolders', 'check_save_folders', 'check_writable_folder', 'earlier_checkpoints', 'fill_rank_zero',
           'rank_zero_folder', 'run_folders', 'saved_after']

#: The placeholders Composer fills in a path (``format_name_with_dist``).
PLACEHOLDERS = '{run_name}, {rank}, {local_rank}, {node_rank}, {world_size}, {local_world_size}'


def fill_rank_zero(field: str, template: str, run_name: str | None) -> str:
    """``template`` filled as Composer's ``format_name_with_dist`` fills it on rank 0; an unknown run name stays."""
    from composer.utils import dist, partial_format

    named = {} if run_name is None else {'run_name': run_name}
    try:
        return partial_format(template, rank=0, local_rank=0, node_rank=0, world_size=dist.get_world_size(),
                              local_world_size=dist.get_local_world_size(), **named)
    except (ValueError, KeyError, IndexError, AttributeError, TypeError) as error:
        raise RecipeError(f'{field} {template!r} cannot be filled as Composer fills it ({error}); its placeholders '
                          f'may be {PLACEHOLDERS}') from None


def rank_zero_folder(field: str, template: str, run_name: str | None) -> str:
    """A save folder filled for rank 0 (:func:`fill_rank_zero`), refused if Composer would read it as a URI.

    Example:
        >>> rank_zero_folder('save_folder', 'runs/{run_name}/rank{rank}', 'digits')
        'runs/digits/rank0'
    """
    from composer.utils import parse_uri

    folder = fill_rank_zero(field, template, run_name)
    backend, _, path = parse_uri(folder)
    if not backend and path != folder:
        raise RecipeError(f'{field} {template!r}: Composer reads the local path {folder!r} as a URI, and would write '
                          f"into {path!r} instead (a '#', '?' or ';' ends the path, spaces at either end are dropped); "
                          "choose a folder without '#', '?', ';' or spaces at either end")
    return folder


@dataclass(frozen=True)
class RunFolders:
    """The save and ledger folders as Composer fills them for rank 0 (``None``: not set)."""

    save: str | None
    ledger: str | None


def run_folders(recipe: Recipe, ledger_folder: str | None, run_name: str | None) -> RunFolders:
    """The run's save folder and ``ledger_folder``, each filled once (:func:`rank_zero_folder`).

    Example:
        >>> run_folders(Recipe(save_folder='s3://bucket/{run_name}'), None, 'digits')
        RunFolders(save='s3://bucket/digits', ledger=None)
    """
    save = None if recipe.save_folder is None else rank_zero_folder('save_folder', recipe.save_folder, run_name)
    ledger = None if ledger_folder is None else rank_zero_folder('the ledger folder', ledger_folder, run_name)
    return RunFolders(save, ledger)


def check_save_folders(recipe: Recipe, ledger_folder: str | None, folders: RunFolders,
                       later: LaterCheckpoints | None, field: str = 'load_path') -> None:
    """The local save and ledger folders can be written, and hold no checkpoints for a fresh run, nor any
    ``later`` than the one a resume loads unless a save cut them short (:attr:`LaterCheckpoints.interrupted`).

    ``field`` names what chose the checkpoint resumed: ``load_path``, or ``autoresume``.
    """
    for name, template, folder in (('save_folder', recipe.save_folder, folders.save),
                                   ('the ledger folder', ledger_folder, folders.ledger)):
        if folder is not None and download_scheme(folder) is None:
            check_writable_folder(name, template or folder, folder)
    kept = _local_save_folder(recipe, folders)
    if kept is None:
        return
    shown = _shown(recipe.save_folder or str(kept), str(kept))
    if recipe.load_path is None:
        names = [path.name for path in kept.iterdir()]
        refusal = earlier_checkpoints(shown, names)
        if refusal is not None and recipe.autoresume and describe_latest(kept / LATEST_NAME):
            refusal = _no_latest(shown, kept, names)
    else:
        refusal = None if later is None else later_problem(later, shown, field)  # saved_after listed the folder
    if refusal is not None:
        raise RecipeError(refusal)


def earlier_checkpoints(shown: str, names: list[str], over: str = 'write over them') -> str | None:
    """The refusal of a fresh run's save folder ``shown`` that holds checkpoints among ``names``, else ``None``."""
    earlier = sorted(name for name in names if name.endswith('.pt'))
    if not earlier:
        return None
    return (f'save_folder {shown} holds the checkpoints of an earlier run ({first_names(earlier)}); Composer would '
            f'refuse to {over}. Choose another save_folder, set save_overwrite: true to replace them, or load_path '
            'to resume')


def _no_latest(shown: str, folder: Path, names: list[str]) -> str:
    """The refusal of an autoresume whose save folder holds checkpoints but no usable link to the latest of them."""
    link = folder / LATEST_NAME
    saved = sorted((time, name) for name in names if (time := checkpoint_time(name)) is not None)
    ways = 'choose another save_folder, or set save_overwrite: true to replace them'
    if saved:
        latest = saved[-1][1]
        ways = (f'make {link.name} a link to the checkpoint to resume (ln -sfn {latest} {link}), resume with '
                f'load_path={folder / latest}, {ways}')
    found = first_names([name for _, name in saved] or sorted(name for name in names if name.endswith('.pt')))
    return (f'save_folder {shown} holds checkpoints ({found}), but {describe_latest(link)}, so autoresume finds no '
            'checkpoint to resume and this run would start from batch 0; Composer would refuse to write over them. '
            f'{ways[0].upper()}{ways[1:]}')


def check_writable_folder(field: str, template: str, folder: str) -> None:
    """``folder`` can be written or created by this process; only the part before an unknown ``{run_name}``.

    Example:
        >>> check_writable_folder('save_folder', '/proc/x', '/proc/x')
        Traceback (most recent call last):
        ...
        composer_sampling.recipes.errors.RecipeError: save_folder /proc/x cannot be created: /proc is not a folder ...
    """
    shown = _shown(template, folder)
    known, unknown, _ = folder.partition('{run_name}')
    path = Path(known) if not unknown or known.endswith('/') else Path(known).parent
    if not unknown and path.exists() and not path.is_dir():
        raise RecipeError(f'{field} {shown} is a file, not a folder; choose another {field.split()[-1]}')
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    if not existing.is_dir() or not _writable(existing):
        raise RecipeError(f'{field} {shown} cannot be created: {existing} is not a folder this process may write to')


def _local_save_folder(recipe: Recipe, folders: RunFolders) -> Path | None:
    """The save folder as a local folder that exists and is not overwritten, else ``None``: nothing in it to refuse."""
    folder = folders.save
    if folder is None or recipe.save_overwrite or download_scheme(folder) is not None or '{run_name}' in folder or \
            not Path(folder).is_dir():
        return None
    return Path(folder)


def saved_after(recipe: Recipe, folders: RunFolders, resumed_path: str | None,
                trained: Mapping[str, int] | None = None) -> LaterCheckpoints | None:
    """Rank 0's checkpoints in the save folder that Composer would refuse after loading ``resumed_path``, or ``None``.

    The fit starts where the checkpoint's own timestamp says (``trained``, its ``epoch`` and ``batch``), else where its
    name says; a file with neither is left to Composer's own check.

    Example:
        >>> saved_after(Recipe(save_folder='/nonexistent/a'), RunFolders('/nonexistent/a', None), None) is None
        True
    """
    folder = _local_save_folder(recipe, folders)
    # A resumed file that does not exist was refused by its check, or Composer downloads it: its name is all there is.
    if folder is None or resumed_path is None or recipe.load_path is None or not Path(resumed_path).exists():
        return None
    resumed = Path(resumed_path).resolve()
    start = checkpoint_time(resumed.name)
    if trained is not None and 'epoch' in trained and 'batch' in trained:
        start = (trained['epoch'], trained['batch'])
    return None if start is None else later_checkpoints(folder, start, resumed)


def _shown(template: str, folder: str) -> str:
    """A folder in a message: the template as written, and what it is for this run if that differs."""
    if '{' not in template:
        return folder
    return f'{template!r}' + (f' ({folder} for this run)' if folder != template else '')


def _writable(folder: Path) -> bool:
    """Whether a folder can be made in ``folder``: tried and removed at once, since the permission bits do not say."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix='.composer-sampling-', dir=folder))
    except OSError:
        return False
    return True
