"""Mixture of 3 sources, 1e6 samples, 8 ranks: one rank's epoch, ours against a VILA port and two baselines.

    .venv/bin/python scripts/bench_mixture.py [--repeats 3]

Contenders, each producing one rank's indices for one epoch as a list:

* ``MixtureDistributedSampler`` (ours): ``list(sampler)`` after ``set_epoch(1)``,
  construction included.
* a port of VILA's ``VILADistributedSampler.__iter__`` (see :func:`vila_port` for
  the repository, path and commit it follows), the sampler VILA trains with.
* per-sample slots, written here from scratch in the manner of VILA's sampler:
  each rank takes a fixed slice of every source, shuffles it, and spreads each
  source evenly over the rank's remaining sample slots, deleting every slot it
  fills from a Python list of available slots (``del available[i]``). Besides its
  cost, it keeps a fixed per-rank slice and mixes sources within a step: weaker
  guarantees than ours.
* per-step lists: shuffle each source, trim it to whole global steps, then cut
  global steps off the front of randomly chosen sources with ``del``; it has our
  guarantees (one source per global step, whole steps only), not our O(1) state.

The process imports composer first, as a training process has (those imports
change how fast plain Python loops run here, which helps the pure-Python
contenders). Medians over repeats, all contenders interleaved in one process.
"""

from __future__ import annotations

import argparse
import random
import statistics
import time
from collections.abc import Callable

import composer  # noqa: F401  (imported first, as in training: it changes how fast Python loops run)

from composer_sampling import MixtureDistributedSampler

from bench_report import write_section

SIZES = [500_000, 300_000, 200_000]
WORLD, RANK, BATCH = 8, 3, 16
EPOCH = 1
SCALES = (1, 4)
TARGET = 100  # ours should be at least this many times faster than the VILA port at 1e6 samples
OURS_RUNS = 10  # ours takes milliseconds: timed this many times a repeat, so the noise of a busy machine averages out
VILA_COMMIT = '00d8e70948f6dce98a85612d6d7309ac810147c1'
VILA_SOURCE = f'NVlabs/VILA, llava/train/llava_trainer.py at commit {VILA_COMMIT}'

Contender = Callable[[list[int], int, int, int, int], list[int]]


