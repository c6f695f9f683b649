"""A remote save or ledger folder, looked at before training as a local one is: what an earlier run left there.

Composer checks a local save folder when the fit starts, but uploads into an object
store without looking: a fresh run into a prefix holding an earlier run's checkpoints
trained to the end, then failed with ``FileExistsError``, its ledger uploaded among the
earlier run's. :func:`remote_refusal` lists each remote folder once, through
Composer's own object store for its URI, before the summary prints, and applies the
rules of a local save folder (:func:`~composer_sampling.recipes.folders.check_save_folders`):

* a store that cannot be reached or listed is refused, naming the field, the URI and why;
* a fresh run refuses a save folder holding checkpoints (``*.pt``), and a ledger folder
  holding ledger files (``*.bin``), unless ``save_overwrite``;
* a resume refuses a save folder holding checkpoints later than the one it loads,
  unless ``save_overwrite``: this run would write them again.

Only global rank 0 lists, among the checks ``plan`` and ``train`` run alike; on several
ranks it hands its verdict to the others once the process group exists
(:func:`share_refusal`), so every rank stops with the same message. Nothing in the
store is moved or written.

Example:
    >>> later_names(['ep0-ba2-rank0.pt', 'ep1-ba4-rank0.pt', 'ep1-ba4-rank1.pt', 'latest-rank0.pt.symlink'],
    ...             'ep0-ba2-rank0.pt')
    ['ep1-ba4-rank0.pt']
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from composer_sampling.recipes.errors import RecipeError
from composer_sampling.recipes.folders import RunFolders, checkpoint_pattern
from composer_sampling.recipes.resolve import RunSpec

__all__ = ['later_names', 'remote_folders', 'remote_refusal', 'share_refusal']


def remote_folders(spec: RunSpec, folders: RunFolders) -> list[tuple[str, str, str]]:
    """The remote folders to look at, as ``(kind, field, uri)``: ``kind`` is ``'save'`` or ``'ledger'``.

    A folder whose ``{run_name}`` Composer fills only when the fit starts is left out:
    Composer names the run then, so no earlier run wrote there under that name.

    Example:
        >>> from composer_sampling.recipes.resolve import resolve
        >>> from composer_sampling.recipes.schema import load_recipe
        >>> from composer_sampling.recipes.folders import run_folders
        >>> spec = resolve(load_recipe(None, ['save_folder=s3://bucket/a', 'callbacks.sample_ledger={}']))
        >>> [(kind, uri) for kind, _, uri in remote_folders(spec, run_folders(spec.recipe, spec.ledger_folder, None))]
        [('save', 's3://bucket/a'), ('ledger', 's3://bucket/a/ledger')]
    """
    found = []
    if folders.save is not None and folders.save_remote:
        found.append(('save', 'save_folder', folders.save))
    if folders.ledger is not None and folders.ledger_remote:
        found.append(('ledger', _ledger_field(spec), folders.ledger))
    return [(kind, field, uri) for kind, field, uri in found if '{run_name}' not in uri]


def remote_refusal(spec: RunSpec, folders: RunFolders, resumed: str | None) -> str | None:
    """Rank 0 lists the remote folders and refuses, before training, one it cannot reach or that holds what this run
    would write over; other ranks do not look.

    ``resumed`` is the checkpoint ``load_path`` names, as checked (a path or a URI);
    ``None`` for a fresh run. In one process (``plan``, or ``train`` alone) the refusal is
    raised here, a :class:`~composer_sampling.recipes.errors.RecipeError`. On several
    ranks it is returned instead, because the process group does not exist yet:
    :func:`share_refusal` raises it on every rank once it does.
    """
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
    """Every rank raises rank 0's :func:`remote_refusal`, handed over once the process group exists (a broadcast,
    made only when the run has a remote folder: every rank knows that alike)."""
    from composer.utils import dist

    if dist.get_world_size() > 1 and remote_folders(spec, folders):
        shared: list[Any] = [refusal]
        dist.broadcast_object_list(shared, src=0)
        refusal = shared[0]
    if refusal is not None:
        raise RecipeError(refusal)


def later_names(names: list[str], resumed: str) -> list[str]:
    """The rank 0 checkpoints of ``names`` later than the checkpoint named ``resumed``, in order (none when
    ``resumed`` is not named as Composer names checkpoints: its time is not known)."""
    pattern = checkpoint_pattern()
    found = pattern.match(resumed)
    if found is None:
        return []
    epoch, batch = int(found['epoch']), int(found['batch'])
    later = [(int(match['epoch']), int(match['batch']), name) for name in names
             if (match := pattern.match(name)) is not None and (int(match['epoch']) > epoch or
                                                                  int(match['batch']) > batch)]
    return [name for *_, name in sorted(later)]


def _problem(spec: RunSpec, targets: list[tuple[str, str, str]], resumed: str | None) -> str | None:
    """The first refusal of ``targets`` as one message, else ``None``."""
    recipe = spec.recipe
    for kind, field, uri in targets:
        names = _listed(field, uri)
        if names is None or recipe.save_overwrite:
            continue
        shown = uri.rstrip('/')
        if kind == 'ledger' and recipe.load_path is None:
            ledgers = sorted(name for name in names if name.endswith('.bin'))
            if ledgers:
                return (f'{field} {shown} holds the ledger files of an earlier run ({_names(ledgers)}); this run would '
                        'upload its own among them. Choose another folder, set save_overwrite: true to record this '
                        'run beside them as a new lineage, or load_path to resume that run')
        elif kind == 'save' and recipe.load_path is None:
            checkpoints = sorted(name for name in names if name.endswith('.pt'))
            if checkpoints:
                return (f'save_folder {shown} holds the checkpoints of an earlier run ({_names(checkpoints)}); '
                        'Composer would refuse to upload over them, after training. Choose another save_folder, set '
                        'save_overwrite: true to replace them, or load_path to resume')
        elif kind == 'save' and resumed is not None:
            later = later_names(names, _resumed_name(resumed))
            if later:
                return (f'save_folder {shown} holds {_names(later)}, checkpoints later than the one '
                        f'{spec.load_path_field} resumes ({_resumed_name(resumed)}), which this run would write again; '
                        'Composer refuses to upload over them, after training. Resume from the latest of them '
                        f'(load_path={shown}/{later[-1]}), choose another save_folder for this run, or set '
                        'save_overwrite: true to replace them')
    return None


def _listed(field: str, uri: str) -> list[str] | None:
    """The names of the objects directly in the folder ``uri`` (``None``: a store that cannot list), or the refusal
    of a store that cannot be reached."""
    from composer_sampling._remote import RemoteError, describe, object_store_of, split_uri

    try:
        store = object_store_of(uri)
    except RemoteError as error:
        raise RecipeError(f'{field}: {error}') from None
    key = split_uri(uri)[2].strip('/')
    prefix = f'{key}/' if key else ''
    try:
        listed = store.list_objects(prefix)
    except NotImplementedError:
        return None  # Composer's own refusal at upload time will do
    except Exception as error:
        raise RecipeError(f'{field}: {describe(uri, error)}; it is listed before training, to see what an earlier '
                          'run left there') from None
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
    from composer_sampling._checkpoint.safe_load import download_scheme

    if download_scheme(resumed) is not None:
        return resumed.rstrip('/').rsplit('/', 1)[-1]
    return Path(resumed).resolve().name


def _names(names: list[str]) -> str:
    return ', '.join(names[:3]) + (', ...' if len(names) > 3 else '')
