"""Epoch start (time to first index, peak memory) and steady iteration: ours against torch's DistributedSampler.

    .venv/bin/python scripts/bench_sampler.py [--repeats 5] [--torch-repeats 3]

Each measurement runs in a fresh process so that its peak RSS is its own; the
table shows the median over repeats, ours and torch's measured side by side
(interleaved) in the same run. Every child imports composer first, as a training
process has: those imports alone change how fast a plain Python loop runs here
by tens of percent, for both samplers.

The last two tables are the steady per-index cost against where N falls between
powers of two (the cycle walk's padding), for the sampler iterated and for the order
alone: this release's walk against the previous one (kept below as
``previous_cycle_walk``), side by side in each child process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np

from composer_sampling.order import _domain_bits, _mix_into, _round_keys

from bench_report import write_section

WORLD = 8
RANK = 3
START_SIZES = [10**7, 10**8, 10**9, 10**10]
TORCH_LIMIT = 10**8  # torch materializes randperm(N) and a list of N ints: ~53 bytes a sample, 1e9 needs ~50 GB

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


def epoch_start(repeats: int, torch_repeats: int) -> str:
    lines = [
        f'### Epoch start, W = {WORLD} (rank {RANK}): time to the first index and memory added',
        '',
        '| N | ours: first index | ours: extra peak RSS | torch: first index | torch: extra peak RSS | speed-up |',
        '| ---: | ---: | ---: | ---: | ---: | ---: |',
    ]
    for n in START_SIZES:
        ours, theirs = [], []
        for i in range(max(repeats, torch_repeats)):
            if i < repeats:
                ours.append(measure('ours', n, WORLD, 'first'))
            if n <= TORCH_LIMIT and i < torch_repeats:
                theirs.append(measure('torch', n, WORLD, 'first'))
        our_time, our_rss = median(ours, 'first_index_s'), median(ours, 'extra_rss_mb')
        if theirs:
            their_time, their_rss = median(theirs, 'first_index_s'), median(theirs, 'extra_rss_mb')
            torch_cells = f'{their_time:.2f} s | {their_rss:,.0f} MB | {their_time / our_time:,.0f}x'
        else:
            torch_cells = 'does not fit (~53 bytes a sample) | | '
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
PADDING_SIZES = [size for sizes in PADDING_GROUPS.values() for size in sizes]
PADDING_NOTE = """
"Previous walk" is the cycle walk before round tables and straggler passes (kept in this
script). Each child process times every size with both walks, one after the other (which
goes first alternates between children), in CPU time of the process; medians over
children; "best" is the 2**k - 1 row of the size's group. Just over a power of two an
index needs two network applications on average instead of one (the walk maps a value
again until it lands in [0, N)), and the stragglers must be gathered and scattered: that
floor stays in the order's own cost, about three times its best case at half padding.
Round tables stand in for the computed round function up to N = 2**32 (the 2**34 rows
compute every round).
"""
STEADY_SKIP = 1 << 16  # past the first, growing chunks
STEADY_COUNT = 3 << 18  # indices timed per size: fits in an epoch of 2**20 - 1

STEADY_CHILD = textwrap.dedent('''
    import json, sys, time
    from itertools import islice
    import composer  # as in a training process
    import numpy as np
    from composer_sampling import ResumableDistributedSampler, order
    scripts, first_variant, skip, count = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sizes = [int(arg) for arg in sys.argv[5:]]
    sys.path.insert(0, scripts)
    from bench_sampler import previous_cycle_walk
    walks = {'previous': previous_cycle_walk, 'new': order._cycle_walk}
    variants = [first_variant, *(variant for variant in walks if variant != first_variant)]

    def time_size(n):
        sampler = ResumableDistributedSampler(n, num_replicas=1, rank=0, shuffle=True, seed=1)
        sampler.set_epoch(1)
        iterator = iter(sampler)
        for _ in islice(iterator, skip):
            pass
        start = time.process_time()
        for _ in islice(iterator, count):
            pass
        sampler_ns = (time.process_time() - start) / count * 1e9
        chunk = 1 << 16
        start = time.process_time()
        for first in range(skip, skip + count, chunk):
            order.global_indices(np.arange(first, first + chunk), n, True, 1, 1)
        order_ns = (time.process_time() - start) / count * 1e9
        return {'sampler_ns': sampler_ns, 'order_ns': order_ns}

    for variant in variants:  # warm up both: the first passes through a fresh process run slow
        order._cycle_walk = walks[variant]
        time_size(sizes[0])
    result = {variant: {} for variant in walks}
    for n in sizes:
        for variant in variants:  # side by side: both walks on one size, then the next size
            order._cycle_walk = walks[variant]
            result[variant][n] = time_size(n)
    print(json.dumps(result))
''')


def _previous_feistel(values: np.ndarray, keys: list[np.uint64], bits: int, inverse: bool) -> np.ndarray:
    """The previous release's network: allocates its halves and scratch on every call."""
    high, low = bits // 2, bits - bits // 2
    a = values >> np.uint64(low)
    b = values & np.uint64((1 << low) - 1)
    len_a, len_b = high, low
    mixed, scratch = np.empty_like(a), np.empty_like(a)
    for key in (keys if not inverse else reversed(keys)):
        if not inverse:
            _mix_into(a, b, key, np.uint64((1 << len_a) - 1), mixed, scratch)
        else:
            _mix_into(b, a, key, np.uint64((1 << len_b) - 1), mixed, scratch)
        a, b = b, a
        len_a, len_b = len_b, len_a
    np.left_shift(a, np.uint64(len_b), out=a)
    return np.bitwise_or(a, b, out=a)


