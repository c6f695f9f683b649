"""Epoch start (time to first index, peak memory) and steady iteration: ours against torch's DistributedSampler.

    .venv/bin/python scripts/bench_sampler.py [--repeats 5] [--torch-repeats 3]

Each measurement runs in a fresh process so that its peak RSS is its own; the
table shows the median over repeats, ours and torch's measured side by side
(interleaved) in the same run. Every child imports composer first, as a training
process has: those imports alone change how fast a plain Python loop runs here
by tens of percent, for both samplers.
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--repeats', type=int, default=5)
    parser.add_argument('--torch-repeats', type=int, default=3)
    args = parser.parse_args()
    body = epoch_start(args.repeats, args.torch_repeats) + '\n\n' + steady(args.repeats)
    body += ('\n\nMedians over repeats, each in a fresh process; "extra peak RSS" is the growth of the '
             "process's peak RSS from just before the sampler is built.")
    write_section('bench_sampler.py', f'.venv/bin/python scripts/bench_sampler.py --repeats {args.repeats} '
                  f'--torch-repeats {args.torch_repeats}', body)


if __name__ == '__main__':
    main()
