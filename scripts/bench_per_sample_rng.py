"""What PerSampleRNG adds to every sample read: seeding in a worker, save and restore in the main process.

    .venv/bin/python scripts/bench_per_sample_rng.py [--repeats 7]

``PerSampleRNG`` seeds Python's ``random``, numpy's global RNG and torch's CPU
generator from ``(data seed, epoch, index)`` before each read. In a DataLoader
worker it only seeds (the worker's RNGs serve nothing else); in the main process
it saves the three states before and restores them after, per sample through
``__getitem__``, once per batch through ``__getitems__`` (what a DataLoader calls).
The target is under 10 us per sample in workers; a first prototype, which saved and
restored all three states around every sample, spent about 74 us.

Measured over an in-memory dataset of 20,000 samples, each a row of 64 floats (a
read is a tensor view, about a microsecond), the same reads bare and through the
wrapper (seed 1, epoch 1), per sample in microseconds:

* (a) in a worker: inside a real DataLoader worker process (``get_worker_info()``
  is set there, so the wrapper takes its seed-only path), one sample at a time
  through ``__getitem__`` and in batches of 32 through ``__getitems__``; with, in
  the same worker, the parts: the seed derivation (``_seed_of``) and each of the
  three seed calls alone. Each repeat starts a fresh one-worker DataLoader and
  reads one item from it, whose read runs all of these loops; the main process
  waits meanwhile, so nothing else runs on the worker's core.
* (b) in the main process through ``__getitem__``, one sample at a time: save,
  seed, read, restore per sample.
* (c) in the main process through ``__getitems__``, batches of 32: the states
  saved and restored once per batch, every sample seeded.
* (d) a whole DataLoader pass (batch 32, sequential order, default collate) over
  the dataset, bare and wrapped, with 0 workers and with 2 persistent workers
  (started and warmed up by one pass before the timed ones, so the times are the
  steady epochs, not worker start-up); the added microseconds a sample are the
  difference of the passes' wall times over the 20,000 samples.

Every repeat runs all measurements once, bare and wrapped side by side, in this one
process (and its workers); the tables show medians over repeats.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

from composer_sampling import PerSampleRNG
from composer_sampling.per_sample_rng import _restore_all, _save_all

from bench_report import write_section

SIZE, FEATURES, BATCH = 20_000, 64, 32
SEED, EPOCH = 1, 1
TARGET_US = 10.0
PROTOTYPE_US = 74.0
PASS_WORKERS = (0, 2)
#: Why every sample seeds all three generators (written with the script; the tables are measured on every run).
WHY_EAGER = """\
Why all three generators are seeded before every read, not lazily: a generator must be seeded before the sample draws
from it, and nothing tells in advance which one an augmentation will draw from (torchvision's transforms draw from
torch, older ones and albumentations from `random` or `np.random`, some only now and then). Seeding at the first draw
would mean replacing the global generators' functions, which code that imported them earlier (`from random import
random`) bypasses; noticing a draw afterwards needs the generator's state (`random.getstate()`,
`np.random.get_state()`), which costs more than seeding it. What a sample costs is the three seed calls, each the
generator's own initialisation (Python's `random.seed` runs Mersenne Twister's init_by_array, three passes over its
624 words, the dearest of the three; numpy's legacy seed one pass; torch one), plus one seed derivation: two
`splitmix64` a sample (the epoch's part is mixed once an epoch), the shared seed and epoch read once per batch. The
generators get the states the first release gave them (`tests/order/test_per_sample_rng.py` pins a sample's draws):
seeding fewer generators, or seeding them another way, would change every augmentation of a run resumed across the
upgrade."""


class Vectors(Dataset):
    """``SIZE`` rows of ``FEATURES`` floats held in memory: a read is a tensor view."""

    def __init__(self) -> None:
        self.data = torch.randn(SIZE, FEATURES, generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return SIZE

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.data[index]


def wrap(dataset: Dataset) -> PerSampleRNG:
    wrapped = PerSampleRNG(dataset, seed=SEED)
    wrapped.set_epoch(EPOCH)
    return wrapped


BATCHES = [list(range(start, min(start + BATCH, SIZE))) for start in range(0, SIZE, BATCH)]


def per_sample_us(read: Callable[[int], Any]) -> float:
    """Microseconds a sample of ``read(index)`` over every index."""
    start = time.perf_counter()
    for index in range(SIZE):
        read(index)
    return (time.perf_counter() - start) / SIZE * 1e6


def per_sample_us_batched(read: Callable[[list[int]], Any]) -> float:
    """Microseconds a sample of ``read(batch)`` over every batch of ``BATCH`` indices."""
    start = time.perf_counter()
    for batch in BATCHES:
        read(batch)
    return (time.perf_counter() - start) / SIZE * 1e6


def bare_batch(dataset: Dataset) -> Callable[[list[int]], Any]:
    """What torch's fetcher does for a dataset without ``__getitems__``."""
    return lambda batch: [dataset[index] for index in batch]


# (a) in a worker ------------------------------------------------------------------------------------


class WorkerProbe(Dataset):
    """One item; reading it (in a DataLoader worker) times the worker-side reads and returns the timings."""

    def __init__(self) -> None:
        self.bare = Vectors()
        self.wrapped = wrap(self.bare)

    def __len__(self) -> int:
        return 1

    def __getitem__(self, _: int) -> dict[str, float]:
        if torch.utils.data.get_worker_info() is None:
            raise RuntimeError('WorkerProbe must be read in a DataLoader worker')
        bare, wrapped = self.bare, self.wrapped
        seeds = [wrapped._seed_of(index) for index in range(SIZE)]
        return {
            'bare': per_sample_us(bare.__getitem__),
            'wrapped': per_sample_us(wrapped.__getitem__),
            'bare batches': per_sample_us_batched(bare_batch(bare)),
            'wrapped batches': per_sample_us_batched(wrapped.__getitems__),
            'derive': per_sample_us(wrapped._seed_of),
            'random.seed': per_sample_us(lambda index: random.seed(seeds[index])),
            'np.random.seed': per_sample_us(lambda index: np.random.seed(seeds[index] & 0xFFFF_FFFF)),
            'torch manual_seed': per_sample_us(lambda index: torch.default_generator.manual_seed(seeds[index])),
        }


def in_a_worker() -> dict[str, float]:
    """One repeat of (a), in a fresh one-worker DataLoader (the main process waits for it)."""
    (timings,) = DataLoader(WorkerProbe(), batch_size=None, num_workers=1)
    return {name: float(value) for name, value in timings.items()}


# (b), (c) in the main process -----------------------------------------------------------------------


def in_main(bare: Vectors, wrapped: PerSampleRNG) -> dict[str, float]:
    assert torch.utils.data.get_worker_info() is None
    return {
        'bare': per_sample_us(bare.__getitem__),
        'wrapped': per_sample_us(wrapped.__getitem__),
        'bare batches': per_sample_us_batched(bare_batch(bare)),
        'wrapped batches': per_sample_us_batched(wrapped.__getitems__),
        'save + restore': per_sample_us(lambda _: _restore_all(_save_all())),
    }


# (d) whole DataLoader passes ------------------------------------------------------------------------


def loaders(workers: int) -> dict[str, DataLoader]:
    bare = Vectors()
    kwargs: dict[str, Any] = {'batch_size': BATCH, 'num_workers': workers}
    if workers:
        kwargs['persistent_workers'] = True
    return {'bare': DataLoader(bare, **kwargs), 'wrapped': DataLoader(wrap(bare), **kwargs)}


def pass_s(loader: DataLoader) -> float:
    start = time.perf_counter()
    samples = sum(len(batch) for batch in loader)
    elapsed = time.perf_counter() - start
    assert samples == SIZE
    return elapsed


# report ---------------------------------------------------------------------------------------------


def median_of(runs: list[dict[str, float]], name: str) -> float:
    return statistics.median(run[name] for run in runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeats', type=int, default=7)
    args = parser.parse_args()
    bare = Vectors()
    wrapped = wrap(bare)
    passes = {workers: loaders(workers) for workers in PASS_WORKERS}
    for group in passes.values():  # warm-up: workers started, first-pass costs paid
        for loader in group.values():
            pass_s(loader)
    in_main(bare, wrapped)  # warm-up
    in_a_worker()
    worker_runs: list[dict[str, float]] = []
    main_runs: list[dict[str, float]] = []
    pass_runs: list[dict[str, float]] = []
    for _ in range(args.repeats):
        worker_runs.append(in_a_worker())
        main_runs.append(in_main(bare, wrapped))
        pass_runs.append({f'{kind} {workers}': pass_s(loader)
                          for workers, group in passes.items() for kind, loader in group.items()})
        print(worker_runs[-1], main_runs[-1], pass_runs[-1], flush=True)

    def row(label: str, runs: list[dict[str, float]], bare_key: str, wrapped_key: str) -> tuple[str, float]:
        bare_us, wrapped_us = median_of(runs, bare_key), median_of(runs, wrapped_key)
        added = statistics.median(run[wrapped_key] - run[bare_key] for run in runs)
        return f'| {label} | {bare_us:.2f} us | {wrapped_us:.2f} us | {added:.2f} us |', added

    worker_single, worker_added = row('(a) DataLoader worker, `__getitem__` one sample at a time: seed only',
                                      worker_runs, 'bare', 'wrapped')
    worker_batched, worker_batched_added = row(
        f'(a) DataLoader worker, `__getitems__` batches of {BATCH}: seed only', worker_runs, 'bare batches',
        'wrapped batches')
    main_single, main_added = row('(b) main process, `__getitem__` one sample at a time: save + seed + restore '
                                  'per sample', main_runs, 'bare', 'wrapped')
    main_batched, main_batched_added = row(
        f'(c) main process, `__getitems__` batches of {BATCH}: save + restore once per batch, seed per sample',
        main_runs, 'bare batches', 'wrapped batches')
    parts = ('derive', 'random.seed', 'np.random.seed', 'torch manual_seed')
    part_labels = {
        'derive': 'seed derivation (`_seed_of`: shared seed and epoch, two `splitmix64` a sample; in a batch '
                  'the shared values are read once)',
        'random.seed': '`random.seed(seed)`',
        'np.random.seed': '`np.random.seed(seed & 0xFFFFFFFF)`',
        'torch manual_seed': '`torch.default_generator.manual_seed(seed)`',
    }
    met = 'met' if max(worker_added, worker_batched_added) < TARGET_US else 'not met'
    rows = [
        f'In-memory dataset of {SIZE:,} samples of {FEATURES} floats; added = the wrapper\'s time minus the bare '
        'read\'s, per sample (median of the per-repeat differences).',
        '',
        '### Per sample: the wrapper\'s read paths',
        '',
        '| path | bare read | through PerSampleRNG | added |',
        '| --- | ---: | ---: | ---: |',
        worker_single, worker_batched, main_single, main_batched,
        '',
        f'In a worker PerSampleRNG adds {worker_added:.1f} us per sample through `__getitem__` and '
        f'{worker_batched_added:.1f} us through `__getitems__` (target under {TARGET_US:g} us: {met}; the '
        f'prototype that saved and restored all three states per sample spent about {PROTOTYPE_US:g} us). In the '
        f'main process a sample costs {main_added:.1f} us one at a time and {main_batched_added:.1f} us in batches '
        f'of {BATCH}.',
        '',
        '### Per sample: the parts (worker: each seed call alone; main process: one save + restore of all three)',
        '',
        '| part | where | per call |',
        '| --- | --- | ---: |',
        *(f'| {part_labels[part]} | worker | {median_of(worker_runs, part):.2f} us |' for part in parts),
        f'| sum of the four | worker | {sum(median_of(worker_runs, part) for part in parts):.2f} us |',
        f'| `_save_all()` + `_restore_all()` (random, numpy, torch states) | main process | '
        f'{median_of(main_runs, "save + restore"):.2f} us |',
        '',
        f'### A whole DataLoader pass: {SIZE:,} samples, batch {BATCH}',
        '',
        '| workers | bare | through PerSampleRNG | added per sample | ratio |',
        '| ---: | ---: | ---: | ---: | ---: |',
    ]
    for workers in PASS_WORKERS:
        bare_s, wrapped_s = median_of(pass_runs, f'bare {workers}'), median_of(pass_runs, f'wrapped {workers}')
        added = statistics.median(run[f'wrapped {workers}'] - run[f'bare {workers}'] for run in pass_runs)
        rows.append(f'| {workers} | {bare_s * 1000:.0f} ms | {wrapped_s * 1000:.0f} ms | '
                    f'{added / SIZE * 1e6:.2f} us | {wrapped_s / bare_s:.2f}x |')
    rows.append(f'\n{WHY_EAGER}\n')
    rows.append(
        f'Medians over {args.repeats} repeats, every measurement once a repeat, bare and wrapped side by side. (a) '
        'runs in a real DataLoader worker (a fresh one-worker DataLoader a repeat, the main process waiting), where '
        '`get_worker_info()` is set and the wrapper only seeds; the parts are timed in that worker too. With 0 '
        'workers a DataLoader reads through `__getitems__`, the (c) path; with 2 workers the pass times are wall '
        'times of steady epochs (persistent workers, warmed up), so the workers\' seeding shows divided among them '
        'and only where the workers, not the main process, bound the pass.',
    )
    rows.append(f'\nLoad average {os.getloadavg()[0]:.1f} when the run ended (the machine may be shared with other '
                'jobs: compare the columns of one run, not runs with each other).')
    write_section('bench_per_sample_rng.py',
                  f'.venv/bin/python scripts/bench_per_sample_rng.py --repeats {args.repeats}', '\n'.join(rows))


if __name__ == '__main__':
    main()
