"""What a train dataset's fingerprint costs at fit start, for every kind of dataset it covers, at 1e8 samples.

    .venv/bin/python scripts/bench_fingerprint.py [--samples 100000000] [--repeats 5]

Each kind is built once, then ``dataset_fingerprint`` runs ``--repeats`` times on it;
the table gives the median. No sample is read: the fingerprint looks at what the
dataset holds in memory (tensors, indices, file lists) or, for mosaicml-streaming, at
what its index files said when the dataset was built. The anchor, in the same run, is
hashing every byte of the TensorDataset's tensor, which the fingerprint samples at a
fixed stride instead.

* ``TensorDataset``: one int64 tensor of ``--samples`` values (800 MB at 1e8);
* ``Subset``: a Python list of ``--samples`` indices over that dataset;
* ``ConcatDataset``: two TensorDatasets of half the samples each;
* ``StreamingDataset``: one stream whose index lists 10,000 shards of ``--samples / 10,000``
  samples each (the index file only: the stream has a remote, so the shard files, never
  written, are never opened; ``bench_fingerprint_shards.py`` measures the read of local
  shard files);
* a folder dataset: ``samples`` of ``--samples`` ``(path, label)`` entries over 1,000 real
  files (the fingerprint takes the size of 65,536 of them at a fixed stride);
* a Hugging Face ``datasets.Dataset`` of 1e6 rows (its own fingerprint: the cost does not
  depend on the size);
* any other dataset: its class and length.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import ConcatDataset, Dataset, Subset, TensorDataset

from composer_sampling._fingerprint import dataset_fingerprint

from bench_report import write_section

SHARDS = 10_000
FILES = 1_000


def median_seconds(work: Callable[[], Any], repeats: int) -> float:
    """The median wall time of ``repeats`` calls of ``work``."""
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


class Folder(Dataset):
    """A dataset over files, listed as torchvision's ``DatasetFolder`` lists them: ``root`` and ``samples``."""

    def __init__(self, root: Path, samples: list[tuple[str, int]]) -> None:
        self.root = str(root)
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Any:
        raise AssertionError('the fingerprint reads no sample')


class Opaque(Dataset):
    """A dataset the fingerprint knows nothing of."""

    def __init__(self, size: int) -> None:
        self.size = size

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Any:
        raise AssertionError('the fingerprint reads no sample')


def streaming_dataset(folder: Path, samples: int) -> Any:
    """A StreamingDataset whose index lists :data:`SHARDS` shards; their files are never written nor read (the stream
    has a remote, ``folder``, so its shards would be downloaded when a sample is read)."""
    from streaming import Stream, StreamingDataset

    per_shard = samples // SHARDS
    shards = [{'column_encodings': ['int'], 'column_names': ['value'], 'column_sizes': [8], 'compression': None,
               'format': 'mds', 'hashes': ['sha1'], 'raw_data': {
                   'basename': f'shard.{number:05d}.mds', 'bytes': 8 * per_shard + 4 * (per_shard + 2),
                   'hashes': {'sha1': hashlib.sha1(str(number).encode()).hexdigest()}},
               'samples': per_shard, 'size_limit': 1 << 26, 'version': 2, 'zip_data': None}
              for number in range(SHARDS)]
    (folder / 'index.json').write_text(json.dumps({'shards': shards, 'version': 2}))
    return StreamingDataset(streams=[Stream(remote=str(folder), local=str(folder / 'cache'))], batch_size=1,
                            shuffle=False)


def folder_dataset(folder: Path, samples: int) -> Folder:
    files = []
    for number in range(FILES):
        path = folder / f'class{number % 10}' / f'{number:04d}.bin'
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b'x' * (number + 1))
        files.append((str(path), number % 10))
    return Folder(folder, [files[k % FILES] for k in range(samples)])


def row(name: str, dataset: Any, repeats: int) -> str:
    """The table's row for one dataset: the median time of its fingerprint, and what the fingerprint covers."""
    seconds = median_seconds(lambda: dataset_fingerprint(dataset), repeats)
    fingerprint = dataset_fingerprint(dataset)
    return (f'| {name} | {seconds * 1e3:,.1f} ms | {"yes" if fingerprint.covers_content else "no"} | '
            f'{fingerprint.source} |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--samples', type=int, default=10**8)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    samples, repeats = args.samples, args.repeats
    work = Path(tempfile.mkdtemp(prefix='bench-fingerprint-'))
    values = torch.arange(samples, dtype=torch.int64)
    whole = median_seconds(lambda: hashlib.blake2b(values.numpy().data, digest_size=16).hexdigest(), repeats)
    (work / 'stream').mkdir()
    kinds: list[tuple[str, Callable[[], Any]]] = [
        (f'TensorDataset, one int64 tensor of {samples:,} values', lambda: TensorDataset(values)),
        (f'Subset, a list of {samples:,} indices', lambda: Subset(TensorDataset(values), list(range(samples)))),
        ('ConcatDataset of two TensorDatasets', lambda: ConcatDataset(
            [TensorDataset(values[:samples // 2]), TensorDataset(values[samples // 2:])])),
        (f'StreamingDataset, {SHARDS:,} shards in its index', lambda: streaming_dataset(work / 'stream', samples)),
        (f'folder dataset, {samples:,} entries over {FILES:,} files', lambda: folder_dataset(work / 'files', samples)),
        ('Hugging Face Dataset of 1e6 rows', lambda: __import__('datasets').Dataset.from_dict(
            {'value': list(range(10**6))})),
        ('any other dataset: class and length', lambda: Opaque(samples)),
    ]
    rows = []
    for name, build in kinds:
        rows.append(row(name, build(), repeats))
        print(rows[-1], flush=True)
    body = (f'Median of {repeats} calls of `dataset_fingerprint` on each dataset, at {samples:,} samples; no sample '
            f'is read. Hashing every byte of the TensorDataset\'s tensor ({values.numel() * 8 / 2**20:,.0f} MiB, '
            f'BLAKE2b, the anchor) took **{whole * 1e3:,.1f} ms** in the same run.\n\n'
            '| dataset | fingerprint | covers content | computed from |\n| --- | ---: | --- | --- |\n'
            + '\n'.join(rows))
    write_section('bench_fingerprint.py', f'.venv/bin/python scripts/bench_fingerprint.py --samples {samples} '
                                          f'--repeats {repeats}', body)


if __name__ == '__main__':
    main()
