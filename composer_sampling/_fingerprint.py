"""The fingerprint of a train dataset: what identifies its content, computed without reading a sample.

A resume is exact only when the indices it continues with point at the samples the
checkpoint trained. :func:`dataset_fingerprint` summarizes a dataset's content in one
digest, from what the dataset already holds in memory or in its index files:

* a dataset's own ``fingerprint``, a ``str`` attribute or a method returning one, wins;
* torch's ``TensorDataset``: each tensor's shape, dtype and a hash of its bytes (a
  tensor over :data:`WHOLE_BYTES` bytes is hashed in :data:`SAMPLED_SLICES` slices of
  :data:`SLICE_BYTES` bytes at a fixed stride, plus its first and last slice);
* ``Subset``: its dataset's fingerprint and its indices; ``ConcatDataset``: its parts'
  fingerprints in order;
* mosaicml-streaming's ``StreamingDataset``: for every stream, in order, each shard's
  file name, size, sample count and the hashes its index records, and the stream's
  proportion, repeat and choose settings; its folders are not part of it, so a copy
  of the same shards elsewhere has the same fingerprint;
* a Hugging Face ``datasets.Dataset``: its own fingerprint, when it has one;
* a wrapper of one dataset, kept in its ``dataset`` attribute at the same length (an
  augmentation wrapper, :class:`~composer_sampling.PerSampleRNG`, a reader that logs):
  the wrapped dataset's fingerprint, so that adding or removing such a wrapper is not a
  change of data; a wrapper that changes the samples' content should say so in its own
  ``fingerprint``;
* a dataset over a folder that lists its files (``samples`` of ``(path, label)`` pairs
  or of paths, as torchvision's ``DatasetFolder`` does): each file's path relative to
  ``root`` and its size (above :data:`WHOLE_ENTRIES` files, those at a fixed stride);
* anything else: its class and its length, and the result says that its content is not
  covered.

Sequences longer than :data:`WHOLE_ENTRIES` (subset indices, file lists) are hashed at
:data:`WHOLE_ENTRIES` positions at a fixed stride, plus their length; so a change of
one entry that the stride passes over goes unnoticed at that size.

Example:
    >>> import torch
    >>> from torch.utils.data import TensorDataset
    >>> first = dataset_fingerprint(TensorDataset(torch.arange(10)))
    >>> first == dataset_fingerprint(TensorDataset(torch.arange(10)))
    True
    >>> first.digest == dataset_fingerprint(TensorDataset(torch.arange(1, 11))).digest
    False
    >>> first.covers_content, first.source
    (True, 'TensorDataset of 1 tensor: shape, dtype and bytes')
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # torch is imported when a dataset is fingerprinted, not by the ledger and audit that read one
    import torch
    from torch.utils.data import ConcatDataset, Subset, TensorDataset

__all__ = ['SAMPLED_SLICES', 'SLICE_BYTES', 'WHOLE_BYTES', 'WHOLE_ENTRIES', 'Fingerprint', 'dataset_fingerprint']

#: A tensor of at most this many bytes is hashed whole.
WHOLE_BYTES = 64 * 2**20
#: A larger tensor is hashed in this many slices at a fixed stride, plus its first and last slice.
SAMPLED_SLICES = 1024
#: The size of each slice of a larger tensor.
SLICE_BYTES = 16 * 2**10
#: A sequence of at most this many entries (indices, files) is hashed whole; a longer one at this many positions.
WHOLE_ENTRIES = 2**16


@dataclass(frozen=True)
class Fingerprint:
    """What identifies a dataset's content.

    Attributes:
        digest (str): 32 hexadecimal digits (BLAKE2b of 16 bytes) of everything the fingerprint covers.
        source (str): what it was computed from, in words, for messages and the run summary.
        covers_content (bool): whether the digest changes with the samples' content; ``False`` when only the
            dataset's class and length were available.

    Example:
        >>> Fingerprint('0' * 32, 'Dataset of 3 samples: class and length only', False).short
        '0000000000000000'
    """

    digest: str
    source: str
    covers_content: bool

    @staticmethod
    def well_formed(digest: Any, source: Any, covers_content: Any) -> bool:
        """Whether these values, read back from a checkpoint or a ledger, can be a fingerprint: 32 hexadecimal digits,
        a ``str`` and a ``bool``.

        Example:
            >>> Fingerprint.well_formed('ab' * 16, 'a test', True), Fingerprint.well_formed('xyz', 'a test', True)
            (True, False)
        """
        return isinstance(digest, str) and len(digest) == 32 and all(c in '0123456789abcdef' for c in digest) and \
            isinstance(source, str) and isinstance(covers_content, bool)

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

    def data(self, value: np.ndarray) -> None:
        raw = np.ascontiguousarray(value).view(np.uint8).reshape(-1)
        self._hash.update(raw.size.to_bytes(8, 'little'))
        self._hash.update(raw.data)

    def digest(self) -> str:
        return self._hash.hexdigest()


def dataset_fingerprint(dataset: Any) -> Fingerprint:
    """The fingerprint of ``dataset``, computed without reading a sample (see the module's docstring for what it
    covers for each kind of dataset).

    Raises:
        TypeError: the dataset's own ``fingerprint`` is not a ``str`` (nor a method returning one).
    """
    for kind, fingerprint in _KINDS:
        if kind(dataset):
            return fingerprint(dataset)
    return _class_and_length(dataset)


# The kinds of datasets, each a test and the function that fingerprints it -------------------------------------------

def _own(dataset: Any) -> Fingerprint:
    value = dataset.fingerprint
    if callable(value):
        value = value()
    if not isinstance(value, str):
        raise TypeError(f'{type(dataset).__name__}.fingerprint must be a str or a method returning one, got '
                        f'{type(value).__name__}: {value!r}')
    digest = _Hash('own')
    digest.text(value)
    return Fingerprint(digest.digest(), f"{type(dataset).__name__}'s own fingerprint {value[:200]!r}", True)


def _tensors(dataset: TensorDataset) -> Fingerprint:
    digest = _Hash('TensorDataset')
    for tensor in dataset.tensors:
        _feed_tensor(digest, tensor)
    count = len(dataset.tensors)
    return Fingerprint(digest.digest(), f'TensorDataset of {count} tensor{"s" if count != 1 else ""}: shape, dtype '
                                        'and bytes', True)


def _subset(dataset: Subset) -> Fingerprint:
    inner = dataset_fingerprint(dataset.dataset)
    digest = _Hash('Subset')
    digest.text(inner.digest)
    _feed_integers(digest, dataset.indices)
    return Fingerprint(digest.digest(), f'Subset of {len(dataset.indices):,} indices of {inner.source}',
                       inner.covers_content)


def _concat(dataset: ConcatDataset) -> Fingerprint:
    parts = [dataset_fingerprint(part) for part in dataset.datasets]
    digest = _Hash('ConcatDataset')
    for part in parts:
        digest.text(part.digest)
    sources = '; '.join(part.source for part in parts[:3]) + ('; ...' if len(parts) > 3 else '')
    return Fingerprint(digest.digest(), f'ConcatDataset of {len(parts)} parts in order: {sources}',
                       all(part.covers_content for part in parts))


def _streaming(dataset: Any) -> Fingerprint:
    digest = _Hash('StreamingDataset')
    streams = list(dataset.streams)
    shards_of_stream: list[list[Any]] = [[] for _ in streams]
    for shard, owner in zip(dataset.shards, dataset.stream_per_shard.tolist(), strict=True):
        shards_of_stream[owner].append(shard)
    for stream, shards in zip(streams, shards_of_stream, strict=True):
        settings = {name: getattr(stream, name, None) for name in ('proportion', 'repeat', 'choose')}
        digest.text(json.dumps(settings, sort_keys=True, default=str))
        for shard in shards:
            digest.text(json.dumps(_shard_entry(shard), sort_keys=True))
    return Fingerprint(digest.digest(), f'StreamingDataset of {len(streams)} stream{"s" if len(streams) != 1 else ""} '
                                        f'and {len(dataset.shards):,} shards: index files (shard names, sizes, sample '
                                        'counts, hashes) and proportion, repeat and choose', True)


def _shard_entry(shard: Any) -> dict[str, Any]:
    """One shard as its index file describes it: its files' names, sizes and hashes, and its sample count."""
    files = [info for info in (getattr(shard, 'raw_data', None), getattr(shard, 'zip_data', None)) if info is not None]
    return {'samples': int(shard.samples),
            'files': [[info.basename, int(info.bytes), dict(sorted((info.hashes or {}).items()))] for info in files]}


