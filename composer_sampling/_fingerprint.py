"""The fingerprint of a train dataset: what identifies its content, computed without reading a sample through it.

A resume is exact only when the indices it continues with point at the samples the
checkpoint trained. :func:`dataset_fingerprint` summarizes a dataset's content in one
digest, from what the dataset already holds in memory, in its index files or, for
local mosaicml-streaming shards, in a bounded read of each shard file:

* a dataset's own ``fingerprint``, a ``str`` attribute or a method returning one, wins;
  an exception raised while it is read (a typo inside a property included) is reported
  as a ``TypeError`` that names the dataset's class and the exception, never taken for
  a missing attribute;
* torch's ``TensorDataset``: each tensor's shape, dtype and a hash of its bytes (a
  tensor over :data:`WHOLE_BYTES` bytes is hashed in :data:`SAMPLED_SLICES` slices of
  :data:`SLICE_BYTES` bytes at a fixed stride, plus its first and last slice);
* ``Subset``: its dataset's fingerprint and its indices; ``ConcatDataset``: its parts'
  fingerprints in order;
* mosaicml-streaming's ``StreamingDataset``: for every stream, in order, each shard's
  file name, size, sample count and the hashes its index records, and the stream's
  proportion, repeat and choose settings; then, for every stream whose shards are
  local (no ``remote``, or a ``remote`` equal to its ``local``), the size and the first
  and last :data:`SHARD_EDGE_BYTES` bytes of each shard file (the compressed file when
  the index lists one), at most :data:`READ_SHARDS` files (above it, that many at a
  fixed stride over all the local shard files, so a file between them is not read).
  A stream with a remote downloads its shards lazily, so its local folder is a cache
  whose files come and go between runs: none of them is read, and the index's hashes
  stand for its content. A shard whose index records no hash leaves the content not covered: a sample
  rewritten at the same size inside it, between the edges that are read, is not seen.
  The folders are not part of the fingerprint, so a copy of the same shards elsewhere
  has the same fingerprint;
* a Hugging Face ``datasets.Dataset``: its own fingerprint, when it has one;
* a wrapper of one dataset, kept in its ``dataset`` attribute at the same length: when
  it declares ``passes_indices_through = True`` (its sample ``i`` is read from sample
  ``i`` of its ``dataset``, as :class:`~composer_sampling.PerSampleRNG` declares), the
  wrapped dataset's fingerprint, so that adding or removing it is not a change of data.
  Any other wrapper may reorder its samples, so its class name and every attribute that
  is an index array (a list, tuple, ``range``, numpy array or tensor of integers) join
  the wrapped dataset's fingerprint; its other attributes (a seed, a generator, a
  transform) are not hashed, and the fingerprint says that it does not cover the content,
  naming them, since an order they make would not be seen;
* a dataset over a folder that lists its files (``samples`` of ``(path, label)`` pairs
  or of paths, as torchvision's ``DatasetFolder`` does): each file's path relative to
  ``root`` (without a ``root``: the path as listed, absolute as ``DatasetFolder`` lists
  it, so a copy of the folder elsewhere has another fingerprint), its size and its label
  (above :data:`WHOLE_ENTRIES` files, those at a fixed stride);
* anything else: its class and its length, and the result says that its content is not
  covered.

A chain of datasets that loops (a wrapper whose ``dataset`` leads back to itself) or
nests deeper than :data:`MAX_DEPTH` is refused with a ``ValueError`` naming the chain.

Sequences longer than :data:`WHOLE_ENTRIES` (subset indices, file lists) are hashed at
:data:`WHOLE_ENTRIES` positions at a fixed stride, plus their length; so a change of
one entry that the stride passes over goes unnoticed at that size. The positions are
computed in integers, so a sequence of any length up to 2**62 (a ``range`` of indices)
is fingerprinted in the same time.

The fingerprint also carries the dataset's total sample count where it knows it (a
map-style dataset's length, a ``StreamingDataset``'s samples in all its shards), so that
a change of length can be named as such.

Example:
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> first = dataset_fingerprint(TensorDataset(torch.arange(10)))
    >>> first == dataset_fingerprint(TensorDataset(torch.arange(10)))
    True
    >>> first.digest == dataset_fingerprint(TensorDataset(torch.arange(1, 11))).digest
    False
    >>> first.covers_content, first.source, first.samples
    (True, 'TensorDataset of 1 tensor: shape, dtype and bytes', 10)
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported when a dataset is fingerprinted, not by the ledger and audit that read one
    import torch
    from torch.utils.data import ConcatDataset, Subset, TensorDataset

__all__ = ['MAX_DEPTH', 'READ_SHARDS', 'SAMPLED_SLICES', 'SHARD_EDGE_BYTES', 'SLICE_BYTES', 'WHOLE_BYTES',
           'WHOLE_ENTRIES', 'Fingerprint', 'dataset_fingerprint']

#: A tensor of at most this many bytes is hashed whole.
WHOLE_BYTES = 64 * 2**20
#: A larger tensor is hashed in this many slices at a fixed stride, plus its first and last slice.
SAMPLED_SLICES = 1024
#: The size of each slice of a larger tensor.
SLICE_BYTES = 16 * 2**10
#: A sequence of at most this many entries (indices, files) is hashed whole; a longer one at this many positions.
WHOLE_ENTRIES = 2**16
#: The bytes read at each end of a local shard file of a ``StreamingDataset``.
SHARD_EDGE_BYTES = 4 * 2**10
#: At most this many local shard files are read; above it, this many at a fixed stride over all of them.
READ_SHARDS = 2**12
#: The deepest chain of datasets fingerprinted (a wrapper of a ``Subset`` of a ``ConcatDataset`` of ...).
MAX_DEPTH = 32
#: The attribute a wrapper sets to ``True`` to say that its sample ``i`` is read from sample ``i`` of its ``dataset``.
PASSES_INDICES_THROUGH = 'passes_indices_through'


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a dataset's content.

    Attributes:
        digest (str): 32 hexadecimal digits (BLAKE2b of 16 bytes) of everything the fingerprint covers.
        source (str): what it was computed from, in words, for messages and the run summary.
        covers_content (bool): whether the digest changes with the samples' content; ``False`` when only the
            dataset's class and length were available, or when the source names a part that is not hashed.
        samples (int | None): the dataset's total number of samples, where it is known: a map-style dataset's
            length, the samples in all the shards of a ``StreamingDataset``; ``None`` for another iterable dataset
            and for fingerprints read from checkpoints written before it was kept. It is not part of the digest.

    Example:
        >>> Fingerprint('0' * 32, 'Dataset of 3 samples: class and length only', False, 3).short
        '0000000000000000'
    """

    digest: str
    source: str
    covers_content: bool
    samples: int | None = None

    @staticmethod
    def well_formed(digest: Any, source: Any, covers_content: Any, samples: Any = None) -> bool:
        """Whether these values, read back from a checkpoint or a ledger, can be a fingerprint: 32 hexadecimal digits,
        a ``str``, a ``bool``, and ``None`` or an ``int`` of at least 0.

        Example:
            >>> Fingerprint.well_formed('ab' * 16, 'a test', True), Fingerprint.well_formed('xyz', 'a test', True)
            (True, False)
            >>> Fingerprint.well_formed('ab' * 16, 'a', True, 12), Fingerprint.well_formed('ab' * 16, 'a', True, -1)
            (True, False)
        """
        return isinstance(digest, str) and len(digest) == 32 and all(c in '0123456789abcdef' for c in digest) and \
            isinstance(source, str) and isinstance(covers_content, bool) and \
            (samples is None or (isinstance(samples, int) and not isinstance(samples, bool) and samples >= 0))

    @property
    def short(self) -> str:
        """The first 16 digits of the digest, as messages print it."""
        return self.digest[:16]

    def __str__(self) -> str:
        return f'{self.short}, from the {self.source}'