def vila_port(sizes: list[int], batch: int, world: int, rank: int, seed: int) -> list[int]:
    """One rank's epoch as VILA's ``VILADistributedSampler.__iter__`` computes it (ported, not copied).

    Follows https://github.com/NVlabs/VILA/blob/00d8e70948f6dce98a85612d6d7309ac810147c1/llava/train/llava_trainer.py
    (repository NVlabs/VILA, file ``llava/train/llava_trainer.py``, commit
    ``00d8e70948f6dce98a85612d6d7309ac810147c1``), the data-parallel branch: sequence
    parallelism off, gradient accumulation 1, so ``sample_len_list`` is ``sizes`` and
    the sampler's epoch is ``EPOCH``. The steps, as that code takes them:

    1. every index of the concatenated dataset, in a Python list, shuffled with Python's
       Mersenne Twister seeded by ``seed + epoch``;
    2. the list cut at every source's offset, keeping ``world * share`` entries, where a
       rank's ``share`` of a source is ``size // (world * batch) * batch``; at this commit
       the cut is taken from the shuffled list, so a "source" cut holds samples of every
       source (the port keeps that, as it is what runs);
    3. each rank keeps the ``rank``-th run of ``share`` entries of every cut;
    4. the generator is seeded again with ``seed + epoch`` and every cut shuffled in turn;
    5. the cuts are ordered by length, longest first (stable);
    6. the rank's ``sum(shares)`` sample slots are filled cut by cut: a cut of ``m``
       entries takes the free slots at ``j * free // m`` for ``j < m``, which are then
       deleted one by one from the Python list of free slots, last first;
    7. a scan checks that no slot stayed empty.

    VILA seeds the module-level generator (``random.seed``); a private ``random.Random``
    with the same seed draws the same numbers at the same cost and leaves global state alone.
    """
    generator = random.Random(seed + EPOCH)
    everything = list(range(sum(sizes)))
    generator.shuffle(everything)
    shares = [size // (world * batch) * batch for size in sizes]
    cuts, offset = [], 0
    for size, share in zip(sizes, shares, strict=True):
        cuts.append(everything[offset:offset + world * share])
        offset += size
    assert sum(len(cut) for cut in cuts) == world * sum(shares)
    mine = [cut[rank * share:(rank + 1) * share] for cut, share in zip(cuts, shares, strict=True)]
    generator = random.Random(seed + EPOCH)
    for cut in mine:
        generator.shuffle(cut)
    slots = fill_slots(mine)
    assert -1 not in slots
    return slots


def fill_slots(cuts: list[list[int]]) -> list[int]:
    """Spread each cut, longest first, evenly over the free slots, deleting every slot it fills from the list."""
    slots = [-1] * sum(len(cut) for cut in cuts)
    free = list(range(len(slots)))
    for cut in sorted(cuts, key=lambda entries: -len(entries)):
        targets = [j * len(free) // len(cut) for j in range(len(cut))]
        taken = [free[target] for target in targets]
        for target in reversed(targets):
            del free[target]
        for slot, index in zip(taken, cut, strict=True):
            slots[slot] = index
    return slots


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
    return fill_slots(slices)


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
    sampler.set_epoch(EPOCH)
    return list(sampler)


def timed(function: Contender, *args: int | list[int]) -> tuple[float, int]:
    start = time.perf_counter()
    result = function(*args)  # type: ignore[arg-type]
    return time.perf_counter() - start, len(result)


CONTENDERS: dict[str, Contender] = {
    'MixtureDistributedSampler': ours,
    f"VILA's VILADistributedSampler (port, {VILA_COMMIT[:7]})": vila_port,
    "per-sample slots (VILA's kind, from scratch)": per_sample_slots,
    'per-step lists': per_step_lists,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--repeats', type=int, default=3)
    args = parser.parse_args()
    rows, ratios = [], {}
    for scale in SCALES:
        sizes = [size * scale for size in SIZES]
        times: dict[str, list[float]] = {name: [] for name in CONTENDERS}
        counts = set()
        for repeat in range(args.repeats):
            for name, function in CONTENDERS.items():
                for _ in range(OURS_RUNS if function is ours else 1):
                    seconds, count = timed(function, sizes, BATCH, WORLD, RANK, repeat)
                    times[name].append(seconds)
                    counts.add(count)
        assert len(counts) == 1, counts
        medians = {name: statistics.median(values) for name, values in times.items()}
        ours_s, (count,) = medians['MixtureDistributedSampler'], counts
        ratios[sum(sizes)] = {name: seconds / ours_s for name, seconds in medians.items()}
        rows += [f'| {sum(sizes):,} | {count:,} | {name} | {seconds * 1000:,.1f} ms | {seconds / ours_s:,.0f}x |'
                 for name, seconds in medians.items()]
    vila_name = next(name for name in CONTENDERS if name.startswith("VILA's"))
    vila_ratio = ratios[sum(SIZES)][vila_name]
    verdict = 'met' if vila_ratio >= TARGET else 'NOT met'
    body = '\n'.join([
        f'Three sources in proportions {SIZES}, {WORLD} ranks, per-device batch {BATCH} (global step '
        f'{WORLD * BATCH}); time for rank {RANK} to produce its indices of epoch {EPOCH} as a list.',
        '',
        '| samples | rank indices | sampler | time | ours is faster by |',
        '| ---: | ---: | --- | ---: | ---: |',
        *rows,
        '',
        f'At {sum(SIZES):,} samples ours is {vila_ratio:,.0f}x faster than the VILA port (target '
        f'{TARGET}x: {verdict}).',
        '',
        f'Medians over {args.repeats} repeats ({OURS_RUNS} runs a repeat for ours, which takes milliseconds), all '
        'interleaved in one process that imported composer first. The VILA '
        f'port follows {VILA_SOURCE} (the data-parallel branch of `VILADistributedSampler.__iter__`): a Python '
        'shuffle of every index of the dataset, a second shuffle of the rank\'s cuts, then slots filled by deleting '
        'from a list as long as the rank\'s share, so its cost grows with the square of the share, ours linearly. '
        'The from-scratch slot baseline skips the whole-dataset shuffle. Ours includes building the sampler and '
        'turning its indices into Python ints.',
    ])
    write_section('bench_mixture.py', f'.venv/bin/python scripts/bench_mixture.py --repeats {args.repeats}', body)


if __name__ == '__main__':
    main()