def _wrapped(dataset: Any) -> Fingerprint:
    inner = dataset_fingerprint(dataset.dataset)
    return Fingerprint(inner.digest, f'{inner.source}, read through {type(dataset).__name__}', inner.covers_content)


def _hugging_face(dataset: Any) -> Fingerprint:
    digest = _Hash('datasets.Dataset')
    digest.text(str(dataset._fingerprint))
    return Fingerprint(digest.digest(), f'Hugging Face Dataset fingerprint {str(dataset._fingerprint)[:16]}', True)


def _folder(dataset: Any) -> Fingerprint:
    entries = list(dataset.samples) if not isinstance(dataset.samples, list) else dataset.samples
    root = getattr(dataset, 'root', None)
    prefix = os.path.join(os.fspath(root), '') if root is not None else ''
    digest = _Hash('folder')
    positions = _positions(len(entries))
    digest.text(str(len(entries)))
    for position in positions:
        entry = entries[position]
        path = os.fspath(entry[0] if isinstance(entry, (tuple, list)) else entry)
        label = entry[1] if isinstance(entry, (tuple, list)) and len(entry) > 1 else None
        relative = path[len(prefix):] if prefix and path.startswith(prefix) else \
            os.path.relpath(path, prefix) if prefix else path
        try:
            size = os.stat(path).st_size
        except OSError:
            size = -1
        digest.text(f'{relative}\0{size}\0{label!r}')
    sampled = '' if len(positions) == len(entries) else f', {len(positions):,} of them at a fixed stride'
    return Fingerprint(digest.digest(), f'{type(dataset).__name__} over {len(entries):,} files: relative paths, '
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


def _has_own(dataset: Any) -> bool:
    return getattr(dataset, 'fingerprint', None) is not None


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
    inner = getattr(dataset, 'dataset', None)
    if inner is None or inner is dataset or not hasattr(inner, '__getitem__'):
        return False
    try:
        return len(inner) == len(dataset)
    except TypeError:
        return False


def _is_folder(dataset: Any) -> bool:
    samples = getattr(dataset, 'samples', None)
    if not isinstance(samples, Sequence) or isinstance(samples, (str, bytes)) or not samples:
        return False
    first = samples[0]
    path = first[0] if isinstance(first, (tuple, list)) and first else first
    return isinstance(path, (str, os.PathLike))


_KINDS: tuple[tuple[Callable[[Any], bool], Callable[[Any], Fingerprint]], ...] = (
    (_has_own, _own),
    (lambda dataset: _is_torch(dataset, 'TensorDataset'), _tensors),
    (lambda dataset: _is_torch(dataset, 'Subset'), _subset),
    (lambda dataset: _is_torch(dataset, 'ConcatDataset'), _concat),
    (_is_streaming, _streaming),
    (_is_hugging_face, _hugging_face),
    (_is_wrapper, _wrapped),
    (_is_folder, _folder),
)


# Feeding tensors and sequences ---------------------------------------------------------------------------------------

def _positions(count: int) -> list[int]:
    """Which entries of a sequence of ``count`` are hashed: all of them, or :data:`WHOLE_ENTRIES` at a fixed stride
    from the first to the last."""
    if count <= WHOLE_ENTRIES:
        return list(range(count))
    return np.linspace(0, count - 1, WHOLE_ENTRIES).round().astype(np.int64).tolist()


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
    last = flat.size - SLICE_BYTES
    for start in np.linspace(0, last, SAMPLED_SLICES + 2).round().astype(np.int64).tolist():
        digest.data(flat[start:start + SLICE_BYTES])
