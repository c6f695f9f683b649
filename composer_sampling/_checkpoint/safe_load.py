"""Refuse a checkpoint that could run code, before Composer unpickles it.

Composer 0.32.1 reads ``load_path`` with ``torch.load(weights_only=False)``: a
checkpoint is a pickle, and a pickle can call any function while it loads.
:func:`check_checkpoint` loads the file first with ``weights_only=True``, allowing
torch's own safe types plus exactly the few a Composer checkpoint needs
(:func:`composer_safe_globals`), and raises :class:`CheckpointError` for anything
else. Only torch and numpy are imported, not Composer.

Which file Composer reads is decided here too, as Composer decides it
(:func:`composer_load_path`: ``{run_name}`` first, the rank fields after, each with
Composer's own formatting), and what is handed to Composer is a path its
formatting turns back into the very file checked (:func:`composer_handoff`). The
recipe runner goes one step further and checks a private copy
(:func:`checked_copy`), so that a file rewritten after the check is not loaded.

Example:
    >>> import tempfile, torch
    >>> path = tempfile.mkdtemp() + '/weights.pt'
    >>> torch.save({'state': {'model': {'w': torch.zeros(2)}}, 'rng': []}, path)
    >>> check_checkpoint(path) == path
    True
"""

from __future__ import annotations

import datetime
import os
import pickle
import re
import shutil
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlparse

import numpy as np
import torch
import torch.serialization
from torch.torch_version import TorchVersion

from composer_sampling._checkpoint.import_names import import_name, split_import_name

__all__ = [
    'CheckpointError',
    'allow_list',
    'check_checkpoint',
    'checked_copy',
    'composer_handoff',
    'composer_load_path',
    'composer_object_name',
    'composer_reading',
    'composer_safe_globals',
    'composer_sharded_path',
    'download_scheme',
    'downloaded_checked_copy',
    'load_checked_checkpoint',
    'resolve_safe_global',
    'sharded_handoff',
    'weights_only_load',
]

#: The placeholders Composer fills in ``load_path`` (``{run_name}``, then the rank ones with rank 0's values).
LOAD_PATH_FIELDS = ('run_name', 'rank', 'local_rank', 'node_rank')
#: What Composer fills the rank fields with, in one ``str.format`` pass: every rank reads rank 0's file.
RANK_ZERO = {'rank': 0, 'local_rank': 0, 'node_rank': 0}
#: The name of the checked copy the recipe runner hands to Composer.
COPY_NAME = 'checkpoint.pt'
_MAX_FORMAT_PASSES = 10_000  # Composer's partial_format gives up after as many
_ZIP_MAGIC = b'PK\x03\x04'  # torch.save's format since torch 1.6
_PICKLE_PROTOCOL = b'\x80'  # the PROTO opcode a legacy torch.save file starts with


class CheckpointError(ValueError):
    """A checkpoint that cannot be checked, cannot be read, or needs a type outside the allow-list.

    ``reason`` says which: ``'unsafe'`` (it needs a type outside the allow-list, or
    the weights-only unpickler refuses it), ``'unchecked'`` (a URI, a directory or
    an archive, which this check cannot open) or ``'invalid'`` (missing, unreadable,
    not a Composer checkpoint, a bad path or allow-list entry).
    """

    def __init__(self, message: str, reason: str = 'invalid') -> None:
        super().__init__(message)
        self.reason = reason


def _numpy_reconstruct() -> Any:
    """numpy's array-unpickling function, whichever module it lives in (``numpy.core`` or ``numpy._core``)."""
    return np.ndarray.__reduce__(np.zeros(0))[0]


