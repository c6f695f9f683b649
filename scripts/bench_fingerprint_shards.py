"""What the bounded read of local shard files adds to a StreamingDataset's fingerprint, for thousands of shards.

    .venv/bin/python scripts/bench_fingerprint_shards.py [--shards 1024 4096 16384] [--repeats 5]

For each count, one local stream whose index lists that many shards of 1 MiB, with hashes
(llm-foundry writes 64 MiB shards; the size does not change what is read). Each shard file
holds real bytes in its first and last 4 KiB and a hole between them, so that the disk holds
what the fingerprint reads and no more. ``dataset_fingerprint`` runs ``--repeats`` times:

* warm: the files' pages are in the page cache, as on a node that has read them before;
* cold: every file's pages are dropped first (``posix_fadvise(POSIX_FADV_DONTNEED)``, which
  needs no privilege for files of one's own), so each edge is read from the disk;
* the anchor: the same index as a stream with a remote, whose shard files the fingerprint
  does not read (the index part alone).

The table gives the median, and the cost per shard of the read (cold minus the anchor).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from composer_sampling._fingerprint import READ_SHARDS, SHARD_EDGE_BYTES, dataset_fingerprint

from bench_report import write_section

SHARD_BYTES = 2**20
SAMPLES_PER_SHARD = 1000


def write_stream(folder: Path, shards: int) -> list[Path]:
    """An index of ``shards`` shards in ``folder`` and their files, real at the edges and sparse between."""
    folder.mkdir(parents=True)
    entries, paths = [], []
    for number in range(shards):
        path = folder / f'shard.{number:05d}.mds'
        edge = hashlib.sha256(str(number).encode()).digest() * (SHARD_EDGE_BYTES // 32)
        with path.open('wb') as file:
            file.write(edge)
            file.seek(SHARD_BYTES - SHARD_EDGE_BYTES)
            file.write(edge)
        paths.append(path)
        entries.append({'column_encodings': ['int'], 'column_names': ['value'], 'column_sizes': [8],
                        'compression': None, 'format': 'mds', 'hashes': ['sha1'],
                        'raw_data': {'basename': path.name, 'bytes': SHARD_BYTES,
                                     'hashes': {'sha1': hashlib.sha1(str(number).encode()).hexdigest()}},
                        'samples': SAMPLES_PER_SHARD, 'size_limit': 1 << 26, 'version': 2, 'zip_data': None})
    (folder / 'index.json').write_text(json.dumps({'shards': entries, 'version': 2}))
    return paths


def drop_pages(paths: list[Path]) -> None:
    """Drop the page cache of every file in ``paths``."""
    for path in paths:
        handle = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(handle)


def median_seconds(work: Callable[[], Any], repeats: int, before: Callable[[], None] = lambda: None) -> float:
    """The median wall time of ``repeats`` calls of ``work``, each after ``before``."""
    times = []
    for _ in range(repeats):
        before()
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def row(work: Path, shards: int, repeats: int) -> str:
    """The table's row for a stream of ``shards`` shards written under ``work``."""
    from streaming import Stream, StreamingDataset

    folder = work / f'{shards}'
    paths = write_stream(folder, shards)
    local = StreamingDataset(streams=[Stream(local=str(folder))], batch_size=1, shuffle=False)
    remote = StreamingDataset(streams=[Stream(remote=str(folder), local=str(work / f'{shards}-cache'))],
                              batch_size=1, shuffle=False)
    anchor = median_seconds(lambda: dataset_fingerprint(remote), repeats)
    dataset_fingerprint(local)
    warm = median_seconds(lambda: dataset_fingerprint(local), repeats)
    cold = median_seconds(lambda: dataset_fingerprint(local), repeats, lambda: drop_pages(paths))
    read = min(shards, READ_SHARDS)
    return (f'| {shards:,} | {read:,} | {anchor * 1e3:,.1f} ms | {warm * 1e3:,.1f} ms | {cold * 1e3:,.1f} ms '
            f'| {(cold - anchor) / read * 1e6:,.0f} us |')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n', 1)[0])
    parser.add_argument('--shards', type=int, nargs='+', default=[1024, 4096, 16384])
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix='bench-fingerprint-shards-'))
    rows = []
    for shards in args.shards:
        rows.append(row(work, shards, args.repeats))
        print(rows[-1], flush=True)
    body = (f'Median of {args.repeats} calls of `dataset_fingerprint` on one local stream of N shards of '
            f'{SHARD_BYTES // 2**20} MiB, whose fingerprint reads the first and last {SHARD_EDGE_BYTES // 2**10} KiB '
            f'of at most {READ_SHARDS:,} shard files; the anchor is the same index as a stream with a remote, whose '
            'shard files are not read. Cold: every file\'s pages dropped from the page cache before each call.\n\n'
            '| shards | files read | index only (anchor) | warm | cold | read, cold, per file |\n'
            '| ---: | ---: | ---: | ---: | ---: | ---: |\n' + '\n'.join(rows))
    write_section('bench_fingerprint_shards.py', '.venv/bin/python scripts/bench_fingerprint_shards.py --shards '
                                                 f'{" ".join(map(str, args.shards))} --repeats {args.repeats}', body)


if __name__ == '__main__':
    main()
