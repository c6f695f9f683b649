"""Remote save and ledger folders, looked at before training as local ones are: what an earlier run left there.

Composer uploads into an object store without looking, so global rank 0 applies the rules of a local save folder
before training, and refuses a store that cannot be reached or listed.

Example:
    >>> _resumed_name('s3://bucket/run/ep0-ba2-rank0.pt')
    'ep0-ba2-rank0.pt'
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from composer_sampling._checkpoint.safe_load import download_scheme
from composer_sampling._checkpoint.save_folder import checkpoint_time, first_names, later_names
from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import RunFolders, earlier_checkpoints
from composer_sampling.recipes.resolve import RunSpec

__all__ = ['list_folder', 'remote_folders', 'remote_refusal', 'share_refusal']


def remote_folders(spec: RunSpec, folders: RunFolders) -> list[tuple[str, str, str]]:
    """The remote folders to look at, as ``(kind, field, uri)``: ``kind`` is ``'save'`` or ``'ledger'``.

    A folder whose ``{run_name}`` Composer fills only when the fit starts is left out.

    Example:
        >>> from composer_sampling.recipes.resolve import resolve
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> from composer_sampling.recipes.folders import run_folders
        >>> spec = resolve(load_recipe(None, ['save_folder=s3://bucket/a', 'callbacks.sample_ledger={}']))
        >>> [(kind, uri) for kind, _, uri in remote_folders(spec, run_folders(spec.recipe, spec.ledger_folder, None))]
        [('save', 's3://bucket/a'), ('ledger', 's3://bucket/a/ledger')]
    """
    found = [('save', 'save_folder', folders.save), ('ledger', _ledger_field(spec), folders.ledger)]
    return [(kind, field, uri) for kind, field, uri in found
            if uri is not None and download_scheme(uri) is not None and '{run_name}' not in uri]


def remote_refusal(spec: RunSpec, folders: RunFolders, resumed: str | None) -> str | None:
    """Rank 0's refusal of a remote folder it cannot reach or that holds what this run would write over: raised
    in a run of one process, else returned for :func:`share_refusal` to raise on every rank."""
    from composer.utils import dist

    targets = remote_folders(spec, folders)
    if not targets or dist.get_global_rank() != 0:
        return None
    try:
        refusal = _problem(spec, targets, resumed)
    except RecipeError as error:  # a store that cannot be reached
        refusal = str(error)
    if refusal is not None and dist.get_world_size() == 1:
        raise RecipeError(refusal)
    return refusal


def share_refusal(spec: RunSpec, folders: RunFolders, refusal: str | None) -> None:
    """Every rank raises rank 0's :func:`remote_refusal`, broadcast once the process group exists."""
    from composer.utils import dist

    if dist.get_world_size() > 1 and remote_folders(spec, folders):
        shared: list[Any] = [refusal]
        dist.broadcast_object_list(shared, src=0)
        refusal = shared[0]
    if refusal is not None:
        raise RecipeError(refusal)


def _problem(spec: RunSpec, targets: list[tuple[str, str, str]], resumed: str | None) -> str | None:
    """The first refusal of ``targets`` as one message, else ``None``."""
    recipe = spec.recipe
    for kind, field, uri in targets:
        why = '; it is listed before training, to see what an earlier run left there'
        names = list_folder(field, uri, why)
        if names is None or recipe.save_overwrite:
            continue
        shown = uri.rstrip('/')
        ledgers = sorted(name for name in names if name.endswith('.bin'))
        if kind == 'ledger' and recipe.load_path is None and ledgers:
            return (f'{field} {shown} holds the ledger files of an earlier run ({first_names(ledgers)}); this run '
                    'would upload its own among them. Choose another folder, set save_overwrite: true to record '
                    'this run beside them as a new lineage, or load_path to resume that run')
        if kind == 'save' and recipe.load_path is None:
            refusal = earlier_checkpoints(shown, names, 'upload over them, after training')
            if refusal is not None:
                return refusal
        elif kind == 'save' and resumed is not None and (start := checkpoint_time(_resumed_name(resumed))) and \
                (later := later_names(names, start)):
            return (f'save_folder {shown} holds {first_names(later)}, checkpoints later than the one '
                    f'{spec.load_path_field} resumes ({_resumed_name(resumed)}), which this run would write again; '
                    'Composer refuses to upload over them, after training. Resume from the latest of them '
                    f'(load_path={shown}/{later[-1]}), choose another save_folder for this run, or set '
                    'save_overwrite: true to replace them')
    return None


def list_folder(field: str, uri: str, why: str = '') -> list[str] | None:
    """The names of the objects directly in the remote folder ``uri``, or ``None`` for a store that cannot list
    (Composer refuses at upload time); a store that cannot be reached is refused, naming ``field``."""
    from composer_sampling._stores.remote import RemoteError, describe, object_store_of, split_uri

    try:
        store = object_store_of(uri)
    except RemoteError as error:
        raise RecipeError(f'{field}: {error}') from None
    key = split_uri(uri)[2].strip('/')
    prefix = f'{key}/' if key else ''
    try:
        listed = store.list_objects(prefix)
    except NotImplementedError:
        return None
    except Exception as error:
        raise RecipeError(f'{field}: {describe(uri, error)}{why}') from None
    return [name[len(prefix):] for name in listed if name.startswith(prefix) and '/' not in name[len(prefix):]]


def _ledger_field(spec: RunSpec) -> str:
    """How a message names the ledger folder: the callback's ``folder`` field, or the default under save_folder."""
    for part in spec.callbacks:
        if part.entry is not None and part.entry.ledger_folder:
            return f'{part.field}.folder' if part.arguments.get('folder') is not None else \
                'the ledger folder (save_folder/ledger)'
    return 'the ledger folder'


def _resumed_name(resumed: str) -> str:
    """The file name of the checkpoint resumed: a local link's target, or the last part of a URI."""
    if download_scheme(resumed) is not None:
        return resumed.rstrip('/').rsplit('/', 1)[-1]
    return Path(resumed).resolve().name