def composer_safe_globals() -> list[Any]:
    """The types a Composer checkpoint needs beyond torch's weights-only defaults, under every name they pickle as.

    The run's timestamp holds ``datetime.timedelta``; the metadata a ``TorchVersion``;
    numpy's RNG state an array of ``uint32`` (``ndarray``, ``dtype``, numpy's
    ``_reconstruct`` and the uint32 dtype class). numpy 1.x pickles ``_reconstruct``
    as ``numpy.core.multiarray._reconstruct``, numpy 2.x as
    ``numpy._core.multiarray._reconstruct``: both names are allowed.

    Example:
        >>> names = {entry[1] for entry in composer_safe_globals() if isinstance(entry, tuple)}
        >>> sorted(name for name in names if 'reconstruct' in name)
        ['numpy._core.multiarray._reconstruct', 'numpy.core.multiarray._reconstruct']
    """
    reconstruct = _numpy_reconstruct()
    return [
        (datetime.timedelta, 'datetime.timedelta'),
        (TorchVersion, 'torch.torch_version.TorchVersion'),
        (np.ndarray, 'numpy.ndarray'),
        (np.dtype, 'numpy.dtype'),
        (reconstruct, 'numpy.core.multiarray._reconstruct'),
        (reconstruct, 'numpy._core.multiarray._reconstruct'),
        type(np.dtype(np.uint32)),  # checked by identity when the dtype's state is set, whatever its name
    ]


def resolve_safe_global(spec: str, allowed: Sequence[str] | None = None) -> list[Any]:
    """Import ``'module:Name'`` (``Name`` may be dotted) and return it as allow-list entries.

    The entry is registered under ``module.Name`` and under the object's own
    ``__module__.__qualname__`` (the name a pickle of it carries), if they differ.
    With ``allowed`` packages, the walk to ``Name`` stays inside them
    (:func:`~composer_sampling._checkpoint.import_names.import_name` raises ``OutsideAllowedError``).

    Example:
        >>> resolve_safe_global('collections:Counter')
        [(<class 'collections.Counter'>, 'collections.Counter')]
    """
    parts = split_import_name(spec)
    if parts is None:
        raise CheckpointError(f"a safe global must look like 'module:Name', e.g. 'my_package.callbacks:MyState', "
                              f'got {spec!r}')
    module_name, qualname = parts
    try:
        obj = import_name(module_name, qualname, allowed)
    except (ImportError, AttributeError) as error:
        raise CheckpointError(f'safe global {spec!r} cannot be imported: {error}') from None
    names = [f'{module_name}.{qualname}']
    own = f'{getattr(obj, "__module__", module_name)}.{getattr(obj, "__qualname__", qualname)}'
    if own not in names:
        names.append(own)
    return [(obj, name) for name in names]


def allow_list(extra_safe_globals: Iterable[Any] = ()) -> list[Any]:
    """Every global a checkpoint may load: :func:`composer_safe_globals` and ``extra_safe_globals``.

    The extra entries are objects, ``(object, 'pickled.name')`` pairs or
    ``'module:Name'`` strings (:func:`resolve_safe_global`).

    Example:
        >>> allow_list(['collections:Counter'])[-1]
        (<class 'collections.Counter'>, 'collections.Counter')
    """
    entries = composer_safe_globals()
    for item in extra_safe_globals:
        entries.extend(resolve_safe_global(item) if isinstance(item, str) else [item])
    return entries


