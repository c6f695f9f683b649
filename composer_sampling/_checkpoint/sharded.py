"""A sharded checkpoint (a ``torch.distributed.checkpoint`` folder) read without running its code.

Composer saves a sharded checkpoint (FSDP's ``state_dict_type: sharded``, FSDP2 by
default) with ``dist_cp.save`` into a folder: a ``.metadata`` file, and
``__{rank}_0.distcp`` files written by each rank. torch 2.7 reads them as follows,
and so does every rank of a Composer run that loads the folder:

* ``.metadata`` with a plain ``pickle.load`` (``FileSystemReader.read_metadata``).
  It holds a ``Metadata`` dataclass: for every flattened key of the state, a
  ``TensorStorageMetadata`` (shape, dtype, chunks) or a ``BytesStorageMetadata``;
  where each entry lies (``storage_data``: file, offset, length); and the path of
  every key in the nested state (``planner_data``).
* a tensor entry, with ``torch.load(weights_only=True)`` (``FileSystemReader.read_data``);
* every other entry (numbers, strings, tuples, numpy arrays: everything that is not a
  tensor), which ``DefaultSavePlanner.resolve_data`` wrote with ``torch.save`` into
  the ``.distcp`` file, with ``torch.load(weights_only=False)``
  (``DefaultLoadPlanner.load_bytes``): it can call any function.

:func:`load_checked_sharded` reads what would otherwise unpickle unchecked: the
``.metadata`` file with an unpickler that resolves only the types torch's
``Metadata`` is made of (:func:`metadata_globals`), and every entry whose metadata
says bytes with ``torch.load(weights_only=True)`` and the allow-list of a single-file
checkpoint. Tensor entries are not read: torch reads them weights-only itself, and
their shapes are in the metadata.

Example:
    >>> import tempfile, torch
    >>> import torch.distributed.checkpoint as dist_cp
    >>> folder = tempfile.mkdtemp()
    >>> _ = dist_cp.save({'state': {'model': {'w': torch.zeros(2, 3)}, 'step': 4}}, checkpoint_id=folder, no_dist=True)
    >>> loaded = load_checked_sharded(folder)
    >>> loaded['state']['step'], loaded['state']['model']['w'].shape
    (4, torch.Size([2, 3]))
"""

from __future__ import annotations

import importlib
import io
import itertools
import os
import pickle
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO, TypeGuard

import torch

from composer_sampling._checkpoint.safe_load import CheckpointError, allow_list, weights_only_load

__all__ = ['METADATA_NAME', 'is_sharded_checkpoint', 'load_checked_sharded', 'metadata_globals']

#: The file of a ``torch.distributed.checkpoint`` folder that says what every entry is and where it lies.
METADATA_NAME = '.metadata'
#: The types torch's ``Metadata`` pickles as, by module: torch 2.7's, and the older names of its tensor
#: properties (a name the installed torch lacks is left out).
_METADATA_TYPES = {
    'torch.distributed.checkpoint.metadata': (
        'Metadata', 'MetadataIndex', 'BytesStorageMetadata', 'TensorStorageMetadata', 'ChunkStorageMetadata',
        'TensorProperties', 'StorageMeta', '_MEM_FORMAT_ENCODING'),
    'torch.distributed._shard.sharded_tensor.metadata': ('TensorProperties', 'MEM_FORMAT_ENCODING'),  # before 2.4
    'torch.distributed.checkpoint.filesystem': ('_StorageInfo',),
    'torch.serialization': ('_get_layout',),  # a layout by its name: torch's own lookup in a table of layouts
    'torch': ('Size',),
    'pathlib': ('PosixPath', 'PurePosixPath', 'PureWindowsPath'),  # StorageMeta.checkpoint_id
    'collections': ('OrderedDict',),
}