class _Hash:
    """A BLAKE2b hash fed with labelled values, so that two different feeds never meet by concatenation."""

    def __init__(self, kind: str) -> None:
        self._hash = hashlib.blake2b(digest_size=16)
        self.text(kind)

    def text(self, value: str) -> None:
        encoded = value.encode()
        self._hash.update(len(encoded).to_bytes(8, 'little') + encoded)

    def data(self, value: np.ndarray | bytes) -> None:
        raw = memoryview(value) if isinstance(value, bytes) else \
            np.ascontiguousarray(value).view(np.uint8).reshape(-1).data
        self._hash.update(raw.nbytes.to_bytes(8, 'little'))
        self._hash.update(raw)

    def digest(self) -> str:
        return self._hash.hexdigest()


def dataset_fingerprint(dataset: Any) -> Fingerprint:
    """The fingerprint of ``dataset``, computed without reading a sample (see the module's docstring for what it
    covers for each kind of dataset).

    Raises:
        TypeError: the dataset's own ``fingerprint`` is not a ``str`` (nor a method returning one), or reading an
            attribute the fingerprint looks at (``fingerprint``, ``dataset``, ``samples``) raised; the message names
            the dataset's class and the exception.
        ValueError: the chain of datasets loops back to one of its own datasets, or nests deeper than
            :data:`MAX_DEPTH`.

    Example:
        >>> class Wrapper:
        ...     passes_indices_through = True
        ...     def __init__(self, dataset): self.dataset = dataset
        ...     def __len__(self): return 3
        ...     def __getitem__(self, index): return self.dataset[index]
        >>> dataset_fingerprint(Wrapper([1, 2, 3])).source.endswith('content is not covered, which a fingerprint '
        ...                                                         'attribute on the dataset would give, read '
        ...                                                         'through Wrapper')
        True
        >>> first = Wrapper(None); first.dataset = Wrapper(first)
        >>> try:
        ...     dataset_fingerprint(first)
        ... except ValueError as error:
        ...     print(str(error).split(', which')[0])
        the train dataset is a chain of datasets that loops: Wrapper.dataset is Wrapper, Wrapper.dataset is Wrapper
    """
    return dataclasses.replace(_fingerprint(dataset, ()), samples=_sample_count(dataset))


