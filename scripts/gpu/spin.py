"""A resume at batch 1,000 of an epoch on the check's device: Composer's spin against SamplerSync.

The loaders, model and checkpoints of ``scripts/bench_resume.py`` (10,000 samples in
memory, batch 8, a linear classifier; 0 workers, so that every read is counted in this
process), trained and resumed on the check's device. Three ways to resume the same
``DataLoader(dataset, batch_size, sampler=...)``: Composer's default (torch's
``DistributedSampler``; Composer spins through the trained batches, reading them
again), torch's ``DistributedSampler`` under ``SamplerSync``, and
``ResumableDistributedSampler`` under ``SamplerSync``. Each row gives the time from
``Trainer(load_path=...)`` to the first batch and the samples read until then, medians
over the repeats; a SamplerSync resume that reads more than its first batch fails.

Example:
    >>> rows = spin_rows({'composer': (1.2, 8016), 'torch+sync': (0.3, 8), 'ours': (0.2, 8)}, batch=8)
    >>> [(row.check, row.result) for row in rows]
    [("Composer's spin (DistributedSampler)", 'reported'), ('DistributedSampler + SamplerSync', 'ok'), \
('ResumableDistributedSampler + SamplerSync', 'ok')]
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from gpu.table import FAIL, OK, REPORTED, Row

__all__ = ['KINDS', 'K', 'measure', 'spin_rows']

#: The batch of epoch 1 the resume starts at.
K = 1000
#: bench_resume's kinds, in the order they run within a repeat.
KINDS = ('composer', 'torch+sync', 'ours')
NAMES = {'composer': "Composer's spin (DistributedSampler)", 'torch+sync': 'DistributedSampler + SamplerSync',
         'ours': 'ResumableDistributedSampler + SamplerSync'}


def measure(device: str, repeats: int) -> dict[str, tuple[float, int]]:
    """``kind -> (median seconds to the first batch, samples read)`` of a resume at batch :data:`K` of epoch 1,
    after one untimed resume of each kind (``first_batch`` raises when a kind reads other than it must)."""
    from bench_resume import checkpoints, first_batch

    with tempfile.TemporaryDirectory(prefix='check-gpu-spin-') as scratch:
        paths = {kind: checkpoints(kind, Path(scratch) / kind.replace('+', '_'), device) for kind in KINDS}
        for kind in KINDS:
            first_batch(kind, paths[kind][0], 0, 0.0, 0, device)
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        reads: dict[str, int] = {}
        for _ in range(repeats):
            for kind in KINDS:
                seconds, reads[kind] = first_batch(kind, paths[kind][K], K, 0.0, 0, device)
                times[kind].append(seconds)
    return {kind: (statistics.median(times[kind]), reads[kind]) for kind in KINDS}


def spin_rows(results: dict[str, tuple[float, int]], batch: int) -> list[Row]:
    """One row per kind: time to the first batch and samples read; a SamplerSync kind must read one ``batch``."""
    spin_s, spin_reads = results['composer']
    rows = [Row('spin', NAMES['composer'], REPORTED, f'{spin_s:.3f} s to the first batch at batch {K}; '
                f'{spin_reads:,} samples read')]
    for kind in ('torch+sync', 'ours'):
        seconds, reads = results[kind]
        rows.append(Row('spin', NAMES[kind], OK if reads == batch else FAIL,
                        f'{seconds:.3f} s to the first batch ({spin_s / seconds:.1f}x faster than the spin); '
                        f'{reads:,} samples read'))
    return rows