def is_sharded_checkpoint(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a folder (or a link to one) holding a ``.metadata`` file, as ``dist_cp.save`` writes.

    Example:
        >>> import tempfile
        >>> is_sharded_checkpoint(tempfile.mkdtemp())
        False
    """
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, METADATA_NAME))


def metadata_globals(extra_safe_globals: Iterable[Any] = ()) -> dict[str, Any]:
    """What the ``.metadata`` unpickler may resolve, by the name a pickle gives it: torch's metadata types, every
    torch dtype, layout and memory format, and the allow-list of a single-file checkpoint with ``extra_safe_globals``.

    Example:
        >>> allowed = metadata_globals()
        >>> allowed['torch.float32'], allowed['torch.Size']
        (torch.float32, <class 'torch.Size'>)
        >>> 'os.system' in allowed
        False
    """
    allowed: dict[str, Any] = {}
    for module_name, names in _METADATA_TYPES.items():
        module = importlib.import_module(module_name)
        allowed.update({f'{module_name}.{name}': getattr(module, name) for name in names if hasattr(module, name)})
    kinds = (torch.dtype, torch.layout, torch.memory_format)
    allowed.update({f'torch.{name}': value for name, value in vars(torch).items() if isinstance(value, kinds)})
    for entry in allow_list(extra_safe_globals):
        value, name = entry if isinstance(entry, tuple) else (entry, f'{entry.__module__}.{entry.__qualname__}')
        allowed[name] = value
    return allowed


class _MetadataUnpickler(pickle.Unpickler):
    """An unpickler that resolves only the names of ``allowed``: anything else is refused before it is imported.

    Every global a pickle reaches (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``OBJ`` and
    the extension codes) goes through ``find_class``, so nothing outside ``allowed``
    is imported, called or built; ``persistent_load`` stays the default, which refuses.
    """

    def __init__(self, file: BinaryIO, allowed: dict[str, Any]) -> None:
        super().__init__(file)
        self.allowed = allowed

    def find_class(self, module: str, name: str) -> Any:
        found = self.allowed.get(f'{module}.{name}')
        if found is None:
            raise pickle.UnpicklingError(f'Unsupported global: GLOBAL {module}.{name}')
        return found


def read_metadata(folder: Path, extra_safe_globals: Iterable[Any] = ()) -> Any:
    """The ``Metadata`` of the checkpoint ``folder``, unpickled with :class:`_MetadataUnpickler`, and checked to be one.

    Raises:
        CheckpointError: no ``.metadata`` file, one that needs another type (``'unsafe'``,
            naming it), or one that is not torch's ``Metadata``.
    """
    from torch.distributed.checkpoint.metadata import Metadata

    path = folder / METADATA_NAME
    if not path.is_file():
        raise CheckpointError(f'{folder} holds no {METADATA_NAME} file: it is not a sharded checkpoint '
                              '(torch.distributed.checkpoint writes one into every checkpoint folder)')
    try:
        with path.open('rb') as stream:
            metadata = _MetadataUnpickler(stream, metadata_globals(extra_safe_globals)).load()
    except pickle.UnpicklingError as error:
        found = str(error).removeprefix('Unsupported global: GLOBAL ')
        if found != str(error):
            raise CheckpointError(f'{path} needs {found}, outside the types torch.distributed.checkpoint metadata '
                                  'is made of; loading it would let the file call or build it', reason='unsafe') \
                from None
        raise CheckpointError(f'{path} is not a readable pickle ({error})') from None
    except Exception as error:  # truncated or garbled: pickle raises several kinds
        raise CheckpointError(f'{path} is not readable checkpoint metadata ({type(error).__name__}: {error})') \
            from None
    if not isinstance(metadata, Metadata) or not isinstance(metadata.state_dict_metadata, dict) or \
            not isinstance(metadata.storage_data, dict):
        raise CheckpointError(f'{path} holds a {type(metadata).__name__}, not the Metadata torch.distributed.'
                              'checkpoint writes')
    return metadata


def _byte_entries(folder: Path, metadata: Any) -> Iterator[tuple[str, Path, int, int]]:
    """``(key, file, offset, length)`` of every entry that torch reads with ``load_bytes``, as ``read_data`` finds it.

    Which entries: those whose metadata is ``BytesStorageMetadata`` (the load plan
    makes a bytes read of exactly those, whatever the loading state holds). Where:
    ``storage_data``'s file, joined to the folder as torch's ``FileSystem.concat_path``
    joins it, and its offset and length.
    """
    from torch.distributed.checkpoint.metadata import BytesStorageMetadata

    for index, info in metadata.storage_data.items():
        key = getattr(index, 'fqn', None)
        if not isinstance(metadata.state_dict_metadata.get(key), BytesStorageMetadata):
            continue
        relative, offset, length = (getattr(info, name, None) for name in ('relative_path', 'offset', 'length'))
        if not isinstance(key, str) or not isinstance(relative, str) or not _natural(offset) or not _natural(length):
            raise CheckpointError(f'{folder / METADATA_NAME} places the entry {key} at {info!r}, not in a file of '
                                  'the checkpoint: it is damaged or was not written by torch.distributed.checkpoint')
        if getattr(info, 'transform_descriptors', None):
            raise CheckpointError(f'{folder / relative}: the entry {key} is stored through '
                                  f'{list(info.transform_descriptors)} (a stream transform such as compression), '
                                  'which this check cannot read', reason='unchecked')
        yield key, folder / relative, offset, length


def _natural(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _entry_bytes(key: str, file: Path, offset: int, length: int) -> io.BytesIO:
    """The bytes torch hands ``load_bytes`` for one entry: ``length`` bytes of ``file`` from ``offset``."""
    if not file.is_file():
        raise CheckpointError(f'{file}, which holds the entry {key}, is missing or not a regular file')
    with file.open('rb') as stream:
        stream.seek(offset)
        return io.BytesIO(stream.read(length))


def _nest(entries: dict[tuple[Any, ...], Any]) -> dict[str, Any]:
    """The nested state ``dist_cp`` flattened: mappings for names, lists for indices (as torch's ``set_element``).

    Example:
        >>> _nest({('state', 'step'): 4, ('rng', 0, 'python'): 'p', ('rng', 1, 'python'): 'q'})
        {'state': {'step': 4}, 'rng': [{'python': 'p'}, {'python': 'q'}]}
    """
    root: dict[str, Any] = {}
    for path, value in entries.items():
        node: Any = root
        for key, below in itertools.pairwise(path):
            node = _child(node, key, [] if isinstance(below, int) else {})
        _put(node, path[-1], value)
    return root


def _child(node: Any, key: Any, empty: Any) -> Any:
    if isinstance(node, list):
        node.extend([None] * (key + 1 - len(node)))
        if node[key] is None:
            node[key] = empty
        return node[key]
    return node.setdefault(key, empty)


def _put(node: Any, key: Any, value: Any) -> None:
    if isinstance(node, list):
        node.extend([None] * (key + 1 - len(node)))
    node[key] = value


def _key_path(metadata: Any, key: str) -> tuple[Any, ...]:
    """Where ``key`` lies in the nested state: its path in ``planner_data`` (``DefaultSavePlanner`` flattens), else
    the key itself. A list index is below the number of entries (no list of the state is longer), so a crafted
    path cannot make :func:`_nest` build a huge list."""
    path = (metadata.planner_data or {}).get(key) if isinstance(metadata.planner_data, dict) else None
    entries = len(metadata.state_dict_metadata)
    if isinstance(path, tuple) and path and all(isinstance(part, str) or (_natural(part) and part < entries)
                                                for part in path):
        return path
    return (key,)


def load_checked_sharded(folder: str | os.PathLike[str], extra_safe_globals: Iterable[Any] = (),
                         shown_as: str | None = None) -> dict[str, Any]:
    """The state of the sharded checkpoint ``folder``, every part of it that unpickles checked, or a refusal.

    The ``.metadata`` file is read by :func:`read_metadata`; every non-tensor entry
    with ``torch.load(weights_only=True)`` and the allow-list of a single-file
    checkpoint (:func:`~composer_sampling._checkpoint.safe_load.allow_list` of
    ``extra_safe_globals``). What is returned is the nested state as ``dist_cp`` would
    rebuild it, each tensor an empty tensor of its whole shape and dtype on the
    ``meta`` device (nothing of a tensor is read). Errors name ``shown_as`` (the path
    that led to ``folder``) when given.

    Raises:
        CheckpointError: no metadata, a file or an entry that needs a type outside the
            allow-list (``'unsafe'``, naming the file and the entry), an entry stored
            through a stream transform (``'unchecked'``), or one that is unreadable.
    """
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    root = Path(os.path.realpath(folder))
    prefix = '' if shown_as is None or shown_as == str(root) else f'{shown_as} (the folder {root}): '
    try:
        metadata = read_metadata(root, extra_safe_globals)
        allowed = allow_list(extra_safe_globals)
        entries: dict[tuple[Any, ...], Any] = {}
        for key, file, offset, length in _byte_entries(root, metadata):
            shown = f'{file}, entry {key} (bytes {offset} to {offset + length}),'
            entries[_key_path(metadata, key)] = weights_only_load(_entry_bytes(key, file, offset, length), shown,
                                                                  allowed)
        for key, tensor in metadata.state_dict_metadata.items():
            if isinstance(tensor, TensorStorageMetadata):
                entries[_key_path(metadata, key)] = torch.empty(tuple(tensor.size), device='meta',
                                                                dtype=tensor.properties.dtype)
    except CheckpointError as error:
        raise CheckpointError(f'{prefix}{error}', reason=error.reason) from None
    try:
        state = _nest(entries)
    except (TypeError, AttributeError, KeyError, IndexError) as error:  # paths that cross: a value where a mapping is
        raise CheckpointError(f'{root / METADATA_NAME} places its entries at paths that cannot make one state '
                              f'({type(error).__name__}: {error}): it is damaged or was not written by '
                              'torch.distributed.checkpoint') from None
    if not isinstance(state.get('state'), dict):
        raise CheckpointError(f"{prefix or f'{root}: '}not a Composer checkpoint: it holds {sorted(state)[:5]}, "
                              "without a 'state' mapping")
    return state
