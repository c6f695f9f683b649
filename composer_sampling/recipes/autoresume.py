"""``autoresume: true``: the checkpoint that Composer's autoresume would pick, found first so that it is checked.

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
from pathlib import Path

from composer_sampling._checkpoint.safe_load import download_scheme
from composer_sampling._checkpoint.save_folder import LATEST_NAME, checkpoint_time, first_names
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import RunFolders, run_folders
from composer_sampling.recipes.remote_folders import list_folder
from composer_sampling.recipes.run_fields import composer_run_name, loads_sharded
from composer_sampling.recipes.schema import Recipe

__all__ = ['autoresume_checkpoint', 'autoresumed', 'latest_checkpoint']


def autoresume_checkpoint(recipe: Recipe) -> str | None:
    """The latest checkpoint of ``recipe``'s save folder when it autoresumes, as a ``load_path``; else ``None``."""
    return latest_checkpoint(recipe, run_folders(recipe, None, composer_run_name(recipe)))


def latest_checkpoint(recipe: Recipe, folders: RunFolders) -> str | None:
    """The ``latest-rank0.pt`` link of a local save folder, or the checkpoint a remote one's pointer names, as a
    ``load_path``, when ``recipe`` autoresumes."""
    if not recipe.autoresume or folders.save is None:
        return None
    link = Path(folders.save) / LATEST_NAME
    remote = download_scheme(folders.save) is not None
    found = _remote_latest(folders.save) if remote else str(link) if link.exists() else None
    # Composer formats a sharded load_path once and a single file's twice, and each pass halves the braces.
    braces = 2 if loads_sharded(recipe.parallelism_config) else 4
    return None if found is None else found.replace('{', '{' * braces).replace('}', '}' * braces)


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


def _remote_latest(folder: str) -> str | None:
    """The URI that a remote save folder's latest pointer leads to; checkpoints without a pointer are refused."""
    from composer_sampling._stores.remote import (
        RemoteError,
        object_exists,
        object_store_of,
        resolve_pointers,
        split_uri,
    )

    scheme, bucket, key = split_uri(folder)
    name = '/'.join(part for part in (key.strip('/'), LATEST_NAME) if part)
    shown = f'{scheme}://{bucket}/{name}'
    try:
        store = object_store_of(folder)
        found = resolve_pointers(store, name, shown)
        if found != name or object_exists(store, name, shown):
            return f'{scheme}://{bucket}/{found}'
    except RemoteError as error:
        raise RecipeError(f'save_folder (autoresume): {error}') from None
    saved = sorted(name for name in list_folder('save_folder (autoresume)', folder) or [] if checkpoint_time(name))
    if saved:
        latest = max(saved, key=lambda name: checkpoint_time(name) or (0, 0))
        raise RecipeError(f'save_folder {folder} holds checkpoints ({first_names(saved)}) but no {LATEST_NAME}.symlink '
                          'pointer to the latest (Composer uploads it some seconds after a checkpoint; the run that '
                          'wrote them stopped before), so autoresume cannot tell where to resume, and Composer would '
                          f'refuse to upload over them. Resume with load_path={folder.rstrip("/")}/{latest}, or choose '
                          'another save_folder')
    return None
