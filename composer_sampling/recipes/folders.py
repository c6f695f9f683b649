"""The save and ledger folders as Composer fills them, and what an earlier run or a crash left in them.

:func:`check_save_folders` refuses checkpoints that a resume would write over, except the one that a save cut
short left after the latest, which the runner moves aside.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> recipe = load_recipe(None, ['save_folder=/nonexistent/runs/a'])
    >>> later_checkpoints(recipe, run_folders(recipe, None, None), None) is None  # nothing to resume
    True
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from composer_sampling._checkpoint.safe_load import download_scheme
from composer_sampling.recipes.cut_short import cut_short, describe_file
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.schema import Recipe

__all__ = ['CHECKPOINT_PATTERN', 'LATEST_NAME', 'LaterCheckpoints', 'RunFolders', 'check_save_folders',
           'check_writable_folder', 'checkpoint_time', 'earlier_checkpoints', 'fill_rank_zero', 'first_names',
           'later_checkpoints', 'later_names', 'rank_zero_folder', 'run_folders']

#: Rank 0's checkpoint names as Composer matches them (``ensure_folder_has_no_conflicting_files``), and its link to
#: the latest; the runner keeps Composer's default names.
CHECKPOINT_PATTERN = re.compile(r'^ep(?P<epoch>\d+)-ba(?P<batch>\d+)-rank0.pt$')
LATEST_NAME = 'latest-rank0.pt'
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
                       later: LaterCheckpoints | None) -> None:
    """The local save and ledger folders can be written, and hold no checkpoints for a fresh run, nor any
    ``later`` than the one a resume loads unless a save cut them short (:attr:`LaterCheckpoints.interrupted`)."""
    for field, template, folder in (('save_folder', recipe.save_folder, folders.save),
                                    ('the ledger folder', ledger_folder, folders.ledger)):
        if folder is not None and download_scheme(folder) is None:
            check_writable_folder(field, template or folder, folder)
    kept = _local_save_folder(recipe, folders)
    if kept is None:
        return
    shown = _shown(recipe.save_folder or str(kept), str(kept))
    if recipe.load_path is None:
        refusal = earlier_checkpoints(shown, [path.name for path in kept.iterdir()])
    else:
        refusal = _later_problem(later, shown)  # later_checkpoints listed the folder already
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


def _later_problem(later: LaterCheckpoints | None, shown: str) -> str | None:
    """The refusal of checkpoints later than the one a resume loads, unless a save cut them short, else ``None``."""
    if later is None or not later.files or later.interrupted:
        return None
    if later.latest:
        found = first_names([describe_file(path) for path in later.files])
        return (f'save_folder {shown} holds {found} after {later.resumed.name}, the latest checkpoint, which this run '
                'resumes. A run that stopped while saving leaves at most the one checkpoint it was writing, cut short '
                '(0 bytes, or a zip without its end record); these were written by a run that went on, or by another '
                'run, and this run would write them again (Composer refuses to write over them). Move them out of '
                'the folder to keep them, choose another save_folder, or set save_overwrite: true to replace them')
    link, latest = later.link, ''
    ways = 'choose another save_folder for this run, or set save_overwrite: true to replace them'
    if link.is_symlink() and link.exists() and link.resolve().parent == link.parent.resolve():
        ways = f"resume from the folder's latest (load_path={link}), {ways}"
    elif link.is_symlink():
        target = 'which does not exist' if not link.exists() else 'outside the folder'
        latest = f' ({link.name} links to {os.readlink(link)}, {target})'
    elif link.exists():
        latest = (f' ({link.name} is a plain file, not a link, as a copy made with cp -L or rsync leaves it: which '
                  'checkpoint is the latest cannot be told)')
    return (f'save_folder {shown} holds {first_names([path.name for path in later.files])}, checkpoints later than '
            f'the one load_path resumes ({later.resumed.name}){latest}, which this run would write again; Composer '
            f'refuses to write over them. {ways[0].upper()}{ways[1:]}')


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


@dataclass(frozen=True)
class LaterCheckpoints:
    """The checkpoints of the save folder later than the one a resume loads (Composer refuses to start over them)."""

    resumed: Path  # the file load_path names, links followed
    link: Path  # the save folder's link to its latest checkpoint (rank 0's)
    latest: bool  # whether the resumed checkpoint is the one that link points to, in this folder
    files: list[Path]

    @property
    def interrupted(self) -> bool:
        """Whether the files are one checkpoint cut short after the latest one, which the run resumes."""
        return self.latest and len(self.files) == 1 and cut_short(self.files[0])


def later_checkpoints(recipe: Recipe, folders: RunFolders, resumed_path: str | None) -> LaterCheckpoints | None:
    """Rank 0's checkpoints in the save folder that Composer would refuse after loading ``resumed_path``, or ``None``.

    Example:
        >>> later_checkpoints(Recipe(save_folder='/nonexistent/a'), RunFolders('/nonexistent/a', None), None) is None
        True
    """
    folder = _local_save_folder(recipe, folders)
    # A resumed file that does not exist was refused by its check, or Composer downloads it: its name is all there is.
    if folder is None or resumed_path is None or recipe.load_path is None or not Path(resumed_path).exists():
        return None
    resumed = Path(resumed_path).resolve()
    if checkpoint_time(resumed.name) is None:
        return None
    link = folder / LATEST_NAME
    latest = link.is_symlink() and link.resolve() == resumed and resumed.parent == folder.resolve()
    later = later_names([path.name for path in folder.iterdir()], resumed.name)
    return LaterCheckpoints(resumed, link, latest, [folder / name for name in later])


def checkpoint_time(name: str) -> tuple[int, int] | None:
    """The epoch and batch of rank 0's checkpoint ``name``, or ``None`` for another file."""
    found = CHECKPOINT_PATTERN.match(name)
    return None if found is None else (int(found['epoch']), int(found['batch']))


def later_names(names: list[str], resumed: str) -> list[str]:
    """The rank 0 checkpoints of ``names`` later than the checkpoint named ``resumed``, in order.

    Example:
        >>> later_names(['ep0-ba2-rank0.pt', 'ep1-ba4-rank0.pt', 'ep1-ba4-rank1.pt', 'latest-rank0.pt.symlink'],
        ...             'ep0-ba2-rank0.pt')
        ['ep1-ba4-rank0.pt']
    """
    start = checkpoint_time(resumed)
    if start is None:
        return []
    later = [(time, name) for name in names
             if (time := checkpoint_time(name)) is not None and (time[0] > start[0] or time[1] > start[1])]
    return [name for _, name in sorted(later)]


def _shown(template: str, folder: str) -> str:
    """A folder in a message: the template as written, and what it is for this run if that differs."""
    if '{' not in template:
        return folder
    return f'{template!r}' + (f' ({folder} for this run)' if folder != template else '')


def first_names(names: list[str]) -> str:
    """The first three of ``names``, and ``...`` when there are more."""
    return ', '.join(names[:3]) + (', ...' if len(names) > 3 else '')


def _writable(folder: Path) -> bool:
    """Whether a folder can be made in ``folder``: tried and removed at once, since the permission bits do not say."""
    try:
        os.rmdir(tempfile.mkdtemp(prefix='.composer-sampling-', dir=folder))
    except OSError:
        return False
    return True