def composer_load_path(load_path: str, run_name: str | None = None) -> str:
    """The file Composer 0.32.1 reads for a non-sharded ``load_path`` (or the URI it downloads): rank 0's.

    Composer's steps, in its order: ``parse_uri`` keeps the path of a local
    ``load_path`` (a ``#``, a ``?`` or a ``;`` in the last part cut it); its
    ``partial_format`` fills ``{run_name}`` and puts every other field back as
    ``'{name}'``, through that field's format spec; then ``str.format`` fills
    ``{rank}``, ``{local_rank}`` and ``{node_rank}`` with 0 (any other field stops
    Composer); and ``get_file`` parses the result once more. ``tests`` prove this
    equal to Composer's own functions on generated templates. A ``{run_name}``
    without a run name cannot be resolved (Composer would invent a random one).

    Raises:
        CheckpointError: empty, not formattable as Composer formats it, ``{run_name}``
            without a run name (``'invalid'``), or an archive Composer would
            unpack (``'unchecked'``).

    Example:
        >>> composer_load_path('checkpoints/{run_name}/ep1-ba20-rank{rank}.pt', run_name='digits')
        'checkpoints/digits/ep1-ba20-rank0.pt'
        >>> composer_load_path('checkpoints/{{rank}}-{rank:>3}.pt#note')  # {{rank}} is a field by the second pass
        'checkpoints/0-0.pt'
    """
    if not load_path.strip():
        raise CheckpointError(f'{load_path!r} is empty: it names no checkpoint')
    if download_scheme(load_path) is not None:
        return load_path
    path = _with_run_name(_uri_path(load_path), run_name, load_path)
    if _is_archive(path):
        raise CheckpointError(f'{load_path} is an archive Composer would unpack before unpickling; only a plain .pt '
                              'file can be checked', reason='unchecked')
    try:
        path = path.format(**RANK_ZERO)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as error:
        raise _unformattable(load_path, error) from None
    if download_scheme(path) is not None:
        return path
    return _uri_path(path)


def composer_sharded_path(load_path: str, run_name: str | None = None) -> str:
    """The folder Composer 0.32.1 reads for a sharded ``load_path`` on the local disk, every rank alike.

    Composer's steps for a sharded checkpoint: ``parse_uri`` keeps the path (as for a
    single file), ``load_checkpoint`` fills ``{run_name}`` with ``partial_format``, and
    nothing fills the rank fields: ``{rank}`` stays in the path as written. The
    result is what ``load_sharded_checkpoint`` opens (it follows a link there).

    Raises:
        CheckpointError: empty, or not formattable as Composer formats it (``'invalid'``).

    Example:
        >>> composer_sharded_path('checkpoints/{run_name}/latest-rank0.pt', run_name='digits')
        'checkpoints/digits/latest-rank0.pt'
        >>> composer_sharded_path('checkpoints/ep1-ba7-rank{rank}')  # no rank is filled in
        'checkpoints/ep1-ba7-rank{rank}'
    """
    if not load_path.strip():
        raise CheckpointError(f'{load_path!r} is empty: it names no checkpoint')
    return _with_run_name(_uri_path(load_path), run_name, load_path)


def sharded_handoff(folder: str) -> str:
    """The ``load_path`` to give Composer so that a sharded load reads exactly the local folder ``folder``.

    Composer formats a sharded path once (``{run_name}``), so every brace is doubled
    once; a path Composer would read as another (a ``#``, a ``?``, a URI-like name) is
    refused, naming what it would read.

    Example:
        >>> sharded_handoff('runs/{x}/ep1-ba7')
        'runs/{{x}}/ep1-ba7'
        >>> composer_sharded_path(sharded_handoff('runs/{x}/ep1-ba7'))
        'runs/{x}/ep1-ba7'
    """
    handed = folder.replace('{', '{{').replace('}', '}}')
    try:
        read = composer_sharded_path(handed, run_name='')
    except CheckpointError as error:
        read = f'nothing it can check ({error})'
    if download_scheme(handed) is not None:
        read = f'the URI {handed}'
    if read != folder:
        raise CheckpointError(f'{folder} cannot be given to Composer as it is: Composer would read {read} instead; '
                              "rename the folder without '#', '?', ';' or a 'scheme:' prefix")
    return handed


