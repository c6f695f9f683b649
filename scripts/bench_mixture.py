"""Mixture of 3 sources, 1e6 samples, 8 ranks: one rank's epoch, ours against list-deleting interleaves.

    .venv/bin/python scripts/bench_mixture.py [--repeats 3]

Two baselines, written here from scratch, each producing one rank's indices for
one epoch:

* per-sample slots, the approach of VILA's sampler: each rank takes a fixed slice
  of every source, shuffles it, and spreads each source evenly over the rank's
  remaining sample slots, deleting every slot it fills from a Python list of
  available slots (``del available[i]``). Besides its cost, it keeps a fixed
  per-rank slice and mixes sources within a step: weaker guarantees than ours.
* per-step lists: shuffle each source, trim it to whole global steps, then cut
  global steps off the front of randomly chosen sources with ``del``; it has our
  guarantees (one source per global step, whole steps only), not our O(1) state.

Medians over repeats, all interleaved in one process.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from composer_sampling import MixtureDistributedSampler

from bench_report import write_section

SIZES = [500_000, 300_000, 200_000]
WORLD, RANK, BATCH = 8, 3, 16
SCALES = (1, 4)


def per_sample_slots(sizes: list[int], batch: int, world: int, rank: int, seed: int) -> list[int]:
    """VILA's kind: fixed per-rank slices, each spread over the free slots, every filled slot deleted."""
    rng = random.Random(seed)
    global_batch = batch * world
    shares = [size // global_batch * batch for size in sizes]  # this rank's samples of each source
    slices, start = [], 0
    for size, share in zip(sizes, shares, strict=True):
        mine = list(range(start + rank * share, start + (rank + 1) * share))
        rng.shuffle(mine)
        slices.append(mine)
        start += size
    slots = [-1] * sum(shares)
    available = list(range(len(slots)))
    for source in sorted(slices, key=len, reverse=True):
        picks = [i * len(available) // len(source) for i in range(len(source))]
        chosen = [available[i] for i in picks]
        for i in reversed(picks):
            del available[i]
        for slot, index in zip(chosen, source, strict=True):
            slots[slot] = index
    return slots


def per_step_lists(sizes: list[int], batch: int, world: int, rank: int, seed: int) -> list[int]:
    """Per-source shuffled lists, global steps cut off the front with ``del``."""
    rng = random.Random(seed)
    global_batch = batch * world
    pools, start = [], 0
    for size in sizes:
        indices = list(range(start, start + size))
        rng.shuffle(indices)
        del indices[size // global_batch * global_batch:]
        pools.append(indices)
        start += size
    mine: list[int] = []
    while True:
        open_sources = [k for k, pool in enumerate(pools) if pool]
        if not open_sources:
            return mine
        pool = pools[rng.choice(open_sources)]
        step = pool[:global_batch]
        del pool[:global_batch]
        mine.extend(step[rank * batch:(rank + 1) * batch])


def ours(sizes: list[int], batch: int, world: int, rank: int, seed: int) -> list[int]:
    sampler = MixtureDistributedSampler(sizes, batch, num_replicas=world, rank=rank, seed=seed)
    sampler.set_epoch(1)
    return list(sampler)


def timed(function, *args) -> tuple[float, int]:
    start = time.perf_counter()
    result = function(*args)
    return time.perf_counter() - start, len(result)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    contenders = {'MixtureDistributedSampler': ours, "per-sample slots (VILA's kind)": per_sample_slots,
                  'per-step lists': per_step_lists}
    rows = []
    for scale in SCALES:
        sizes = [size * scale for size in SIZES]
        times: dict[str, list[float]] = {name: [] for name in contenders}
        counts = set()
        for repeat in range(args.repeats):
            for name, function in contenders.items():
                seconds, count = timed(function, sizes, BATCH, WORLD, RANK, repeat)
                times[name].append(seconds)
                counts.add(count)
        assert len(counts) == 1, counts
        medians = {name: statistics.median(values) for name, values in times.items()}
        ours_s, (count,) = medians['MixtureDistributedSampler'], counts
        rows += [f'| {sum(sizes):,} | {count:,} | {name} | {seconds * 1000:,.1f} ms | {seconds / ours_s:,.0f}x |'
                 for name, seconds in medians.items()]
    body = '\n'.join([
        f'Three sources in proportions {SIZES}, {WORLD} ranks, per-device batch {BATCH} (global step '
        f'{WORLD * BATCH}); time for rank {RANK} to produce its indices of one epoch.',
        '',
        '| samples | rank indices | sampler | time | ours is faster by |',
        '| ---: | ---: | --- | ---: | ---: |',
        *rows,
        '',
        f'Medians over {args.repeats} repeats, interleaved in one process. The slot baseline deletes from a '
        "list as long as the rank's share, so its cost grows with the square of the share, ours linearly.",
    ])
    write_section('bench_mixture.py', f'.venv/bin/python scripts/bench_mixture.py --repeats {args.repeats}', body)


if __name__ == '__main__':
    main()
