"""``autoresume: true``: the checkpoint Composer's autoresume would pick, found first so that it is checked.

Composer's autoresume unpickles the latest checkpoint with no hook before it, so the runner finds that checkpoint
as Composer does and gives it to the run as its ``load_path``, checked as any other.

Example:
    >>> from composer_sampling.recipes.schema import load_recipe
    >>> recipe = load_recipe(None, ['autoresume=true', 'save_folder=/nonexistent/runs/a', 'run_name=a'])
    >>> autoresume_checkpoint(recipe) is None  # nothing saved yet: the run starts fresh
    True
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any

from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import LATEST_NAME, RunFolders, checkpoint_pattern, first_names, run_folders
from composer_sampling.recipes.run_fields import composer_run_name, loads_sharded
from composer_sampling.recipes.schema import Recipe

__all__ = ['autoresume_checkpoint', 'autoresumed', 'latest_checkpoint']


def autoresume_checkpoint(recipe: Recipe) -> str | None:
    """The latest checkpoint of ``recipe``'s save folder when it autoresumes, as a ``load_path``; else ``None``."""
    return latest_checkpoint(recipe, run_folders(recipe, None, composer_run_name(recipe)))


def latest_checkpoint(recipe: Recipe, folders: RunFolders) -> str | None:
    """The latest checkpoint in the save folder of ``folders`` when ``recipe`` autoresumes, as a ``load_path``.

    A local folder's ``latest-rank0.pt`` link, or the object a remote folder's ``.symlink`` pointer names; braces
    escaped as a ``load_path`` needs.
    """
    if not recipe.autoresume or folders.save is None:
        return None
    latest = LATEST_NAME.format(rank=0)
    passes = 1 if loads_sharded(recipe.parallelism_config) else 2
    if not folders.save_remote:
        link = Path(folders.save) / latest
        return _escaped(str(link), passes) if link.exists() else None
    found = _remote_latest(folders.save, latest)
    return None if found is None else _escaped(found, passes)


def autoresumed(recipe: Recipe, folders: RunFolders) -> Recipe:
    """``recipe`` with ``load_path`` set to the checkpoint autoresume picks (:func:`latest_checkpoint`), if any.

    Example:
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> recipe = load_recipe(None, ['load_path=a.pt'])
        >>> autoresumed(recipe, run_folders(recipe, None, None)).load_path
        'a.pt'
    """
    found = latest_checkpoint(recipe, folders)
    return recipe if found is None else dataclasses.replace(recipe, load_path=found)


def _remote_latest(folder: str, latest: str) -> str | None:
    """The URI of the checkpoint a remote save folder's latest pointer leads to (or of the object itself), else
    ``None``; pointers are followed as Composer follows them, a bounded number of times."""
    from composer_sampling._remote import RemoteError, object_exists, object_store_of, resolve_pointers, split_uri

    scheme, bucket, key = split_uri(folder)
    name = '/'.join(part for part in (key.strip('/'), latest) if part)
    shown = f'{scheme}://{bucket}/{name}'
    try:
        store = object_store_of(folder)
        found = resolve_pointers(store, name, shown)
        if found != name or object_exists(store, name, shown):
            return f'{scheme}://{bucket}/{found}'
    except RemoteError as error:
        raise RecipeError(f'save_folder (autoresume): {error}') from None
    _refuse_pointerless(store, folder, key)
    return None


def _refuse_pointerless(store: Any, folder: str, key: str) -> None:
    """Checkpoints without the latest pointer: Composer would start over and fail to upload over them, at the end."""
    from composer_sampling._remote import describe

    prefix = key.strip('/') + '/' if key.strip('/') else ''
    try:
        names = sorted(name[len(prefix):] for name in store.list_objects(prefix) if name.startswith(prefix))
    except NotImplementedError:
        return  # a store that cannot list: Composer's own refusal at upload time will do
    except Exception as error:
        raise RecipeError(f'save_folder (autoresume): {describe(folder, error)}') from None
    found = [name for name in names if checkpoint_pattern().match(name)]
    if not found:
        return
    latest = max(found, key=lambda name: [int(part) for part in re.findall(r'\d+', name)[:2]])
    shown = first_names(found)
    pointer = LATEST_NAME.format(rank=0) + '.symlink'
    raise RecipeError(f'save_folder {folder} holds checkpoints ({shown}) but no {pointer} pointer to the latest '
                      '(Composer uploads it some seconds after a checkpoint; the run that wrote them stopped before), '
                      'so autoresume cannot tell where to resume, and Composer would refuse to upload over them. '
                      f'Resume with load_path={folder.rstrip("/")}/{latest}, or choose another save_folder')


def _escaped(path: str, passes: int) -> str:
    """``path`` as a ``load_path`` value Composer reads as written after ``passes`` formatting passes.

    Example:
        >>> _escaped('runs/{x}', 2), _escaped('runs/{x}', 1)
        ('runs/{{{{x}}}}', 'runs/{{x}}')
    """
    return path.replace('{', '{' * 2 ** passes).replace('}', '}' * 2 ** passes)