def composer_object_name(load_path: str, run_name: str | None = None) -> str:
    """The object Composer 0.32.1 downloads for the remote ``load_path`` (``scheme://bucket/key``): rank 0's key.

    Composer's steps for a URI: ``parse_uri`` splits off the scheme and bucket (the
    object store is made from the unformatted URI); ``load_checkpoint`` fills
    ``{run_name}`` in the key with ``partial_format``; ``download_checkpoint`` fills
    the rank fields with rank 0's and hands the key to ``get_file``.

    Raises:
        CheckpointError: as :func:`composer_load_path` does for the key.

    Example:
        >>> composer_object_name('s3://bucket/{run_name}/ep1-rank{rank}.pt', run_name='digits')
        'digits/ep1-rank0.pt'
    """
    key = urlparse(load_path).path.lstrip('/')
    key = _with_run_name(key, run_name, load_path)
    if _is_archive(key):
        raise CheckpointError(f'{load_path} is an archive Composer would unpack before unpickling; only a plain .pt '
                              'file can be checked', reason='unchecked')
    try:
        return key.format(**RANK_ZERO)
    except (KeyError, IndexError, ValueError, TypeError, AttributeError) as error:
        raise _unformattable(load_path, error) from None


def downloaded_checked_copy(load_path: str, run_name: str | None, folder: str,
                            extra_safe_globals: Iterable[Any] = ()) -> tuple[str, dict[str, Any], str]:
    """Download the remote ``load_path`` as Composer would, into ``folder``, and check the copy.

    The object is the one Composer reads (:func:`composer_object_name`), fetched as
    Composer's ``get_file`` fetches it through Composer's object store for the URI (a
    ``.symlink`` pointer is followed as Composer follows it, a bounded number of times).
    Returns what to give Composer (the local copy, :func:`composer_handoff`), what it
    holds, and the URI of the object read (the checkpoint a pointer names). Errors (the
    store unreachable, the object missing, a broken pointer, the check refusing it) raise
    :class:`CheckpointError` naming that URI or the pointer.
    """
    from composer_sampling._stores.remote import RemoteError, download_file, object_store_of

    key = composer_object_name(load_path, run_name)
    parsed = urlparse(load_path)
    shown = f'{parsed.scheme}://{parsed.netloc}/{key}'
    copy = os.path.join(folder, COPY_NAME)
    try:
        read = download_file(object_store_of(load_path), key, copy, shown)
    except RemoteError as error:
        raise CheckpointError(str(error)) from None
    shown = f'{parsed.scheme}://{parsed.netloc}/{read}'  # the checkpoint a pointer named, when key was one
    loaded = load_checked_checkpoint(copy, extra_safe_globals, shown_as=shown)
    return composer_handoff(copy), loaded, shown


def _uri_path(path: str) -> str:
    """What Composer's ``parse_uri`` keeps of a path without a scheme (it renames ``AZURE_BLOBS`` first)."""
    return urlparse(path.replace('AZURE_BLOBS', 'azure')).path


def _partial_format(text: str, run_name: str) -> str:
    """Composer's ``partial_format(text, run_name=...)``: a missing field goes back in as ``'{name}'``, and retries."""
    args: tuple[str, ...] = ()
    values: dict[str, Any] = {'run_name': run_name}
    for _ in range(_MAX_FORMAT_PASSES):
        try:
            return text.format(*args, **values)
        except IndexError:
            args += ('{}',)
        except KeyError as error:
            values[error.args[0]] = '{' + str(error.args[0]) + '}'
    raise ValueError(f'no result after {_MAX_FORMAT_PASSES} passes')


def _with_run_name(path: str, run_name: str | None, load_path: str) -> str:
    """``path`` with ``{run_name}`` filled as Composer fills it; without a run name, only if the result needs none."""
    try:
        if run_name is not None:
            return _partial_format(path, run_name)
        filled = {_partial_format(path, name) for name in ('run-a', 'run-b')}  # Composer would invent one
    except (ValueError, TypeError, AttributeError, KeyError) as error:
        raise _unformattable(load_path, error) from None
    if len(filled) > 1:
        raise CheckpointError(f'{load_path} uses {{run_name}} but the run has no run_name: set run_name, or write '
                              'the path out')
    return filled.pop()


