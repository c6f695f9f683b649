"""Epoch start (time to first index, peak memory) and steady iteration: ours against torch's DistributedSampler.

    .venv/bin/python scripts/bench_sampler.py [--repeats 5] [--torch-repeats 3] [--quick]

Each measurement runs in a fresh process so that its peak RSS is its own; the
table shows the median over repeats, ours and torch's measured side by side
(interleaved) in the same run. Every child imports composer first, as a training
process has: those imports alone change how fast a plain Python loop runs here
by tens of percent, for both samplers.

The last table is the steady per-index cost against where N falls between powers of
two (the cycle walk's padding): the sampler iterated, and the permutation alone with
each of its strategies (``Permutation(..., strategy=...)``: round tables or computed
rounds), side by side in each child process.

``--quick`` runs small sizes once and prints the tables without writing BENCHMARKS.md
(a check that the script works, not a measurement).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap

from bench_report import write_section

WORLD = 8
RANK = 3
START_SIZES = (10**7, 10**8, 10**9, 10**10)
TORCH_LIMIT = 10**8  # torch materializes randperm(N) and a list of N ints: ~53 bytes per sample, 1e9 needs ~50 GB

CHILD = textwrap.dedent('''
    import json, resource, sys, time
    import composer  # a training process has imported it; its imports change how fast Python loops run
    import torch
    from torch.utils.data import DistributedSampler
    from composer_sampling import ResumableDistributedSampler
    kind, n, world, rank, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]

    class Length:
        def __init__(self, n): self.n = n
        def __len__(self): return self.n

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    cls = ResumableDistributedSampler if kind == 'ours' else DistributedSampler
    sampler = cls(Length(n), num_replicas=world, rank=rank, shuffle=True, seed=1)
    sampler.set_epoch(1)
    iterator = iter(sampler)
    first = next(iterator)
    first_index = time.perf_counter() - start
    count = 1
    if mode == 'epoch':
        for _ in iterator:
            count += 1
    total = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({'first_index_s': first_index, 'total_s': total, 'count': count,
                      'extra_rss_mb': (peak - before) / 1024}))
''')


def measure(kind: str, n: int, world: int, mode: str) -> dict:
    out = subprocess.run([sys.executable, '-c', CHILD, kind, str(n), str(world), str(RANK % world), mode],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def median(rows: list[dict], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def epoch_start(repeats: int, torch_repeats: int, *, sizes: tuple[int, ...] = START_SIZES,
                torch_limit: int = TORCH_LIMIT) -> str:
    lines = [
        f'### Epoch start, W = {WORLD} (rank {RANK}): time to the first index and memory added',
        '',
        '| N | ours: first index | ours: extra peak RSS | torch: first index | torch: extra peak RSS | speed-up |',
        '| ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    for n in sizes:
        ours, theirs = [], []
        for i in range(max(repeats, torch_repeats)):
            if i < repeats:
                ours.append(measure('ours', n, WORLD, 'first'))
            if n <= torch_limit and i < torch_repeats:
                theirs.append(measure('torch', n, WORLD, 'first'))
        our_time, our_rss = median(ours, 'first_index_s'), median(ours, 'extra_rss_mb')
        if theirs:
            their_time, their_rss = median(theirs, 'first_index_s'), median(theirs, 'extra_rss_mb')
            torch_cells = f'{their_time:.2f} s | {their_rss:,.0f} MB | {their_time / our_time:,.0f}x'
        else:
            torch_cells = 'does not fit (~53 bytes per sample) | | '
        lines.append(f'| {n:.0e} | {our_time * 1000:.1f} ms | {our_rss:.1f} MB | {torch_cells} |')
    return '\n'.join(lines)


def steady(repeats: int) -> str:
    n = 10**7
    lines = [
        f'### Whole epoch of one rank at N = {n:.0e}: indices per second, epoch start included',
        '',
        '| W | ours | torch | ours / torch |',
        '| ---: | ---: | ---: | ---: |',
    ]
    for world in (1, WORLD):
        ours, theirs = [], []
        for _ in range(repeats):
            ours.append(measure('ours', n, world, 'epoch'))
            theirs.append(measure('torch', n, world, 'epoch'))
        assert ours[0]['count'] == theirs[0]['count']
        our_rate = ours[0]['count'] / median(ours, 'total_s')
        their_rate = theirs[0]['count'] / median(theirs, 'total_s')
        ratio = our_rate / their_rate
        lines.append(f'| {world} | {our_rate / 1e6:.2f} M/s | {their_rate / 1e6:.2f} M/s | {ratio:.2f}x |')
    return '\n'.join(lines)


# Per-index cost against where N falls: just under 2**k the padded Feistel domain is full
# (one network application an index, the best case); just over it, half of it is padding.
PADDING_GROUPS = {k: [2**k - 1, 2**k + 1, 3 * 2**(k - 1), int(1.7 * 2**k)] for k in (20, 24, 34)}
PADDING_NOTE = """
"Sampler" is ResumableDistributedSampler iterated (its permutation picks the strategy
per call); "computed" and "tabulated" are the permutation alone over chunks of 2**16
positions with that strategy forced (tabulated needs N <= 2**32: the 2**34 rows compute
every round). Each child process times every size, both strategies one after the other
(which goes first alternates between children), in CPU time of the process; medians over
children; "best" is the 2**k - 1 row of the size's group. Just over a power of two an
index needs two network applications on average instead of one (the walk maps a value
again until it lands in [0, N)), and the stragglers must be gathered and scattered: that
floor stays in the order's own cost.
"""
STEADY_SKIP = 1 << 16  # past the first, growing chunks
STEADY_COUNT = 3 << 18  # indices timed per size: fits in an epoch of 2**20 - 1
STRATEGIES = ('computed', 'tabulated')

STEADY_CHILD = textwrap.dedent('''
    import json, sys, time
    from itertools import islice
    import composer  # as in a training process
    import numpy as np
    from composer_sampling import ResumableDistributedSampler
    from composer_sampling.permutation import Permutation
    first_strategy, skip, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    sizes = [int(arg) for arg in sys.argv[4:]]
    strategies = [first_strategy, *(s for s in ('computed', 'tabulated') if s != first_strategy)]

    def sampler_ns(n):
        sampler = ResumableDistributedSampler(n, num_replicas=1, rank=0, shuffle=True, seed=1)
        sampler.set_epoch(1)
        iterator = iter(sampler)
        for _ in islice(iterator, skip):
            pass
        start = time.process_time()
        for _ in islice(iterator, count):
            pass
        return (time.process_time() - start) / count * 1e9

    def order_ns(n, strategy):
        order = Permutation(n, seed=1, epoch=1, strategy=strategy)
        order(np.arange(1))  # builds the tables of the tabulated strategy before the clock starts
        chunk = 1 << 16
        start = time.process_time()
        for first in range(skip, skip + count, chunk):
            order(np.arange(first, first + chunk) % n)
        return (time.process_time() - start) / count * 1e9

    def usable(n, strategy):
        return strategy != 'tabulated' or Permutation(n, seed=1, epoch=1).tabulable

    for strategy in strategies:  # warm up: the first passes through a fresh process run slow
        order_ns(sizes[0], strategy)
    sampler_ns(sizes[0])
    result = {}
    for n in sizes:  # side by side: both strategies on one size, then the next size
        result[n] = {'sampler': sampler_ns(n), **{s: order_ns(n, s) for s in strategies if usable(n, s)}}
    print(json.dumps(result))
''')


def measure_padding(first_strategy: str, sizes: list[int], skip: int, count: int) -> dict[int, dict[str, float]]:
    """One child's steady ns per index for every size: the sampler, and the permutation under each strategy."""
    args = [sys.executable, '-c', STEADY_CHILD, first_strategy, str(skip), str(count), *map(str, sizes)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return {int(n): row for n, row in json.loads(out.stdout).items()}


def padding(repeats: int, groups: dict[int, list[int]], skip: int = STEADY_SKIP, count: int = STEADY_COUNT) -> str:
    """Steady per-index cost against where N falls between powers of two: the sampler and both strategies."""
    sizes = [size for group in groups.values() for size in group]
    runs = [measure_padding(STRATEGIES[repeat % 2], sizes, skip, count) for repeat in range(repeats)]

    def cost(n: int, key: str) -> float | None:
        values = [run[n][key] for run in runs if key in run[n]]
        return statistics.median(values) if values else None

    def ns(n: int, key: str) -> str:
        value = cost(n, key)
        return '-' if value is None else f'{value:.1f} ns'

    def ratio(n: int, best: int, key: str) -> str:
        value, base = cost(n, key), cost(best, key)
        return '-' if value is None or not base else f'{value / base:.2f}'

    lines = [
        '### Steady cost per index against where N falls, W = 1: the sampler, and the permutation by strategy',
        '',
        '| N | N / 2**bits | sampler | computed | tabulated | sampler / best | computed / best | tabulated / best |',
        '| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    keys = ('sampler', *STRATEGIES)
    for k, group in groups.items():
        for n in group:
            cells = [ns(n, key) for key in keys] + [ratio(n, 2**k - 1, key) for key in keys]
            lines.append(f'| {n:,} | {n / 2 ** (n - 1).bit_length():.2f} | ' + ' | '.join(cells) + ' |')
    return '\n'.join(lines) + '\n'


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--torch-repeats', type=int, default=3)
    parser.add_argument('--quick', action='store_true', help='small sizes, one repeat, print only')
    args = parser.parse_args()
    if args.quick:
        quick()
        return
    body = epoch_start(args.repeats, args.torch_repeats) + '\n\n' + steady(args.repeats)
    body += ('\n\nMedians over repeats, each in a fresh process; "extra peak RSS" is the growth of the '
             "process's peak RSS from just before the sampler is built.")
    body += '\n\n' + padding(args.repeats, PADDING_GROUPS) + PADDING_NOTE
    write_section('bench_sampler.py', f'.venv/bin/python scripts/bench_sampler.py --repeats {args.repeats} '
                  f'--torch-repeats {args.torch_repeats}', body)


def quick() -> None:
    """Every table at small sizes, once, printed: checks that the script and its children still work."""
    print(epoch_start(1, 1, sizes=(10**4, 10**5), torch_limit=10**5))
    print(padding(1, {k: [2**k - 1, 2**k + 1] for k in (18, 33)}, skip=1 << 10, count=1 << 16))


if __name__ == '__main__':
    main()