def previous_cycle_walk(values: np.ndarray, n: int, seed: int, epoch: int, inverse: bool) -> np.ndarray:
    """The previous release's cycle walk, for comparison: every pass gathers and scatters the stragglers."""
    keys = _round_keys(seed, epoch)
    bits = _domain_bits(n)
    limit = np.uint64(n)
    out = _previous_feistel(values.astype(np.uint64), keys, bits, inverse)
    todo = np.flatnonzero(out >= limit)
    while todo.size:
        out[todo] = _previous_feistel(out[todo], keys, bits, inverse)
        todo = todo[out[todo] >= limit]
    return out.astype(np.int64)


def measure_padding(first_variant: str) -> dict[str, dict[int, dict[str, float]]]:
    """One child's steady ns per index, sampler and order alone, for both walks and every size of ``PADDING_SIZES``."""
    args = [sys.executable, '-c', STEADY_CHILD, str(Path(__file__).resolve().parent), first_variant,
            str(STEADY_SKIP), str(STEADY_COUNT), *map(str, PADDING_SIZES)]
    out = subprocess.run(args, capture_output=True, text=True, check=True)
    return {variant: {int(n): row for n, row in rows.items()} for variant, rows in json.loads(out.stdout).items()}


def padding(repeats: int) -> str:
    """Steady per-index cost against where N falls between powers of two: previous walk and this one."""
    runs: dict[str, list[dict[int, dict[str, float]]]] = {'previous': [], 'new': []}
    for repeat in range(repeats):
        measured = measure_padding('previous' if repeat % 2 == 0 else 'new')  # alternate which walk goes first
        for variant, rows in measured.items():
            runs[variant].append(rows)

    def cost(variant: str, n: int, key: str) -> float:
        return statistics.median(run[n][key] for run in runs[variant])

    lines = []
    for key, title in (('sampler_ns', 'the sampler iterated (what a training loop pays)'),
                       ('order_ns', 'the order alone (global_indices over chunks of 2**16 positions)')):
        lines += [
            f'### Steady cost per index against where N falls, W = 1: {title}',
            '',
            '| N | N / 2**bits | previous walk | this walk | this / previous | previous / best | this / best |',
            '| ---: | ---: | ---: | ---: | ---: | ---: | ---: |',
        ]
        for k, sizes in PADDING_GROUPS.items():
            best = 2**k - 1
            for n in sizes:
                old, new = cost('previous', n, key), cost('new', n, key)
                old_best, new_best = cost('previous', best, key), cost('new', best, key)
                lines.append(f'| {n:,} | {n / 2 ** _domain_bits(n):.2f} | {old:.1f} ns | {new:.1f} ns | '
                             f'{new / old:.2f} | {old / old_best:.2f} | {new / new_best:.2f} |')
        lines.append('')
    return '\n'.join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--torch-repeats', type=int, default=3)
    args = parser.parse_args()
    body = epoch_start(args.repeats, args.torch_repeats) + '\n\n' + steady(args.repeats)
    body += ('\n\nMedians over repeats, each in a fresh process; "extra peak RSS" is the growth of the '
             "process's peak RSS from just before the sampler is built.")
    body += '\n\n' + padding(args.repeats) + PADDING_NOTE
    write_section('bench_sampler.py', f'.venv/bin/python scripts/bench_sampler.py --repeats {args.repeats} '
                  f'--torch-repeats {args.torch_repeats}', body)


if __name__ == '__main__':
    main()