def _unformattable(load_path: str, error: BaseException) -> CheckpointError:
    detail = f'{type(error).__name__}: {error}' if not isinstance(error, KeyError) else f'unknown field {error}'
    return CheckpointError(f'{load_path} cannot be formatted as Composer does ({detail}); its placeholders may '
                           f'be {", ".join("{" + name + "}" for name in LOAD_PATH_FIELDS)}, and a literal brace is '
                           'written {{ or }}')


def composer_handoff(path: str) -> str:
    """The ``load_path`` to give Composer so that it reads exactly the local file ``path``.

    Composer formats a path twice (``{run_name}``, then the rank fields), so every
    brace is doubled twice; a path Composer would still read as another file (a
    ``#``, a ``?``, a URI-like name) is refused, naming what it would read.

    Example:
        >>> composer_handoff('runs/{x}/ep1.pt')
        'runs/{{{{x}}}}/ep1.pt'
        >>> composer_load_path(composer_handoff('runs/{x}/ep1.pt'))
        'runs/{x}/ep1.pt'
    """
    handed = path.replace('{', '{{{{').replace('}', '}}}}')
    read = composer_reading(path)
    if read != path:
        raise CheckpointError(f'{path} cannot be given to Composer as it is: Composer would read {read} instead; '
                              "rename the file without '#', '?', ';' or a 'scheme:' prefix")
    return handed


def composer_reading(path: str) -> str:
    """What Composer reads when it is given the local file ``path``, its braces escaped: ``path`` itself, or what
    a ``#``, a ``?``, a ``;`` or a URI-like name makes of it.

    Example:
        >>> composer_reading('runs/a#b/ep1.pt'), composer_reading('runs/{x}/ep1.pt')
        ('runs/a', 'runs/{x}/ep1.pt')
    """
    handed = path.replace('{', '{{{{').replace('}', '}}}}')
    if download_scheme(handed) is not None:
        return f'the URI {handed}'
    try:
        return composer_load_path(handed, run_name='')
    except CheckpointError as error:
        return f'nothing it can check ({error})'


def download_scheme(path: str) -> str | None:
    """The scheme of ``path`` if it is a URI Composer would download (``s3``, ``https``...), else ``None``.

    This is Composer's own test (``urlparse``), which decides where Composer reads a
    checkpoint. :func:`composer_sampling.ledger_format.object_store_scheme` answers another
    question: whether a ledger location names an object store. A Path-collapsed ``s3:/``
    does, and a Windows drive does not.

    Example:
        >>> download_scheme('s3://bucket/ep1.pt'), download_scheme('checkpoints/ep1.pt')
        ('s3', None)
    """
    scheme = urlparse(path).scheme
    return scheme or None


def _unsafe_type(error: BaseException) -> str | None:
    """The offending type named in a weights-only unpickling error, if it names one."""
    text = str(error)
    found = re.search(r'Unsupported global: GLOBAL (\S+)', text) or re.search(r"but got <class '([^']+)'>", text)
    if found:
        return found.group(1)
    found = re.search(r'for unrecognized function (.+?)(?:\.|$)', text, flags=re.MULTILINE)
    return found.group(1) if found else None


def _detail(error: BaseException) -> str:
    """The one informative line of a torch loading error."""
    found = re.search(r'WeightsUnpickler error: (.+)', str(error))
    if found:
        return found.group(1).strip()
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return f'{type(error).__name__}: {lines[0]}' if lines else type(error).__name__


def _static_unsafe_globals(source: Path | BinaryIO) -> list[str]:
    """The pickle GLOBALs of a zip checkpoint outside the allow-list, found without unpickling (empty if unreadable)."""
    try:
        return sorted(torch.serialization.get_unsafe_globals_in_checkpoint(str(source) if isinstance(source, Path)
                                                                           else source))
    except Exception:  # unreadable files are named by the load below
        return []