def _fingerprint(dataset: Any, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    """The fingerprint of ``dataset``, reached from the datasets of ``chain`` (each with the attribute that led on)."""
    if any(outer is dataset for outer, _ in chain):
        raise ValueError(f'the train dataset is a chain of datasets that loops: {_chain_text(chain, dataset)}, which '
                         'was met before; a dataset cannot hold itself. Point the attribute that closes the loop at '
                         'the dataset it wraps')
    if len(chain) >= MAX_DEPTH:
        raise ValueError(f'the train dataset is a chain of more than {MAX_DEPTH} datasets '
                         f'({_chain_text(chain[:4], dataset)}, ...); the fingerprint follows at most {MAX_DEPTH}. A '
                         'chain that deep usually loops through new objects: check its dataset attributes')
    own = _attribute(dataset, 'fingerprint')
    if own is not None:
        return _own(dataset, own)
    for kind, fingerprint in _KINDS:
        if kind(dataset):
            return fingerprint(dataset, chain)
    return _class_and_length(dataset)


def _chain_text(chain: tuple[tuple[Any, str], ...], last: Any) -> str:
    """``chain`` and ``last`` in words: ``Looping.dataset is Other, Other.dataset is Looping``."""
    return ', '.join(f'{type(outer).__name__}.{attribute} is {type(inner).__name__}' for (outer, attribute), inner in
                     zip(chain, [*[outer for outer, _ in chain[1:]], last], strict=True))


def _attribute(dataset: Any, name: str) -> Any:
    """The attribute ``name`` of ``dataset``, or ``None`` where it has none.

    An attribute the dataset's class or instance defines is read, and any exception it raises (an ``AttributeError``
    raised inside a property included) is reported naming the class and the exception. An attribute only a
    ``__getattr__`` could give is absent when ``__getattr__`` raises ``AttributeError``.
    """
    try:
        inspect.getattr_static(dataset, name)
        defined = True
    except AttributeError:
        defined = False
    try:
        return getattr(dataset, name)
    except AttributeError as error:
        if not defined:
            return None
        problem: Exception = error
    except Exception as error:  # the user's code: reported, not swallowed
        problem = error
    raise TypeError(f'reading {type(dataset).__name__}.{name} for the train dataset\'s fingerprint raised '
                    f'{type(problem).__name__}: {problem}; {type(dataset).__name__}.{name} must be readable (fix the '
                    f'error in it, or remove it)') from problem


def _sample_count(dataset: Any) -> int | None:
    """The dataset's total number of samples: a ``StreamingDataset``'s samples in all its shards, a map-style
    dataset's length, or ``None`` (another iterable dataset, whose length may be one rank's share)."""
    from torch.utils.data import IterableDataset

    if _is_streaming(dataset):
        return int(dataset.num_samples)
    if isinstance(dataset, IterableDataset):
        return None
    try:
        return len(dataset)
    except TypeError:
        return None


# The kinds of datasets, each a test and the function that fingerprints it -------------------------------------------

def _own(dataset: Any, value: Any) -> Fingerprint:
    if callable(value):
        try:
            value = value()
        except Exception as error:  # the user's code: reported, not swallowed
            raise TypeError(f'{type(dataset).__name__}.fingerprint() raised {type(error).__name__}: {error}; it must '
                            'return a str that names the dataset\'s content (fix the error in it, or remove it)') \
                from error
    if not isinstance(value, str):
        raise TypeError(f'{type(dataset).__name__}.fingerprint must be a str or a method returning one, got '
                        f'{type(value).__name__}: {value!r}')
    digest = _Hash('own')
    digest.text(value)
    return Fingerprint(digest.digest(), f"{type(dataset).__name__}'s own fingerprint {value[:200]!r}", True)


def _tensors(dataset: TensorDataset, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    digest = _Hash('TensorDataset')
    for tensor in dataset.tensors:
        _feed_tensor(digest, tensor)
    count = len(dataset.tensors)
    return Fingerprint(digest.digest(), f'TensorDataset of {count} tensor{"s" if count != 1 else ""}: shape, dtype '
                                        'and bytes', True)


def _subset(dataset: Subset, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    inner = _fingerprint(dataset.dataset, (*chain, (dataset, 'dataset')))
    digest = _Hash('Subset')
    digest.text(inner.digest)
    _feed_integers(digest, dataset.indices)
    return Fingerprint(digest.digest(), f'Subset of {len(dataset.indices):,} indices of {inner.source}',
                       inner.covers_content)


def _concat(dataset: ConcatDataset, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    parts = [_fingerprint(part, (*chain, (dataset, f'datasets[{number}]')))
             for number, part in enumerate(dataset.datasets)]
    digest = _Hash('ConcatDataset')
    for part in parts:
        digest.text(part.digest)
    sources = '; '.join(part.source for part in parts[:3]) + ('; ...' if len(parts) > 3 else '')
    return Fingerprint(digest.digest(), f'ConcatDataset of {len(parts)} parts in order: {sources}',
                       all(part.covers_content for part in parts))


def _streaming(dataset: Any, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    digest = _Hash('StreamingDataset')
    streams = list(dataset.streams)
    shards_of_stream: list[list[Any]] = [[] for _ in streams]
    for shard, owner in zip(dataset.shards, dataset.stream_per_shard.tolist(), strict=True):
        shards_of_stream[owner].append(shard)
    unhashed, local_files, remote_streams = 0, [], 0
    for stream, shards in zip(streams, shards_of_stream, strict=True):
        settings = {name: getattr(stream, name, None) for name in ('proportion', 'repeat', 'choose')}
        digest.text(json.dumps(settings, sort_keys=True, default=str))
        for shard in shards:
            entry = _shard_entry(shard)
            digest.text(json.dumps(entry, sort_keys=True))
            unhashed += not entry['files'] or any(not hashes for _, _, hashes in entry['files'])
        if getattr(stream, 'remote', None) in {None, stream.local}:  # as streaming decides that its shards are local
            local_files += [_shard_path(stream, shard) for shard in shards]
        else:
            remote_streams += 1
    chosen = [local_files[position] for position in _positions(len(local_files), READ_SHARDS)]
    if chosen:
        digest.text('local shard files')
        for path in chosen:
            _feed_shard_file(digest, path)
    count = len(streams)
    source = (f'StreamingDataset of {count} stream{"s" if count != 1 else ""} and {len(dataset.shards):,} shards: '
              'index files (shard names, sizes, sample counts, hashes) and proportion, repeat and choose')
    if chosen:
        some = '' if len(chosen) == len(local_files) else f' ({len(chosen):,} of {len(local_files):,} at a fixed ' \
                                                            'stride)'
        source += (f', and the size and the first and last {SHARD_EDGE_BYTES // 2**10} KiB of each local shard '
                   f'file{some}')
    if remote_streams:
        source += (f'; the shard files of {remote_streams} stream{"s" if remote_streams != 1 else ""} with a remote '
                   'are not read, since they are downloaded lazily')
    if unhashed:
        source += (f'; its content is not covered: {unhashed:,} of {len(dataset.shards):,} shards have no hashes in '
                   "their index (MDSWriter(hashes=['sha1']) records them), so a sample rewritten at the same size "
                   'inside such a shard is not seen')
    return Fingerprint(digest.digest(), source, not unhashed)


def _shard_entry(shard: Any) -> dict[str, Any]:
    """One shard as its index file describes it: its files' names, sizes and hashes, and its sample count."""
    files = [info for info in (getattr(shard, 'raw_data', None), getattr(shard, 'zip_data', None)) if info is not None]
    return {'samples': int(shard.samples),
            'files': [[info.basename, int(info.bytes), dict(sorted((info.hashes or {}).items()))] for info in files]}


def _shard_path(stream: Any, shard: Any) -> str:
    """The local file of ``shard`` that the fingerprint reads: the compressed one when the index lists one (streaming
    keeps it in a local stream, and decompresses it only when a sample is read), else the raw one."""
    info = getattr(shard, 'zip_data', None) or shard.raw_data
    return os.path.join(stream.local, getattr(stream, 'split', None) or '', info.basename)


def _feed_shard_file(digest: _Hash, path: str) -> None:
    """The size and the first and last :data:`SHARD_EDGE_BYTES` bytes of the file at ``path`` (a missing file counts
    as missing)."""
    try:
        handle = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        digest.text('missing')
        return
    try:
        size = os.fstat(handle).st_size
        head = os.pread(handle, SHARD_EDGE_BYTES, 0)
        tail = os.pread(handle, SHARD_EDGE_BYTES, max(SHARD_EDGE_BYTES, size - SHARD_EDGE_BYTES)) \
            if size > SHARD_EDGE_BYTES else b''
    finally:
        os.close(handle)
    digest.text(str(size))
    digest.data(head)
    digest.data(tail)


def _wrapped(dataset: Any, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    inner = _fingerprint(dataset.dataset, (*chain, (dataset, 'dataset')))
    name = type(dataset).__name__
    if _attribute(dataset, PASSES_INDICES_THROUGH) is True:
        return Fingerprint(inner.digest, f'{inner.source}, read through {name}', inner.covers_content)
    digest = _Hash('wrapper')
    digest.text(inner.digest)
    digest.text(type(dataset).__qualname__)  # not the module: a class run as __main__ one day and imported the next
    arrays, others = [], []
    for attribute, value in sorted(_own_state(dataset).items()):
        if attribute == 'dataset':
            continue
        if _is_index_array(value):
            digest.text(attribute)
            _feed_integers(digest, value)
            arrays.append(attribute)
        else:
            others.append(attribute)
    source = f'{inner.source}, read through {name}, whose class name'
    source += f' and index arrays ({", ".join(arrays)}) join the fingerprint' if arrays else ' joins the fingerprint'
    if others:
        source += (f'; its content is not covered: {name} is not declared {PASSES_INDICES_THROUGH} = True, and its '
                   f'attributes {", ".join(others)} are not index arrays, so an order they make is not seen')
    return Fingerprint(digest.digest(), source, inner.covers_content and not others)


def _own_state(dataset: Any) -> dict[str, Any]:
    """The instance attributes of ``dataset``: its ``__dict__`` and the slots its classes declare."""
    state = dict(getattr(dataset, '__dict__', None) or {})
    for cls in type(dataset).__mro__:
        slots = cls.__dict__.get('__slots__', ())
        for slot in [slots] if isinstance(slots, str) else slots:
            if slot not in ('__dict__', '__weakref__') and slot not in state:
                with contextlib.suppress(AttributeError):  # a slot never set
                    state[slot] = getattr(dataset, slot)
    return state


def _is_index_array(value: Any) -> bool:
    """Whether ``value`` is a sequence of integers: a list, tuple or ``range`` of them, or an integer (or bool) numpy
    array or tensor."""
    import torch

    if isinstance(value, torch.Tensor):
        return not (value.is_floating_point() or value.is_complex())
    if isinstance(value, np.ndarray):
        return value.dtype.kind in 'biu'
    if isinstance(value, range):
        return True
    if isinstance(value, (list, tuple)):
        return all(isinstance(value[position], (int, np.integer)) for position in _positions(len(value)))
    return False


def _hugging_face(dataset: Any, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    digest = _Hash('datasets.Dataset')
    digest.text(str(dataset._fingerprint))
    return Fingerprint(digest.digest(), f'Hugging Face Dataset fingerprint {str(dataset._fingerprint)[:16]}', True)


def _folder(dataset: Any, chain: tuple[tuple[Any, str], ...]) -> Fingerprint:
    samples = _attribute(dataset, 'samples')
    entries = list(samples) if not isinstance(samples, list) else samples
    root = _attribute(dataset, 'root')
    prefix = os.path.join(os.fspath(root), '') if root is not None else ''
    digest = _Hash('folder')
    positions = _positions(len(entries))
    digest.text(str(len(entries)))
    absolute = True
    for position in positions:
        entry = entries[position]
        path = os.fspath(entry[0] if isinstance(entry, (tuple, list)) else entry)
        label = entry[1] if isinstance(entry, (tuple, list)) and len(entry) > 1 else None
        relative = path[len(prefix):] if prefix and path.startswith(prefix) else \
            os.path.relpath(path, prefix) if prefix else path
        absolute = absolute and os.path.isabs(path)
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        digest.text(f'{relative}\0{size}\0{label!r}')
    sampled = '' if len(positions) == len(entries) else f', {len(positions):,} of them at a fixed stride'
    if prefix:
        paths = 'relative paths'
    else:
        paths = 'absolute paths (it has no root, so a copy elsewhere differs)' if absolute else \
            'paths as listed (it has no root)'
    return Fingerprint(digest.digest(), f'{type(dataset).__name__} over {len(entries):,} files: {paths}, '
                                        f'sizes and labels{sampled}', True)


def _class_and_length(dataset: Any) -> Fingerprint:
    digest = _Hash('class and length')
    name = f'{type(dataset).__module__}.{type(dataset).__qualname__}'
    try:
        length: int | None = len(dataset)
    except TypeError:
        length = None
    digest.text(json.dumps([name, length]))
    size = 'no length' if length is None else f'{length:,} samples'
    return Fingerprint(digest.digest(), f'{type(dataset).__name__} of {size}: class and length only; its content is '
                                        'not covered, which a fingerprint attribute on the dataset would give', False)


def _is_torch(dataset: Any, name: str) -> bool:
    """Whether ``dataset`` is an instance of the class ``name`` of ``torch.utils.data``."""
    from torch.utils import data

    return isinstance(dataset, getattr(data, name))


def _is_streaming(dataset: Any) -> bool:
    return any(base.__module__.startswith('streaming.') and base.__name__ == 'StreamingDataset'
               for base in type(dataset).__mro__)


def _is_hugging_face(dataset: Any) -> bool:
    return any(base.__module__.startswith('datasets.') for base in type(dataset).__mro__) and \
        isinstance(getattr(dataset, '_fingerprint', None), str)


def _is_wrapper(dataset: Any) -> bool:
    inner = _attribute(dataset, 'dataset')
    if inner is None or not hasattr(inner, '__getitem__'):
        return False
    try:
        return len(inner) == len(dataset)
    except TypeError:
        return False


def _is_folder(dataset: Any) -> bool:
    samples = _attribute(dataset, 'samples')
    if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes)) or not samples:
        return False
    first = samples[0]
    path = first[0] if isinstance(first, (tuple, list)) and first else first
    return isinstance(path, (str, os.PathLike))


_KINDS: tuple[tuple[Callable[[Any], bool], Callable[[Any, tuple[tuple[Any, str], ...]], Fingerprint]], ...] = (
    (lambda dataset: _is_torch(dataset, 'TensorDataset'), _tensors),
    (lambda dataset: _is_torch(dataset, 'Subset'), _subset),
    (lambda dataset: _is_torch(dataset, 'ConcatDataset'), _concat),
    (_is_streaming, _streaming),
    (_is_hugging_face, _hugging_face),
    (_is_wrapper, _wrapped),
    (_is_folder, _folder),
)


# Feeding tensors and sequences ---------------------------------------------------------------------------------------

def _spread(last: int, count: int) -> np.ndarray:
    """``count`` positions from 0 to ``last`` at a fixed stride: position ``k`` is ``k * last / (count - 1)``
    rounded to the nearest integer (half to even), computed in integers so that ``last`` may be up to 2**62.

    Example:
        >>> _spread(10, 3).tolist(), _spread(2**62 - 1, 3).tolist()[-1] == 2**62 - 1
        ([0, 5, 10], True)
    """
    steps = np.arange(count, dtype=np.int64)
    divisor = count - 1
    whole, rest = divmod(last, divisor)
    floor, remainder = np.divmod(steps * rest, divisor)  # steps * rest < count**2: no overflow
    up = (2 * remainder > divisor) | ((2 * remainder == divisor) & (floor % 2 == 1))
    return steps * whole + floor + up


def _positions(count: int, most: int | None = None) -> list[int]:
    """Which entries of a sequence of ``count`` are hashed: all of them, or ``most`` (default :data:`WHOLE_ENTRIES`)
    at a fixed stride from the first to the last."""
    most = WHOLE_ENTRIES if most is None else most
    if count <= most:
        return list(range(count))
    return _spread(count - 1, most).tolist()


def _feed_integers(digest: _Hash, values: Sequence[int] | torch.Tensor | np.ndarray) -> None:
    import torch

    count = len(values)
    digest.text(str(count))
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu().numpy()
    if isinstance(values, np.ndarray):
        chosen = values if count <= WHOLE_ENTRIES else values[np.asarray(_positions(count))]
    else:
        chosen = np.asarray([int(values[position]) for position in _positions(count)], dtype=np.int64)
    digest.data(np.asarray(chosen, dtype=np.int64))


def _feed_tensor(digest: _Hash, tensor: torch.Tensor) -> None:
    import torch

    digest.text(f'{tuple(tensor.shape)} {tensor.dtype}')
    on_host = tensor.detach().cpu()
    flat: np.ndarray = (on_host if on_host.is_contiguous() else on_host.contiguous()).reshape(-1).view(
        torch.uint8).numpy()
    if flat.size <= WHOLE_BYTES:
        digest.data(flat)
        return
    for start in _spread(flat.size - SLICE_BYTES, SAMPLED_SLICES + 2).tolist():
        digest.data(flat[start:start + SLICE_BYTES])
