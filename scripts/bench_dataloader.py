"""One DataLoader epoch over a cheap in-memory dataset: the sampler's share of the loop, ours against torch's.

    .venv/bin/python scripts/bench_dataloader.py [--repeats 5]

A map-style dataset whose ``__getitem__`` returns its index (an int: no storage,
no decoding, so whatever the sampler costs shows as plainly as it can), batch 256,
0 and 4 DataLoader workers, W = 1 and W = 8 (one rank simulated: rank 3 with
``num_replicas=8``). Each rank's epoch has 1e6 samples: the dataset holds 1e6
samples for W = 1 and 8e6 for W = 8, because torch's DistributedSampler shuffles
the whole dataset on every rank while ours touches only the rank's share.

For ours (``ResumableDistributedSampler``) and torch's ``DistributedSampler``
(both ``shuffle=True``, ``seed=1``, ``set_epoch(1)``) it reports:

* loop: building the sampler and the DataLoader and iterating one epoch of batches
  (worker start-up included);
* sampler alone: building the sampler and draining its iterator in C
  (``collections.deque(sampler, maxlen=0)``), which is all the sampler adds to the loop;
* the sampler's share: sampler alone / loop. With workers the sampler runs in the
  main process beside them, so this is an upper bound on what it costs the loop.

Every measurement runs in its own process, forked from this one after it has
imported composer (as a training process has: those imports change how fast
plain Python loops run here), so none pays for imports or inherits another's
memory. Medians over repeats; ours and torch's interleaved in one run.
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import statistics
import time
import warnings
from multiprocessing.connection import Connection
from typing import Any

import composer  # noqa: F401  (imported first, as in training: it changes how fast Python loops run)
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from composer_sampling import ResumableDistributedSampler

from bench_report import write_section

PER_RANK = 1_000_000
BATCH = 256
RANK = 3
CONFIGS = ((1, 0), (1, 4), (8, 0), (8, 4))  # (W, DataLoader workers)
KINDS = {'ours': 'ResumableDistributedSampler', 'torch': 'DistributedSampler'}


class Indices(Dataset):
    """``n`` samples; sample ``i`` is the int ``i``, read from nowhere."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> int:
        return index


def make_sampler(kind: str, dataset: Indices, world: int) -> ResumableDistributedSampler | DistributedSampler:
    cls = ResumableDistributedSampler if kind == 'ours' else DistributedSampler
    sampler = cls(dataset, num_replicas=world, rank=RANK % world, shuffle=True, seed=1)
    sampler.set_epoch(1)
    return sampler


def run(kind: str, world: int, workers: int, what: str) -> dict[str, Any]:
    """One measurement, in the calling (fresh) process."""
    warnings.filterwarnings('ignore', message='This DataLoader will create')  # 4 workers on 2 cores: on purpose
    dataset = Indices(PER_RANK * world)
    start = time.perf_counter()
    sampler = make_sampler(kind, dataset, world)
    if what == 'sampler':
        collections.deque(sampler, maxlen=0)
        count = len(sampler)
    else:
        count = 0
        for batch in DataLoader(dataset, batch_size=BATCH, sampler=sampler, num_workers=workers):
            count += len(batch)
    return {'seconds': time.perf_counter() - start, 'count': count}


def _child(conn: Connection, *args: Any) -> None:
    conn.send(run(*args))
    conn.close()


def measure(kind: str, world: int, workers: int, what: str) -> dict[str, Any]:
    """``run`` in a process forked for it (composer already imported, nothing else done)."""
    context = multiprocessing.get_context('fork')
    parent, child = context.Pipe(duplex=False)
    process = context.Process(target=_child, args=(child, kind, world, workers, what))
    process.start()
    child.close()
    result = parent.recv()
    process.join()
    assert process.exitcode == 0, process.exitcode
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args()
    rows = []
    for world, workers in CONFIGS:
        times: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
        counts = set()
        for _ in range(args.repeats):
            for what in ('loop', 'sampler'):
                for kind in KINDS:
                    result = measure(kind, world, workers, what)
                    times[kind, what].append(result['seconds'])
                    counts.add(result['count'])
        assert counts == {PER_RANK}, counts
        ours_loop = statistics.median(times['ours', 'loop'])
        for kind, name in KINDS.items():
            loop, alone = statistics.median(times[kind, 'loop']), statistics.median(times[kind, 'sampler'])
            rows.append(f'| {world} | {PER_RANK * world:.0e} | {workers} | {name} | {loop:.2f} s | '
                        f'{loop / ours_loop:.2f}x | {alone * 1000:,.0f} ms | {alone / loop:.1%} |')
            print(rows[-1], flush=True)
    body = '\n'.join([
        f'Map-style dataset returning its index (an int), batch {BATCH}, one epoch of {PER_RANK:.0e} samples for '
        f'the rank (W = 8: rank {RANK} of 8, dataset 8x larger), seed 1, epoch 1.',
        '',
        '| W | dataset | workers | sampler | loop | loop / ours | sampler alone | sampler\'s share of the loop |',
        '| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |',
        *rows,
        '',
        f'Medians over {args.repeats} repeats, ours and torch\'s interleaved; every measurement in its own process '
        'forked after importing composer. "loop" builds the sampler and the DataLoader (and its workers) and '
        'iterates the epoch; "sampler alone" builds the sampler and drains it with `deque(sampler, maxlen=0)`. '
        'With workers the sampler runs in the main process beside them, so its share is an upper bound on what it '
        'costs the loop. The machine has 2 cores: 4 workers oversubscribe it, and with items this cheap their '
        'inter-process traffic makes the loop slower than with none; they are measured because training uses them.',
    ])
    write_section('bench_dataloader.py', f'.venv/bin/python scripts/bench_dataloader.py --repeats {args.repeats}',
                  body)


if __name__ == '__main__':
    main()