def _local_file(path: str) -> Path:
    """``path`` as a local single file, or a :class:`CheckpointError` saying why it cannot be checked."""
    if not path.strip():
        raise CheckpointError(f'{path!r} is empty: it names no checkpoint')
    file = Path(path)
    scheme = download_scheme(path)
    unchecked = None
    if scheme is not None:
        unchecked = (f'is a URI ({scheme}://) that Composer would download and unpickle unchecked; download it first '
                     '(composer.utils.get_file) and check the copy')
    elif path.endswith('.symlink') or (not file.exists() and Path(path + '.symlink').is_file()):
        unchecked = 'is a Composer .symlink pointer; give the checkpoint file it points to'
    elif file.is_dir():
        unchecked = 'is a directory (a sharded checkpoint?); only a single-file checkpoint can be checked'
    elif file.is_file() and _is_archive(path):
        unchecked = 'is an archive Composer would unpack before unpickling; only a plain .pt file can be checked'
    if unchecked is not None:
        raise CheckpointError(f'{path} {unchecked}', reason='unchecked')
    if not file.exists():
        raise CheckpointError(f'{path} does not exist')
    if not file.is_file():
        raise CheckpointError(f'{path} is not a regular file')
    with file.open('rb') as stream:
        head = stream.read(4)
    if not head:
        raise CheckpointError(f'{path} is empty, not a checkpoint')
    if head != _ZIP_MAGIC and head[:1] != _PICKLE_PROTOCOL:
        raise CheckpointError(f'{path} is not a readable checkpoint (not written by torch.save): it is neither a '
                              'zip archive nor a pickle')
    return file


def _is_archive(path: str) -> bool:
    """Whether Composer would untar or decompress ``path`` (``.tar``, ``.tgz``, ``.pt.gz``...)."""
    parts = path.split('.')
    return len(parts) > 1 and ('tar' in parts[-2:] or parts[-1] == 'tgz' or (parts[-2] == 'pt' and
                                                                               parts[-1] != 'symlink'))


def check_checkpoint(path: str | os.PathLike[str], extra_safe_globals: Iterable[Any] = ()) -> str:
    """Load ``path`` with ``weights_only=True`` and the allow-list; return the path if it is a safe Composer checkpoint.

    Use it before handing a checkpoint you did not write to Composer, which
    unpickles with ``weights_only=False``:
    ``Trainer(load_path=check_checkpoint(path), ...)``. What it returns is the
    path Composer's formatting turns back into ``path``: ``path`` itself, or with
    its braces escaped (:func:`composer_handoff`). A file someone else can rewrite
    between this check and Composer's load is not protected (the recipe runner
    checks and hands over a private copy instead: :func:`checked_copy`).

    Args:
        path: a local single-file checkpoint (a URI, a directory or an archive is refused).
        extra_safe_globals: more allowed types for your own models and callbacks, as
            objects, ``(object, 'pickled.name')`` pairs or ``'module:Name'`` strings.

    Raises:
        CheckpointError: the file is missing, not a single local file, unreadable,
            not a Composer checkpoint, or needs a type outside the allow-list (named).

    Example:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + '/weights.pt'
        >>> torch.save({'state': {}, 'note': frozenset()}, path)
        >>> check_checkpoint(path)
        Traceback (most recent call last):
        ...
        composer_sampling._checkpoint.safe_load.CheckpointError: ... needs builtins.frozenset, ...
    """
    load_checked_checkpoint(path, extra_safe_globals)
    return composer_handoff(os.fspath(path))


def checked_copy(path: str, folder: str, extra_safe_globals: Iterable[Any] = ()) -> tuple[str, dict[str, Any]]:
    """Copy the local file ``path`` into ``folder`` and check the copy: what to give Composer, and what it holds.

    The bytes checked are the bytes Composer unpickles: Composer receives the copy
    (:func:`composer_handoff` of it), which no one but this user can write in a
    private ``folder`` (``tempfile.mkdtemp``). Errors name ``path``.

    Example:
        >>> import tempfile, torch
        >>> path = tempfile.mkdtemp() + '/weights.pt'
        >>> torch.save({'state': {'model': {}}}, path)
        >>> handed, loaded = checked_copy(path, tempfile.mkdtemp())
        >>> handed.endswith('/checkpoint.pt'), loaded
        (True, {'state': {'model': {}}})
    """
    _local_file(path)
    copy = os.path.join(folder, COPY_NAME)
    try:
        shutil.copyfile(path, copy)
    except OSError as error:
        raise CheckpointError(f'{path} cannot be copied into {folder} to be checked and loaded ({error}); free some '
                              'space there or set TMPDIR to a folder with room') from None
    loaded = load_checked_checkpoint(copy, extra_safe_globals, shown_as=path)
    return composer_handoff(copy), loaded


def load_checked_checkpoint(path: str | os.PathLike[str], extra_safe_globals: Iterable[Any] = (),
                            shown_as: str | None = None) -> dict[str, Any]:
    """What :func:`check_checkpoint` loads to check ``path``: the checkpoint's dict, loaded weights-only.

    Raises :class:`CheckpointError` as :func:`check_checkpoint` does, naming
    ``shown_as`` (the file ``path`` is a copy of) if given.
    """
    file = _local_file(os.fspath(path))
    text = shown_as if shown_as is not None else os.fspath(path)
    loaded = weights_only_load(file, text, allow_list(extra_safe_globals))
    if not isinstance(loaded, dict) or not isinstance(loaded.get('state'), dict):
        kind = f'a dict of {list(loaded)[:5]}' if isinstance(loaded, dict) else f'a {type(loaded).__name__}'
        raise CheckpointError(f"{text} is not a Composer checkpoint: it holds {kind}, without a 'state' mapping")
    return loaded


def weights_only_load(source: Path | BinaryIO, shown: str, allowed: list[Any]) -> Any:
    """``torch.load(source, weights_only=True)`` with the ``allowed`` globals (:func:`allow_list`), or a named refusal.

    ``source`` is a file or the bytes of one (``io.BytesIO``); ``shown`` names it in
    every error. GLOBALs outside the list are found without unpickling where torch
    can (a zip), so the refusal lists them all; else the weights-only unpickler
    stops at the first.

    Example:
        >>> import io, torch
        >>> stream = io.BytesIO()
        >>> torch.save({'note': frozenset()}, stream)
        >>> weights_only_load(io.BytesIO(stream.getvalue()), 'the note', allow_list())
        Traceback (most recent call last):
        ...
        composer_sampling._checkpoint.safe_load.CheckpointError: the note needs builtins.frozenset, ...
    """
    with torch.serialization.safe_globals(allowed), warnings.catch_warnings():
        warnings.simplefilter('ignore')  # torch warns about pickle protocols it then refuses anyway
        unsafe = _static_unsafe_globals(source)
        if unsafe:
            raise CheckpointError(_refusal(shown, unsafe), reason='unsafe')
        if not isinstance(source, Path):
            source.seek(0)
        try:
            return torch.load(source, map_location='cpu', weights_only=True)
        except pickle.UnpicklingError as error:
            offending = _unsafe_type(error)
            if offending is not None:
                raise CheckpointError(_refusal(shown, [offending]), reason='unsafe') from None
            raise CheckpointError(f'{shown} is refused by the weights-only unpickler ({_detail(error)}): it is not '
                                  'a checkpoint torch.save wrote, or it needs code to load', reason='unsafe') from None
        except Exception as error:  # truncated zips, other formats: torch raises several kinds
            raise CheckpointError(f'{shown} is not a readable checkpoint (truncated, or not written by torch.save): '
                                  f'{_detail(error)}') from None


def _refusal(path: str, types: list[str]) -> str:
    return (f'{path} needs {", ".join(types)}, outside the types a Composer checkpoint needs; loading it would let '
            'the file call or build them')
